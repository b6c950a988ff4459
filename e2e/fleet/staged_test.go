package fleet

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/e2e/gitserver"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/operate"
	"github.com/flotilla-dev/flotilla/hub/report"
)

// e2e scenario 3: a git push starts a staged run by itself (R3.14); it waits at a before-stage
// approval, approved the way the CLI does it, then at a timed wait, and completes. A rollback to
// the older revision then runs through the same stages (R3.7) and stops the run in flight.
func TestR3_14_R3_9_R3_7_PushStartsStagedRunThenRollback(t *testing.T) {
	up := gitserver.New(t)
	up.Commit("main", map[string]string{
		"web/fleet.yaml":      "defaultNamespace: staged\nstagedUpdate: {strategy: canary-then-rest, autoRun: true}\n",
		"web/deployment.yaml": webManifest("example.invalid/web:1"),
	})
	srv := up.ServeHTTP("", "")
	f := startFleet(t)
	ctx := context.Background()
	strategy := &v1alpha1.StagedUpdateStrategy{ObjectMeta: metav1.ObjectMeta{Name: "canary-then-rest", Namespace: f.ns}, Spec: v1alpha1.StagedUpdateStrategySpec{Stages: []v1alpha1.StageConfig{
		{Name: "canary", LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"index": "0"}},
			AfterStageTasks: []v1alpha1.StageTask{{Type: v1alpha1.TaskTimedWait, WaitTime: &metav1.Duration{Duration: 3 * time.Second}}}},
		{Name: "rest", LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "index", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"0"}}}},
			BeforeStageTasks: []v1alpha1.StageTask{{Type: v1alpha1.TaskApproval}}},
	}}}
	if err := f.hub.Create(ctx, strategy); err != nil {
		t.Fatal(err)
	}
	createRepo(t, f, srv.URL+"/repo.git", map[string]string{"env": "prod"})

	runOf := func(name string) *v1alpha1.StagedUpdateRun {
		var r v1alpha1.StagedUpdateRun
		if err := f.hub.Get(ctx, types.NamespacedName{Namespace: f.ns, Name: name}, &r); err != nil {
			return &v1alpha1.StagedUpdateRun{}
		}
		return &r
	}
	// The first revision's run goes through the canary and its wait, then stops at the gate.
	eventually(t, "run shop-web-r1 waits for the approval of stage rest", 60*time.Second, func() bool {
		r := runOf("shop-web-r1")
		return r.Status.State == v1alpha1.RunRunning && strings.Contains(r.Status.Message, "waiting for approval shop-web-r1-before-rest")
	})
	if !deploymentAvailable(t, workloads[0], "staged", "web", "example.invalid/web:1") {
		t.Errorf("the canary stage did not deploy")
	}
	// The bundle and `flotilla status` show the stages and why the rollout waits.
	var out strings.Builder
	eventually(t, "flotilla status shows the stages and the gate", 30*time.Second, func() bool {
		out.Reset()
		if err := report.Write(ctx, &out, f.hub, f.ns, "shop"); err != nil {
			return false
		}
		return lineWith(out.String(), "Stage canary", "1/1", "Completed") && lineWith(out.String(), "Stage rest", "0/2") &&
			lineWith(out.String(), "now:", "run shop-web-r1", "waiting for approval shop-web-r1-before-rest")
	})
	for _, w := range workloads[1:] {
		if r := released(deploymentOn(t, f, w.Name)); r != 0 {
			t.Fatalf("%s in the rest stage was released before its approval (revision %d)", w.Name, r)
		}
	}
	if _, _, err := operate.Approve(ctx, f.hub, f.ns, "shop-web-r1", "rest", "", false, "e2e-operator", "looks good"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "run shop-web-r1 completes", 60*time.Second, func() bool { return runOf("shop-web-r1").Status.State == v1alpha1.RunCompleted })
	if !availableEverywhere(t, "staged", "web", "example.invalid/web:1", workloads[1:]...) {
		t.Errorf("the rest stage did not deploy after the approval")
	}
	var ar v1alpha1.ApprovalRequest
	if err := f.hub.Get(ctx, types.NamespacedName{Namespace: f.ns, Name: "shop-web-r1-before-rest"}, &ar); err != nil || ar.Status.Approval == nil || ar.Status.Approval.By != "e2e-operator" {
		t.Errorf("approval not recorded: %+v %v", ar.Status, err)
	}

	// A push starts the next run by itself.
	up.Commit("main", map[string]string{"web/deployment.yaml": webManifest("example.invalid/web:2")})
	eventually(t, "run shop-web-r2 starts and waits at the gate", 60*time.Second, func() bool {
		return strings.Contains(runOf("shop-web-r2").Status.Message, "waiting for approval shop-web-r2-before-rest")
	})
	if !deploymentAvailable(t, workloads[0], "staged", "web", "example.invalid/web:2") || !availableEverywhere(t, "staged", "web", "example.invalid/web:1", workloads[1:]...) {
		t.Errorf("revision 2 must be on the canary only")
	}

	// Revision 2 is bad: roll back to 1. The run in flight stops; a run of revision 1 takes the
	// canary back, waits, and asks again at the gate; the rest already run revision 1.
	res, err := operate.Rollback(ctx, f.hub, f.ns, "shop-web", 1, "e2e-operator")
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Superseded) != 1 || res.Superseded[0] != "shop-web-r2" || res.Run == "" {
		t.Fatalf("rollback: %+v", res)
	}
	eventually(t, "run shop-web-r2 stops", 60*time.Second, func() bool { return runOf("shop-web-r2").Status.State == v1alpha1.RunStopped })
	eventually(t, "the canary runs revision 1 again", 60*time.Second, func() bool {
		return deploymentAvailable(t, workloads[0], "staged", "web", "example.invalid/web:1")
	})
	eventually(t, "the rollback run waits at the gate", 60*time.Second, func() bool {
		return strings.Contains(runOf(res.Run).Status.Message, "waiting for approval "+res.Run+"-before-rest")
	})
	// This gate is approved the other way R3.9 allows: the Approved condition on the request's
	// status, as `kubectl patch --subresource status` would set it.
	gate := res.Run + "-before-rest"
	approval := []byte(`{"status":{"conditions":[{"type":"Approved","status":"True","reason":"OnCall","message":"jane: rollback confirmed","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}`)
	if err := f.hub.Status().Patch(ctx, &v1alpha1.ApprovalRequest{ObjectMeta: metav1.ObjectMeta{Name: gate, Namespace: f.ns}}, client.RawPatch(types.MergePatchType, approval)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the rollback run completes", 60*time.Second, func() bool { return runOf(res.Run).Status.State == v1alpha1.RunCompleted })
	var recorded v1alpha1.ApprovalRequest
	if err := f.hub.Get(ctx, types.NamespacedName{Namespace: f.ns, Name: gate}, &recorded); err != nil || recorded.Status.Approval == nil || !strings.Contains(recorded.Status.Approval.By, "jane") {
		t.Errorf("the condition's approval was not recorded: %+v %v", recorded.Status, err)
	}
	if !availableEverywhere(t, "staged", "web", "example.invalid/web:1") {
		t.Errorf("revision 1 is not back everywhere")
	}
	for _, w := range workloads {
		if bd := deploymentOn(t, f, w.Name); bd.Spec.Released == nil || bd.Spec.Released.Index != 1 || bd.Spec.Staged.Index != 1 {
			t.Errorf("%s: staged %d, released %+v after the rollback", w.Name, bd.Spec.Staged.Index, bd.Spec.Released)
		}
	}
}
