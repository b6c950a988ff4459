package model

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// ClusterGroups reads a namespace's ClusterGroups and returns a function naming the groups of a
// cluster, with each group's labels.
func ClusterGroups(ctx context.Context, c client.Reader, namespace string) (func(*v1alpha1.Cluster) map[string]map[string]string, error) {
	var groups v1alpha1.ClusterGroupList
	if err := c.List(ctx, &groups, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("failed to list cluster groups: %w", err)
	}
	return func(cl *v1alpha1.Cluster) map[string]map[string]string {
		out := map[string]map[string]string{}
		for _, g := range groups.Items {
			sel, err := metav1.LabelSelectorAsSelector(g.Spec.Selector)
			if err == nil && sel.Matches(labels.Set(cl.Labels)) {
				out[g.Name] = g.Labels
			}
		}
		return out
	}, nil
}
