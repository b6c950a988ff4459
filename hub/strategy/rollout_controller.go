package strategy

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
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

// bundleWorkers is how many bundles are planned at once.
const bundleWorkers = 4

// RolloutReconciler releases a bundle's staged revision to clusters as the planner decides
// (gather → rollout.Plan → act), and reports the rollout on the Bundle. It never decides
// anything itself: every release and every wait reason comes from the rollout package.
type RolloutReconciler struct {
	Client client.Client
	// Uncached confirms, before content is written into a cluster's own Role, that no shared
	// grant the cache does not show yet gives it (GrantAndWrite).
	Uncached  client.Reader
	Shard     model.Shard
	Revisions *model.RevisionStore
	// Released remembers releases until the cache shows them, shared with the bundler.
	Released *deploy.Releases
	Staging  *deploy.StagingNow
	Writes   deploy.WriteSlots
	Live     *liveness.Liveness
	Now      func() time.Time

	// Progress spaces out writes of a bundle's progress counts (see report).
	Progress model.ProgressThrottle
	Recorder *events.Recorder
	// Analysis measures the checks the rollouts judge (§7).
	Analysis *analysis.Runner

	inFlight batchesInFlight
	// plans keeps what each bundle's passes read of its clusters between passes.
	plans *plan.Tracker
}

// Progress counts alone are written at most every progressEvery per bundle, and at most
// bundleProgressPerSecond for all bundles together (ten bundles rolling at once each report
// every 5 s; fifty, every 25 s). Clusters' counts share clusterProgressPerSecond. Together
// they bound the hub's status writes during any rollout to a few per second.
const (
	ProgressEvery            = 5 * time.Second
	BundleProgressPerSecond  = 2
	ClusterProgressPerSecond = 4
)

func (r *RolloutReconciler) Setup(mgr ctrl.Manager) error {
	bundlesOf := model.AllInNamespace(r.Client, func() client.ObjectList { return &v1alpha1.BundleList{} })
	allBundles := handler.EnqueueRequestsFromMapFunc(bundlesOf)
	// The events that change what a pass reads of a cluster are noted before they wake it.
	r.plans = plan.NewTracker(r.Client, r.Live)
	// Bundles are independent: several are planned at once (one bundle is never planned twice
	// at the same time: the work queue hands out each key to one worker).
	return ctrl.NewControllerManagedBy(mgr).Named("bundle-rollout").
		WithOptions(controller.Options{MaxConcurrentReconciles: bundleWorkers}).
		// Its own status writes do not come back as passes: only the spec, labels and
		// annotations (approvals, skips) of a Bundle change a plan, and the bundler's record
		// that the newest commit does not render changes what its status says.
		For(&v1alpha1.Bundle{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{}, predicate.AnnotationChangedPredicate{}, renderFailureChanged{}))).
		Watches(&v1alpha1.BundleDeployment{}, r.plans.Noting(model.Coalesced(passCoalesce, model.BundleOfDeployment, model.DeploymentPlanChanged))).
		WatchesRawSource(source.Channel(r.Staging.Done, &handler.EnqueueRequestForObject{})).
		// A check's verdict changed: a rollout's (or a staged bundle's current run's) gates
		// may open or fail.
		WatchesRawSource(source.Channel(r.Analysis.Changed(analysis.KindRollout), &handler.EnqueueRequestForObject{})).
		Watches(&v1alpha1.Cluster{}, r.plans.Noting(allBundles, clusterPlanningChanged{live: r.Live, now: r.Now})).
		Watches(&coordinationv1.Lease{}, r.plans.Noting(r.Live.OnAgentBack(r.Client, r.Now, func(ctx context.Context, c *v1alpha1.Cluster) []reconcile.Request {
			return bundlesOf(ctx, c)
		}))).
		Watches(&v1alpha1.Bundle{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return plan.Dependents(ctx, r.Client, o)
		})).
		Watches(&v1alpha1.StagedUpdateRun{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			run, ok := o.(*v1alpha1.StagedUpdateRun)
			if !ok {
				return nil
			}
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: run.Namespace, Name: run.Spec.Bundle}}}
		})).
		Complete(reconciler.Status[v1alpha1.Bundle, *v1alpha1.Bundle]{Client: r.Client, Step: r.step})
}

