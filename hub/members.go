package hub

import (
	"context"
	"time"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/bdstate"
	"github.com/flotilla-dev/flotilla/rollout"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// member is what the staged and sequence planners see of a cluster a bundle is placed on.
type member struct {
	cluster      *v1alpha1.Cluster
	deployment   *rollout.Deployment
	availability *rollout.Availability
	offline      bool
	// since is the first revision the cluster's record has (revisionStore.since).
	since int64
}

// readMembers reads the bundle's placements as members, with their deployments by cluster.
func readMembers(ctx context.Context, c client.Reader, revisions *revisionStore, live *liveness, now time.Time, bun *v1alpha1.Bundle) ([]member, map[string]*v1alpha1.BundleDeployment, error) {
	ps, err := placements(ctx, c, bun)
	if err != nil {
		return nil, nil, err
	}
	since, err := revisions.since(ctx, bun)
	if err != nil {
		return nil, nil, err
	}
	out := make([]member, 0, len(ps))
	for _, p := range ps {
		m := member{cluster: p.cluster, deployment: bdstate.Deployment(p.bd), availability: availability(p.cluster),
			offline: live.offline(p.cluster, now), since: since[p.cluster.Name]}
		if m.offline {
			seen, _ := live.lastSeen(p.cluster)
			markOffline(m.deployment, seen)
		}
		out = append(out, m)
	}
	return out, byCluster(ps), nil
}
