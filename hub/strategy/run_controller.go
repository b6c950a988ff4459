package strategy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/flotilla-dev/flotilla/hub/analysis"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/bdstate"
	"github.com/flotilla-dev/flotilla/hub/deploy"
	"github.com/flotilla-dev/flotilla/hub/events"
	"github.com/flotilla-dev/flotilla/hub/liveness"
	"github.com/flotilla-dev/flotilla/hub/model"
	"github.com/flotilla-dev/flotilla/hub/plan"
	"github.com/flotilla-dev/flotilla/hub/reconciler"
	"github.com/flotilla-dev/flotilla/rollout"
)

// Annotations and labels of staged runs.
const (
	// AnnotationSupersededBy names the newer run that replaces a run in flight (R3.14).
	AnnotationSupersededBy = v1alpha1.AnnotationSupersededBy
	// LabelAutoRun marks runs the hub created for a new revision.
	LabelAutoRun = v1alpha1.LabelAutoRun
)

// RunReconciler drives StagedUpdateRuns with rollout.Step: it gathers the run, its frozen
// strategy, the bundle's deployments and the approvals, lets Step decide, and writes the
// releases, the approval requests and the run's status.
type RunReconciler struct {
	Client client.Client
	Shard  model.Shard
	Live   *liveness.Liveness
	// Uncached tells another shard's bundle (not in this shard's cache) from a missing one, and
	// confirms a step's copy of the run is the latest before it releases (DecidedOnLatest).
	Uncached  client.Reader
	Revisions *model.RevisionStore
	// Released remembers the deployments a step created until the cache shows them (the
	// hub's one, shared with the other controllers that release).
	Released *deploy.Releases
	// Writes bounds the release writes in flight (the hub's one, shared with the bundler and
	// the other controllers that release).
	Writes   deploy.WriteSlots
	Now      func() time.Time
	Recorder *events.Recorder
	// Analysis measures the checks of the runs' tasks (§7).
	Analysis *analysis.Runner
}

func (r *RunReconciler) Setup(mgr ctrl.Manager) error {
	byRunName := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		ar, ok := o.(*v1alpha1.ApprovalRequest)
		if !ok {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: ar.Namespace, Name: ar.Spec.Run}}}
	})
	// A bundle or a cluster paused or resumed (R1.13), an agent back online (R1.11): the
	// clusters they held may start. The runs are read uncopied (keep only reads): this runs on
	// every deployment's change, and a run's status names each of its clusters (a profile of a
	// run over 10,000 clusters had these copies at an eighth of the hub's CPU).
	runsOf := func(ctx context.Context, ns string, keep func(*v1alpha1.StagedUpdateRun) bool) []reconcile.Request {
		var runs v1alpha1.StagedUpdateRunList
		if err := r.Client.List(ctx, &runs, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
			return nil
		}
		var out []reconcile.Request
		for i := range runs.Items {
			if keep(&runs.Items[i]) {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&runs.Items[i])})
			}
		}
		return out
	}
	anyRun := func(*v1alpha1.StagedUpdateRun) bool { return true }
	byBundle := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		l := o.GetLabels()
		return runsOf(ctx, l[model.LabelBundleNamespace], func(run *v1alpha1.StagedUpdateRun) bool { return run.Spec.Bundle == l[model.LabelBundle] })
	})
	bundleRuns := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		return runsOf(ctx, o.GetNamespace(), func(run *v1alpha1.StagedUpdateRun) bool { return run.Spec.Bundle == o.GetName() })
	})
	clusterRuns := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		return runsOf(ctx, o.GetNamespace(), anyRun)
	})
	// A run created or set running supersedes its bundle's other runs in flight.
	siblingRuns := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		run, ok := o.(*v1alpha1.StagedUpdateRun)
		if !ok {
			return nil
		}
		return runsOf(ctx, run.Namespace, func(other *v1alpha1.StagedUpdateRun) bool {
			return other.Spec.Bundle == run.Spec.Bundle && other.Name != run.Name
		})
	})
	return ctrl.NewControllerManagedBy(mgr).Named("staged-run").
		For(&v1alpha1.StagedUpdateRun{}).
		Watches(&v1alpha1.StagedUpdateRun{}, siblingRuns, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&v1alpha1.ApprovalRequest{}, byRunName).
		WatchesRawSource(source.Channel(r.Analysis.Changed(analysis.KindRun), &handler.EnqueueRequestForObject{})).
		Watches(&v1alpha1.BundleDeployment{}, byBundle).
		Watches(&v1alpha1.Bundle{}, bundleRuns, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&v1alpha1.Cluster{}, clusterRuns, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&coordinationv1.Lease{}, r.Live.OnAgentBack(r.Client, r.Now, func(ctx context.Context, c *v1alpha1.Cluster) []reconcile.Request {
			return runsOf(ctx, c.Namespace, anyRun)
		})).
		Complete(r.Reconciler())
}