// clusterPlanningChanged passes the cluster events that change a plan: membership (labels,
// spec, namespace; see ClusterMembershipChanged) and an agent coming back after its heartbeat
// deadline. Routine heartbeats do not pass: with hundreds of clusters they would re-plan every
// bundle several times a second. Going offline is noticed by the requeue at the deadline.
type clusterPlanningChanged struct {
	model.ClusterMembershipChanged
	live *liveness.Liveness
	now  func() time.Time
}

func (p clusterPlanningChanged) Update(e event.UpdateEvent) bool {
	if p.ClusterMembershipChanged.Update(e) {
		return true
	}
	oldC, ok1 := e.ObjectOld.(*v1alpha1.Cluster)
	newC, ok2 := e.ObjectNew.(*v1alpha1.Cluster)
	if !ok1 || !ok2 {
		return true
	}
	wasOnline, _ := p.live.Check(oldC, p.now())
	isOnline, _ := p.live.Check(newC, p.now())
	return !wasOnline && isOnline
}

// passCoalesce is how long a deployment's change waits for others before its bundle is planned
// again. Agents report in bursts (hundreds of clusters acknowledge a batch within a second);
// planning once per burst instead of once per report keeps the hub's CPU, which shares the
// machine with the API server, flat. The rollout still moves on events, never on a timer (R1.10).
const passCoalesce = 200 * time.Millisecond

// deploymentToBundle enqueues a BundleDeployment's Bundle at once.
var deploymentToBundle = handler.EnqueueRequestsFromMapFunc(model.BundleOfDeployment)

// step plans one pass for a bundle, writes the releases and sets the bundle's status (written
// by the skeleton, or held back while only progress counts changed). The releases of the
// bundle's previous pass may still be in flight (releaseBatch): they are waited for once this
// pass's own are under way, and this pass's are left in flight when the next pass comes at
// once (a maxNew batch), else waited for before the pass ends.
func (r *RolloutReconciler) step(ctx context.Context, bun, orig *v1alpha1.Bundle) (reconciler.Outcome, error) {
	key := client.ObjectKeyFromObject(bun)
	prev := r.inFlight.take(key)
	out, batch, err := r.pass(ctx, bun, orig)
	err = errors.Join(err, prev.wait())
	if err == nil && batch != nil && out.After == nextBatch {
		r.inFlight.put(key, batch)
		return out, nil
	}
	return out, errors.Join(err, batch.wait())
}

