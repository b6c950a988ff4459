package sources

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/model"
	"github.com/flotilla-dev/flotilla/hub/plan"
	"github.com/flotilla-dev/flotilla/hub/reconciler"
	"github.com/flotilla-dev/flotilla/rollout"
)

// repoStatusDelay gathers bundle changes before a GitRepo's sum is written: a repository of
// many bundles would otherwise be rewritten for every bundle's progress.
const repoStatusDelay = time.Second

// RepoStatusReconciler sums a GitRepo's bundles into its status. It runs on Bundle events, which
// arrive after the cache holds the new bundle status, so the sum never misses a write.
type RepoStatusReconciler struct {
	Client client.Client
}

func (r *RepoStatusReconciler) Setup(mgr ctrl.Manager) error {
	toRepo := model.Coalesced(repoStatusDelay, model.GitRepoOfBundle, nil)
	return ctrl.NewControllerManagedBy(mgr).Named("gitrepo-status").
		For(&v1alpha1.GitRepo{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&v1alpha1.Bundle{}, toRepo).
		Complete(reconciler.Status[v1alpha1.GitRepo, *v1alpha1.GitRepo]{Client: r.Client, Lock: true, Step: r.step})
}

// step sums the GitRepo's bundles into its status. The write is conditional on the GitRepo as
// read: a display derived from conditions the cache does not show yet fails with a conflict
// and is derived again, never written over them.
func (r *RepoStatusReconciler) step(ctx context.Context, repo, _ *v1alpha1.GitRepo) (reconciler.Outcome, error) {
	var bundles v1alpha1.BundleList
	if err := r.Client.List(ctx, &bundles, client.InNamespace(repo.Namespace), client.MatchingLabels{model.LabelGitRepo: repo.Name}); err != nil {
		return reconciler.Outcome{}, err
	}
	sumBundles(repo, bundles.Items)
	return reconciler.Outcome{}, nil
}

// sumBundles sets a GitRepo's bundle count, summed per-cluster states and printer columns from
// its bundles.
func sumBundles(repo *v1alpha1.GitRepo, bundles []v1alpha1.Bundle) {
	sum := SumBundles(bundles)
	repo.Status.Bundles, repo.Status.Summary, repo.Status.Display = int32(len(bundles)), sum.Summary, sum.Display
	displayCondition(repo)
}

// BundlesSum is what a source (a GitRepo, a HelmOp) shows of its bundles.
type BundlesSum struct {
	Summary v1alpha1.StateCounts
	Display v1alpha1.Display
}

// SumBundles sums bundles' per-cluster states, and says in a display the most pressing state
// and why each bundle waits.
func SumBundles(bundles []v1alpha1.Bundle) BundlesSum {
	sum := v1alpha1.StateCounts{}
	var waiting []string
	var outcome plan.OutcomeState // the most pressing outcome of a failure policy among the bundles (R5.6)
	for i := range bundles {
		counts, msg := bundleSummary(&bundles[i])
		sum = sum.Add(counts)
		if state, why := plan.OutcomeWaiting(&bundles[i]); state != "" {
			msg = why
			if state.Outranks(outcome) {
				outcome = state
			}
		}
		if msg != "" {
			waiting = append(waiting, bundles[i].Name+": "+msg)
		}
	}
	sort.Strings(waiting)
	out := BundlesSum{Summary: sum}
	out.Display.ReadyClusters = fmt.Sprintf("%d/%d", sum.Ready+sum.Modified, sum.DesiredReady)
	out.Display.State = model.WorstState(rollout.Counts{rollout.Pending: int(sum.Pending), rollout.OutOfSync: int(sum.OutOfSync), rollout.WaitApplied: int(sum.WaitApplied),
		rollout.ErrApplied: int(sum.ErrApplied), rollout.NotReady: int(sum.NotReady), rollout.Modified: int(sum.Modified), rollout.Ready: int(sum.Ready)})
	if outcome != "" {
		out.Display.State = string(outcome)
	}
	out.Display.Message = strings.Join(waiting, "; ")
	return out
}

// displayCondition makes a GitRepo's printer columns say what its Ready condition says when
// the GitRepo itself fails (its source, its render, its spec, its deletion): kubectl's STATUS
// column and the condition never disagree. While Ready is True the columns sum the bundles.
func displayCondition(repo *v1alpha1.GitRepo) {
	if ready := meta.FindStatusCondition(repo.Status.Conditions, v1alpha1.ReadyCondition); ready != nil && ready.Status != metav1.ConditionTrue {
		repo.Status.Display.State, repo.Status.Display.Message = ready.Reason, ready.Message
	}
}

// displaysCondition reports whether the GitRepo's columns show its Ready condition rather
// than its bundles.
func displaysCondition(repo *v1alpha1.GitRepo) bool {
	ready := meta.FindStatusCondition(repo.Status.Conditions, v1alpha1.ReadyCondition)
	return ready != nil && ready.Status != metav1.ConditionTrue
}

// bundleSummary is what a bundle adds to its GitRepo's sum, and why it waits. A bundle whose
// rollout has not reported its new revision yet (its status is of an older spec and names
// another revision) has its clusters on an older revision: OutOfSync (§0), not the Ready its
// last report counted, or the GitRepo would show the new commit ready before it rolled out.
func bundleSummary(b *v1alpha1.Bundle) (v1alpha1.StateCounts, string) {
	st := &b.Status
	if st.ObservedGeneration >= b.Generation || st.ReleasingRevision == model.WantedRevision(b) {
		return st.Summary, st.Display.Message
	}
	s := st.Summary
	return v1alpha1.StateCounts{DesiredReady: s.DesiredReady, Pending: s.Pending, OutOfSync: s.DesiredReady - s.Pending},
		fmt.Sprintf("revision %d not rolled out yet", model.WantedRevision(b))
}
