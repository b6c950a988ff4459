package strategy

import (
	"github.com/flotilla-dev/flotilla/hub/analysis"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/rollout"
)

// Analysis gates (§7) in the three controllers share this: a pass reads what its checks say
// (analysis.Runner.Inputs), lets the planner decide, tells the runner what to measure from now
// on (Track), and reports the checks on the Bundle (Summary). The runner wakes the controller
// when a verdict changes.

// clusterIndex looks a pass's clusters up by name, built on first use: a pass of a bundle
// without checks never builds it.
type clusterIndex[T any] struct {
	items  []T
	name   func(*T) string
	by     map[string]*T
	lookup func(*T) *rollout.Deployment
	labels func(*T) map[string]string
}

func newClusterIndex[T any](items []T, name func(*T) string, deployment func(*T) *rollout.Deployment, labels func(*T) map[string]string) *clusterIndex[T] {
	return &clusterIndex[T]{items: items, name: name, lookup: deployment, labels: labels}
}

func (x *clusterIndex[T]) get(cluster string) *T {
	if x.by == nil {
		x.by = make(map[string]*T, len(x.items))
		for i := range x.items {
			x.by[x.name(&x.items[i])] = &x.items[i]
		}
	}
	return x.by[cluster]
}

// Deployment is the cluster's deployment as the planner sees it, nil when unknown.
func (x *clusterIndex[T]) Deployment(cluster string) *rollout.Deployment {
	if t := x.get(cluster); t != nil {
		return x.lookup(t)
	}
	return nil
}

// Labels are the cluster's labels, for a Cluster check's query.
func (x *clusterIndex[T]) Labels(cluster string) map[string]string {
	if t := x.get(cluster); t != nil {
		return x.labels(t)
	}
	return nil
}

func targetIndex(ts []rollout.Target) *clusterIndex[rollout.Target] {
	return newClusterIndex(ts, func(t *rollout.Target) string { return t.Cluster }, func(t *rollout.Target) *rollout.Deployment { return t.Deployment },
		func(t *rollout.Target) map[string]string { return t.Labels })
}

func sequenceIndex(cs []rollout.SequenceCluster) *clusterIndex[rollout.SequenceCluster] {
	return newClusterIndex(cs, func(c *rollout.SequenceCluster) string { return c.Name }, func(c *rollout.SequenceCluster) *rollout.Deployment { return c.Deployment },
		func(c *rollout.SequenceCluster) map[string]string { return c.Labels })
}

func runIndex(cs []rollout.RunCluster) *clusterIndex[rollout.RunCluster] {
	return newClusterIndex(cs, func(c *rollout.RunCluster) string { return c.Name }, func(c *rollout.RunCluster) *rollout.Deployment { return c.Deployment },
		func(c *rollout.RunCluster) map[string]string { return c.Labels })
}

// bundleOwner is the owner of a bundle's checks judged by kind (rollout or sequence).
func bundleOwner(kind analysis.Kind, bun *v1alpha1.Bundle) analysis.Owner {
	return analysis.Owner{Kind: kind, Namespace: bun.Namespace, Name: bun.Name, Bundle: bun.Name}
}

// runOwner is the owner of a staged run's checks.
func runOwner(run *v1alpha1.StagedUpdateRun) analysis.Owner {
	return analysis.Owner{Kind: analysis.KindRun, Namespace: run.Namespace, Name: run.Name, Bundle: run.Spec.Bundle}
}