// pass is one planning pass: gather → rollout.Plan → act. It returns the releases it started.
func (r *RolloutReconciler) pass(ctx context.Context, bun, orig *v1alpha1.Bundle) (reconciler.Outcome, *releaseBatch, error) {
	owner := bundleOwner(analysis.KindRollout, bun)
	if !bun.DeletionTimestamp.IsZero() || !r.Shard.Owns(bun) || bun.Spec.StagedUpdate != nil || bun.Spec.Sequence != nil {
		r.Analysis.Track(owner, nil, nil)               // this controller judges none of its checks (any more)
		r.plans.Forget(client.ObjectKeyFromObject(bun)) // nor plans it
	}
	if !bun.DeletionTimestamp.IsZero() || !r.Shard.Owns(bun) {
		return reconciler.Outcome{}, nil, nil // being removed (BundleRemovalReconciler), or another shard's
	}
	completed := func() { recordCompletion(r.Recorder, orig, bun) }
	if bun.Spec.StagedUpdate != nil {
		if err := autoRuns(ctx, r.Client, bun); err != nil {
			return reconciler.Outcome{}, nil, err
		}
		if err := r.reportStaged(ctx, bun); err != nil { // staged runs release
			return reconciler.Outcome{}, nil, err
		}
		wait := r.hold(orig, bun, significantStaged(orig, bun))
		return reconciler.Outcome{After: wait, Hold: wait > 0, Written: func() {
			completed()
			plan.RecordOutcome(r.Recorder, orig, bun)
		}}, nil, nil
	}
	if bun.Spec.Sequence != nil {
		return reconciler.Outcome{}, nil, nil // released by the sequence controller
	}
	// Clusters of the revision's record that have no deployment yet are Pending (§0): the
	// rollout has not reached them. Releasing one creates its deployment.
	recorded, err := r.Revisions.Targets(ctx, bun, model.WantedRevision(bun))
	var missing *model.MissingRevisionError
	switch {
	case errors.As(err, &missing) && bun.Spec.TargetRevision != nil:
		setStalled(bun, missing.Error()) // nothing to roll back to
		return reconciler.Outcome{}, nil, nil
	case errors.As(err, &missing):
		recorded = nil // no revision yet, or one from before records: only existing deployments take part
	case err != nil:
		return reconciler.Outcome{}, nil, err
	}
	st, err := r.plans.Gather(ctx, r.Client, r.Now(), bun, recorded)
	if err != nil {
		return reconciler.Outcome{}, nil, err
	}
	st.CountUnseen(r.Released, bun, r.Now())
	in, requeue := st.In, st.Requeue
	if bun.Spec.TargetRevision != nil {
		if err := r.pin(ctx, bun, st, recorded); err != nil {
			return reconciler.Outcome{}, nil, err
		}
	}
	targets := targetIndex(in.Targets)
	in.Analyses = r.Analysis.Inputs(owner, targets.Deployment)
	// What the checks said when the planner judged them, failures included: the pass that acts
	// on a failure shows it.
	bun.Status.Analysis = r.Analysis.Summary(owner)
	decision := rollout.Plan(in)
	if plan.RecordQuarantine(bun, decision.Failure) {
		log.FromContext(ctx).Info("revision failed: quarantined, rolling back", "bundle", bun.Name, "revision", decision.Failure.Revision, "rule", decision.Failure.Rule, "clusters", decision.Failure.Clusters)
		plan.
			// The quarantine is recorded before anything is rolled back: the next pass, right
			// after its write, restores.
			SetOutcome(bun, in.Revision, "", decision.Failure, st.Bds, r.Now())
		plan.ApplyOutcome(bun)
		return reconciler.Outcome{After: nextBatch, Written: func() { plan.RecordOutcome(r.Recorder, orig, bun) }}, nil, nil
	}
	// Measured from now on: what this pass judges (a failure's pass above keeps measuring until
	// the next, which rolls back).
	r.Analysis.Track(owner, decision.Analysis, targets.Labels)
	batch := r.release(ctx, bun, st, recorded, decision)
	if err := plan.RestoreDeployments(ctx, r.Client, r.Writes, st.Bds, decision.Restore, r.Now()); err != nil {
		return reconciler.Outcome{}, batch, err
	}
	wait, significant := r.report(bun, orig, in, decision, st.Bds)
	requeue = model.Sooner(model.Sooner(requeue, wait), decision.RequeueAfter)
	if decision.More && batch.launched > 0 {
		// The partition has clusters beyond this batch: the next pass checks its threshold
		// with this batch counted (CountUnseen) and releases the next one (R1.8), without
		// waiting for the batch's own events to come back (R1.10).
		requeue = nextBatch
	}
	if r.Staging.Active(client.ObjectKeyFromObject(bun)) {
		requeue = model.Sooner(requeue, time.Second) // what the bundler leaves to this controller is looked at after it
	}
	return reconciler.Outcome{After: requeue, Hold: wait > 0, Written: func() {
		completed()
		plan.RecordOutcome(r.Recorder, orig, bun)
		if significant {
			r.recordTransitions(orig, bun)
		}
	}}, batch, nil
}

// nextBatch is when a pass that released a maxNew batch plans the next one: at once.
const nextBatch = time.Millisecond

// pin stages a rollback's revision on the bundle's deployments, as recorded when the revision
// was created, releasing it at once where the planner allows. Clusters that revision did not
// deploy to keep what they run and are left out of the rollout.
func (r *RolloutReconciler) pin(ctx context.Context, bun *v1alpha1.Bundle, st *plan.PlanState, recorded model.RevisionTargets) error {
	kept := st.In.Targets[:0]
	want := model.RevisionTargets{}
	for _, t := range st.In.Targets {
		w, ok := recorded[t.Cluster]
		if bd := st.Bds[t.Cluster]; bd == nil || !ok {
			delete(st.Bds, t.Cluster)
			continue
		} else if bd.Spec.Staged != w.Ref {
			want[t.Cluster] = w
		}
		kept = append(kept, t)
	}
	st.In.Targets = kept
	release, _ := plan.ReleasedWithStaging(st, want)
	for i := range st.In.Targets {
		t := &st.In.Targets[i]
		w, ok := want[t.Cluster]
		if !ok {
			continue
		}
		bd, err := deploy.GrantAndWrite(ctx, r.Client, r.Uncached, bun, st.Clusters[t.Cluster], st.Bds[t.Cluster], w, release[t.Cluster], r.Now())
		if err != nil {
			return err
		}
		st.Bds[t.Cluster], t.Deployment = bd, bdstate.Deployment(bd)
	}
	return nil
}