// Reconciler is the runs' reconciler, without the watches Setup adds.
func (r *RunReconciler) Reconciler() reconcile.Reconciler {
	return reconciler.Status[v1alpha1.StagedUpdateRun, *v1alpha1.StagedUpdateRun]{Client: r.Client, Lock: true, Step: r.step}
}

// step moves a run on: it releases what the planner releases, asks for the approvals its gates
// need, and sets the run's status. The status write is conditional on the run as read, as
// every write that moves a rollout: progress decided on a stale copy fails with a conflict and
// is decided again.
func (r *RunReconciler) step(ctx context.Context, run, orig *v1alpha1.StagedUpdateRun) (reconciler.Outcome, error) {
	var bun v1alpha1.Bundle
	key := types.NamespacedName{Namespace: run.Namespace, Name: run.Spec.Bundle}
	if err := r.Client.Get(ctx, key, &bun); err != nil {
		if apierrors.IsNotFound(err) && model.Elsewhere(ctx, r.Uncached, key, &v1alpha1.Bundle{}) {
			return reconciler.Outcome{}, nil // another shard's bundle: that shard runs it
		}
		return r.fail(run, fmt.Sprintf("bundle %s: %v", run.Spec.Bundle, err))
	}
	if !r.Shard.Owns(&bun) {
		return reconciler.Outcome{}, nil
	}
	in, err := r.gather(ctx, run, &bun)
	if err != nil {
		return r.fail(run, err.Error())
	}
	current := false
	if in.SupersededBy, current, err = r.supersede(ctx, run); err != nil {
		return reconciler.Outcome{}, err
	}
	in.Current = current && in.Revision == model.WantedRevision(&bun)
	// The run's members are the clusters its revision's record names (those the rollout has not
	// reached have no deployment yet) and the bundle's other deployments: its membership is
	// whole from its first step (R3.7).
	fleet, ms, err := r.fleet(ctx, &bun, in.Revision)
	if err != nil {
		return reconciler.Outcome{}, err
	}
	bds := ms.bds
	approvals, err := r.approvals(ctx, run)
	if err != nil {
		return reconciler.Outcome{}, err
	}
	now := r.Now()
	owner := runOwner(run)
	members := runIndex(fleet)
	in.Analyses = r.Analysis.Inputs(owner, members.Deployment)
	res := rollout.Step(in, fleet, approvals, now)
	r.Analysis.Track(owner, res.Analysis, members.Labels)
	var missing *model.MissingRevisionError
	release := res.Release
	if bun.Spec.TargetRevision != nil && *bun.Spec.TargetRevision == res.Status.RevisionIndex {
		release = append(release, onRevisionButStagedElse(bds, res.Status.RevisionIndex)...)
	}
	if len(release) > 0 || len(res.Restore) > 0 {
		// Releases and restores are not taken back when the status write below fails.
		if err := model.DecidedOnLatest(ctx, r.Uncached, v1alpha1.GroupVersion.WithKind("StagedUpdateRun"), orig); err != nil {
			return reconciler.Outcome{}, err
		}
	}
	if err := r.release(ctx, &bun, ms, release, res.Status.RevisionIndex); errors.As(err, &missing) {
		return r.fail(run, missing.Error())
	} else if err != nil {
		return reconciler.Outcome{}, err
	}
	// A failure that rolls back is written with the run's status first; the restores follow
	// from the next step, which that write wakes (a hub stopping in between rolls back then).
	if f := res.Failure; f != nil {
		log.FromContext(ctx).Info("run failed its budgets", "run", run.Name, "bundle", bun.Name, "revision", f.Revision, "action", f.Action, "clusters", f.Clusters)
	} else if err := plan.RestoreDeployments(ctx, r.Client, nil, bds, res.Restore, now); err != nil {
		return reconciler.Outcome{}, err
	}
	for _, gate := range res.Approvals {
		ar := &v1alpha1.ApprovalRequest{ObjectMeta: metav1.ObjectMeta{Name: gate.Name, Namespace: run.Namespace},
			Spec: v1alpha1.ApprovalRequestSpec{Run: run.Name, Stage: gate.Stage, Group: gate.Group, Gate: gate.Gate, Quorum: int32(gate.Quorum),
				Approvers: model.ApproverSpecs(gate.Approvers)}}
		if err := controllerutil.SetControllerReference(run, ar, r.Client.Scheme()); err != nil {
			return reconciler.Outcome{}, err
		}
		switch err := r.Client.Create(ctx, ar); {
		case apierrors.IsAlreadyExists(err):
		case err != nil:
			return reconciler.Outcome{}, fmt.Errorf("failed to create approval request %s: %w", gate.Name, err)
		default:
			r.Recorder.Normal(run, v1alpha1.EventApprovalRequested, "%s needs %d approval(s): %s", gateName(gate), max(gate.Quorum, 1), approveCommand(run, gate))
		}
	}
	setRunStatus(run, res.Status)
	out := reconciler.Outcome{Written: func() { r.recordTransitions(&orig.Status, run) }}
	if !res.WakeAt.IsZero() {
		out.After = res.WakeAt.Sub(now)
	}
	return out, nil
}

