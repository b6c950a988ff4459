package strategy

import (
	"context"
	"fmt"
	"maps"
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

// SequenceReconciler moves the revisions of bundles that follow a RolloutSequence through its
// chain of groups, with soak times (ROLLOUT.md §4): gather → rollout.StepSequence → release,
// and the progress per group and revision on the Bundle. Downstream groups may run an older
// revision than upstream ones (R4.4); each is deployed as recorded when it was created.
type SequenceReconciler struct {
	Client    client.Client
	Shard     model.Shard
	Live      *liveness.Liveness
	Revisions *model.RevisionStore
	// Released remembers the deployments a step created until the cache shows them (the
	// hub's one, shared with the other controllers that release).
	Released *deploy.Releases
	// Writes bounds the release writes in flight (the hub's one, shared with the bundler and
	// the other controllers that release).
	Writes deploy.WriteSlots
	// Uncached confirms a step's copy of the Bundle is the latest before it releases
	// (DecidedOnLatest).
	Uncached client.Reader
	Now      func() time.Time
	Recorder *events.Recorder
	// Analysis measures the checks of the groups' soaks (§7).
	Analysis *analysis.Runner
}

func (r *SequenceReconciler) Setup(mgr ctrl.Manager) error {
	followers := func(ctx context.Context, o client.Object) []reconcile.Request {
		bundles, err := sequenceBundles(ctx, r.Client, o.GetNamespace(), "")
		if err != nil {
			return nil
		}
		out := make([]reconcile.Request, 0, len(bundles))
		for _, b := range bundles {
			if _, isSeq := o.(*v1alpha1.RolloutSequence); !isSeq || b.Spec.Sequence.Name == o.GetName() {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&b)})
			}
		}
		return out
	}
	return ctrl.NewControllerManagedBy(mgr).Named("bundle-sequence").
		For(&v1alpha1.Bundle{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			b, ok := o.(*v1alpha1.Bundle)
			return ok && b.Spec.Sequence != nil
		}))).
		Watches(&v1alpha1.BundleDeployment{}, deploymentToBundle).
		WatchesRawSource(source.Channel(r.Analysis.Changed(analysis.KindSequence), &handler.EnqueueRequestForObject{})).
		Watches(&v1alpha1.RolloutSequence{}, handler.EnqueueRequestsFromMapFunc(followers), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&v1alpha1.Cluster{}, handler.EnqueueRequestsFromMapFunc(followers), builder.WithPredicates(model.ClusterMembershipChanged{})).
		// An agent back online (R1.11): the clusters it held may be released.
		Watches(&coordinationv1.Lease{}, r.Live.OnAgentBack(r.Client, r.Now, func(ctx context.Context, c *v1alpha1.Cluster) []reconcile.Request {
			return followers(ctx, c)
		})).
		// The sequence's progress (when each group started, finished, soaks until) lives in the
		// bundle's status and is read back by the next step: a step on a cache that does not show
		// the last write yet would start a group again at its own time and overwrite when it
		// started (R4.5's 30 days would count from the later time). Its write is conditional
		// on the status it read, and a stale read is done again.
		Complete(reconciler.Status[v1alpha1.Bundle, *v1alpha1.Bundle]{Client: r.Client, Lock: true, Step: r.step})
}

