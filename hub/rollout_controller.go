package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/bdstate"
	"github.com/flotilla-dev/flotilla/rollout"
)

// DefaultHeartbeatDeadline is how long after its last heartbeat a cluster counts as offline.
const DefaultHeartbeatDeadline = 2 * time.Minute

// rolloutReconciler releases a bundle's staged revision to clusters as the planner decides
// (gather → rollout.Plan → act), and reports the rollout on the Bundle. It never decides
// anything itself: every release and every wait reason comes from the rollout package.
type rolloutReconciler struct {
	client    client.Client
	revisions *revisionStore
	now       func() time.Time

	// released remembers the deployment ids written to spec.released until the cache shows
	// them, so a reconcile on a stale cache does not write the same release again.
	mu       sync.Mutex
	released map[types.UID]string
}

func (r *rolloutReconciler) setup(mgr ctrl.Manager) error {
	allBundles := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		var list v1alpha1.BundleList
		if err := r.client.List(ctx, &list, client.InNamespace(o.GetNamespace())); err != nil {
			return nil
		}
		out := make([]reconcile.Request, 0, len(list.Items))
		for _, b := range list.Items {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&b)})
		}
		return out
	})
	return ctrl.NewControllerManagedBy(mgr).Named("bundle-rollout").
		For(&v1alpha1.Bundle{}).
		Watches(&v1alpha1.BundleDeployment{}, deploymentToBundle).
		Watches(&v1alpha1.Cluster{}, allBundles).
		Watches(&v1alpha1.Bundle{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return dependents(ctx, r.client, o)
		})).
		Watches(&v1alpha1.StagedUpdateRun{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			run, ok := o.(*v1alpha1.StagedUpdateRun)
			if !ok {
				return nil
			}
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: run.Namespace, Name: run.Spec.Bundle}}}
		})).
		Complete(r)
}

// deploymentToBundle maps a BundleDeployment event to its Bundle, from the labels the bundler sets.
var deploymentToBundle = handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
	l := o.GetLabels()
	if l[LabelBundle] == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: l[LabelBundleNamespace], Name: l[LabelBundle]}}}
})

// Reconcile plans one pass for a bundle and writes what changed.
func (r *rolloutReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var bun v1alpha1.Bundle
	if err := r.client.Get(ctx, req.NamespacedName, &bun); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if bun.Spec.StagedUpdate != nil {
		if err := autoRuns(ctx, r.client, &bun); err != nil {
			return ctrl.Result{}, err
		}
		return ctrl.Result{}, r.reportStaged(ctx, &bun) // staged runs release
	}
	if bun.Spec.Sequence != nil {
		return ctrl.Result{}, nil // released by the sequence controller
	}
	in, bds, requeue, err := r.gather(ctx, &bun)
	if err != nil {
		return ctrl.Result{}, err
	}
	if bun.Spec.TargetRevision != nil {
		var missing *missingRevisionError
		if err := r.pin(ctx, &bun, in, bds); errors.As(err, &missing) {
			return ctrl.Result{}, stallBundle(ctx, r.client, &bun, missing.Error())
		} else if err != nil {
			return ctrl.Result{}, err
		}
	}
	decision := rollout.Plan(in)
	if err := r.release(ctx, bds, decision); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.report(ctx, &bun, in, decision); err != nil {
		return ctrl.Result{}, err
	}
	if decision.RequeueAfter > 0 && (requeue == 0 || decision.RequeueAfter < requeue) {
		requeue = decision.RequeueAfter
	}
	return ctrl.Result{RequeueAfter: requeue}, nil
}

