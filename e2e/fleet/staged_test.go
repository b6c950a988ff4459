package fleet

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/flotilla-dev/flotilla/e2e/gitserver"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/operate"
)

// e2e scenario 3: a git push starts a staged run by itself (R3.14); it waits at a before-stage
// approval, approved the way the CLI does it, then at a timed wait, and completes.
func TestPushStartsStagedRunWithApprovalAndWait(t *testing.T) {
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
		{Name: "rest", LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"index": "1"}},
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
	if r := released(deploymentOn(t, f, workloads[1].Name)); r != 0 {
		t.Fatalf("the rest stage was released before its approval (revision %d)", r)
	}
	if _, _, err := operate.Approve(ctx, f.hub, f.ns, "shop-web-r1", "rest", "", false, "e2e-operator", "looks good"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "run shop-web-r1 completes", 60*time.Second, func() bool { return runOf("shop-web-r1").Status.State == v1alpha1.RunCompleted })
	if !deploymentAvailable(t, workloads[1], "staged", "web", "example.invalid/web:1") {
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
	if !deploymentAvailable(t, workloads[0], "staged", "web", "example.invalid/web:2") || !deploymentAvailable(t, workloads[1], "staged", "web", "example.invalid/web:1") {
		t.Errorf("revision 2 must be on the canary only")
	}
}
