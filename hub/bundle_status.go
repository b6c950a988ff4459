package hub

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/events"
	"github.com/flotilla-dev/flotilla/rollout"
)

// bundleProgress is what every kind of rollout (continuous, staged, sequence) reports the same
// way on its Bundle.
type bundleProgress struct {
	revision int64
	counts   rollout.Counts
	clusters int
	// complete: every cluster that should run the revision runs it and is available.
	complete bool
	// waiting says why it is not complete; empty means "rolling out".
	waiting string
}

// setProgress writes the revision, its commit, the per-state counts, the printer columns and
// the Ready/Reconciling conditions (kstatus) into the bundle's status.
func setProgress(bun *v1alpha1.Bundle, p bundleProgress) {
	st := &bun.Status
	st.ObservedGeneration, st.ReleasingRevision, st.Commit = bun.Generation, p.revision, ""
	if rev := findRevision(bun, p.revision); rev != nil {
		st.Commit = rev.Commit
	}
	st.Summary = stateCounts(p.counts, p.clusters)
	meta.RemoveStatusCondition(&st.Conditions, v1alpha1.StalledCondition)
	ready := metav1.Condition{Type: v1alpha1.ReadyCondition, Status: metav1.ConditionFalse, Reason: v1alpha1.ProgressingReason, ObservedGeneration: bun.Generation}
	st.Display = v1alpha1.Display{ReadyClusters: fmt.Sprintf("%d/%d", st.Summary.Ready+st.Summary.Modified, st.Summary.DesiredReady)}
	if p.complete {
		ready.Status, ready.Reason, ready.Message = metav1.ConditionTrue, v1alpha1.SucceededReason, fmt.Sprintf("revision %d ready on %d clusters", p.revision, p.clusters)
		st.Display.State = "Ready"
		meta.RemoveStatusCondition(&st.Conditions, v1alpha1.ReconcilingCondition)
	} else {
		ready.Message = p.waiting
		if ready.Message == "" {
			verb := "rolling out"
			if bun.Spec.TargetRevision != nil && *bun.Spec.TargetRevision < bun.Spec.LatestRevision {
				verb = "rolling back to"
			}
			ready.Message = fmt.Sprintf("%s revision %d", verb, p.revision)
		}
		st.Display.State, st.Display.Message = worstState(p.counts), ready.Message
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.ReconcilingCondition, Status: metav1.ConditionTrue, Reason: v1alpha1.ProgressingReason, Message: ready.Message, ObservedGeneration: bun.Generation})
	}
	meta.SetStatusCondition(&st.Conditions, ready)
}

// patchBundleStatus writes the bundle's status if it differs from orig's. A rollout that
// completes with the write is told and measured (recordCompletion).
func patchBundleStatus(ctx context.Context, c client.Client, rec *events.Recorder, bun, orig *v1alpha1.Bundle) error {
	if equality.Semantic.DeepEqual(orig.Status, bun.Status) {
		return nil
	}
	if err := c.Status().Patch(ctx, bun, client.MergeFrom(orig)); err != nil {
		return fmt.Errorf("failed to update bundle status: %w", client.IgnoreNotFound(err))
	}
	recordCompletion(rec, orig, bun)
	return nil
}

// recordCompletion tells, once a bundle's status is written, a rollout that completed with it,
// whatever its strategy (an Event), and measures it (flotilla_commit_to_ready_seconds).
func recordCompletion(rec *events.Recorder, orig, bun *v1alpha1.Bundle) {
	if ready := meta.FindStatusCondition(bun.Status.Conditions, v1alpha1.ReadyCondition); ready != nil && ready.Status == metav1.ConditionTrue &&
		!meta.IsStatusConditionTrue(orig.Status.Conditions, v1alpha1.ReadyCondition) {
		rec.Normal(bun, v1alpha1.EventRolloutCompleted, "%s", ready.Message)
		observeCompletion(bun, time.Now())
	}
}

// setStalled reports a rollout that cannot proceed until the bundle or what it names changes.
func setStalled(bun *v1alpha1.Bundle, msg string) {
	st := &bun.Status
	st.ObservedGeneration = bun.Generation
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.StalledCondition, Status: metav1.ConditionTrue, Reason: v1alpha1.InvalidSpecReason, Message: msg, ObservedGeneration: bun.Generation})
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.ReadyCondition, Status: metav1.ConditionFalse, Reason: v1alpha1.InvalidSpecReason, Message: msg, ObservedGeneration: bun.Generation})
	st.Display.State, st.Display.Message = "Stalled", msg
}

// stallBundle writes setStalled's status.
func stallBundle(ctx context.Context, c client.Client, bun *v1alpha1.Bundle, msg string) error {
	orig := bun.DeepCopy()
	setStalled(bun, msg)
	return patchBundleStatus(ctx, c, nil, bun, orig) // never completes a rollout
}
