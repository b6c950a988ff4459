package plan

import (
	"context"
	"fmt"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/bdstate"
	"github.com/flotilla-dev/flotilla/hub/model"
)

// dependencyHolds says, per cluster, why a bundle may not be released there yet: a bundle it
// depends on (spec.dependsOn) is not Ready on that cluster. A dependency that does not exist,
// or does not deploy to the cluster, holds it too: "ready there first" cannot be met.
func dependencyHolds(ctx context.Context, c client.Reader, bun *v1alpha1.Bundle) (func(cluster string) string, error) {
	if len(bun.Spec.DependsOn) == 0 {
		return func(string) string { return "" }, nil
	}
	var list v1alpha1.BundleList
	if err := c.List(ctx, &list, client.InNamespace(bun.Namespace), client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("failed to list bundles: %w", err)
	}
	var missing []string
	var deps []*v1alpha1.Bundle
	for i, d := range bun.Spec.DependsOn {
		found := false
		for j := range list.Items {
			if b := &list.Items[j]; b.Name != bun.Name && dependencyMatches(d, b) {
				deps, found = append(deps, b), true
			}
		}
		if !found {
			missing = append(missing, describeDependency(i, d))
		}
	}
	if len(missing) > 0 {
		msg := "depends on " + strings.Join(missing, ", ") + ", which does not exist"
		return func(string) string { return msg }, nil
	}
	// ready[dependency][cluster]
	ready := make([]map[string]bool, len(deps))
	for i, dep := range deps {
		ps, err := model.Placements(ctx, c, dep)
		if err != nil {
			return nil, err
		}
		ready[i] = map[string]bool{}
		for _, p := range ps {
			ready[i][p.Cluster.Name] = bdstate.Available(p.Bd, model.MeasuredRevision(dep, p.Bd))
		}
	}
	return func(cluster string) string {
		var waiting []string
		for i, dep := range deps {
			if !ready[i][cluster] {
				waiting = append(waiting, dep.Name)
			}
		}
		if len(waiting) == 0 {
			return ""
		}
		sort.Strings(waiting)
		return "depends on " + strings.Join(waiting, ", ") + ": not ready on this cluster yet"
	}, nil
}

func dependencyMatches(d v1alpha1.BundleDependency, b *v1alpha1.Bundle) bool {
	if d.Name != "" {
		return b.Name == d.Name
	}
	sel, err := metav1.LabelSelectorAsSelector(d.Selector)
	return err == nil && !sel.Empty() && sel.Matches(labels.Set(b.Labels))
}

func describeDependency(i int, d v1alpha1.BundleDependency) string {
	if d.Name != "" {
		return "bundle " + d.Name
	}
	return fmt.Sprintf("dependsOn[%d].selector (no bundle matches)", i)
}

// Dependents lists the bundles that depend on b, to look at them again when b's progress
// changes.
func Dependents(ctx context.Context, c client.Reader, b client.Object) []reconcile.Request {
	bun, ok := b.(*v1alpha1.Bundle)
	if !ok {
		return nil
	}
	var list v1alpha1.BundleList
	if err := c.List(ctx, &list, client.InNamespace(bun.Namespace), client.UnsafeDisableDeepCopy); err != nil {
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		other := &list.Items[i]
		for _, d := range other.Spec.DependsOn {
			if other.Name != bun.Name && dependencyMatches(d, bun) {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(other)})
				break
			}
		}
	}
	return out
}
