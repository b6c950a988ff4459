package strategy

import (
	"context"
	"errors"
	"fmt"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/bdstate"
	"github.com/flotilla-dev/flotilla/hub/deploy"
	"github.com/flotilla-dev/flotilla/hub/liveness"
	"github.com/flotilla-dev/flotilla/hub/model"
	"github.com/flotilla-dev/flotilla/hub/plan"
	"github.com/flotilla-dev/flotilla/rollout"
)

// member is what the staged and sequence planners see of a cluster a bundle is placed on.
type member struct {
	cluster      *v1alpha1.Cluster
	deployment   *rollout.Deployment
	availability *rollout.Availability
	offline      bool
	// since is the first revision the cluster's record has (RevisionStore.since).
	since int64
}

// members is a bundle's fleet as the staged and sequence planners see it.
type members struct {
	list []member
	// clusters and bds are the members' Clusters and deployments by cluster name; a member the
	// rollout has not reached has no deployment.
	clusters map[string]*v1alpha1.Cluster
	bds      map[string]*v1alpha1.BundleDeployment
}

// readMembers reads the bundle's placements as members, and the clusters revision's record
// names that the rollout has not reached yet (no deployment: releasing the revision to one
// creates it, staged and released in one write).
func readMembers(ctx context.Context, c client.Reader, revisions *model.RevisionStore, live *liveness.Liveness, now time.Time, bun *v1alpha1.Bundle, revision int64) (*members, error) {
	recorded, err := revisions.Targets(ctx, bun, revision)
	var missing *model.MissingRevisionError
	if err != nil && !errors.As(err, &missing) { // without a record, the deployments alone take part
		return nil, err
	}
	ps, err := model.PlacementsWith(ctx, c, bun, recorded)
	if err != nil {
		return nil, err
	}
	since, err := revisions.Since(ctx, bun)
	if err != nil {
		return nil, err
	}
	out := &members{list: make([]member, 0, len(ps)), clusters: make(map[string]*v1alpha1.Cluster, len(ps)), bds: model.ByCluster(ps)}
	for _, p := range ps {
		m := member{cluster: p.Cluster, deployment: bdstate.Deployment(p.Bd), availability: availability(p.Cluster),
			offline: live.Offline(p.Cluster, now), since: since[p.Cluster.Name]}
		if m.offline {
			seen, _ := live.LastSeen(p.Cluster)
			plan.MarkOffline(m.deployment, seen)
		}
		out.list = append(out.list, m)
		out.clusters[p.Cluster.Name] = p.Cluster
	}
	return out, nil
}

// release is one cluster a run's stage or a sequence's group reaches: target (its revision's
// record) is staged and released on bd, or on a deployment created for it (bd nil).
type release struct {
	cluster *v1alpha1.Cluster
	bd      *v1alpha1.BundleDeployment
	target  model.RevisionTarget
}

// releaseAll writes a step's releases through the hub's write slots, deploy.StageWorkers at a
// time: a stage of 2,000 clusters written one after the other took 16 s here, twice what the
// API server needs for them. One write refused (a quota or an admission policy of a cluster's
// namespace) does not stop the others; every error is returned, and the step that follows
// releases the refused clusters again.
func releaseAll(ctx context.Context, c client.Client, uncached client.Reader, slots deploy.WriteSlots, released *deploy.Releases, bun *v1alpha1.Bundle, releases []release, now time.Time) error {
	errs := make([]error, len(releases))
	writes := make([]func(), len(releases))
	for i, rel := range releases {
		writes[i] = func() {
			errs[i] = slots.Do(ctx, func() error {
				return releaseTarget(ctx, c, uncached, released, bun, rel.cluster, rel.bd, rel.target, now)
			})
		}
	}
	<-startWrites(writes, deploy.StageWorkers, len(writes))
	return errors.Join(errs...)
}

// releaseTarget stages and releases target (a revision's record for cl) in one write: on bd,
// or creating the cluster's deployment when the rollout reaches it for the first time (bd
// nil). The agent is granted the content first if no grant the bundler wrote covers it yet. A
// deployment created is remembered in released for as long as a cache may lag: a step planned
// on a cache a moment behind releases the cluster again, and would write it twice.
func releaseTarget(ctx context.Context, c client.Client, uncached client.Reader, released *deploy.Releases, bun *v1alpha1.Bundle, cl *v1alpha1.Cluster, bd *v1alpha1.BundleDeployment, target model.RevisionTarget, now time.Time) error {
	key := deploy.DeploymentKey(bun, cl)
	if bd == nil {
		if released.Pending(key, target.Ref.DeploymentID, now) {
			return nil
		}
		released.Add(key, target.Ref, now)
	}
	if _, err := deploy.GrantAndWrite(ctx, c, uncached, bun, cl, bd, target, true, now); err != nil {
		released.Forget(key, target.Ref.DeploymentID)
		return fmt.Errorf("failed to release %s to %s: %w", bun.Name, cl.Name, err)
	}
	return nil
}
