package model

import (
	"context"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// ClusterGroups reads a namespace's ClusterGroups and returns a function naming the groups of a
// cluster, with each group's labels. Each group's selector is compiled once, here: a planning
// pass asks for every cluster of its bundle, and compiling a selector (its labels validated) per
// cluster and group cost more than the rest of the pass with ten groups (BenchmarkPlanningPass).
// A group whose selector does not compile has no clusters.
func ClusterGroups(ctx context.Context, c client.Reader, namespace string) (func(*v1alpha1.Cluster) map[string]map[string]string, error) {
	groupsOf, _, err := VersionedClusterGroups(ctx, c, namespace)
	return groupsOf, err
}

// VersionedClusterGroups is ClusterGroups and a version of the groups it read: the same
// version, the same groups (a planning pass keeps each cluster's groups while it holds).
func VersionedClusterGroups(ctx context.Context, c client.Reader, namespace string) (func(*v1alpha1.Cluster) map[string]map[string]string, string, error) {
	var groups v1alpha1.ClusterGroupList
	if err := c.List(ctx, &groups, client.InNamespace(namespace)); err != nil {
		return nil, "", fmt.Errorf("failed to list cluster groups: %w", err)
	}
	seen := make([]string, len(groups.Items)) // the cache lists in no fixed order
	for i, g := range groups.Items {
		seen[i] = fmt.Sprintf("%s/%s/%s", g.Name, g.UID, g.ResourceVersion)
	}
	slices.Sort(seen)
	version := strings.Join(seen, ",")
	type compiled struct {
		name     string
		labels   map[string]string
		selector labels.Selector
	}
	selecting := make([]compiled, 0, len(groups.Items))
	for _, g := range groups.Items {
		if sel, err := metav1.LabelSelectorAsSelector(g.Spec.Selector); err == nil {
			selecting = append(selecting, compiled{name: g.Name, labels: g.Labels, selector: sel})
		}
	}
	return func(cl *v1alpha1.Cluster) map[string]map[string]string {
		out := map[string]map[string]string{}
		for _, g := range selecting {
			if g.selector.Matches(labels.Set(cl.Labels)) {
				out[g.name] = g.labels
			}
		}
		return out
	}, version, nil
}
