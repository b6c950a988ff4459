package clusters

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/bdstate"
	"github.com/flotilla-dev/flotilla/hub/events"
	"github.com/flotilla-dev/flotilla/hub/liveness"
	"github.com/flotilla-dev/flotilla/hub/model"
	"github.com/flotilla-dev/flotilla/hub/reconciler"
	"github.com/flotilla-dev/flotilla/rollout"
)

// Cluster and ClusterGroup status sum the per-cluster states (ROLLOUT.md §0) of every bundle on
// a cluster. Those change several times per deployment during a rollout; the sums are written
// at most once per statusDelay per object, so a rollout costs the API server a bounded number of
// these writes however many bundles change at once.

// DefaultStatusDelay is how long deployment changes of one cluster are gathered before its
// status is written.
const DefaultStatusDelay = 5 * time.Second

// ClusterStatusReconciler writes a Cluster's bundle summary and whether its agent is online
// (R1.11: offline once the heartbeat deadline passed).
type ClusterStatusReconciler struct {
	Client client.Client
	Live   *liveness.Liveness
	Now    func() time.Time
	Delay  time.Duration
	// Progress spaces out writes that only move the bundle counts along: a rollout changes
	// every cluster's counts several times, and nothing acts on them but a reader.
	Progress model.ProgressThrottle
	Recorder *events.Recorder
}

func (r *ClusterStatusReconciler) Setup(mgr ctrl.Manager) error {
	toCluster := func(_ context.Context, o client.Object) []reconcile.Request {
		l := o.GetLabels()
		if l[model.LabelCluster] == "" {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: l[model.LabelBundleNamespace], Name: l[model.LabelCluster]}}}
	}
	stateChanged := model.Coalesced(r.Delay, toCluster, func(old, new client.Object) bool {
		o, ok1 := old.(*v1alpha1.BundleDeployment)
		n, ok2 := new.(*v1alpha1.BundleDeployment)
		return !ok1 || !ok2 || bdstate.State(o, n.Spec.Staged.Index) != bdstate.State(n, n.Spec.Staged.Index)
	})
	// A new revision makes the clusters the rollout has not reached OutOfSync without
	// touching their deployments.
	revisionChanged := model.Coalesced(r.Delay, model.AllInNamespace(r.Client, func() client.ObjectList { return &v1alpha1.ClusterList{} }), func(old, new client.Object) bool {
		o, ok1 := old.(*v1alpha1.Bundle)
		n, ok2 := new.(*v1alpha1.Bundle)
		return !ok1 || !ok2 || model.WantedRevision(o) != model.WantedRevision(n)
	})
	itself := func(_ context.Context, c *v1alpha1.Cluster) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: client.ObjectKeyFromObject(c)}}
	}
	return ctrl.NewControllerManagedBy(mgr).Named("cluster-status").
		For(&v1alpha1.Cluster{}).
		Watches(&v1alpha1.BundleDeployment{}, stateChanged).
		Watches(&v1alpha1.Bundle{}, revisionChanged).
		Watches(&coordinationv1.Lease{}, r.Live.OnAgentBack(r.Client, r.Now, itself)).
		Complete(r.Controller())
}

// Controller is the reconciler: the status skeleton around step.
func (r *ClusterStatusReconciler) Controller() reconciler.Status[v1alpha1.Cluster, *v1alpha1.Cluster] {
	// Conditional: the Cluster's conditions have other writers (cluster-access, removals), whose
	// conditions a write from a cache that is behind would drop.
	return reconciler.Status[v1alpha1.Cluster, *v1alpha1.Cluster]{Client: r.Client, Lock: true, Step: r.step}
}

