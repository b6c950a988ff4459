package model

import (
	"context"
	"fmt"
	"slices"
	"sort"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// deploymentsByBundle indexes BundleDeployments in the hub's cache by their bundle
// ("namespace/name"): a bundle's deployments are found without scanning every deployment of
// the fleet.
const deploymentsByBundle = "flotilla.dev/bundle"

func bundleKey(namespace, name string) string { return namespace + "/" + name }

// DeploymentsByContent indexes BundleDeployments by the content their staged and released
// revisions reference ("bundle namespace/content id"): who still deploys a content.
const DeploymentsByContent = "flotilla.dev/content"

// IndexDeployments registers deploymentsByBundle, DeploymentsByContent and clustersByNamespace
// with the manager's cache.
func IndexDeployments(ctx context.Context, indexer client.FieldIndexer) error {
	err := indexer.IndexField(ctx, &v1alpha1.BundleDeployment{}, deploymentsByBundle, func(o client.Object) []string {
		l := o.GetLabels()
		if l[LabelBundle] == "" {
			return nil
		}
		return []string{bundleKey(l[LabelBundleNamespace], l[LabelBundle])}
	})
	if err != nil {
		return err
	}
	err = indexer.IndexField(ctx, &v1alpha1.BundleDeployment{}, DeploymentsByContent, func(o client.Object) []string {
		var keys []string
		for _, ref := range ContentRefsOf(o) {
			keys = append(keys, ref.String())
		}
		return keys
	})
	if err != nil {
		return err
	}
	return indexer.IndexField(ctx, &v1alpha1.Cluster{}, clustersByNamespace, func(o client.Object) []string {
		c, ok := o.(*v1alpha1.Cluster)
		if !ok {
			return nil
		}
		var keys []string
		for _, ns := range []string{c.Status.Namespace, c.Status.PreviousNamespace} {
			if ns != "" {
				keys = append(keys, ns)
			}
		}
		return keys
	})
}

// clustersByNamespace indexes Clusters by the namespaces they hold on the hub: status.namespace
// and, while moving, status.previousNamespace. An object found in a cluster namespace (the
// agent's Lease) leads to its Cluster without a scan.
const clustersByNamespace = "flotilla.dev/cluster-namespace"

// ClusterInNamespace reads from the cache the Cluster that holds namespace ns.
func ClusterInNamespace(ctx context.Context, c client.Reader, ns string) (*v1alpha1.Cluster, bool) {
	var list v1alpha1.ClusterList
	if err := c.List(ctx, &list, client.MatchingFields{clustersByNamespace: ns}); err != nil || len(list.Items) != 1 {
		return nil, false
	}
	return &list.Items[0], true
}

// ListDeployments reads a bundle's BundleDeployments from the cache. They are the cache's own
// objects, not copies: callers copy one before changing it.
func ListDeployments(ctx context.Context, c client.Reader, bun *v1alpha1.Bundle) ([]v1alpha1.BundleDeployment, error) {
	var list v1alpha1.BundleDeploymentList
	if err := c.List(ctx, &list, client.MatchingFields{deploymentsByBundle: bundleKey(bun.Namespace, bun.Name)}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("failed to list deployments of %s: %w", bun.Name, err)
	}
	return list.Items, nil
}

// ReadFleet reads a bundle's deployments and the Clusters of its namespace from the cache:
// the cache's own objects, not copies (through c's FleetIndex when it has one).
func ReadFleet(ctx context.Context, c client.Reader, bun *v1alpha1.Bundle) ([]*v1alpha1.BundleDeployment, []*v1alpha1.Cluster, error) {
	if f := FleetIndexOf(c); f != nil {
		return f.read(bun)
	}
	bds, err := ListDeployments(ctx, c, bun)
	if err != nil {
		return nil, nil, err
	}
	clusters, err := ListClusters(ctx, c, bun.Namespace)
	return pointers(bds), pointers(clusters), err
}

func pointers[T any](items []T) []*T {
	out := make([]*T, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	return out
}

// ListClusters reads a namespace's Clusters from the cache, read-only (not copied).
func ListClusters(ctx context.Context, c client.Reader, namespace string) ([]v1alpha1.Cluster, error) {
	var list v1alpha1.ClusterList
	if err := c.List(ctx, &list, client.InNamespace(namespace), client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("failed to list clusters: %w", err)
	}
	return list.Items, nil
}

// placed is a bundle's deployment on a cluster that still exists (nil when the rollout has
// not reached the cluster yet: PlacementsWith).
type placed struct {
	Bd      *v1alpha1.BundleDeployment
	Cluster *v1alpha1.Cluster
}

// Placements reads a bundle's BundleDeployments with their Clusters, sorted by cluster name.
// Deployments whose Cluster is gone are left out: nothing can be released to them; so are the
// ones a cluster that moves to a new namespace leaves behind (clusterMove). Both are
// the cache's objects: copy a deployment before changing it.
func Placements(ctx context.Context, c client.Reader, bun *v1alpha1.Bundle) ([]placed, error) {
	return PlacementsWith(ctx, c, bun, nil)
}

// PlacementsWith is Placements with the clusters recorded (a revision's record) names that the
// rollout has not reached: admitted, and without a deployment of the bundle in their namespace
// or the one they leave, they are placed with Bd nil (Pending, ROLLOUT.md §0). Releasing the
// revision to one creates its deployment.
func PlacementsWith(ctx context.Context, c client.Reader, bun *v1alpha1.Bundle, recorded RevisionTargets) ([]placed, error) {
	bds, clusters, err := ReadFleet(ctx, c, bun)
	if err != nil {
		return nil, err
	}
	byName := make(map[string]*v1alpha1.Cluster, len(clusters))
	for _, cl := range clusters {
		byName[cl.Name] = cl
	}
	out := make([]placed, 0, max(len(bds), len(recorded)))
	deployed := make(map[string]bool, len(bds)) // cluster namespaces with a deployment of the bundle
	for _, bd := range bds {
		deployed[bd.Namespace] = true
		if cl := byName[bd.Labels[LabelCluster]]; cl != nil && bd.Namespace == cl.Status.Namespace {
			out = append(out, placed{Bd: bd, Cluster: cl})
		}
	}
	for name := range recorded {
		cl := byName[name]
		if cl == nil || cl.Status.Namespace == "" || deployed[cl.Status.Namespace] || cl.Status.PreviousNamespace != "" && deployed[cl.Status.PreviousNamespace] {
			continue
		}
		out = append(out, placed{Cluster: cl})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Cluster.Name < out[j].Cluster.Name })
	return out, nil
}

// ByCluster indexes placements' deployments by cluster name; the clusters placed without one
// (PlacementsWith) are not in it.
func ByCluster(ps []placed) map[string]*v1alpha1.BundleDeployment {
	out := make(map[string]*v1alpha1.BundleDeployment, len(ps))
	for _, p := range ps {
		if p.Bd != nil {
			out[p.Cluster.Name] = p.Bd
		}
	}
	return out
}

// ContentRef names one content: its bundle namespace and id.
type ContentRef struct{ Namespace, ID string }

func (r ContentRef) String() string { return r.Namespace + "/" + r.ID }

// ContentRefsOf lists the content a BundleDeployment's staged and released revisions reference.
func ContentRefsOf(o client.Object) []ContentRef {
	bd, ok := o.(*v1alpha1.BundleDeployment)
	if !ok {
		return nil
	}
	refs := []ContentRef{{bd.Spec.BundleNamespace, bd.Spec.Staged.ContentID}}
	if r := bd.Spec.Released; r != nil && r.ContentID != bd.Spec.Staged.ContentID {
		refs = append(refs, ContentRef{bd.Spec.BundleNamespace, r.ContentID})
	}
	// The last good revision stays readable (and kept): a rollback may release it (R5.4).
	if g := bd.Spec.LastGood; g != nil && !slices.ContainsFunc(refs, func(r ContentRef) bool { return r.ID == g.ContentID }) {
		refs = append(refs, ContentRef{bd.Spec.BundleNamespace, g.ContentID})
	}
	return refs
}

func ContentRefsChanged(old, updated client.Object) bool {
	return !slices.Equal(ContentRefsOf(old), ContentRefsOf(updated))
}

// RunsOfBundle lists the StagedUpdateRuns of a bundle, read-only: they are the cache's, not
// copies (a run's status names each of its clusters, and a namespace's runs were copied on
// every planning pass).
func RunsOfBundle(ctx context.Context, c client.Reader, namespace, bundle string) ([]v1alpha1.StagedUpdateRun, error) {
	var list v1alpha1.StagedUpdateRunList
	if err := c.List(ctx, &list, client.InNamespace(namespace), client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("failed to list runs: %w", err)
	}
	runs := list.Items[:0]
	for _, run := range list.Items {
		if run.Spec.Bundle == bundle {
			runs = append(runs, run)
		}
	}
	return runs, nil
}