// sequenceBundles lists the bundles of a namespace that follow a sequence (any, when name is "").
func sequenceBundles(ctx context.Context, c client.Reader, namespace, name string) ([]v1alpha1.Bundle, error) {
	var list v1alpha1.BundleList
	if err := c.List(ctx, &list, client.InNamespace(namespace), client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	var out []v1alpha1.Bundle
	for _, b := range list.Items {
		if b.Spec.Sequence != nil && (name == "" || b.Spec.Sequence.Name == name) {
			out = append(out, b)
		}
	}
	return out, nil
}

// step releases a sequence bundle's revisions as far as its groups allow and sets its status.
func (r *SequenceReconciler) step(ctx context.Context, bun, orig *v1alpha1.Bundle) (reconciler.Outcome, error) {
	if bun.Spec.Sequence == nil || !r.Shard.Owns(bun) || !bun.DeletionTimestamp.IsZero() {
		r.Analysis.Track(bundleOwner(analysis.KindSequence, bun), nil, nil) // none of its checks is judged here (any more)
		if bun.Spec.Sequence == nil || !r.Shard.Owns(bun) {
			return reconciler.Outcome{}, nil
		}
	}
	var seq v1alpha1.RolloutSequence
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: bun.Namespace, Name: bun.Spec.Sequence.Name}, &seq); err != nil {
		if apierrors.IsNotFound(err) {
			setStalled(bun, fmt.Sprintf("sequence: RolloutSequence %s not found", bun.Spec.Sequence.Name))
			return reconciler.Outcome{}, nil
		}
		return reconciler.Outcome{}, fmt.Errorf("failed to get sequence: %w", err)
	}
	steps := model.Sequence(&seq.Spec)
	// A retried revision starts over from the first group (R5.5).
	prev := rollout.SequenceStatus{Groups: forgetRevisions(model.SequenceProgress(bun.Status.Sequence), plan.LiftedRevisions(bun))}
	steps.Paused, steps.Quarantine = bun.Spec.Paused, plan.ActiveQuarantine(bun)
	fleet, ms, err := r.fleet(ctx, bun)
	if err != nil {
		return reconciler.Outcome{}, err
	}
	bds := ms.bds
	var revisions []int64
	for _, rev := range bun.Spec.Revisions {
		if rev.TargetsID != "" {
			revisions = append(revisions, rev.Index)
		}
	}
	now := r.Now()
	owner := bundleOwner(analysis.KindSequence, bun)
	members := sequenceIndex(fleet)
	steps.Analyses = r.Analysis.Inputs(owner, members.Deployment)
	summary := r.Analysis.Summary(owner) // what the checks said when the step judged them
	res, err := rollout.StepSequence(&steps, prev, revisions, fleet, now)
	r.Analysis.Track(owner, res.Analysis, members.Labels)
	if err != nil {
		setStalled(bun, fmt.Sprintf("sequence %s: %v", seq.Name, err))
		return reconciler.Outcome{}, nil
	}
	fresh := false
	for i := range res.Failures {
		if plan.RecordQuarantine(bun, &res.Failures[i]) {
			f := &res.Failures[i]
			log.FromContext(ctx).Info("revision failed: quarantined, rolling back", "bundle", bun.Name, "revision", f.Revision, "rule", f.Rule, "clusters", f.Clusters)
			fresh = true
		}
	}
	plan.RecordQuarantine(bun, nil) // drops what a retry lifted
	if !fresh {
		// A failure that rolls back is recorded first: this step's releases and restores wait
		// for the next, right after its status write. They are not taken back when that write
		// fails: they are made on the Bundle's latest version only.
		if len(res.Release) > 0 || len(res.Restore) > 0 {
			if err := model.DecidedOnLatest(ctx, r.Uncached, v1alpha1.GroupVersion.WithKind("Bundle"), orig); err != nil {
				return reconciler.Outcome{}, err
			}
		}
		if err := r.release(ctx, bun, ms, res.Release); err != nil {
			return reconciler.Outcome{}, err
		}
		if err := plan.RestoreDeployments(ctx, r.Client, nil, bds, res.Restore, now); err != nil {
			return reconciler.Outcome{}, err
		}
	}
	r.report(bun, ms, res)
	bun.Status.Analysis = summary
	plan.SetOutcome(bun, bun.Spec.LatestRevision, res.Outcome, plan.NewestFailure(res.Failures, bun.Spec.LatestRevision), bds, now)
	plan.ApplyOutcome(bun)
	out := reconciler.Outcome{Written: func() {
		recordCompletion(r.Recorder, orig, bun)
		plan.RecordOutcome(r.Recorder, orig, bun)
		r.recordTransitions(bun, prev, res.Status)
	}}
	if !res.WakeAt.IsZero() {
		out.After = res.WakeAt.Sub(now)
	}
	if fresh {
		out.After = nextBatch
	}
	return out, nil
}

