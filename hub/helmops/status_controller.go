package helmops

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/model"
	"github.com/flotilla-dev/flotilla/hub/reconciler"
	"github.com/flotilla-dev/flotilla/hub/sources"
)

// statusDelay gathers the bundle's changes before the HelmOp's sum is written.
const statusDelay = time.Second

// StatusReconciler sums a HelmOp's bundle into its status. It runs on Bundle events, which
// arrive after the cache holds the new bundle status, so the sum never misses a write.
type StatusReconciler struct {
	Client client.Client
}

func (r *StatusReconciler) Setup(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named("helmop-status").
		For(&v1alpha1.HelmOp{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&v1alpha1.Bundle{}, model.Coalesced(statusDelay, model.SourceOfBundle(model.LabelHelmOp), nil)).
		Complete(reconciler.Status[v1alpha1.HelmOp, *v1alpha1.HelmOp]{Client: r.Client, Lock: true, Step: r.step})
}

func (r *StatusReconciler) step(ctx context.Context, op, _ *v1alpha1.HelmOp) (reconciler.Outcome, error) {
	var bundles v1alpha1.BundleList
	if err := r.Client.List(ctx, &bundles, client.InNamespace(op.Namespace), client.MatchingLabels{model.LabelHelmOp: op.Name}); err != nil {
		return reconciler.Outcome{}, err
	}
	sumBundles(op, bundles.Items)
	return reconciler.Outcome{}, nil
}

// sumBundles sets the HelmOp's summed per-cluster states and printer columns from its bundle.
func sumBundles(op *v1alpha1.HelmOp, bundles []v1alpha1.Bundle) {
	sum := sources.SumBundles(bundles)
	op.Status.Summary, op.Status.Display = sum.Summary, sum.Display
	displayCondition(op)
}

// displayCondition makes the printer columns say what the Ready condition says while the
// HelmOp itself fails (its chart server, its render, its spec, its deletion).
func displayCondition(op *v1alpha1.HelmOp) {
	if ready := meta.FindStatusCondition(op.Status.Conditions, v1alpha1.ReadyCondition); ready != nil && ready.Status != metav1.ConditionTrue {
		op.Status.Display.State, op.Status.Display.Message = ready.Reason, ready.Message
	}
}

// equalStatus reports whether two statuses differ in more than the time of the last poll.
func equalStatus(a, b *v1alpha1.HelmOpStatus) bool {
	a, b = a.DeepCopy(), b.DeepCopy()
	a.LastPollTime, b.LastPollTime = nil, nil
	return equality.Semantic.DeepEqual(a, b)
}