// gateName is how people call a gate: "stage prod, before it", "group eu of stage prod, after it".
func gateName(g rollout.ApprovalGate) string {
	where := "stage " + g.Stage
	if g.Group != "" {
		where = "group " + g.Group + " of " + where
	}
	if g.Gate == "After" {
		return where + ", after it"
	}
	return where + ", before it"
}

// approveCommand is the command that approves a gate (R3.9), as a person types it.
func approveCommand(run *v1alpha1.StagedUpdateRun, g rollout.ApprovalGate) string {
	cmd := fmt.Sprintf("flotilla approve %s -n %s --stage %s", run.Name, run.Namespace, g.Stage)
	if g.Group != "" {
		cmd += " --group " + g.Group
	}
	if g.Gate == "After" {
		cmd += " --after"
	}
	return cmd
}

// release lets the agents of the named clusters apply the run's revision: a cluster the
// rollout has not reached gets its deployment, staged and released from the revision's record
// in one write; a revision other than the one staged (a run of an older index: a rollback) is
// staged from its record at the same time.
func (r *RunReconciler) release(ctx context.Context, bun *v1alpha1.Bundle, ms *members, clusters []string, revision int64) error {
	var targets model.RevisionTargets
	releases := make([]release, 0, len(clusters))
	for _, name := range clusters {
		bd, cl := ms.bds[name], ms.clusters[name]
		if cl == nil {
			continue
		}
		var want model.RevisionTarget
		if bd != nil && bd.Spec.Staged.Index == revision {
			want = model.RevisionTarget{Ref: bd.Spec.Staged, Options: bd.Spec.Options}
		} else {
			if targets == nil {
				var err error
				if targets, err = r.Revisions.Targets(ctx, bun, revision); err != nil {
					return err
				}
			}
			var ok bool
			if want, ok = targets[name]; !ok {
				continue // the revision did not deploy to this cluster
			}
		}
		releases = append(releases, release{cluster: cl, bd: bd, target: want})
	}
	return releaseAll(ctx, r.Client, r.Uncached, r.Writes, r.Released, bun, releases, r.Now())
}

