package plan

import (
	"context"
	"fmt"
	"slices"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/deploy"
	"github.com/flotilla-dev/flotilla/hub/events"
	"github.com/flotilla-dev/flotilla/hub/model"
	"github.com/flotilla-dev/flotilla/rollout"
)

// Outcome-gated rollouts (ROLLOUT.md §5) on the hub. The planners decide; the controller of a
// bundle's strategy (rollout, staged-run, sequence) records what they decided on the Bundle
// (status.quarantined, status.outcome) and writes the rollback. A failure that rolls back is
// recorded before anything is restored: a hub that stops in between finds the quarantine on
// its next pass, never a half-rolled-back revision it would release again.

// maxQuarantined bounds status.quarantined: the oldest entries go first.
const maxQuarantined = 20

// ActiveQuarantine is the bundle's quarantined revisions a person's retry has not lifted:
// what no partition, run or group may release (R5.5).
func ActiveQuarantine(bun *v1alpha1.Bundle) []rollout.Failure {
	var out []rollout.Failure
	for i := range bun.Status.Quarantined {
		if q := &bun.Status.Quarantined[i]; !liftedByRetry(bun, q) {
			out = append(out, *model.FailureOf(q))
		}
	}
	return out
}

// liftedByRetry reports whether a person asked to retry the quarantined revision after it
// failed.
func liftedByRetry(bun *v1alpha1.Bundle, q *v1alpha1.RevisionFailure) bool {
	// Times are kept to the second: a retry in the second the failure was recorded lifts it.
	r := bun.Spec.Retry
	return r != nil && r.Revision == q.Revision && !r.At.Before(&q.At)
}

// RecordQuarantine adds a failure that rolls back to the bundle's quarantined revisions and
// drops the entries a retry lifted. It reports whether the failure is new.
func RecordQuarantine(bun *v1alpha1.Bundle, f *rollout.Failure) bool {
	st := &bun.Status
	st.Quarantined = slices.DeleteFunc(st.Quarantined, func(q v1alpha1.RevisionFailure) bool { return liftedByRetry(bun, &q) })
	if f == nil || f.Action != rollout.FailureRollback || slices.ContainsFunc(st.Quarantined, func(q v1alpha1.RevisionFailure) bool { return q.Revision == f.Revision }) {
		return false
	}
	st.Quarantined = append(st.Quarantined, *model.RevisionFailure(f))
	if n := len(st.Quarantined); n > maxQuarantined {
		st.Quarantined = st.Quarantined[n-maxQuarantined:]
	}
	return true
}

// SetOutcome records how the rollout of revision stands (R5.6): its outcome once it ended, the
// failure that fired (failure, or the quarantine that holds the revision), and the revision the
// rolled-back clusters run again. A rollout going on without a failure has none.
func SetOutcome(bun *v1alpha1.Bundle, revision int64, outcome rollout.Outcome, failure *rollout.Failure, bds map[string]*v1alpha1.BundleDeployment, now time.Time) {
	st := &bun.Status
	if failure == nil {
		for _, q := range ActiveQuarantine(bun) {
			if q.Revision == revision {
				failure = &q
			}
		}
	}
	if outcome == "" && failure == nil {
		st.Outcome = nil
		return
	}
	next := &v1alpha1.RolloutResult{Revision: revision, Outcome: v1alpha1.RolloutOutcome(outcome), Failure: model.RevisionFailure(failure)}
	if prev := st.Outcome; prev != nil && prev.Failure != nil && next.Failure != nil && prev.Failure.Revision == next.Failure.Revision &&
		prev.Failure.Rule == next.Failure.Rule && prev.Failure.Action == next.Failure.Action {
		// A failure that holds is found again at every pass: it is the same one, from when it
		// was first found.
		next.Failure.At = prev.Failure.At
	}
	if failure != nil && failure.Action == rollout.FailureRollback {
		next.RestoredRevision = restoredRevision(bds, revision)
	}
	if prev := st.Outcome; prev != nil && prev.Revision == next.Revision && prev.Outcome == next.Outcome {
		next.At = prev.At
	} else if outcome != "" {
		next.At = &metav1.Time{Time: now.Truncate(time.Second)}
	}
	st.Outcome = next
}

// restoredRevision is the revision most clusters rolled back from revision run again: each
// cluster's own is its last good one.
func restoredRevision(bds map[string]*v1alpha1.BundleDeployment, from int64) int64 {
	count := map[int64]int{}
	var best int64
	for _, bd := range bds {
		if rel := bd.Spec.Released; bd.Spec.Rollback && rel != nil && rel.Index < from {
			count[rel.Index]++
			if count[rel.Index] > count[best] || count[rel.Index] == count[best] && rel.Index > best {
				best = rel.Index
			}
		}
	}
	return best
}

// completedAt is when the rollout of revision completed, for the health window (R5.1).
func completedAt(bun *v1alpha1.Bundle, revision int64) time.Time {
	if o := bun.Status.Outcome; o != nil && o.Revision == revision && o.Outcome == v1alpha1.OutcomeCompleted && o.At != nil {
		return o.At.Time
	}
	return time.Time{}
}

// RestoreDeployments writes a rollback's restores (R5.4): each deployment released its last
// good revision again (or nothing), one write each. A pass restores as many clusters as the
// strategy's budget allows (every failed one at once): like releases, their writes go out
// together, within the hub's write slots when it has them.
func RestoreDeployments(ctx context.Context, c client.Client, slots deploy.WriteSlots, bds map[string]*v1alpha1.BundleDeployment, restores []rollout.Restore, now time.Time) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(deploy.StageWorkers)
	for _, r := range restores {
		bd := bds[r.Cluster]
		if bd == nil {
			continue
		}
		g.Go(func() error {
			write := func() error { return deploy.Restore(gctx, c, bd, now) }
			var err error
			if slots != nil {
				err = slots.Do(gctx, write)
			} else {
				err = write()
			}
			if err != nil {
				return fmt.Errorf("failed to roll back cluster %s: %w", r.Cluster, err)
			}
			return nil
		})
	}
	return g.Wait()
}