// fleet reads the bundle's members (readMembers, with the clusters the wanted revision's record
// names) and their groups.
func (r *SequenceReconciler) fleet(ctx context.Context, bun *v1alpha1.Bundle) ([]rollout.SequenceCluster, *members, error) {
	ms, err := readMembers(ctx, r.Client, r.Revisions, r.Live, r.Now(), bun, model.WantedRevision(bun))
	if err != nil {
		return nil, nil, err
	}
	groupsOf, err := model.ClusterGroups(ctx, r.Client, bun.Namespace)
	if err != nil {
		return nil, nil, err
	}
	fleet := make([]rollout.SequenceCluster, 0, len(ms.list))
	for _, m := range ms.list {
		fleet = append(fleet, rollout.SequenceCluster{Name: m.cluster.Name, Labels: m.cluster.Labels, Deployment: m.deployment, Availability: m.availability,
			Paused: m.cluster.Spec.Paused, Offline: m.offline, Since: m.since, Groups: slices.Sorted(maps.Keys(groupsOf(m.cluster)))})
	}
	return fleet, ms, nil
}

// release stages and releases each cluster's revision from its record, in one write (creating
// the deployment of a cluster the rollout has not reached yet).
func (r *SequenceReconciler) release(ctx context.Context, bun *v1alpha1.Bundle, ms *members, revisionOf map[string]int64) error {
	names := make([]string, 0, len(revisionOf))
	for name := range revisionOf {
		names = append(names, name)
	}
	sort.Strings(names)
	releases := make([]release, 0, len(names))
	for _, name := range names {
		targets, err := r.Revisions.Targets(ctx, bun, revisionOf[name])
		if err != nil {
			return err
		}
		cl, want := ms.clusters[name], targets[name]
		if cl == nil || want.Ref.Index == 0 {
			continue // the revision did not deploy to this cluster
		}
		releases = append(releases, release{cluster: cl, bd: ms.bds[name], target: want})
	}
	return releaseAll(ctx, r.Client, r.Uncached, r.Writes, r.Released, bun, releases, r.Now())
}

// report sets the sequence's progress and the bundle's summary.
func (r *SequenceReconciler) report(bun *v1alpha1.Bundle, ms *members, res rollout.SequenceResult) {
	st := res.Status
	s := &bun.Status
	s.Sequence = nil
	// Clusters in no group are never released: said like unpartitioned ones (R1.3).
	s.UnpartitionedClusters = int32(len(res.Unsequenced))
	setWarning(s, v1alpha1.UnpartitionedClustersCondition, len(res.Unsequenced) > 0, v1alpha1.UnsequencedClustersReason,
		fmt.Sprintf("%d targeted clusters are in no group of the sequence and are never released (R1.3): %s", len(res.Unsequenced), model.ListSome(res.Unsequenced, 10)), bun.Generation)
	s.Sequence = model.SequenceStatus(st.Groups)
	latest := bun.Spec.LatestRevision
	counts := rollout.Counts{}
	for _, m := range ms.list { // those the rollout has not reached are Pending
		counts[rollout.ClusterState(bdstate.Deployment(ms.bds[m.cluster.Name]), latest)]++
	}
	var where []string
	complete := len(st.Groups) > 0
	for _, g := range st.Groups {
		for _, rv := range g.Revisions {
			if rv.Index != latest {
				continue
			}
			complete = complete && rv.State == rollout.SeqComplete
			if rv.State != rollout.SeqComplete {
				w := fmt.Sprintf("group %s %s", g.Name, rv.State)
				if rv.State == rollout.SeqSoaking || rv.State == rollout.SeqForcedSoaking {
					w += " until " + rv.SoakUntil.UTC().Format(time.RFC3339)
				}
				if rv.Message != "" {
					w += ": " + rv.Message
				}
				where = append(where, w)
			}
			break
		}
	}
	setProgress(bun, bundleProgress{revision: latest, counts: counts, clusters: len(ms.list), complete: complete, waiting: strings.Join(where, "; "),
		blocking: model.BlockingObject(latest, maps.Values(ms.bds))})
}

// recordTransitions records the groups that started or completed a revision in this pass.
func (r *SequenceReconciler) recordTransitions(bun *v1alpha1.Bundle, was, now rollout.SequenceStatus) {
	before := map[string]rollout.SequenceState{}
	for _, g := range was.Groups {
		for _, rv := range g.Revisions {
			before[fmt.Sprint(g.Name, "/", rv.Index)] = rv.State
		}
	}
	for _, g := range now.Groups {
		for _, rv := range g.Revisions {
			old := before[fmt.Sprint(g.Name, "/", rv.Index)]
			switch {
			case old == rv.State:
			case rv.State == rollout.SeqInProgress:
				r.Recorder.Normal(bun, v1alpha1.EventGroupReleased, "group %s: revision %d released to %d clusters", g.Name, rv.Index, g.Clusters)
			case rv.State == rollout.SeqComplete:
				r.Recorder.Normal(bun, v1alpha1.EventGroupCompleted, "group %s: revision %d complete", g.Name, rv.Index)
			case rv.State == rollout.SeqFailed:
				r.Recorder.Warning(bun, v1alpha1.EventGroupFailed, "group %s: %s", g.Name, rv.Message)
			}
		}
	}
}

