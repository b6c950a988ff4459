package strategy

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/events"
	"github.com/flotilla-dev/flotilla/hub/metrics"
	"github.com/flotilla-dev/flotilla/hub/model"
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
	// blocking names the object that keeps the revision from Ready (model.BlockingObject).
	blocking string
}

// setProgress writes the revision, its commit, the per-state counts, the printer columns and
// the Ready/Reconciling conditions (kstatus) into the bundle's status.
func setProgress(bun *v1alpha1.Bundle, p bundleProgress) {
	st := &bun.Status
	st.ObservedGeneration, st.ReleasingRevision, st.Commit = bun.Generation, p.revision, ""
	if rev := model.FindRevision(bun, p.revision); rev != nil {
		st.Commit = rev.Commit
	}
	st.Summary = model.StateCounts(p.counts, p.clusters)
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
		if p.blocking != "" {
			ready.Message = model.Truncate(ready.Message+"; "+p.blocking, model.MaxConditionMessage)
		}
		st.Display.State, st.Display.Message = model.WorstState(p.counts), ready.Message
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.ReconcilingCondition, Status: metav1.ConditionTrue, Reason: v1alpha1.ProgressingReason, Message: ready.Message, ObservedGeneration: bun.Generation})
	}
	meta.SetStatusCondition(&st.Conditions, ready)
	setRendered(bun)
}

// setRendered tells, as the Rendered condition, whether the newest commit renders (the
// bundler records it in status.renderFailure): a bundle that does not keeps its last revision
// deployed, so Ready still speaks of that revision.
func setRendered(bun *v1alpha1.Bundle) {
	st := &bun.Status
	f := st.RenderFailure
	if f == nil {
		meta.RemoveStatusCondition(&st.Conditions, v1alpha1.RenderedCondition)
		return
	}
	msg := fmt.Sprintf("commit %s does not render; revision %d stays deployed: %s", model.ShortCommit(f.Commit), bun.Spec.LatestRevision, f.Message)
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.RenderedCondition, Status: metav1.ConditionFalse, Reason: v1alpha1.RenderFailedReason,
		Message: model.Truncate(msg, model.MaxConditionMessage), ObservedGeneration: bun.Generation})
	st.Display.Message = msg
}

// recordCompletion tells, once a bundle's status is written, a rollout that completed with it,
// whatever its strategy (an Event), and measures it (flotilla_commit_to_ready_seconds).
func recordCompletion(rec *events.Recorder, orig, bun *v1alpha1.Bundle) {
	if ready := meta.FindStatusCondition(bun.Status.Conditions, v1alpha1.ReadyCondition); ready != nil && ready.Status == metav1.ConditionTrue &&
		!meta.IsStatusConditionTrue(orig.Status.Conditions, v1alpha1.ReadyCondition) {
		rec.Normal(bun, v1alpha1.EventRolloutCompleted, "%s", ready.Message)
		metrics.ObserveCompletion(bun, time.Now())
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