// MarkOffline dates a cluster's regression from when its agent was last seen, if it was Ready
// then: going offline after Ready is a regression too (R5.1).
func MarkOffline(d *rollout.Deployment, seen time.Time) {
	if d != nil && d.WasReady && d.Ready && seen.After(d.NotReadyAt) {
		d.NotReadyAt = seen
	}
}

// RecordOutcome tells what a status write changed of a bundle's outcome (R5.6): a failure
// that holds the rollout, a rollback starting, a rollback done. Each is told once: the
// outcome is written once per change.
func RecordOutcome(rec *events.Recorder, orig, bun *v1alpha1.Bundle) {
	was, is := orig.Status.Outcome, bun.Status.Outcome
	if is == nil || is.Failure == nil {
		return
	}
	sameFailure := was != nil && was.Failure != nil && was.Failure.Revision == is.Failure.Revision && was.Failure.At.Equal(&is.Failure.At)
	switch {
	case !sameFailure && is.Failure.Action == v1alpha1.FailureActionRollback:
		rec.Warning(bun, v1alpha1.EventRollbackStarted, "revision %d failed (%s): %s", is.Failure.Revision, is.Failure.Rule, is.Failure.Message)
	case !sameFailure:
		rec.Warning(bun, v1alpha1.EventRolloutFailed, "revision %d failed (%s): %s", is.Failure.Revision, is.Failure.Rule, is.Failure.Message)
	}
	if is.Outcome == v1alpha1.OutcomeRolledBack && (was == nil || was.Outcome != v1alpha1.OutcomeRolledBack || was.Revision != is.Revision) {
		rec.Warning(bun, v1alpha1.EventRolledBack, "revision %d rolled back: %s; it stays quarantined until a new revision or `flotilla rollout retry %s --revision %d`",
			is.Revision, restoredTo(is), bun.Name, is.Revision)
	}
}

// OutcomeState is what a bundle (and its GitRepo) shows while its failure policy holds or
// rolls back its newest revision: the Ready condition's reason and the STATUS column.
type OutcomeState string

const (
	stateRolledBack  OutcomeState = v1alpha1.RolledBackReason
	stateFailed      OutcomeState = v1alpha1.FailedReason
	stateRollingBack OutcomeState = v1alpha1.RollingBackReason
)

// outcomeRank orders the outcomes a GitRepo shows for its bundles: a rollback under way first,
// then a rollout held by its failure, then one rolled back.
var outcomeRank = map[OutcomeState]int{stateRolledBack: 1, stateFailed: 2, stateRollingBack: 3}

// Outranks reports whether a GitRepo shows s rather than o when its bundles have both.
func (s OutcomeState) Outranks(o OutcomeState) bool { return outcomeRank[s] > outcomeRank[o] }

// OutcomeWaiting is why a rollout stands still under its failure policy, for the Ready
// condition and the printer columns; "" when it goes on.
func OutcomeWaiting(bun *v1alpha1.Bundle) (OutcomeState, string) {
	o := bun.Status.Outcome
	switch {
	case o == nil || o.Failure == nil && o.Outcome != v1alpha1.OutcomeRolledBack:
		return "", ""
	case o.Outcome == v1alpha1.OutcomeRolledBack:
		return stateRolledBack, fmt.Sprintf("revision %d failed and was rolled back (%s): %s; it is quarantined until a new revision or a retry", o.Revision, o.Failure.Rule, restoredTo(o))
	case o.Failure.Action == v1alpha1.FailureActionRollback:
		return stateRollingBack, o.Failure.Message
	}
	return stateFailed, o.Failure.Message
}

// ApplyOutcome shows a failed or rolled-back rollout in the Ready condition and the printer
// columns, over what setProgress said: the outcome is why the bundle is not Ready.
func ApplyOutcome(bun *v1alpha1.Bundle) {
	state, msg := OutcomeWaiting(bun)
	if state == "" {
		return
	}
	st := &bun.Status
	st.Display.State, st.Display.Message = string(state), msg
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.ReadyCondition, Status: metav1.ConditionFalse, Reason: string(state), Message: msg, ObservedGeneration: bun.Generation})
}

// LiftedRevisions are the quarantined revisions a person's retry lifted: their rollout starts
// over.
func LiftedRevisions(bun *v1alpha1.Bundle) []int64 {
	var out []int64
	for i := range bun.Status.Quarantined {
		if q := &bun.Status.Quarantined[i]; liftedByRetry(bun, q) {
			out = append(out, q.Revision)
		}
	}
	return out
}

// NewestFailure is the failure of revision among failures, nil when it has none.
func NewestFailure(failures []rollout.Failure, revision int64) *rollout.Failure {
	for i := range failures {
		if failures[i].Revision == revision {
			return &failures[i]
		}
	}
	return nil
}

// restoredTo says what the clusters a rollback restored run now: their last good revision, or
// nothing of the bundle when the failed revision was their first.
func restoredTo(o *v1alpha1.RolloutResult) string {
	if o.RestoredRevision == 0 {
		return "the bundle is removed from the clusters that received it, which had no earlier revision"
	}
	return fmt.Sprintf("the clusters that received it run their last good revision (%d) again", o.RestoredRevision)
}
