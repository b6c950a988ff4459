package model

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// Progress-only writes are spaced out per object; significant ones go out at once.
func TestProgressThrottleSpacesOutProgressOnly(t *testing.T) {
	p := &ProgressThrottle{Every: 3 * time.Second}
	runThrottle(t, p, []throttleStep{
		{"first write", "a", false, 0, 0},
		{"progress a second later waits for the rest", "a", false, time.Second, 2 * time.Second},
		{"another object is not held", "b", false, time.Second, 0},
		{"a significant change goes out at once", "a", true, 2 * time.Second, 0},
		{"progress right after it waits again", "a", false, 2500 * time.Millisecond, 2500 * time.Millisecond},
		{"progress after the interval goes out", "a", false, 5 * time.Second, 0},
	})
}

// throttleStep is one call of ProgressThrottle.hold, at a time after throttleStart, and the
// wait it must return.
type throttleStep struct {
	name        string
	uid         string
	significant bool
	at          time.Duration
	wait        time.Duration
}

var throttleStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func runThrottle(t *testing.T, p *ProgressThrottle, steps []throttleStep) {
	t.Helper()
	for _, step := range steps {
		if got := p.Hold(types.UID(step.uid), step.significant, throttleStart.Add(step.at)); got != step.wait {
			t.Errorf("%s: hold = %v, want %v", step.name, got, step.wait)
		}
	}
}

// Past each object's interval, progress-only writes share a budget: each object waits for a
// slot of its own, reserved on its first try; significant writes use none of it.
func TestProgressThrottleBudgetIsSharedByAllObjects(t *testing.T) {
	p := &ProgressThrottle{Every: time.Second, PerSecond: 2}
	for _, uid := range []string{"a", "b", "c", "d"} {
		p.Hold(types.UID(uid), true, throttleStart) // each written once
	}
	runThrottle(t, p, []throttleStep{
		{"the first progress past the interval takes the first slot", "a", false, 2 * time.Second, 0},
		{"the next waits half a second", "b", false, 2 * time.Second, 500 * time.Millisecond},
		{"and the one after a second", "c", false, 2 * time.Second, time.Second},
		{"asking again does not reserve another slot", "b", false, 2200 * time.Millisecond, 300 * time.Millisecond},
		{"a significant write goes out at once", "d", true, 2200 * time.Millisecond, 0},
		{"a reserved slot that has come goes out", "b", false, 2500 * time.Millisecond, 0},
		{"progress after the slots is free again", "d", false, 5 * time.Second, 0},
	})
}

// R1.10: the rollout moves on agents' reports, not on a timer; the reports that change what
// the planner sees wake their bundle (after a short gathering), the others do not.
func TestR1_10_ReportsThatChangeThePlanWakeTheBundle(t *testing.T) {
	base := func() *v1alpha1.BundleDeployment {
		ref := v1alpha1.RevisionRef{Index: 2, ContentID: "s-a", DeploymentID: "s-a:1"}
		return &v1alpha1.BundleDeployment{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{LabelCluster: "edge-1"}},
			Spec:       v1alpha1.BundleDeploymentSpec{Staged: ref, Released: &ref},
			Status:     v1alpha1.BundleDeploymentStatus{AppliedRevision: 2, AppliedDeploymentID: "s-a:1"},
		}
	}
	for _, tc := range []struct {
		name   string
		change func(bd *v1alpha1.BundleDeployment)
		wakes  bool
	}{
		{"ready", func(bd *v1alpha1.BundleDeployment) { bd.Status.Ready = true }, true},
		{"apply failed", func(bd *v1alpha1.BundleDeployment) {
			bd.Status.Conditions = []metav1.Condition{{Type: v1alpha1.AppliedCondition, Status: metav1.ConditionFalse}}
		}, true},
		{"drifted", func(bd *v1alpha1.BundleDeployment) { bd.Status.Modified = true }, true},
		{"released a new revision", func(bd *v1alpha1.BundleDeployment) {
			bd.Spec.Released = &v1alpha1.RevisionRef{Index: 3, ContentID: "s-b", DeploymentID: "s-b:1"}
		}, true},
		{"which resources are not ready", func(bd *v1alpha1.BundleDeployment) {
			bd.Status.NonReadyResources = []v1alpha1.ResourceSummary{{Kind: "Deployment", Name: "web", Message: "Available: 0/3"}}
		}, false},
		{"observed generation", func(bd *v1alpha1.BundleDeployment) { bd.Status.ObservedGeneration = 4 }, false},
	} {
		updated := base()
		tc.change(updated)
		if got := DeploymentPlanChanged(base(), updated); got != tc.wakes {
			t.Errorf("%s: wakes the bundle = %v, want %v", tc.name, got, tc.wakes)
		}
	}
}