// step writes the cluster's bundle counts and whether its agent is online. A merge patch of
// these fields only: the agent's heartbeat fields are left to it.
func (r *ClusterStatusReconciler) step(ctx context.Context, c, orig *v1alpha1.Cluster) (reconciler.Outcome, error) {
	var bds v1alpha1.BundleDeploymentList
	if c.Status.Namespace != "" {
		if err := r.Client.List(ctx, &bds, client.InNamespace(c.Status.Namespace)); err != nil {
			return reconciler.Outcome{}, fmt.Errorf("failed to list deployments of %s: %w", c.Name, err)
		}
	}
	var bundles v1alpha1.BundleList
	if err := r.Client.List(ctx, &bundles, client.InNamespace(c.Namespace), client.UnsafeDisableDeepCopy); err != nil {
		return reconciler.Outcome{}, fmt.Errorf("failed to list bundles: %w", err)
	}
	byName := make(map[string]*v1alpha1.Bundle, len(bundles.Items))
	for i := range bundles.Items {
		byName[bundles.Items[i].Name] = &bundles.Items[i]
	}
	counts := rollout.Counts{}
	for i := range bds.Items {
		bd := &bds.Items[i]
		counts[rollout.State(model.DeploymentState(byName[bd.Spec.Bundle], bd))]++
	}
	st := &c.Status
	st.ObservedGeneration = c.Generation
	st.Summary = model.StateCounts(counts, len(bds.Items))
	st.Display = v1alpha1.Display{ReadyClusters: fmt.Sprintf("%d/%d", st.Summary.Ready+st.Summary.Modified, st.Summary.DesiredReady), State: model.WorstState(counts)}
	ready := metav1.Condition{Type: v1alpha1.ReadyCondition, Status: metav1.ConditionTrue, Reason: v1alpha1.SucceededReason, ObservedGeneration: c.Generation,
		Message: fmt.Sprintf("%d bundles ready", st.Summary.Ready+st.Summary.Modified)}
	online, left, lastSeen, reported := r.Live.Look(c, r.Now())
	var requeue time.Duration
	if online {
		requeue = left + time.Second // to notice the deadline passing
	}
	switch admitted := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.AdmittedCondition); {
	case admitted != nil && admitted.Status == metav1.ConditionFalse:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, admitted.Reason, admitted.Message
		st.Display.State = "NotAdmitted"
	case !reported:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, v1alpha1.AgentNotConnectedReason, "no agent has reported for this cluster yet"
		st.Display.State = "WaitingForAgent"
	case !online:
		ready.Status, ready.Reason = metav1.ConditionFalse, v1alpha1.OfflineReason
		ready.Message = fmt.Sprintf("agent last seen %s, past the heartbeat deadline: the cluster counts as unavailable (R1.11)", lastSeen.UTC().Format(time.RFC3339))
		st.Display.State = "Offline"
	case st.Display.State != string(rollout.Ready):
		ready.Status, ready.Reason = metav1.ConditionFalse, v1alpha1.ProgressingReason
		ready.Message = fmt.Sprintf("%d of %d bundles ready", st.Summary.Ready+st.Summary.Modified, st.Summary.DesiredReady)
	}
	st.Display.Message = ""
	if ready.Status == metav1.ConditionFalse {
		st.Display.Message = ready.Message
	}
	meta.SetStatusCondition(&st.Conditions, ready)
	// The agent removes the workloads of deployments that went without its confirmation when
	// it reconnects or starts: a heartbeat after the record ends it.
	if cond := meta.FindStatusCondition(st.Conditions, v1alpha1.UninstalledCondition); cond != nil && reported && lastSeen.After(cond.LastTransitionTime.Time) {
		meta.RemoveStatusCondition(&st.Conditions, v1alpha1.UninstalledCondition)
	}
	// Noticing a deadline passing goes before the counts queued by a busy rollout: a stopped
	// agent is Offline within a bounded time however loaded the hub is.
	out := reconciler.Outcome{After: requeue, Urgent: online}
	if !reconciler.StatusChanged(orig, c) {
		return out, nil
	}
	// Written at once: all bundles ready, the agent lost or back. A ready cluster starting on a
	// new revision is progress like its counts: a rollout that passes it within the interval
	// costs no write at all.
	old := meta.FindStatusCondition(orig.Status.Conditions, v1alpha1.ReadyCondition)
	startsRollout := old != nil && old.Reason == v1alpha1.SucceededReason && ready.Reason == v1alpha1.ProgressingReason
	significant := old == nil || old.Reason != ready.Reason && !startsRollout
	if wait := r.Progress.Hold(c.UID, significant, time.Now()); wait > 0 { // paced on the wall clock, whatever Options.Clock says
		return reconciler.Outcome{After: model.Sooner(requeue, wait), Urgent: online && requeue > 0 && requeue <= wait, Hold: true}, nil
	}
	out.Written = func() {
		switch {
		case ready.Reason == v1alpha1.OfflineReason && (old == nil || old.Reason != v1alpha1.OfflineReason):
			r.Recorder.Warning(c, v1alpha1.EventClusterOffline, "%s", ready.Message)
		case old != nil && old.Reason == v1alpha1.OfflineReason && ready.Reason != v1alpha1.OfflineReason:
			r.Recorder.Normal(c, v1alpha1.EventClusterOnline, "agent back, last seen %s", lastSeen.UTC().Format(time.RFC3339))
		}
	}
	return out, nil
}

