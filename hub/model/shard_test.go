package model

import (
	"maps"
	"testing"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// A shard owns the objects labelled with its name; the default shard the unlabelled ones. What
// a GitRepo derives carries the GitRepo's label, or none.
func TestShardOwnership(t *testing.T) {
	blue := map[string]string{v1alpha1.ShardLabel: "blue", "app": "web"}
	plain := map[string]string{"app": "web"}
	for _, tc := range []struct {
		shard            Shard
		labels           map[string]string
		owns, fleetWide  bool
		leaderElectionID string
	}{
		{"", plain, true, true, "flotilla-hub"},
		{"", blue, false, true, "flotilla-hub"},
		{"blue", blue, true, false, "flotilla-hub-blue"},
		{"blue", plain, false, false, "flotilla-hub-blue"},
		{"red", blue, false, false, "flotilla-hub-red"},
	} {
		if got := tc.shard.ownsLabels(tc.labels); got != tc.owns {
			t.Errorf("shard %q owns %v: %v, want %v", tc.shard, tc.labels, got, tc.owns)
		}
		if got := tc.shard.selector().Matches(labels.Set(tc.labels)); got != tc.owns {
			t.Errorf("shard %q's cache selects %v: %v, want %v", tc.shard, tc.labels, got, tc.owns)
		}
		if tc.shard.FleetWide() != tc.fleetWide || tc.shard.LeaderElectionID() != tc.leaderElectionID {
			t.Errorf("shard %q: fleet-wide %v, lease %s", tc.shard, tc.shard.FleetWide(), tc.shard.LeaderElectionID())
		}
	}
	derived := map[string]string{LabelBundle: "web", v1alpha1.ShardLabel: "blue"}
	InheritShard(derived, plain)
	if _, ok := derived[v1alpha1.ShardLabel]; ok {
		t.Errorf("a deployment of an unlabelled GitRepo keeps a shard label: %v", derived)
	}
	InheritShard(derived, blue)
	if want := map[string]string{LabelBundle: "web", v1alpha1.ShardLabel: "blue"}; !maps.Equal(derived, want) {
		t.Errorf("a deployment of the blue shard's GitRepo is labelled %v, want %v", derived, want)
	}
}