// SequenceStatusReconciler reports on a RolloutSequence whether its chain is valid, how many
// clusters each group holds and which bundles follow it.
type SequenceStatusReconciler struct {
	Client client.Client
}

func (r *SequenceStatusReconciler) Setup(mgr ctrl.Manager) error {
	all := handler.EnqueueRequestsFromMapFunc(model.AllInNamespace(r.Client, func() client.ObjectList { return &v1alpha1.RolloutSequenceList{} }))
	return ctrl.NewControllerManagedBy(mgr).Named("sequence-status").
		For(&v1alpha1.RolloutSequence{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&v1alpha1.Bundle{}, all, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&v1alpha1.Cluster{}, all, builder.WithPredicates(model.ClusterMembershipChanged{})).
		Complete(reconciler.Status[v1alpha1.RolloutSequence, *v1alpha1.RolloutSequence]{Client: r.Client, Lock: true, Step: r.step})
}

// step reports whether the sequence's chain is valid, its groups' sizes and its bundles.
func (r *SequenceStatusReconciler) step(ctx context.Context, seq, _ *v1alpha1.RolloutSequence) (reconciler.Outcome, error) {
	st := &seq.Status
	st.ObservedGeneration, st.Groups, st.Bundles = seq.Generation, nil, nil
	bundles, err := sequenceBundles(ctx, r.Client, seq.Namespace, seq.Name)
	if err != nil {
		return reconciler.Outcome{}, err
	}
	for _, b := range bundles {
		st.Bundles = append(st.Bundles, b.Name)
	}
	sort.Strings(st.Bundles)
	ready := metav1.Condition{Type: v1alpha1.ReadyCondition, Status: metav1.ConditionTrue, Reason: v1alpha1.SucceededReason,
		Message: fmt.Sprintf("%d groups, followed by %d bundles", len(seq.Spec.Groups), len(bundles)), ObservedGeneration: seq.Generation}
	steps := model.Sequence(&seq.Spec)
	order, err := steps.ChainOrder()
	if err != nil {
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, v1alpha1.InvalidSpecReason, err.Error()
	} else {
		var clusters v1alpha1.ClusterList
		if err := r.Client.List(ctx, &clusters, client.InNamespace(seq.Namespace)); err != nil {
			return reconciler.Outcome{}, err
		}
		groupsOf, err := model.ClusterGroups(ctx, r.Client, seq.Namespace)
		if err != nil {
			return reconciler.Outcome{}, err
		}
		fleet := make([]rollout.SequenceCluster, 0, len(clusters.Items))
		for i := range clusters.Items {
			c := &clusters.Items[i]
			sc := rollout.SequenceCluster{Name: c.Name, Labels: c.Labels}
			sc.Groups = slices.Sorted(maps.Keys(groupsOf(c)))
			fleet = append(fleet, sc)
		}
		for _, gi := range order {
			g := steps.Groups[gi]
			st.Groups = append(st.Groups, v1alpha1.SequenceGroupStatus{Name: g.Name, Clusters: int32(rollout.CountGroupClusters(g, fleet))})
		}
	}
	meta.SetStatusCondition(&st.Conditions, ready)
	return reconciler.Outcome{}, nil
}

// forgetRevisions drops the groups' progress on revisions, which start over.
func forgetRevisions(groups []rollout.SequenceGroupStatus, revisions []int64) []rollout.SequenceGroupStatus {
	if len(revisions) == 0 {
		return groups
	}
	for i := range groups {
		groups[i].Revisions = slices.DeleteFunc(groups[i].Revisions, func(r rollout.SequenceRevisionStatus) bool { return slices.Contains(revisions, r.Index) })
	}
	return groups
}