// release lets the agents of the clusters the planner released apply the revision. A Pending
// cluster gets its deployment, and one whose staging is behind (the cache lags the bundler, or
// the bundler stopped mid-commit) is staged from the revision's record: each in one write.
//
// The writes go out in the background and release returns with the last of them in flight
// (queuedAhead): the next pass plans while they are written (see releaseBatch). Each release
// is remembered (Released) before its write, so that pass counts it as released (CountUnseen)
// and does not hand it out again; a write that fails is forgotten, and its cluster planned
// again.
func (r *RolloutReconciler) release(ctx context.Context, bun *v1alpha1.Bundle, st *plan.PlanState, recorded model.RevisionTargets, d *rollout.Decision) *releaseBatch {
	revision, bds := st.In.Revision, st.Bds
	type write struct {
		key     types.NamespacedName
		cluster *v1alpha1.Cluster
		bd      *v1alpha1.BundleDeployment // nil: create
		target  model.RevisionTarget
	}
	var todo []write
	now := r.Now()
	for _, name := range d.Release {
		bd, cl := bds[name], st.Clusters[name]
		rec, isRecorded := recorded[name]
		switch {
		case cl == nil:
		case bd == nil || bd.Spec.Staged.Index != revision:
			// Pending, or not staged yet: from the record, unless the bundler is writing it.
			if isRecorded && !r.Staging.Active(client.ObjectKeyFromObject(bun)) && !r.Released.Pending(deploy.DeploymentKey(bun, cl), rec.Ref.DeploymentID, now) {
				todo = append(todo, write{deploy.DeploymentKey(bun, cl), cl, bd, rec})
			}
		case bd.Spec.Released != nil && *bd.Spec.Released == bd.Spec.Staged ||
			r.Released.Pending(client.ObjectKeyFromObject(bd), bd.Spec.Staged.DeploymentID, now):
			// released already; the cache may not show it yet
		default:
			todo = append(todo, write{client.ObjectKeyFromObject(bd), cl, bd, model.RevisionTarget{Ref: bd.Spec.Staged, Options: bd.Spec.Options}})
		}
	}
	var removes []*v1alpha1.BundleDeployment
	for _, name := range d.Remove {
		if bd := bds[name]; bd != nil {
			removes = append(removes, bd)
		}
	}
	batch := &releaseBatch{launched: len(todo), done: make(chan struct{})}
	if len(todo) == 0 && len(removes) == 0 {
		close(batch.done)
		return batch
	}
	for _, w := range todo {
		r.Released.Add(w.key, w.target.Ref, now)
	}
	// The writes outlive this pass: they read a copy of the bundle, whose status the
	// reconciler's skeleton writes meanwhile.
	bun = bun.DeepCopy()
	// One write refused (a quota or an admission policy of the cluster's namespace) does not
	// stop the others: every error is kept, and only the refused clusters are planned again.
	written := make([]bool, len(todo))
	errs := make([]error, len(todo)+len(removes))
	writes := make([]func(), 0, len(todo)+len(removes))
	for i, w := range todo {
		writes = append(writes, func() {
			err := r.Writes.Do(ctx, func() error {
				_, err := deploy.GrantAndWrite(ctx, r.Client, r.Uncached, bun, w.cluster, w.bd, w.target, true, now)
				return err
			})
			if err != nil {
				r.Released.Forget(w.key, w.target.Ref.DeploymentID)
			}
			switch {
			case w.bd == nil && apierrors.IsAlreadyExists(err):
				// created by a pass the cache does not show yet
			case err != nil:
				errs[i] = fmt.Errorf("failed to release %s to %s: %w", bun.Name, w.cluster.Name, err)
			default:
				written[i] = true
			}
		})
	}
	for i, bd := range removes {
		writes = append(writes, func() {
			if err := r.Client.Delete(ctx, bd.DeepCopy()); client.IgnoreNotFound(err) != nil {
				errs[len(todo)+i] = fmt.Errorf("failed to remove %s from %s: %w", bd.Spec.Bundle, bd.Labels[model.LabelCluster], err)
			}
		})
	}
	finished := startWrites(writes, deploy.StageWorkers, queuedAhead)
	go func() {
		defer close(batch.done)
		<-finished // the writes report through errs
		batch.err = errors.Join(errs...)
		released := map[string]bool{}
		for i, w := range todo {
			if written[i] {
				released[w.cluster.Name] = true
			}
		}
		if len(released) > 0 {
			deploy.RecordReleases(r.Recorder, bun, revision, d, func(c string) bool { return released[c] })
		}
	}()
	return batch
}

