package sources

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/flotilla-dev/flotilla/bundle"
	"github.com/flotilla-dev/flotilla/hub/access"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/deploy"
	"github.com/flotilla-dev/flotilla/hub/model"
	"github.com/flotilla-dev/flotilla/hub/plan"
	"github.com/flotilla-dev/flotilla/rollout"
	"golang.org/x/sync/errgroup"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// grantShared plans the agents' access to the content a commit brings them (PlanGrants: one
// Role write per cluster, or two writes per content shared by several clusters) and writes the
// shared grants; the clusters' own grants are written with their deployments (writeStaging).
// The grants cover the clusters the rollout reaches later too: their release is then one
// write, and their agents never wait for access.
func (b *Bundler) grantShared(ctx context.Context, clusters []targetCluster, drafts []revisionDraft) (access.ContentGrants, error) {
	// A rolled-back bundle stages nothing (planStaging): its pinned revision stays.
	drafts = slices.DeleteFunc(slices.Clone(drafts), func(d revisionDraft) bool { return d.bundle.Spec.TargetRevision != nil })
	staged := map[string]map[string][]string{}
	namespaceOf := map[string]string{}
	for _, c := range clusters {
		if c.cluster.Status.Namespace == "" {
			continue // not admitted: nothing is staged for it
		}
		namespaceOf[c.cluster.Name] = c.cluster.Status.Namespace
		for _, d := range drafts {
			if t, ok := d.recorded[c.cluster.Name]; ok {
				if staged[c.cluster.Name] == nil {
					staged[c.cluster.Name] = map[string][]string{}
				}
				staged[c.cluster.Name][d.bundle.Namespace] = append(staged[c.cluster.Name][d.bundle.Namespace], t.Ref.ContentID)
			}
		}
	}
	grants := access.PlanGrants(staged)
	if !b.Shard.FleetWide() {
		// Another shard's agents are granted by the default shard, which sees every shard's
		// deployments (their agents retry content they cannot read yet).
		return access.ContentGrants{}, nil
	}
	bundlesOf := map[model.ContentRef][]string{}
	for _, d := range drafts {
		for _, t := range d.recorded {
			ref := model.ContentRef{Namespace: d.bundle.Namespace, ID: t.Ref.ContentID}
			if _, shared := grants.Shared[ref]; shared && !slices.Contains(bundlesOf[ref], d.bundle.Name) {
				bundlesOf[ref] = append(bundlesOf[ref], d.bundle.Name)
			}
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(deploy.StageWorkers)
	for ref, names := range grants.Shared {
		g.Go(func() error {
			agents := make([]string, len(names))
			for i, name := range names {
				agents[i] = namespaceOf[name]
			}
			return b.Writes.Do(gctx, func() error {
				// Grants age on the wall clock, whatever the rollouts' clock says.
				grant := access.SharedGrant{Ref: ref, Bundles: bundlesOf[ref], ClusterNamespaces: agents}
				if err := access.GrantShared(gctx, b.Client, grant, time.Now()); err != nil {
					return fmt.Errorf("failed to grant content %s to its clusters: %w", ref.ID, err)
				}
				return nil
			})
		})
	}
	return grants, g.Wait()
}

// writeStaging writes the deployments cluster by cluster, each cluster's own grant of content
// (grants.Own) first. Clusters are independent, so several are staged at once, as many as the
// client's share of API server concurrency.
func (b *Bundler) writeStaging(ctx context.Context, clusters []targetCluster, plans []staging, grants access.ContentGrants) error {
	staged := map[string]bool{}
	for _, p := range plans {
		for name := range p.recorded {
			staged[name] = true
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(deploy.StageWorkers)
	for _, c := range clusters {
		if c.cluster.Status.Namespace == "" || !staged[c.cluster.Name] {
			continue
		}
		g.Go(func() error {
			return b.Writes.Do(gctx, func() error {
				if own := grants.Own[c.cluster.Name]; len(own) > 0 {
					if err := access.GrantAccess(gctx, b.Client, c.cluster, own); err != nil {
						return fmt.Errorf("failed to grant cluster %s its content: %w", c.cluster.Name, err)
					}
				}
				for _, p := range plans {
					t, ok := p.want[c.cluster.Name]
					if !ok {
						continue
					}
					release := p.release[c.cluster.Name]
					if _, err := deploy.WriteDeployment(gctx, b.Client, p.bundle, c.cluster, p.state.Bds[c.cluster.Name], t, release, b.Now()); err != nil {
						return err
					}
					if release {
						b.Released.Add(deploy.DeploymentKey(p.bundle, c.cluster), t.Ref, b.Now())
					}
				}
				return nil
			})
		})
	}
	return g.Wait()
}

// staging is what a commit stages for one bundle: the revision per cluster, and the clusters
// the planner releases it to at once.
type staging struct {
	bundle *v1alpha1.Bundle
	// recorded is what the revision deploys to each cluster; want, what is written now.
	recorded, want model.RevisionTargets
	state          *plan.PlanState
	release        map[string]bool
	// decision is the planner's, for a continuous rollout: what release tells the operator.
	decision *rollout.Decision
	// newRevision: the commit made a new revision of the bundle.
	newRevision bool
}

// planStaging decides what to stage for a bundle's latest revision. A continuous rollout asks
// the planner which clusters it would release right away, so that those are staged and
// released in one write; no rollout gets a deployment for the others yet. A rolled-back bundle
// stages nothing: its pinned revision stays.
func (b *Bundler) planStaging(ctx context.Context, bun *v1alpha1.Bundle, recorded model.RevisionTargets) (staging, error) {
	p := staging{bundle: bun}
	if bun.Spec.TargetRevision != nil {
		return p, nil
	}
	p.recorded, p.want = recorded, maps.Clone(recorded)
	var err error
	if p.state, err = plan.GatherPlan(ctx, b.Client, b.Live, b.Now(), bun, p.want); err != nil {
		return p, err
	}
	paused := func(name string) bool {
		cl := p.state.Clusters[name]
		return bun.Spec.Paused || cl != nil && cl.Spec.Paused
	}
	// A rollout writes a cluster's deployment when it reaches the cluster, staged and released
	// from the revision's record in one write: the rollout controller for a continuous rollout,
	// a staged run's stage or a sequence's group for theirs. Until then a cluster stays Pending
	// (no deployment yet) or OutOfSync (its older revision staged). What is written now is what
	// a continuous rollout's planner releases at once, and the staging of paused bundles and
	// clusters that have a deployment (R1.13).
	if bun.Spec.StagedUpdate == nil && bun.Spec.Sequence == nil {
		p.release, p.decision = plan.ReleasedWithStaging(p.state, p.want)
	}
	for name := range p.want {
		if !p.release[name] && (p.state.Bds[name] == nil || !paused(name)) {
			delete(p.want, name)
		}
	}
	return p, nil
}

// dropUntargeted deletes the bundle's BundleDeployments on clusters it no longer targets; their
// agents then remove the workload. A placement's rolling update removes them itself, within
// its availability budget once new clusters carry the workload (R2.4).
func (b *Bundler) dropUntargeted(ctx context.Context, bun *v1alpha1.Bundle, targets map[string]*bundle.Rendered) error {
	if bun.Spec.Placement != nil && bun.Spec.TargetRevision == nil {
		return nil
	}
	bds, err := model.ListDeployments(ctx, b.Client, bun)
	if err != nil {
		return err
	}
	for i := range bds {
		bd := &bds[i]
		if _, ok := targets[bd.Labels[model.LabelCluster]]; ok || !bd.DeletionTimestamp.IsZero() {
			continue
		}
		if err := b.Client.Delete(ctx, bd.DeepCopy()); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("failed to remove %s from %s: %w", bun.Name, bd.Labels[model.LabelCluster], err)
		}
	}
	return nil
}
