package strategy

import (
	"context"
	"time"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/bdstate"
	"github.com/flotilla-dev/flotilla/hub/liveness"
	"github.com/flotilla-dev/flotilla/hub/model"
	"github.com/flotilla-dev/flotilla/hub/plan"
	"github.com/flotilla-dev/flotilla/rollout"
	"sigs.k8s.io/controller-runtime/pkg/client"
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

// readMembers reads the bundle's placements as members, with their deployments by cluster.
func readMembers(ctx context.Context, c client.Reader, revisions *model.RevisionStore, live *liveness.Liveness, now time.Time, bun *v1alpha1.Bundle) ([]member, map[string]*v1alpha1.BundleDeployment, error) {
	ps, err := model.Placements(ctx, c, bun)
	if err != nil {
		return nil, nil, err
	}
	since, err := revisions.Since(ctx, bun)
	if err != nil {
		return nil, nil, err
	}
	out := make([]member, 0, len(ps))
	for _, p := range ps {
		m := member{cluster: p.Cluster, deployment: bdstate.Deployment(p.Bd), availability: availability(p.Cluster),
			offline: live.Offline(p.Cluster, now), since: since[p.Cluster.Name]}
		if m.offline {
			seen, _ := live.LastSeen(p.Cluster)
			plan.MarkOffline(m.deployment, seen)
		}
		out = append(out, m)
	}
	return out, model.ByCluster(ps), nil
}