// queuedAhead is how many of a pass's release writes may still wait for a worker when the pass
// returns. The workers then have writes to start while the bundle's next pass plans, which at
// 10,000 clusters takes about as long as the write slots take for two rounds of writes. A pass
// that returned with its whole batch waiting (50 writes, maxNew) kept two batches in flight and
// measured slower at 5,000 clusters (README, Measured).
const queuedAhead = 2 * deploy.StageWorkers

// startWrites runs writes on at most workers goroutines at a time and returns once no more than
// ahead of them are left waiting for a worker; the channel it returns is closed when every
// write has returned.
func startWrites(writes []func(), workers, ahead int) <-chan struct{} {
	finished := make(chan struct{})
	started := make(chan struct{}, len(writes))
	go func() {
		defer close(finished)
		var g errgroup.Group
		g.SetLimit(workers)
		for _, write := range writes {
			g.Go(func() error {
				started <- struct{}{}
				write()
				return nil
			})
		}
		_ = g.Wait()
	}()
	for range len(writes) - ahead {
		<-started
	}
	return finished
}

// releaseBatch is one pass's release writes. A bundle's next pass plans while they are in
// flight and waits for them only once its own are under way: at 10,000 clusters a pass takes
// as long as a batch of maxNew writes, and planning after each batch's writes, not beside
// them, left the API server idle half the time. At most two batches of a bundle are in
// flight: the one a pass starts and the one before it.
type releaseBatch struct {
	launched int
	done     chan struct{}
	err      error
}

// wait blocks until the batch is written and returns its first error.
func (b *releaseBatch) wait() error {
	if b == nil {
		return nil
	}
	<-b.done
	return b.err
}

// batchesInFlight holds each bundle's release batch that is still being written when its pass
// ended; the bundle's next pass takes it.
type batchesInFlight struct {
	mu sync.Mutex
	m  map[types.NamespacedName]*releaseBatch
}

func (f *batchesInFlight) take(key types.NamespacedName) *releaseBatch {
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.m[key]
	delete(f.m, key)
	return b
}

func (f *batchesInFlight) put(key types.NamespacedName, b *releaseBatch) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = map[types.NamespacedName]*releaseBatch{}
	}
	f.m[key] = b
}

// report sets the Bundle's status from the pass's decision and says whether its write waits.
//
// Progress (counts, the least advanced state) changes with every cluster a rollout passes; it
// is written at most every progressEvery per bundle. A new revision, readiness reached or lost,
// and a pause or its reason are significant: written at once, and told (recordTransitions).
// report returns how long the write is held back (0: write now) and whether it is significant.
func (r *RolloutReconciler) report(bun, orig *v1alpha1.Bundle, in *rollout.Input, d *rollout.Decision, bds map[string]*v1alpha1.BundleDeployment) (time.Duration, bool) {
	st := &bun.Status
	counts := rollout.Counts{}
	for _, c := range d.Clusters {
		counts[c.State]++
	}
	setProgress(bun, bundleProgress{revision: in.Revision, counts: counts, clusters: len(d.Clusters), complete: d.Complete, waiting: waitReason(d),
		blocking: model.BlockingObject(in.Revision, maps.Values(bds))})
	st.Partitions = nil
	for _, p := range d.Partitions {
		st.Partitions = append(st.Partitions, v1alpha1.PartitionStatus{Name: p.Name, Count: int32(len(p.Clusters)), MaxUnavailable: int32(p.MaxUnavailable),
			Unavailable: int32(p.Unavailable), Ready: p.Ready, Summary: model.StateCounts(p.Counts, len(p.Clusters))})
	}
	st.UnpartitionedClusters = int32(len(d.Unpartitioned))
	unpartitioned, unsafe := d.Warning(rollout.WarnUnpartitioned), d.Warning(rollout.WarnUnsafeDefaults)
	setWarning(st, v1alpha1.UnpartitionedClustersCondition, unpartitioned != "", v1alpha1.UnpartitionedClustersReason, unpartitioned, bun.Generation)
	setWarning(st, v1alpha1.UnsafeDefaultsCondition, unsafe != "", v1alpha1.MaxUnavailable100PercentReason, unsafe, bun.Generation)
	ineligible := d.Warning(rollout.WarnIneligible)
	setWarning(st, v1alpha1.IneligibleClustersCondition, ineligible != "", v1alpha1.APINotServedReason, ineligible, bun.Generation)
	setWarning(st, v1alpha1.RolloutPausedCondition, d.Paused != "", v1alpha1.PausedReason, d.Paused, bun.Generation)
	plan.RecordQuarantine(bun, nil)
	plan. // drops what a retry lifted
		SetOutcome(bun, in.Revision, d.Outcome, d.Failure, bds, r.Now())
	plan.ApplyOutcome(bun)
	significant := significantChange(orig, bun)
	return r.hold(orig, bun, significant), significant
}

