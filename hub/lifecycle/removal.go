package lifecycle

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/liveness"
	"github.com/flotilla-dev/flotilla/hub/model"
	"github.com/flotilla-dev/flotilla/hub/reconciler"
)

// Removal. A deleted GitRepo, a bundle that left its repository and a cluster a bundle no
// longer targets all end the same way: the BundleDeployment is deleted, its agent removes the
// workloads (unless keepResources) and says so on the deployment (UninstalledCondition), and
// only then does the deployment go (UninstallFinalizer). A deleted Bundle waits for its
// deployments (DeploymentsFinalizer), and a deleted GitRepo for its Bundles, with its status
// naming the clusters it waits for. An agent that does not confirm within the uninstall
// timeout (offline, or failing) does not hold the deletion forever: the deployment goes, and
// its Cluster says so (Uninstalled=False) until the agent reports again; the agent removes the
// workloads of deployments that went while it was away when it reconnects or starts.

// DefaultUninstallTimeout is how long a deleted deployment waits for its agent to confirm the
// removal (Options.UninstallTimeout).
const DefaultUninstallTimeout = 10 * time.Minute

// removalStep is what the hub does next with a deleted BundleDeployment.
type removalStep struct {
	// release the deployment (remove UninstallFinalizer); timedOut when its agent did not
	// confirm in time.
	release, timedOut bool
	// wait is how long until the timeout, while neither holds.
	wait time.Duration
}

// nextRemovalStep decides for a deleted deployment: it goes once its agent confirmed; at once
// when there is nothing to remove (nothing was applied, or no agent ever reported for the
// cluster) or no agent will (the cluster is gone, leaving, or holds another namespace now); and
// at the timeout otherwise. cl is the deployment's Cluster, nil when it is gone; reported,
// whether its agent ever reported.
func nextRemovalStep(bd *v1alpha1.BundleDeployment, cl *v1alpha1.Cluster, reported bool, now time.Time, timeout time.Duration) removalStep {
	switch {
	case cl == nil || !cl.DeletionTimestamp.IsZero() || cl.Status.Namespace != bd.Namespace:
		return removalStep{release: true}
	case !reported || bd.Status.AppliedDeploymentID == "":
		return removalStep{release: true}
	case meta.IsStatusConditionTrue(bd.Status.Conditions, v1alpha1.UninstalledCondition):
		return removalStep{release: true}
	}
	if left := bd.DeletionTimestamp.Add(timeout).Sub(now); left > 0 {
		return removalStep{wait: left}
	}
	return removalStep{release: true, timedOut: true}
}

// DeploymentRemovalReconciler lets deleted BundleDeployments go (nextRemovalStep).
type DeploymentRemovalReconciler struct {
	Client  client.Client
	Shard   model.Shard
	Live    *liveness.Liveness
	Now     func() time.Time
	Timeout time.Duration
}

func (r *DeploymentRemovalReconciler) Setup(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named("deployment-removal").
		For(&v1alpha1.BundleDeployment{}, builder.WithPredicates(held(v1alpha1.UninstallFinalizer))).
		Complete(r.Controller())
}

// held passes the objects being deleted that carry finalizer: the only ones a removal
// controller acts on. An agent's status reports on live deployments wake nothing.
func held(finalizer string) predicate.Funcs {
	return predicate.NewPredicateFuncs(func(o client.Object) bool {
		return !o.GetDeletionTimestamp().IsZero() && controllerutil.ContainsFinalizer(o, finalizer)
	})
}

func (r *DeploymentRemovalReconciler) Controller() reconciler.Status[v1alpha1.BundleDeployment, *v1alpha1.BundleDeployment] {
	return reconciler.Status[v1alpha1.BundleDeployment, *v1alpha1.BundleDeployment]{Client: r.Client, Finalizer: v1alpha1.UninstallFinalizer, Finalize: r.finalize}
}

// finalize lets a deleted deployment go when nextRemovalStep says so; the Cluster says when
// that was without its agent's confirmation.
func (r *DeploymentRemovalReconciler) finalize(ctx context.Context, bd *v1alpha1.BundleDeployment) (reconciler.Outcome, error) {
	if !r.Shard.Owns(bd) {
		return reconciler.Outcome{}, nil
	}
	var cl *v1alpha1.Cluster
	reported := false
	if found, ok := model.ClusterInNamespace(ctx, r.Client, bd.Namespace); ok {
		cl = found
		_, reported = r.Live.LastSeen(cl)
	}
	step := nextRemovalStep(bd, cl, reported, r.Now(), r.Timeout)
	if !step.release {
		return reconciler.Outcome{After: step.wait}, nil
	}
	if step.timedOut {
		if err := r.recordUnconfirmed(ctx, cl, bd); err != nil {
			return reconciler.Outcome{}, err
		}
		log.FromContext(ctx).Info("deployment removed without its agent's confirmation: the uninstall timeout passed", "deployment", bd.Namespace+"/"+bd.Name, "cluster", cl.Name, "timeout", r.Timeout)
	}
	return reconciler.Outcome{Done: true}, nil
}

