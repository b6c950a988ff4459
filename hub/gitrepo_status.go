package hub

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/rollout"
)

// repoStatusDelay gathers bundle changes before a GitRepo's sum is written: a repository of
// many bundles would otherwise be rewritten for every bundle's progress.
const repoStatusDelay = time.Second

// repoStatusReconciler sums a GitRepo's bundles into its status. It runs on Bundle events, which
// arrive after the cache holds the new bundle status, so the sum never misses a write.
type repoStatusReconciler struct {
	client client.Client
}

func (r *repoStatusReconciler) setup(mgr ctrl.Manager) error {
	toRepo := coalesced(repoStatusDelay, func(_ context.Context, o client.Object) []reconcile.Request {
		if name := o.GetLabels()[LabelGitRepo]; name != "" {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
		}
		return nil
	}, nil)
	return ctrl.NewControllerManagedBy(mgr).Named("gitrepo-status").
		For(&v1alpha1.GitRepo{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&v1alpha1.Bundle{}, toRepo).
		Complete(r)
}

func (r *repoStatusReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var repo v1alpha1.GitRepo
	if err := r.client.Get(ctx, req.NamespacedName, &repo); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	var bundles v1alpha1.BundleList
	if err := r.client.List(ctx, &bundles, client.InNamespace(repo.Namespace), client.MatchingLabels{LabelGitRepo: repo.Name}); err != nil {
		return ctrl.Result{}, err
	}
	orig := repo.DeepCopy()
	sum := v1alpha1.StateCounts{}
	var waiting []string
	for _, b := range bundles.Items {
		sum = sum.Add(b.Status.Summary)
		if b.Status.Display.Message != "" {
			waiting = append(waiting, b.Name+": "+b.Status.Display.Message)
		}
	}
	sort.Strings(waiting)
	repo.Status.Bundles, repo.Status.Summary = int32(len(bundles.Items)), sum
	repo.Status.Display.ReadyClusters = fmt.Sprintf("%d/%d", sum.Ready+sum.Modified, sum.DesiredReady)
	repo.Status.Display.State = worstState(rollout.Counts{rollout.Pending: int(sum.Pending), rollout.OutOfSync: int(sum.OutOfSync), rollout.WaitApplied: int(sum.WaitApplied),
		rollout.ErrApplied: int(sum.ErrApplied), rollout.NotReady: int(sum.NotReady), rollout.Modified: int(sum.Modified), rollout.Ready: int(sum.Ready)})
	repo.Status.Display.Message = strings.Join(waiting, "; ")
	if equality.Semantic.DeepEqual(orig.Status, repo.Status) {
		return ctrl.Result{}, nil
	}
	return ctrl.Result{}, client.IgnoreNotFound(r.client.Status().Patch(ctx, &repo, client.MergeFrom(orig)))
}