// hold is how long the status write of a bundle whose status changed waits: 0 when it is
// significant or the bundle's progress is due (Progress), and 0 when nothing changed (the
// skeleton then writes nothing).
func (r *RolloutReconciler) hold(orig, bun *v1alpha1.Bundle, significant bool) time.Duration {
	if !reconciler.StatusChanged(orig, bun) {
		return 0
	}
	// The throttle paces writes on the wall clock: a simulated Clock (Options.Clock) that
	// stands still must not hold progress back forever.
	return r.Progress.Hold(bun.UID, significant, time.Now())
}

// significantChange says whether a bundle's status changed more than its progress counts: a new
// revision, its outcome or quarantine, readiness reached or lost, a pause or its reason.
func significantChange(orig, bun *v1alpha1.Bundle) bool {
	was, is := &orig.Status, &bun.Status
	return was.ReleasingRevision != is.ReleasingRevision || !equality.Semantic.DeepEqual(was.Outcome, is.Outcome) ||
		len(was.Quarantined) != len(is.Quarantined) ||
		meta.IsStatusConditionTrue(was.Conditions, v1alpha1.ReadyCondition) != meta.IsStatusConditionTrue(is.Conditions, v1alpha1.ReadyCondition) ||
		conditionMessage(was.Conditions, v1alpha1.RolloutPausedCondition) != conditionMessage(is.Conditions, v1alpha1.RolloutPausedCondition)
}

// significantStaged is significantChange for a staged bundle, where a stage changing state
// (starting, stopping, failing, ending) is significant too; clusters completing within a stage,
// and the run's message of what it waits for (an approval, a timed wait: the run's own status
// has them at once), are progress.
func significantStaged(orig, bun *v1alpha1.Bundle) bool {
	if significantChange(orig, bun) || len(orig.Status.Stages) != len(bun.Status.Stages) {
		return true
	}
	for i, s := range bun.Status.Stages {
		if was := orig.Status.Stages[i]; was.Name != s.Name || was.State != s.State {
			return true
		}
	}
	return false
}

// recordTransitions records what a status write of a continuous rollout changed for people: a
// rollback starting, a pause (or a new reason for it). Its completion is told with the write
// (recordCompletion). Both are Normal: a person's rollback and a partition that waits for its
// canary are the rollout working as designed, and alerts on Warnings must not fire on them; a
// failed revision (package plan) and an offline cluster are Warnings.
func (r *RolloutReconciler) recordTransitions(orig, bun *v1alpha1.Bundle) {
	st := &bun.Status
	if st.ReleasingRevision != orig.Status.ReleasingRevision && bun.Spec.TargetRevision != nil && *bun.Spec.TargetRevision < bun.Spec.LatestRevision {
		r.Recorder.Normal(bun, v1alpha1.EventRollbackStarted, "rolling back from revision %d to revision %d", bun.Spec.LatestRevision, st.ReleasingRevision)
	}
	// A pause ends with the release that follows it, or the rollout completing: both are told.
	was, is := meta.FindStatusCondition(orig.Status.Conditions, v1alpha1.RolloutPausedCondition), meta.FindStatusCondition(st.Conditions, v1alpha1.RolloutPausedCondition)
	if is != nil && (was == nil || was.Message != is.Message) {
		r.Recorder.Normal(bun, v1alpha1.EventRolloutPaused, "revision %d: %s", st.ReleasingRevision, is.Message)
	}
}

