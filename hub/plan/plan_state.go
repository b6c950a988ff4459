package plan

import (
	"context"
	"maps"
	"sort"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/bdstate"
	"github.com/flotilla-dev/flotilla/hub/deploy"
	"github.com/flotilla-dev/flotilla/hub/liveness"
	"github.com/flotilla-dev/flotilla/hub/model"
	"github.com/flotilla-dev/flotilla/rollout"
)

// The gather step of a continuous rollout: what the bundler and the rollout controller hand to
// rollout.Plan.

// PlanState is what the planner needs about a bundle, read from the cache, and the objects it
// was read from (the cache's own: copy before changing).
type PlanState struct {
	In       *rollout.Input
	Bds      map[string]*v1alpha1.BundleDeployment
	Clusters map[string]*v1alpha1.Cluster
	// Requeue is when the next cluster's heartbeat deadline passes (R1.11 needs a look then).
	Requeue time.Duration
}

// GatherPlan reads the bundle's deployments and their clusters (groups, heartbeats, pause,
// dependencies) into the planner's input. Clusters named in also (the revision's targets) take
// part even before they have a deployment: they are about to be staged. With a placement, a
// cluster outside also that still has a deployment takes part as Excluded: it left the targets.
func GatherPlan(ctx context.Context, c client.Reader, live *liveness.Liveness, now time.Time, bun *v1alpha1.Bundle, also map[string]model.RevisionTarget) (*PlanState, error) {
	bds, clusters, err := model.ReadFleet(ctx, c, bun)
	if err != nil {
		return nil, err
	}
	groupsOf, err := model.ClusterGroups(ctx, c, bun.Namespace)
	if err != nil {
		return nil, err
	}
	held, err := dependencyHolds(ctx, c, bun)
	if err != nil {
		return nil, err
	}
	rev := model.WantedRevision(bun)
	// Sized for the fleet up front: a pass over 10,000 clusters otherwise grows each map and
	// the targets a dozen times, 200 passes per revision (BenchmarkPlanningPass).
	taking := max(len(bds), len(also))
	st := &PlanState{In: &rollout.Input{Revision: rev, Paused: bun.Spec.Paused, Now: now, Quarantine: ActiveQuarantine(bun), CompletedAt: completedAt(bun, rev),
		Targets: make([]rollout.Target, 0, taking)},
		Bds: make(map[string]*v1alpha1.BundleDeployment, len(bds)), Clusters: make(map[string]*v1alpha1.Cluster, taking)}
	in := st.In
	if in.Strategy, err = model.RolloutStrategy(bun.Spec.RolloutStrategy); err != nil {
		return nil, err
	}
	if in.Placement, err = model.Placement(bun.Spec.Placement); err != nil {
		return nil, err
	}
	for _, bd := range bds {
		if bd.DeletionTimestamp.IsZero() { // one being removed is no longer the rollout's
			st.Bds[bd.Labels[model.LabelCluster]] = bd
		}
	}
	for _, c := range clusters {
		name := c.Name
		bd, deployed := st.Bds[name]
		_, targeted := also[name]
		if !deployed && !targeted {
			continue
		}
		st.Clusters[name] = c
		// A placement removes a cluster that left the targets within its budgets (R2.4); the
		// record of the revision says which are targeted.
		excluded := in.Placement != nil && also != nil && !targeted
		t := rollout.Target{Cluster: name, Labels: c.Labels, Paused: c.Spec.Paused, Blocked: held(name), Excluded: excluded}
		if deployed {
			t.Deployment = bdstate.Deployment(bd)
		}
		for g, gl := range groupsOf(c) {
			t.Groups = append(t.Groups, g)
			in.Groups = appendGroup(in.Groups, rollout.ClusterGroup{Name: g, Labels: gl})
		}
		sort.Strings(t.Groups)
		// A cluster that never reported is not offline, just pending.
		if ok, left, seen, reported := live.Look(c, now); ok {
			st.Requeue = model.Sooner(st.Requeue, left+time.Second)
		} else if t.Offline = reported; t.Offline {
			MarkOffline(t.Deployment, seen)
		}
		in.Targets = append(in.Targets, t)
	}
	for name := range st.Bds {
		if st.Clusters[name] == nil {
			delete(st.Bds, name) // its cluster is gone
		}
	}
	return st, nil
}

// CountUnseen plans with the releases this hub wrote that the cache does not show yet (their
// clusters WaitApplied): a pass right after a batch must neither hand the same clusters the
// revision again nor leave them out of the partition's budget (R1.8).
func (st *PlanState) CountUnseen(r *deploy.Releases, bun *v1alpha1.Bundle, now time.Time) {
	r.SeenAll(maps.Values(st.Bds))
	unseen := r.UnseenOf(model.DeploymentName(bun.Namespace, bun.Name), now)
	if len(unseen) == 0 {
		return
	}
	for i := range st.In.Targets {
		t := &st.In.Targets[i]
		ref, ok := unseen[st.Clusters[t.Cluster].Status.Namespace]
		if !ok {
			continue
		}
		d := rollout.Deployment{}
		if t.Deployment != nil {
			d = *t.Deployment
		}
		d.Staged, d.Released, d.Applied, d.ApplyFailed = ref.Index, ref.Index, 0, false
		d.ReleasedAt, d.WasReady, d.NotReadyAt, d.Rollback = now, false, time.Time{}, false
		t.Deployment = &d
	}
}

// ReleasedWithStaging plans as if want were staged already and returns the clusters the planner
// releases at once, with its decision: their deployment is staged and released in one write
// instead of two.
func ReleasedWithStaging(st *PlanState, want model.RevisionTargets) (map[string]bool, *rollout.Decision) {
	in := *st.In
	in.Targets = append([]rollout.Target(nil), st.In.Targets...)
	for i := range in.Targets {
		t := &in.Targets[i]
		w, ok := want[t.Cluster]
		if !ok {
			continue
		}
		d := rollout.Deployment{}
		if t.Deployment != nil {
			d = *t.Deployment
		}
		if bd := st.Bds[t.Cluster]; bd == nil || bd.Spec.Staged != w.Ref {
			d.Staged = w.Ref.Index
		}
		t.Deployment = &d
	}
	d := rollout.Plan(&in)
	out := map[string]bool{}
	for _, name := range d.Release {
		out[name] = true
	}
	return out, d
}

func appendGroup(gs []rollout.ClusterGroup, g rollout.ClusterGroup) []rollout.ClusterGroup {
	for _, x := range gs {
		if x.Name == g.Name {
			return gs
		}
	}
	return append(gs, g)
}