// gather reads the bundle's BundleDeployments and their clusters into the planner's input. It
// also returns when the next cluster's heartbeat deadline passes (R1.11 needs a look then).
func (r *rolloutReconciler) gather(ctx context.Context, bun *v1alpha1.Bundle) (*rollout.Input, map[string]*v1alpha1.BundleDeployment, time.Duration, error) {
	ps, err := placements(ctx, r.client, bun)
	if err != nil {
		return nil, nil, 0, err
	}
	groupsOf, err := clusterGroups(ctx, r.client, bun.Namespace)
	if err != nil {
		return nil, nil, 0, err
	}
	held, err := dependencyHolds(ctx, r.client, bun)
	if err != nil {
		return nil, nil, 0, err
	}
	now := r.now()
	revision := bun.Spec.LatestRevision
	if bun.Spec.TargetRevision != nil {
		revision = *bun.Spec.TargetRevision
	}
	in := &rollout.Input{Revision: revision, Paused: bun.Spec.Paused, Now: now}
	if err := convertJSON(bun.Spec.RolloutStrategy, &in.Strategy); err != nil {
		return nil, nil, 0, err
	}
	if bun.Spec.Placement != nil {
		in.Placement = &rollout.Placement{}
		if err := convertJSON(bun.Spec.Placement, in.Placement); err != nil {
			return nil, nil, 0, err
		}
	}
	var requeue time.Duration
	for _, p := range ps {
		c, bd, name := p.cluster, p.bd, p.cluster.Name
		t := rollout.Target{Cluster: name, Labels: c.Labels, Paused: c.Spec.Paused, Blocked: held(name), Deployment: bdstate.Deployment(bd)}
		for g, gl := range groupsOf(c) {
			t.Groups = append(t.Groups, g)
			in.Groups = appendGroup(in.Groups, rollout.ClusterGroup{Name: g, Labels: gl})
		}
		sort.Strings(t.Groups)
		deadline := DefaultHeartbeatDeadline
		if c.Spec.HeartbeatDeadline != nil {
			deadline = c.Spec.HeartbeatDeadline.Duration
		}
		if seen := c.Status.AgentLastSeen; seen == nil || now.Sub(seen.Time) > deadline {
			t.Offline = seen != nil // a cluster that never reported is not offline, just pending
		} else if d := seen.Add(deadline).Sub(now); requeue == 0 || d < requeue {
			requeue = d + time.Second
		}
		in.Targets = append(in.Targets, t)
	}
	return in, byCluster(ps), requeue, nil
}

// pin stages a rollback's revision on the bundle's deployments, as recorded when the revision
// was created. Clusters that revision did not deploy to keep what they run and are left out of
// the rollout. A revision gone from the history stalls the bundle with the reason.
func (r *rolloutReconciler) pin(ctx context.Context, bun *v1alpha1.Bundle, in *rollout.Input, bds map[string]*v1alpha1.BundleDeployment) error {
	targets, err := r.revisions.targets(ctx, bun, *bun.Spec.TargetRevision)
	if err != nil {
		return err
	}
	kept := in.Targets[:0]
	for _, t := range in.Targets {
		bd, ok := bds[t.Cluster]
		want, recorded := targets[t.Cluster]
		if !ok || !recorded {
			delete(bds, t.Cluster)
			continue
		}
		orig := bd.DeepCopy()
		if stageTarget(bd, want, false) {
			if err := patchDeployment(ctx, r.client, bd, orig); err != nil {
				return err
			}
		}
		t.Deployment = bdstate.Deployment(bd)
		kept = append(kept, t)
	}
	in.Targets = kept
	return nil
}