// unconfirmedShown is how many deployments removed without confirmation a Cluster's condition
// names.
const unconfirmedShown = 5

// recordUnconfirmed says on the Cluster that a deployment went without its agent's
// confirmation: its workloads may still run until the agent reconnects.
func (r *DeploymentRemovalReconciler) recordUnconfirmed(ctx context.Context, cl *v1alpha1.Cluster, bd *v1alpha1.BundleDeployment) error {
	orig := cl.DeepCopy()
	name := bd.Spec.BundleNamespace + "/" + bd.Spec.Bundle
	var names []string
	if cond := meta.FindStatusCondition(cl.Status.Conditions, v1alpha1.UninstalledCondition); cond != nil {
		if before, _, ok := strings.Cut(cond.Message, ";"); ok {
			names = strings.Split(strings.TrimPrefix(before, "removed without the agent's confirmation: "), ", ")
		}
	}
	if !slices.Contains(names, name) && len(names) < unconfirmedShown {
		names = append(names, name)
	}
	sort.Strings(names)
	model.SetCondition(&cl.Status.Conditions, metav1.Condition{Type: v1alpha1.UninstalledCondition, Status: metav1.ConditionFalse, Reason: v1alpha1.UninstallTimedOutReason,
		ObservedGeneration: cl.Generation, Message: fmt.Sprintf("removed without the agent's confirmation: %s; the agent removes their workloads when it reconnects or starts", strings.Join(names, ", "))})
	// Conditional: the Cluster's status has other writers (the default shard, its agent).
	if err := r.Client.Status().Patch(ctx, cl, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("failed to record an unconfirmed removal on cluster %s: %w", cl.Name, err)
	}
	return nil
}

// BundleRemovalReconciler lets a deleted Bundle go once its deployments are gone.
type BundleRemovalReconciler struct {
	Client client.Client
	Shard  model.Shard
}

func (r *BundleRemovalReconciler) Setup(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named("bundle-removal").
		For(&v1alpha1.Bundle{}, builder.WithPredicates(held(v1alpha1.DeploymentsFinalizer))).
		Watches(&v1alpha1.BundleDeployment{}, handler.Funcs{DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			for _, req := range model.BundleOfDeployment(ctx, e.Object) {
				q.Add(req)
			}
		}}).
		Complete(r.Controller())
}

func (r *BundleRemovalReconciler) Controller() reconciler.Status[v1alpha1.Bundle, *v1alpha1.Bundle] {
	return reconciler.Status[v1alpha1.Bundle, *v1alpha1.Bundle]{Client: r.Client, Finalizer: v1alpha1.DeploymentsFinalizer, Finalize: r.finalize}
}

// finalize lets a deleted Bundle go once its deployments are gone; a deployment's deletion
// wakes it.
func (r *BundleRemovalReconciler) finalize(ctx context.Context, bun *v1alpha1.Bundle) (reconciler.Outcome, error) {
	if !r.Shard.Owns(bun) {
		return reconciler.Outcome{}, nil
	}
	bds, err := model.ListDeployments(ctx, r.Client, bun)
	return reconciler.Outcome{Done: err == nil && len(bds) == 0}, err
}

// RemovalWaits describes what the deletion of a source's bundles (a GitRepo's, a HelmOp's: those
// of namespace carrying label=name) waits for: the clusters whose agents have not confirmed,
// and when the hub stops waiting. Empty when nothing is left.
func RemovalWaits(ctx context.Context, c client.Reader, namespace, label, name string, timeout time.Duration) (string, error) {
	var bundles v1alpha1.BundleList
	if err := c.List(ctx, &bundles, client.InNamespace(namespace), client.MatchingLabels{label: name}); err != nil {
		return "", fmt.Errorf("failed to list the bundles of %s: %w", name, err)
	}
	clusters := map[string]bool{}
	var until time.Time
	for i := range bundles.Items {
		bds, err := model.ListDeployments(ctx, c, &bundles.Items[i])
		if err != nil {
			return "", err
		}
		for j := range bds {
			clusters[bds[j].Labels[model.LabelCluster]] = true
			if d := bds[j].DeletionTimestamp; d != nil && d.Add(timeout).After(until) {
				until = d.Add(timeout)
			}
		}
	}
	if len(bundles.Items) == 0 {
		return "", nil
	}
	names := make([]string, 0, len(clusters))
	for name := range clusters {
		names = append(names, name)
	}
	sort.Strings(names)
	if len(names) == 0 {
		return fmt.Sprintf("removing %d bundles", len(bundles.Items)), nil
	}
	msg := fmt.Sprintf("waiting for the agents of %d cluster(s) to remove the workloads: %s", len(names), model.ListSome(names, 10))
	if !until.IsZero() {
		msg += fmt.Sprintf(" (at most until %s)", until.UTC().Format(time.RFC3339))
	}
	return msg, nil
}
