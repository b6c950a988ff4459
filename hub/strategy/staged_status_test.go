package strategy

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/model"
)

// A staged bundle's status is paced like a continuous one's (R3.1: the run, not the bundle,
// releases; the bundle shows where its current run stands): clusters completing within a stage
// and the run's message are progress, written at most every ProgressEvery; a stage changing
// state, a new revision or readiness is written at once.
func TestR3_1_StagedBundleStatusIsPacedLikeProgress(t *testing.T) {
	base := func() *v1alpha1.Bundle {
		bun := &v1alpha1.Bundle{ObjectMeta: metav1.ObjectMeta{UID: "b1"}}
		bun.Status.ReleasingRevision = 2
		bun.Status.Stages = []v1alpha1.StageProgress{{Name: "canary", State: v1alpha1.RunCompleted, Clusters: 2, Completed: 2}, {Name: "prod", State: v1alpha1.RunRunning, Clusters: 8, Completed: 3}}
		meta.SetStatusCondition(&bun.Status.Conditions, metav1.Condition{Type: v1alpha1.ReadyCondition, Status: metav1.ConditionFalse, Reason: v1alpha1.ProgressingReason, Message: "run r: 3 in flight in stage prod"})
		return bun
	}
	cases := []struct {
		name        string
		change      func(*v1alpha1.Bundle)
		significant bool
	}{
		{"a cluster completes within a stage", func(b *v1alpha1.Bundle) { b.Status.Stages[1].Completed++ }, false},
		{"the run's message changes", func(b *v1alpha1.Bundle) {
			ready := meta.FindStatusCondition(b.Status.Conditions, v1alpha1.ReadyCondition)
			ready.Message += "; one more in flight"
		}, false},
		{"a stage ends", func(b *v1alpha1.Bundle) { b.Status.Stages[1].State = v1alpha1.RunCompleted }, true},
		{"a stage stops", func(b *v1alpha1.Bundle) { b.Status.Stages[1].State = v1alpha1.RunStopped }, true},
		{"a new run's stages", func(b *v1alpha1.Bundle) { b.Status.Stages = b.Status.Stages[:1] }, true},
		{"a new revision", func(b *v1alpha1.Bundle) { b.Status.ReleasingRevision = 3 }, true},
		{"ready", func(b *v1alpha1.Bundle) {
			meta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{Type: v1alpha1.ReadyCondition, Status: metav1.ConditionTrue, Reason: v1alpha1.SucceededReason})
		}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			orig, bun := base(), base()
			c.change(bun)
			if got := significantStaged(orig, bun); got != c.significant {
				t.Fatalf("significant = %v, want %v", got, c.significant)
			}
			r := &RolloutReconciler{Progress: model.ProgressThrottle{Every: ProgressEvery}}
			if wait := r.hold(orig, bun, c.significant); wait != 0 {
				t.Fatalf("the bundle's first status write waits %v", wait)
			}
			again := bun.DeepCopy()
			c.change(again)
			wait := r.hold(bun, again, significantStaged(bun, again))
			if c.significant && wait != 0 {
				t.Errorf("a significant change is held back %v", wait)
			}
			if !c.significant && (wait <= 0 || wait > ProgressEvery) {
				t.Errorf("progress written again at once is held back %v, want (0, %v]", wait, ProgressEvery)
			}
		})
	}
}
