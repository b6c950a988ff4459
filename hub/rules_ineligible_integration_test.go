package hub

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// R1.15 through the real hub: a cluster whose agent reports that it does not serve an API of
// the revision is left behind, not failed. Under onFailure Rollback with a 10 s failureTimeout,
// an hour on, the revision is not rolled back nor quarantined, the rest of the partition gets
// it, the rollout completes, and the Bundle names the cluster and the API it lacks.
func TestR1_15_AnIneligibleClusterIsLeftBehindNotFailed(t *testing.T) {
	clock := &simClock{at: time.Now()}
	f := newSimFleet(t, Options{Clock: clock.now}, canaryRollback, map[string]map[string]string{"c1": {"ring": "canary"}, "m1": {"ring": "main"}, "m2": {"ring": "main"}})
	completed := func(rev int64) func() bool {
		return func() bool {
			o := f.getBundle().Status.Outcome
			return o != nil && o.Revision == rev && o.Outcome == v1alpha1.OutcomeCompleted
		}
	}
	f.releasedExactly(1, "partitions NotReady (canary)", "c1")
	f.ready("c1")
	f.until("revision 1 reaches the main ring", func() bool { return f.onRevision(1, "m1", "m2") })
	f.ready("m1", "m2")
	f.until("revision 1 completes", completed(1))

	f.commit("2", "")
	f.until("revision 2 reaches the canary", func() bool { return f.onRevision(2, "c1") })
	f.ready("c1")
	f.until("revision 2 reaches m1", func() bool { return f.onRevision(2, "m1") })
	f.reportIneligible("m1", "autoscaling/v2beta2 HorizontalPodAutoscaler")
	f.until("m1 ineligible spends no budget: m2 gets revision 2", func() bool { return f.onRevision(2, "m2") })
	f.ready("m2")
	clock.advance(time.Hour)
	f.poke()
	f.until("revision 2 completes without m1", completed(2))

	bun := f.getBundle()
	cond := meta.FindStatusCondition(bun.Status.Conditions, v1alpha1.IneligibleClustersCondition)
	if cond == nil || cond.Status != metav1.ConditionTrue || !strings.Contains(cond.Message, "m1 does not serve autoscaling/v2beta2 HorizontalPodAutoscaler (R1.15)") {
		t.Errorf("condition %s: %+v, want it naming m1 and the API", v1alpha1.IneligibleClustersCondition, cond)
	}
	if len(bun.Status.Quarantined) != 0 || bun.Status.Outcome.Failure != nil || f.deployments()["m1"].Spec.Rollback {
		t.Errorf("an ineligible cluster failed the revision:\n%s", f.dump())
	}
	if n := f.story().Count("RolloutFailed") + f.story().Count("RollbackStarted"); n != 0 {
		t.Errorf("%d RolloutFailed or RollbackStarted Events, want none:\n%s", n, f.story())
	}
	if bun.Status.Summary.ErrApplied != 1 || bun.Status.Summary.Ready != 2 {
		t.Errorf("summary %+v, want m1 counted ErrApplied and two Ready", bun.Status.Summary)
	}
}

// reportIneligible writes what the cluster's agent writes when its cluster does not serve apis
// of its release: nothing applied, the revision before still Ready.
func (f *simFleet) reportIneligible(cluster string, apis ...string) {
	f.t.Helper()
	bd, ok := f.deployments()[cluster]
	if !ok || bd.Spec.Released == nil {
		f.t.Fatalf("cluster %s has no release to report", cluster)
	}
	orig := bd.DeepCopy()
	bd.Status.Ineligible = &v1alpha1.Ineligibility{DeploymentID: bd.Spec.Released.DeploymentID, UnservedAPIs: slices.Clone(apis)}
	meta.SetStatusCondition(&bd.Status.Conditions, metav1.Condition{Type: v1alpha1.AppliedCondition, Status: metav1.ConditionFalse, Reason: v1alpha1.APINotServedReason,
		Message: "the cluster does not serve " + strings.Join(apis, ", ") + ": nothing was applied"})
	if err := f.c.Status().Patch(context.Background(), &bd, client.MergeFrom(orig)); err != nil {
		f.t.Fatal(err)
	}
}
