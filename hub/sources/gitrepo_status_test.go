package sources

import (
	"testing"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// R1.12: until a bundle's rollout reports its new revision, the GitRepo counts the bundle's
// clusters OutOfSync, not Ready on the revision before.
func TestR1_12_GitRepoCountsABundleNotYetRollingItsRevisionOutOfSync(t *testing.T) {
	ready := v1alpha1.StateCounts{DesiredReady: 3, Ready: 2, Pending: 1}
	for _, tc := range []struct {
		name                  string
		generation, observed  int64
		latest, releasing     int64
		wantReady, wantOutOfS int32
		wantMessage           string
	}{
		{"reported", 2, 2, 2, 2, 2, 0, ""},
		{"a new revision not reported yet", 3, 2, 3, 2, 0, 2, "revision 3 not rolled out yet"},
		{"a spec change of the same revision", 3, 2, 2, 2, 2, 0, ""},
		{"a staged bundle whose run is on an older revision, reported", 3, 3, 3, 2, 2, 0, ""},
	} {
		b := &v1alpha1.Bundle{}
		b.Generation, b.Spec.LatestRevision = tc.generation, tc.latest
		b.Status.ObservedGeneration, b.Status.ReleasingRevision, b.Status.Summary = tc.observed, tc.releasing, ready
		got, msg := bundleSummary(b)
		if got.Ready != tc.wantReady || got.OutOfSync != tc.wantOutOfS || got.Pending != 1 || got.DesiredReady != 3 || msg != tc.wantMessage {
			t.Errorf("%s: %+v, %q", tc.name, got, msg)
		}
	}
}