// release writes spec.released = spec.staged for the clusters the planner released.
func (r *rolloutReconciler) release(ctx context.Context, bds map[string]*v1alpha1.BundleDeployment, d *rollout.Decision) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.released == nil {
		r.released = map[types.UID]string{}
	}
	for _, bd := range bds {
		if bd.Spec.Released != nil && r.released[bd.UID] == bd.Spec.Released.DeploymentID {
			delete(r.released, bd.UID) // the cache caught up
		}
	}
	for _, name := range d.Release {
		bd := bds[name]
		if bd == nil || r.released[bd.UID] == bd.Spec.Staged.DeploymentID {
			continue
		}
		orig := bd.DeepCopy()
		staged := bd.Spec.Staged
		bd.Spec.Released = &staged
		bd.Spec.Rollback = false
		if err := r.client.Patch(ctx, bd, client.MergeFrom(orig)); err != nil {
			return fmt.Errorf("failed to release %s to %s: %w", bd.Spec.Bundle, name, err)
		}
		r.released[bd.UID] = staged.DeploymentID
	}
	for _, name := range d.Remove {
		if bd := bds[name]; bd != nil {
			if err := r.client.Delete(ctx, bd); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("failed to remove %s from %s: %w", bd.Spec.Bundle, name, err)
			}
		}
	}
	return nil
}

// report writes the Bundle's status when it changed.
func (r *rolloutReconciler) report(ctx context.Context, bun *v1alpha1.Bundle, in *rollout.Input, d *rollout.Decision) error {
	orig := bun.DeepCopy()
	st := &bun.Status
	counts := rollout.Counts{}
	for _, c := range d.Clusters {
		counts[c.State]++
	}
	setProgress(bun, bundleProgress{revision: in.Revision, counts: counts, clusters: len(d.Clusters), complete: d.Complete, waiting: waitReason(d)})
	st.Partitions = nil
	for _, p := range d.Partitions {
		st.Partitions = append(st.Partitions, v1alpha1.PartitionStatus{Name: p.Name, Count: int32(len(p.Clusters)), MaxUnavailable: int32(p.MaxUnavailable),
			Unavailable: int32(p.Unavailable), Ready: p.Ready, Summary: stateCounts(p.Counts, len(p.Clusters))})
	}
	st.UnpartitionedClusters = int32(len(d.Unpartitioned))
	setWarning(st, v1alpha1.UnpartitionedClustersCondition, len(d.Unpartitioned) > 0, "UnpartitionedClusters", firstWarning(d.Warnings, "match no partition"), bun.Generation)
	setWarning(st, v1alpha1.UnsafeDefaultsCondition, firstWarning(d.Warnings, "R1.14") != "", "MaxUnavailable100Percent", firstWarning(d.Warnings, "R1.14"), bun.Generation)
	setWarning(st, v1alpha1.RolloutPausedCondition, d.Paused != "", v1alpha1.PausedReason, d.Paused, bun.Generation)
	return patchBundleStatus(ctx, r.client, bun, orig)
}

// reportStaged reports a staged bundle from its current run: the newest one created. Its
// stages become the bundle's, and its message is why the rollout waits.
func (r *rolloutReconciler) reportStaged(ctx context.Context, bun *v1alpha1.Bundle) error {
	var runs v1alpha1.StagedUpdateRunList
	if err := r.client.List(ctx, &runs, client.InNamespace(bun.Namespace)); err != nil {
		return fmt.Errorf("failed to list runs: %w", err)
	}
	var current *v1alpha1.StagedUpdateRun
	for i := range runs.Items {
		run := &runs.Items[i]
		if run.Spec.Bundle != bun.Name {
			continue
		}
		if current == nil || current.CreationTimestamp.Before(&run.CreationTimestamp) ||
			current.CreationTimestamp.Equal(&run.CreationTimestamp) && current.Name < run.Name {
			current = run
		}
	}
	ps, err := placements(ctx, r.client, bun)
	if err != nil {
		return err
	}
	p := bundleProgress{revision: wantedRevision(bun), counts: rollout.Counts{}, clusters: len(ps)}
	orig := bun.DeepCopy()
	bun.Status.Stages = nil
	if current != nil {
		if current.Status.RevisionIndex != 0 {
			p.revision = current.Status.RevisionIndex
		}
		for _, s := range current.Status.Stages {
			sp := v1alpha1.StageProgress{Name: s.Name, State: s.State}
			for _, g := range s.Groups {
				for _, c := range g.Clusters {
					sp.Clusters++
					if c.State == v1alpha1.RunCompleted || c.State == v1alpha1.RunSkipped {
						sp.Completed++
					}
				}
			}
			bun.Status.Stages = append(bun.Status.Stages, sp)
		}
		p.waiting = "run " + current.Name + ": " + current.Status.Message
		if current.Status.Message == "" {
			p.waiting = "run " + current.Name + ": " + string(current.Status.State)
		}
	} else {
		p.waiting = "no run yet: create a StagedUpdateRun, or set stagedUpdate.autoRun"
	}
	for _, pl := range ps {
		p.counts[rollout.ClusterState(bdstate.Deployment(pl.bd), p.revision)]++
	}
	p.complete = current != nil && current.Status.State == v1alpha1.RunCompleted && p.counts[rollout.Ready]+p.counts[rollout.Modified] == len(ps)
	setProgress(bun, p)
	return patchBundleStatus(ctx, r.client, bun, orig)
}