// onRevisionButStagedElse lists clusters that run revision already while another is staged: in
// a rollback, the clusters that never left the older revision. Staging it again for them keeps
// their state (ROLLOUT.md §0) from reading OutOfSync against a revision no longer wanted.
func onRevisionButStagedElse(bds map[string]*v1alpha1.BundleDeployment, revision int64) []string {
	var out []string
	for name, bd := range bds {
		if bd.Spec.Released != nil && bd.Spec.Released.Index == revision && bd.Spec.Staged.Index != revision {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// gather reads the run and its strategy in the planner's terms. The strategy object is read
// only until the run has frozen its own copy.
func (r *RunReconciler) gather(ctx context.Context, run *v1alpha1.StagedUpdateRun, bun *v1alpha1.Bundle) (*rollout.Run, error) {
	in := &rollout.Run{Name: run.Name, Action: rollout.RunAction(run.Spec.State), Paused: bun.Spec.Paused, Quarantine: plan.ActiveQuarantine(bun)}
	var err error
	if in.Status, err = model.RunStatus(&run.Status); err != nil {
		return nil, err
	}
	in.Skips = model.Skips(run.Spec.Skips)
	in.Revision = bun.Spec.LatestRevision
	if run.Spec.RevisionIndex != nil {
		in.Revision = *run.Spec.RevisionIndex
	}
	if in.Status.Strategy == nil {
		var strategy v1alpha1.StagedUpdateStrategy
		if err := r.Client.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: run.Spec.Strategy}, &strategy); err != nil {
			return nil, fmt.Errorf("strategy %s: %w", run.Spec.Strategy, err)
		}
		if in.Strategy, err = model.StagedStrategy(&strategy.Spec); err != nil {
			return nil, fmt.Errorf("strategy %s: spec.%w", run.Spec.Strategy, err)
		}
	}
	return in, nil
}

// fleet reads the run's members (readMembers), windows included.
func (r *RunReconciler) fleet(ctx context.Context, bun *v1alpha1.Bundle, revision int64) ([]rollout.RunCluster, *members, error) {
	ms, err := readMembers(ctx, r.Client, r.Revisions, r.Live, r.Now(), bun, revision)
	if err != nil {
		return nil, nil, err
	}
	fleet := make([]rollout.RunCluster, 0, len(ms.list))
	for _, m := range ms.list {
		fleet = append(fleet, rollout.RunCluster{Name: m.cluster.Name, Labels: m.cluster.Labels, Deployment: m.deployment, Availability: m.availability,
			Paused: m.cluster.Spec.Paused, Offline: m.offline, Since: m.since})
	}
	return fleet, ms, nil
}

// availability is when work may start on a cluster: its maintenance window and exclusions
// (R3.13, R4.9). One that does not compile (a cron or time zone the API server could not check)
// holds every run and sequence on the cluster rather than dropping the freeze.
func availability(c *v1alpha1.Cluster) *rollout.Availability {
	avail := &rollout.Availability{}
	if w := c.Spec.MaintenanceWindow; w != nil {
		avail.Window = &rollout.Window{Schedule: w.Schedule, Duration: rollout.Duration(w.Duration.Duration), TimeZone: w.TimeZone}
	}
	for _, x := range c.Spec.Exclusions {
		avail.Exclusions = append(avail.Exclusions, rollout.TimeRange{Name: x.Name, Start: x.Start.Time, End: x.End.Time})
	}
	if err := avail.Compile(); err != nil {
		// Fail closed: a window that does not compile holds the cluster, and says where.
		//lint:ignore ST1005 the message names the object as kubectl does, kind first
		return rollout.InvalidAvailability(fmt.Errorf("Cluster %s/%s spec.%w", c.Namespace, c.Name, err))
	}
	return avail
}

// approvals reads what people recorded on the run's approval requests. The names are the API
// server's: the admission policy flotilla-approvals-name-their-author lets a record name only
// the user who wrote it.
func (r *RunReconciler) approvals(ctx context.Context, run *v1alpha1.StagedUpdateRun) (map[string]rollout.Approval, error) {
	var list v1alpha1.ApprovalRequestList
	if err := r.Client.List(ctx, &list, client.InNamespace(run.Namespace)); err != nil {
		return nil, err
	}
	out := map[string]rollout.Approval{}
	for i := range list.Items {
		ar := &list.Items[i]
		if ar.Spec.Run != run.Name {
			continue
		}
		var a rollout.Approval
		if ar.Status.Approval != nil {
			a.Approvers = append(a.Approvers, ar.Status.Approval.By)
		}
		for _, rec := range ar.Status.Approvals {
			a.Approvers = append(a.Approvers, rec.By)
		}
		if rej := ar.Status.Rejection; rej != nil {
			a.RejectedBy, a.Reason = rej.By, rej.Comment
		}
		out[ar.Name] = a
	}
	return out, nil
}

// setRunStatus sets the planner's status on the run, with Ready, and Reconciling or Stalled
// while they hold.
func setRunStatus(run *v1alpha1.StagedUpdateRun, st rollout.RunStatus) {
	status := model.RunStatusOf(st)
	status.ObservedGeneration, status.Conditions = run.Generation, slices.Clone(run.Status.Conditions)
	ready := metav1.Condition{Type: v1alpha1.ReadyCondition, Status: metav1.ConditionFalse, Reason: string(st.State), Message: st.Message, ObservedGeneration: run.Generation}
	switch st.State {
	case rollout.RunCompleted, rollout.RunSkipped:
		ready.Status = metav1.ConditionTrue
		meta.RemoveStatusCondition(&status.Conditions, v1alpha1.ReconcilingCondition)
	case rollout.RunFailed:
		meta.RemoveStatusCondition(&status.Conditions, v1alpha1.ReconcilingCondition)
		meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: v1alpha1.StalledCondition, Status: metav1.ConditionTrue, Reason: v1alpha1.FailedReason, Message: st.Message, ObservedGeneration: run.Generation})
	default:
		meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: v1alpha1.ReconcilingCondition, Status: metav1.ConditionTrue, Reason: v1alpha1.ProgressingReason, Message: st.Message, ObservedGeneration: run.Generation})
	}
	if ready.Reason == "" {
		ready.Reason = v1alpha1.ProgressingReason
	}
	meta.SetStatusCondition(&status.Conditions, ready)
	if st.SupersededBy != "" {
		meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: v1alpha1.SupersededCondition, Status: metav1.ConditionTrue, Reason: v1alpha1.NewerRunReason, Message: "superseded by run " + st.SupersededBy, ObservedGeneration: run.Generation})
	}
	run.Status = status
}