// ClusterGroupStatusReconciler sums a ClusterGroup's member Clusters.
type ClusterGroupStatusReconciler struct {
	Client client.Client
	Delay  time.Duration
}

func (r *ClusterGroupStatusReconciler) Setup(mgr ctrl.Manager) error {
	// Every group is looked at: a cluster whose labels changed may have left one.
	allGroups := model.AllInNamespace(r.Client, func() client.ObjectList { return &v1alpha1.ClusterGroupList{} })
	clusterChanged := model.Coalesced(r.Delay, allGroups, func(old, new client.Object) bool {
		o, ok1 := old.(*v1alpha1.Cluster)
		n, ok2 := new.(*v1alpha1.Cluster)
		return !ok1 || !ok2 || !equality.Semantic.DeepEqual(o.Labels, n.Labels) || o.Status.Summary != n.Status.Summary || o.Status.Display.State != n.Status.Display.State
	})
	return ctrl.NewControllerManagedBy(mgr).Named("clustergroup-status").
		For(&v1alpha1.ClusterGroup{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&v1alpha1.Cluster{}, clusterChanged).
		Complete(reconciler.Status[v1alpha1.ClusterGroup, *v1alpha1.ClusterGroup]{Client: r.Client, Step: r.step})
}

// step sums the group's member Clusters into its status.
func (r *ClusterGroupStatusReconciler) step(ctx context.Context, g, _ *v1alpha1.ClusterGroup) (reconciler.Outcome, error) {
	st := &g.Status
	st.ObservedGeneration = g.Generation
	sel, err := metav1.LabelSelectorAsSelector(g.Spec.Selector)
	if err != nil {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.ReadyCondition, Status: metav1.ConditionFalse, Reason: v1alpha1.InvalidSpecReason,
			Message: "spec.selector: " + err.Error(), ObservedGeneration: g.Generation})
	} else {
		var clusters v1alpha1.ClusterList
		if err := r.Client.List(ctx, &clusters, client.InNamespace(g.Namespace)); err != nil {
			return reconciler.Outcome{}, fmt.Errorf("failed to list clusters: %w", err)
		}
		st.ClusterCount, st.NonReadyClusterCount, st.Summary = 0, 0, v1alpha1.StateCounts{}
		var notReady []string
		for _, c := range clusters.Items {
			if !sel.Matches(labels.Set(c.Labels)) {
				continue
			}
			st.ClusterCount++
			st.Summary = st.Summary.Add(c.Status.Summary)
			if cond := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ReadyCondition); cond == nil || cond.Status != metav1.ConditionTrue {
				st.NonReadyClusterCount++
				notReady = append(notReady, c.Name)
			}
		}
		st.Display = v1alpha1.Display{ReadyClusters: fmt.Sprintf("%d/%d", st.Summary.Ready+st.Summary.Modified, st.Summary.DesiredReady), State: string(rollout.Ready)}
		ready := metav1.Condition{Type: v1alpha1.ReadyCondition, Status: metav1.ConditionTrue, Reason: v1alpha1.SucceededReason, ObservedGeneration: g.Generation,
			Message: fmt.Sprintf("%d clusters ready", st.ClusterCount)}
		if len(notReady) > 0 {
			ready.Status, ready.Reason = metav1.ConditionFalse, v1alpha1.ProgressingReason
			ready.Message = fmt.Sprintf("%d of %d clusters not ready: %s", len(notReady), st.ClusterCount, model.ListSome(notReady, 5))
			st.Display.State, st.Display.Message = "NotReady", ready.Message
		}
		meta.SetStatusCondition(&st.Conditions, ready)
	}
	return reconciler.Outcome{}, nil
}