// repoStatusReconciler sums a GitRepo's bundles into its status. It runs on Bundle events, which
// arrive after the cache holds the new bundle status, so the sum never misses a write.
type repoStatusReconciler struct {
	client client.Client
}

func (r *repoStatusReconciler) setup(mgr ctrl.Manager) error {
	toRepo := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		if name := o.GetLabels()[LabelGitRepo]; name != "" {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
		}
		return nil
	})
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

func stateCounts(c rollout.Counts, total int) v1alpha1.StateCounts {
	return v1alpha1.StateCounts{DesiredReady: int32(total), Ready: int32(c[rollout.Ready]), Pending: int32(c[rollout.Pending]), OutOfSync: int32(c[rollout.OutOfSync]),
		WaitApplied: int32(c[rollout.WaitApplied]), ErrApplied: int32(c[rollout.ErrApplied]), NotReady: int32(c[rollout.NotReady]), Modified: int32(c[rollout.Modified])}
}

// worstState names the least advanced state with clusters in it, for printer columns.
func worstState(c rollout.Counts) string {
	for _, s := range []rollout.State{rollout.ErrApplied, rollout.NotReady, rollout.WaitApplied, rollout.OutOfSync, rollout.Pending, rollout.Modified} {
		if c[s] > 0 {
			return string(s)
		}
	}
	return string(rollout.Ready)
}

// waitReason is why a rollout is not complete: its pause, else what holds its clusters.
func waitReason(d *rollout.Decision) string {
	if d.Paused != "" {
		return d.Paused
	}
	held := 0
	first := ""
	for _, c := range d.Clusters {
		if c.Wait != "" {
			if held == 0 {
				first = c.Name + ": " + c.Wait
			}
			held++
		}
	}
	switch held {
	case 0:
		return ""
	case 1:
		return first
	}
	return fmt.Sprintf("%s (and %d more clusters waiting)", first, held-1)
}

func firstWarning(ws []string, contains string) string {
	for _, w := range ws {
		if strings.Contains(w, contains) {
			return w
		}
	}
	return ""
}

// setWarning keeps a condition present only while it is true.
func setWarning(st *v1alpha1.BundleStatus, typ string, on bool, reason, msg string, gen int64) {
	if !on {
		meta.RemoveStatusCondition(&st.Conditions, typ)
		return
	}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: typ, Status: metav1.ConditionTrue, Reason: reason, Message: msg, ObservedGeneration: gen})
}

// convertJSON converts between the API's types and the planner's, which share their JSON.
func convertJSON(from, to any) error {
	if from == nil {
		return nil
	}
	data, err := json.Marshal(from)
	if err != nil {
		return err
	}
	if string(data) == "null" {
		return nil
	}
	return json.Unmarshal(data, to)
}

func appendGroup(gs []rollout.ClusterGroup, g rollout.ClusterGroup) []rollout.ClusterGroup {
	for _, x := range gs {
		if x.Name == g.Name {
			return gs
		}
	}
	return append(gs, g)
}