// recordTransitions records what a status write of a run changed for people: stages starting
// and finishing, gates approved or rejected, the run giving way to a newer one.
func (r *RunReconciler) recordTransitions(was *v1alpha1.StagedUpdateRunStatus, run *v1alpha1.StagedUpdateRun) {
	before := map[string]*v1alpha1.StageRunStatus{}
	for i := range was.Stages {
		before[was.Stages[i].Name] = &was.Stages[i]
	}
	for i := range run.Status.Stages {
		s, old := &run.Status.Stages[i], before[run.Status.Stages[i].Name]
		if old == nil {
			old = &v1alpha1.StageRunStatus{}
		}
		r.recordGates(run, "stage "+s.Name, old.BeforeTasks, s.BeforeTasks)
		if s.StartedAt != nil && old.StartedAt == nil {
			r.Recorder.Normal(run, v1alpha1.EventStageStarted, "stage %s started: revision %d released to its first clusters", s.Name, run.Status.RevisionIndex)
		}
		if finished(s.State) && s.State != old.State {
			r.Recorder.Normal(run, v1alpha1.EventStageCompleted, "stage %s %s (%d failed clusters)", s.Name, strings.ToLower(string(s.State)), s.FailureCount)
		}
		r.recordGates(run, "stage "+s.Name, old.AfterTasks, s.AfterTasks)
	}
	if f := run.Status.Failure; f != nil && run.Status.State != was.State {
		switch run.Status.State {
		case v1alpha1.RunRollingBack:
			r.Recorder.Warning(run, v1alpha1.EventRollbackStarted, "revision %d failed (%s): %s", f.Revision, f.Rule, f.Message)
		case v1alpha1.RunRolledBack:
			r.Recorder.Normal(run, v1alpha1.EventRolledBack, "%s", run.Status.Message)
		case v1alpha1.RunFailed:
			r.Recorder.Warning(run, v1alpha1.EventRolloutFailed, "revision %d failed (%s): %s", f.Revision, f.Rule, f.Message)
		}
	}
	if !meta.IsStatusConditionTrue(was.Conditions, v1alpha1.SupersededCondition) && meta.IsStatusConditionTrue(run.Status.Conditions, v1alpha1.SupersededCondition) {
		r.Recorder.Normal(run, v1alpha1.EventRunSuperseded, "%s: clusters in flight finish, nothing new starts", meta.FindStatusCondition(run.Status.Conditions, v1alpha1.SupersededCondition).Message)
	}
}

