package hub

import (
	"context"
	"fmt"
	"maps"

	"github.com/flotilla-dev/flotilla/bundle"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/rollout"
	"golang.org/x/sync/errgroup"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// writeStaging writes the deployments cluster by cluster, the agents first granted the content
// the commit brings them (planGrants: one Role write per cluster, or two writes per content
// shared by several clusters). Clusters are independent, so several are staged at once, as many
// as the client's share of API server concurrency. The grants cover the clusters the rollout
// reaches later too: their release is then one write, and their agents never wait for access.
func (b *bundler) writeStaging(ctx context.Context, clusters []targetCluster, plans []staging) error {
	staged := map[string]map[string][]string{}
	namespaceOf := map[string]string{}
	for _, c := range clusters {
		if c.cluster.Status.Namespace == "" {
			continue // not admitted: nothing is staged for it
		}
		namespaceOf[c.cluster.Name] = c.cluster.Status.Namespace
		for _, p := range plans {
			if t, ok := p.recorded[c.cluster.Name]; ok {
				if staged[c.cluster.Name] == nil {
					staged[c.cluster.Name] = map[string][]string{}
				}
				staged[c.cluster.Name][p.bundle.Namespace] = append(staged[c.cluster.Name][p.bundle.Namespace], t.Ref.ContentID)
			}
		}
	}
	grants := planGrants(staged)
	if !b.shard.fleetWide() {
		// Another shard's agents are granted by the default shard, which sees every shard's
		// deployments (their agents retry content they cannot read yet).
		grants = contentGrants{}
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(stageWorkers)
	for ref, names := range grants.shared {
		g.Go(func() error {
			agents := make([]string, len(names))
			for i, name := range names {
				agents[i] = namespaceOf[name]
			}
			return b.writes.do(gctx, func() error {
				if err := grantShared(gctx, b.client, ref, agents, b.now()); err != nil {
					return fmt.Errorf("failed to grant content %s to its clusters: %w", ref.ID, err)
				}
				return nil
			})
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	g, gctx = errgroup.WithContext(ctx)
	g.SetLimit(stageWorkers)
	for _, c := range clusters {
		if staged[c.cluster.Name] == nil {
			continue
		}
		g.Go(func() error {
			return b.writes.do(gctx, func() error {
				if own := grants.own[c.cluster.Name]; len(own) > 0 {
					if err := grantAccess(gctx, b.client, c.cluster, own); err != nil {
						return fmt.Errorf("failed to grant cluster %s its content: %w", c.cluster.Name, err)
					}
				}
				for _, p := range plans {
					t, ok := p.want[c.cluster.Name]
					if !ok {
						continue
					}
					release := p.release[c.cluster.Name]
					if _, err := writeDeployment(gctx, b.client, p.bundle, c.cluster, p.state.bds[c.cluster.Name], t, release, b.now()); err != nil {
						return err
					}
					if release {
						b.released.add(deploymentKey(p.bundle, c.cluster), t.Ref, b.now())
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
	recorded, want revisionTargets
	state          *planState
	release        map[string]bool
	// decision is the planner's, for a continuous rollout: what release tells the operator.
	decision *rollout.Decision
	// newRevision: the commit made a new revision of the bundle.
	newRevision bool
}

// planStaging decides what to stage for a bundle's latest revision. A continuous rollout asks
// the planner which clusters it would release right away, so that those are staged and
// released in one write, and creates no deployment for the others yet. A rolled-back bundle
// stages nothing: its pinned revision stays.
func (b *bundler) planStaging(ctx context.Context, bun *v1alpha1.Bundle, recorded revisionTargets) (staging, error) {
	p := staging{bundle: bun}
	if bun.Spec.TargetRevision != nil {
		return p, nil
	}
	p.recorded, p.want = recorded, maps.Clone(recorded)
	var err error
	if p.state, err = gatherPlan(ctx, b.client, b.live, b.now(), bun, p.want); err != nil {
		return p, err
	}
	if bun.Spec.StagedUpdate == nil && bun.Spec.Sequence == nil {
		p.release, p.decision = releasedWithStaging(p.state, p.want)
		// A continuous rollout writes a cluster's deployment when it reaches the cluster, staged
		// and released in one write: the rollout controller does it from the revision's record.
		// Until then a cluster stays Pending (no deployment yet) or OutOfSync (its older revision
		// staged). Paused bundles and clusters are staged at once (R1.13).
		for name := range p.want {
			cl := p.state.clusters[name]
			if !p.release[name] && (p.state.bds[name] == nil || !bun.Spec.Paused && (cl == nil || !cl.Spec.Paused)) {
				delete(p.want, name)
			}
		}
	}
	return p, nil
}

// dropUntargeted deletes the bundle's BundleDeployments on clusters it no longer targets; their
// agents then remove the workload. A placement's rolling update removes them itself, within
// its availability budget once new clusters carry the workload (R2.4).
func (b *bundler) dropUntargeted(ctx context.Context, bun *v1alpha1.Bundle, targets map[string]*bundle.Rendered) error {
	if bun.Spec.Placement != nil && bun.Spec.TargetRevision == nil {
		return nil
	}
	bds, err := listDeployments(ctx, b.client, bun)
	if err != nil {
		return err
	}
	for i := range bds {
		bd := &bds[i]
		if _, ok := targets[bd.Labels[LabelCluster]]; ok || !bd.DeletionTimestamp.IsZero() {
			continue
		}
		if err := b.client.Delete(ctx, bd.DeepCopy()); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("failed to remove %s from %s: %w", bun.Name, bd.Labels[LabelCluster], err)
		}
	}
	return nil
}
