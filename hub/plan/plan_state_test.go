package plan

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/bdstate"
	"github.com/flotilla-dev/flotilla/hub/deploy"
	"github.com/flotilla-dev/flotilla/hub/model"
	"github.com/flotilla-dev/flotilla/rollout"
)

// R1.8: the pass after a maxNew batch plans on a cache that may not show the batch yet. The
// releases it wrote count as released (WaitApplied, unavailable), so the next batch is the
// next clusters and the partition's threshold is checked with the batch in it.
func TestR1_8_NextBatchCountsReleasesTheCacheDoesNotShowYet(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	bun := &v1alpha1.Bundle{}
	bun.Namespace, bun.Name = "fleet", "web"
	one := int(1)
	cases := []struct {
		name           string
		maxUnavailable rollout.IntOrPercent
		wantRelease    []string
		wantPaused     bool
	}{
		{"the next batch is the next cluster", rollout.Percent(100), []string{"c"}, false},
		{"the unseen batch fills the budget: the rollout waits", rollout.Int(1), nil, true},
	}
	for _, tc := range cases {
		var mem deploy.Releases
		cached := &v1alpha1.BundleDeployment{Spec: v1alpha1.BundleDeploymentSpec{Staged: ref(1, "1"), Released: &v1alpha1.RevisionRef{Index: 1, DeploymentID: "d-1"}}}
		cached.Status.AppliedRevision, cached.Status.AppliedDeploymentID, cached.Status.Ready = 1, "d-1", true
		st := &PlanState{In: &rollout.Input{Revision: 2, Now: now}, Bds: map[string]*v1alpha1.BundleDeployment{}, Clusters: map[string]*v1alpha1.Cluster{}}
		st.clusterIn = func(ns string) (string, bool) { return strings.CutPrefix(ns, "cluster-") }
		st.In.Strategy.MaxNew = &one
		st.In.Strategy.MaxUnavailable = tc.maxUnavailable
		for _, name := range []string{"a", "b", "c"} {
			cl := &v1alpha1.Cluster{}
			cl.Name, cl.Status.Namespace = name, "cluster-"+name
			st.Clusters[name] = cl
			bd := cached.DeepCopy()
			bd.Namespace, bd.Name = cl.Status.Namespace, model.DeploymentName(bun.Namespace, bun.Name)
			st.Bds[name] = bd
			st.In.Targets = append(st.In.Targets, rollout.Target{Cluster: name, Deployment: bdstate.Deployment(bd)})
		}
		// a's release of revision 2 is in the cache already; b's was written a moment ago.
		st.Bds["a"].Spec.Staged, st.Bds["a"].Spec.Released = ref(2, "2"), &v1alpha1.RevisionRef{Index: 2, DeploymentID: "d-2"}
		st.In.Targets[0].Deployment = bdstate.Deployment(st.Bds["a"])
		mem.Add(deploy.DeploymentKey(bun, st.Clusters["a"]), ref(2, "2"), now)
		mem.Add(deploy.DeploymentKey(bun, st.Clusters["b"]), ref(2, "2"), now)

		st.CountUnseen(&mem, bun, now.Add(time.Second))
		if mem.Pending(deploy.DeploymentKey(bun, st.Clusters["a"]), "d-2", now) {
			t.Errorf("%s: a release the cache shows must be forgotten", tc.name)
		}
		if d := st.In.Targets[1].Deployment; d.Staged != 2 || d.Released != 2 || d.Applied != 0 {
			t.Errorf("%s: b's unseen release must count as released and not applied: %+v", tc.name, d)
		}
		d := rollout.Plan(st.In)
		if !slices.Equal(d.Release, tc.wantRelease) || (d.Paused != "") != tc.wantPaused {
			t.Errorf("%s: released %v, paused %q", tc.name, d.Release, d.Paused)
		}
	}
}

func ref(index int64, id string) v1alpha1.RevisionRef {
	return v1alpha1.RevisionRef{Index: index, ContentID: "c-" + id, DeploymentID: "d-" + id}
}
