package preview

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/bundle"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/model"
	"github.com/flotilla-dev/flotilla/rollout"
)

// FleetOf is the fleet a GitRepo of the hub deploys to: its paths and targets, the Clusters and
// ClusterGroups of its namespace and the strategies there, read through c (a person's
// credentials, or the hub's cache) and never written. Only the GitRepo's namespace is read, as
// the hub renders only for clusters of a GitRepo's own namespace.
func FleetOf(ctx context.Context, c client.Reader, namespace, gitRepo string) (Fleet, error) {
	var repo v1alpha1.GitRepo
	if err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: gitRepo}, &repo); err != nil {
		return Fleet{}, fmt.Errorf("GitRepo %s/%s: %w", namespace, gitRepo, err)
	}
	var clusters v1alpha1.ClusterList
	if err := c.List(ctx, &clusters, client.InNamespace(namespace)); err != nil {
		return Fleet{}, fmt.Errorf("clusters of %s: %w", namespace, err)
	}
	var groups v1alpha1.ClusterGroupList
	if err := c.List(ctx, &groups, client.InNamespace(namespace)); err != nil {
		return Fleet{}, fmt.Errorf("cluster groups of %s: %w", namespace, err)
	}
	groupsOf, err := model.ClusterGroups(ctx, c, namespace)
	if err != nil {
		return Fleet{}, err
	}
	fleet := Fleet{RepoName: repo.Name, Paths: repo.Spec.Paths, Defaults: repo.Spec.BundleDefaults, Targets: model.TargetMatches(repo.Spec.Targets),
		Strategies: hubStrategies{c: c, namespace: namespace}}
	for _, g := range groups.Items {
		fleet.ClusterGroups = append(fleet.ClusterGroups, rollout.ClusterGroup{Name: g.Name, Labels: g.Labels})
	}
	for i := range clusters.Items {
		cl := &clusters.Items[i]
		fleet.Clusters = append(fleet.Clusters, bundle.Target{ClusterName: cl.Name, Labels: cl.Labels, Annotations: cl.Annotations,
			TemplateValues: cl.Spec.TemplateValues, Namespace: cl.Status.Namespace, Groups: groupsOf(cl)})
	}
	slices.SortFunc(fleet.Clusters, func(a, b bundle.Target) int { return strings.Compare(a.ClusterName, b.ClusterName) })
	return fleet, nil
}

// hubStrategies reads the strategies bundles name from the GitRepo's namespace.
type hubStrategies struct {
	c         client.Reader
	namespace string
}

func (s hubStrategies) Staged(ctx context.Context, name string) (*rollout.StagedStrategy, error) {
	var obj v1alpha1.StagedUpdateStrategy
	if err := s.c.Get(ctx, types.NamespacedName{Namespace: s.namespace, Name: name}, &obj); err != nil {
		return nil, err
	}
	out, err := model.StagedStrategy(&obj.Spec)
	return &out, err
}

func (s hubStrategies) Sequence(ctx context.Context, name string) (*rollout.Sequence, error) {
	var obj v1alpha1.RolloutSequence
	if err := s.c.Get(ctx, types.NamespacedName{Namespace: s.namespace, Name: name}, &obj); err != nil {
		return nil, err
	}
	out := model.Sequence(&obj.Spec)
	return &out, nil
}