// recordGates records the approval gates of a stage that opened or were rejected.
func (r *RunReconciler) recordGates(run *v1alpha1.StagedUpdateRun, where string, was, now []v1alpha1.TaskStatus) {
	for i, t := range now {
		if t.Type != v1alpha1.TaskApproval || i < len(was) && was[i].State == t.State {
			continue
		}
		switch t.State {
		case v1alpha1.RunCompleted:
			r.Recorder.Normal(run, v1alpha1.EventApprovalRecorded, "%s: approval request %s approved", where, t.ApprovalRequest)
		case v1alpha1.RunFailed:
			r.Recorder.Warning(run, v1alpha1.EventApprovalRejected, "%s: approval request %s rejected", where, t.ApprovalRequest)
		}
	}
}

// finished reports whether a run, stage or group state is final.
func finished(s v1alpha1.RunState) bool {
	return s == v1alpha1.RunCompleted || s == v1alpha1.RunSkipped || s == v1alpha1.RunFailed || s == v1alpha1.RunStopped
}

// fail sets a run that cannot go on Failed, with why.
func (r *RunReconciler) fail(run *v1alpha1.StagedUpdateRun, msg string) (reconciler.Outcome, error) {
	setRunStatus(run, rollout.RunStatus{State: rollout.RunFailed, Message: msg})
	return reconciler.Outcome{}, nil
}

// autoRuns applies R3.14 for a bundle whose staged rollout starts runs by itself: a run for
// each new revision. The runs it replaces stop themselves (supersede).
func autoRuns(ctx context.Context, c client.Client, bun *v1alpha1.Bundle) error {
	ref := bun.Spec.StagedUpdate
	if ref == nil || !ref.AutoRun || bun.Spec.LatestRevision == 0 {
		return nil
	}
	runs, err := model.RunsOfBundle(ctx, c, bun.Namespace, bun.Name)
	if err != nil {
		return err
	}
	name := rollout.PlanAutoRuns(bun.Name, bun.Spec.LatestRevision, bdstate.RunRefs(runs))
	if name == "" {
		return nil
	}
	rev := bun.Spec.LatestRevision
	run := &v1alpha1.StagedUpdateRun{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: bun.Namespace, Labels: map[string]string{LabelAutoRun: "true"}},
		Spec: v1alpha1.StagedUpdateRunSpec{Bundle: bun.Name, Strategy: ref.Strategy, RevisionIndex: &rev, State: v1alpha1.RunRun}}
	if err := c.Create(ctx, run); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("failed to start run %s: %w", name, err)
	}
	return nil
}

// supersede keeps one rollout per bundle: when a newer run of the bundle is in flight, run
// stops (clusters in flight finish) and records which run replaced it. It returns that run's
// name, or "" when none did, and whether run is the bundle's current one: no other run of the
// bundle is in flight (a finished run may be current: it still serves clusters that join).
func (r *RunReconciler) supersede(ctx context.Context, run *v1alpha1.StagedUpdateRun) (by string, current bool, err error) {
	if by := run.Annotations[AnnotationSupersededBy]; by != "" {
		return by, false, nil
	}
	runs, err := model.RunsOfBundle(ctx, r.Client, run.Namespace, run.Spec.Bundle)
	if err != nil {
		return "", false, err
	}
	newest, superseded := rollout.Superseding(bdstate.RunRefs(runs), r.Now())
	if !slices.Contains(superseded, run.Name) {
		return "", newest == "" || newest == run.Name, nil
	}
	orig := run.DeepCopy()
	if run.Annotations == nil {
		run.Annotations = map[string]string{}
	}
	run.Annotations[AnnotationSupersededBy] = newest
	if err := r.Client.Patch(ctx, run, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return "", false, fmt.Errorf("failed to record that run %s supersedes %s: %w", newest, run.Name, err)
	}
	log.FromContext(ctx).Info("run superseded: it stops, its clusters in flight finish", "run", run.Name, "bundle", run.Spec.Bundle, "by", newest)
	return newest, false, nil
}
