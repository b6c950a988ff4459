package hub

import (
	"context"
	"fmt"
	"sort"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// placed is a bundle's deployment on a cluster that still exists.
type placed struct {
	bd      *v1alpha1.BundleDeployment
	cluster *v1alpha1.Cluster
}

// placements reads a bundle's BundleDeployments with their Clusters, sorted by cluster name.
// Deployments whose Cluster is gone are left out: nothing can be released to them.
func placements(ctx context.Context, c client.Reader, bun *v1alpha1.Bundle) ([]placed, error) {
	var list v1alpha1.BundleDeploymentList
	if err := c.List(ctx, &list, client.MatchingLabels{LabelBundle: bun.Name, LabelBundleNamespace: bun.Namespace}); err != nil {
		return nil, fmt.Errorf("failed to list deployments of %s: %w", bun.Name, err)
	}
	var clusters v1alpha1.ClusterList
	if err := c.List(ctx, &clusters, client.InNamespace(bun.Namespace)); err != nil {
		return nil, fmt.Errorf("failed to list clusters: %w", err)
	}
	byName := map[string]*v1alpha1.Cluster{}
	for i := range clusters.Items {
		byName[clusters.Items[i].Name] = &clusters.Items[i]
	}
	out := make([]placed, 0, len(list.Items))
	for i := range list.Items {
		bd := &list.Items[i]
		if cl := byName[bd.Labels[LabelCluster]]; cl != nil {
			out = append(out, placed{bd: bd, cluster: cl})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].cluster.Name < out[j].cluster.Name })
	return out, nil
}

// byCluster indexes placements' deployments by cluster name.
func byCluster(ps []placed) map[string]*v1alpha1.BundleDeployment {
	out := make(map[string]*v1alpha1.BundleDeployment, len(ps))
	for _, p := range ps {
		out[p.cluster.Name] = p.bd
	}
	return out
}