// conditionMessage is a condition's status and message, "" when it is absent.
func conditionMessage(conds []metav1.Condition, typ string) string {
	if c := meta.FindStatusCondition(conds, typ); c != nil {
		return string(c.Status) + c.Message
	}
	return ""
}

// reportStaged sets a staged bundle's status from its current run (rollout.CurrentRun): the one
// that holds the rollout. Its stages become the bundle's, and its message is why the rollout waits.
func (r *RolloutReconciler) reportStaged(ctx context.Context, bun *v1alpha1.Bundle) error {
	runs, err := model.RunsOfBundle(ctx, r.Client, bun.Namespace, bun.Name)
	if err != nil {
		return err
	}
	var current *v1alpha1.StagedUpdateRun
	if name := rollout.CurrentRun(bdstate.RunRefs(runs), r.Now()); name != "" {
		current = &runs[slices.IndexFunc(runs, func(run v1alpha1.StagedUpdateRun) bool { return run.Name == name })]
	}
	p := bundleProgress{revision: model.WantedRevision(bun), counts: rollout.Counts{}}
	if current != nil && current.Status.RevisionIndex != 0 {
		p.revision = current.Status.RevisionIndex
	}
	// The clusters the revision's record names that the run has not reached are Pending.
	recorded, err := r.Revisions.Targets(ctx, bun, p.revision)
	var missing *model.MissingRevisionError
	if err != nil && !errors.As(err, &missing) {
		return err
	}
	ps, err := model.PlacementsWith(ctx, r.Client, bun, recorded)
	if err != nil {
		return err
	}
	p.clusters = len(ps)
	bun.Status.Stages = nil
	if current != nil {
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
		p.counts[rollout.ClusterState(bdstate.Deployment(pl.Bd), p.revision)]++
	}
	bun.Status.Analysis = nil
	if current != nil {
		bun.Status.Analysis = r.Analysis.Summary(runOwner(current))
	}
	p.blocking = model.BlockingObject(p.revision, func(yield func(*v1alpha1.BundleDeployment) bool) {
		for _, pl := range ps {
			if pl.Bd != nil && !yield(pl.Bd) {
				return
			}
		}
	})
	p.complete = current != nil && (current.Status.State == v1alpha1.RunCompleted || current.Status.State == v1alpha1.RunSkipped) && p.counts[rollout.Ready]+p.counts[rollout.Modified] == len(ps)
	setProgress(bun, p)
	// The current run's failure is the bundle's: one that rolled back quarantines its revision
	// for the bundle's other runs (R5.5).
	plan.RecordQuarantine(bun, nil)
	var failure *rollout.Failure
	var outcome rollout.Outcome
	if current != nil {
		failure = model.FailureOf(current.Status.Failure)
		plan.RecordQuarantine(bun, failure)
		st, err := model.RunStatus(&current.Status)
		if err != nil {
			return err
		}
		outcome = st.Outcome()
	}
	plan.SetOutcome(bun, p.revision, outcome, failure, model.ByCluster(ps), r.Now())
	plan.ApplyOutcome(bun)
	return nil
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

// setWarning keeps a condition present only while it is true.
func setWarning(st *v1alpha1.BundleStatus, typ string, on bool, reason, msg string, gen int64) {
	if !on {
		meta.RemoveStatusCondition(&st.Conditions, typ)
		return
	}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: typ, Status: metav1.ConditionTrue, Reason: reason, Message: msg, ObservedGeneration: gen})
}

// renderFailureChanged passes a Bundle whose status.renderFailure the bundler changed.
type renderFailureChanged struct{ predicate.Funcs }

func (renderFailureChanged) Update(e event.UpdateEvent) bool {
	old, okOld := e.ObjectOld.(*v1alpha1.Bundle)
	bun, okNew := e.ObjectNew.(*v1alpha1.Bundle)
	return okOld && okNew && !equality.Semantic.DeepEqual(old.Status.RenderFailure, bun.Status.RenderFailure)
}
