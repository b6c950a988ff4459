package fleet

import (
	"context"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/e2e/gitserver"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/operate"
	"github.com/flotilla-dev/flotilla/hub/report"
	"github.com/flotilla-dev/flotilla/rollout"
)

// The stages of the staged tests: the canary (the first workload cluster), and the rest, the
// one structured and the other in string form (R3.6).
var (
	canaryClusters = &metav1.LabelSelector{MatchLabels: map[string]string{"index": "0"}}
	restClusters   = "index notin (0)"
)

// stagedFleet starts a fleet whose repository's bundle web (a Deployment, image tag 1, in
// namespace) rolls out in staged runs that start themselves, through stages; runOf reads a run
// (empty while it does not exist).
func stagedFleet(t *testing.T, namespace string, stages ...v1alpha1.StageConfig) (*gitserver.Upstream, *fleetEnv, func(string) *v1alpha1.StagedUpdateRun) {
	t.Helper()
	up := gitserver.New(t)
	up.Commit("main", map[string]string{
		"web/fleet.yaml":      "defaultNamespace: " + namespace + "\nstagedUpdate: {strategy: stages, autoRun: true}\n",
		"web/deployment.yaml": webManifest("example.invalid/web:1"),
	})
	srv := up.ServeHTTP("", "")
	f := startFleet(t)
	ctx := context.Background()
	strategy := &v1alpha1.StagedUpdateStrategy{ObjectMeta: metav1.ObjectMeta{Name: "stages", Namespace: f.ns}, Spec: v1alpha1.StagedUpdateStrategySpec{Stages: stages}}
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
	return up, f, runOf
}

// e2e scenario 3: a git push starts a staged run by itself (R3.14); it waits at a before-stage
// approval, approved the way the CLI does it, then at a timed wait, and completes. A rollback to
// the older revision then runs through the same stages (R3.7) and stops the run in flight.
func TestR3_14_R3_9_R3_7_R3_11_PushStartsStagedRunThenRollback(t *testing.T) {
	up, f, runOf := stagedFleet(t, "staged",
		v1alpha1.StageConfig{Name: "canary", LabelSelector: canaryClusters, AfterStageTasks: []v1alpha1.StageTask{{Type: v1alpha1.TaskTimedWait, WaitTime: &metav1.Duration{Duration: 3 * time.Second}}}},
		v1alpha1.StageConfig{Name: "rest", Selector: restClusters, BeforeStageTasks: []v1alpha1.StageTask{{Type: v1alpha1.TaskApproval}}})
	ctx := context.Background()
	// The first revision's run goes through the canary and its wait, then stops at the gate.
	eventually(t, "run shop-web-r1 waits for the approval of stage rest", 60*time.Second, func() bool {
		r := runOf("shop-web-r1")
		// Nothing in flight while it waits: the run is Pending and says for what (R3.11).
		return r.Status.State == v1alpha1.RunPending && strings.Contains(r.Status.Message, "waiting for approval shop-web-r1-before-rest")
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
	me, err := operate.Whoami(ctx, f.hub)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := operate.Approve(ctx, f.hub, f.ns, "shop-web-r1", operate.Gate{Stage: "rest"}, "looks good"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "run shop-web-r1 completes", 60*time.Second, func() bool { return runOf("shop-web-r1").Status.State == v1alpha1.RunCompleted })
	if !availableEverywhere(t, "staged", "web", "example.invalid/web:1", workloads[1:]...) {
		t.Errorf("the rest stage did not deploy after the approval")
	}
	var ar v1alpha1.ApprovalRequest
	if err := f.hub.Get(ctx, types.NamespacedName{Namespace: f.ns, Name: rollout.ApprovalName("shop-web-r1", "Before", "rest", "")}, &ar); err != nil ||
		len(ar.Status.Approvals) != 1 || ar.Status.Approvals[0].By != me || ar.Status.Approvals[0].Comment != "looks good" {
		t.Errorf("approval not recorded as %s's: %+v %v", me, ar.Status, err)
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
	res, err := operate.Rollback(ctx, f.hub, f.ns, "shop-web", 1, me)
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
	// This gate is approved the other way R3.9 allows: a record on the request's status, as
	// `kubectl patch --subresource status` writes it. A record in someone else's name is
	// refused by the API server and opens nothing; one's own name goes in.
	gate := rollout.ApprovalName(res.Run, "Before", "rest", "")
	approve := func(by string) error {
		patch := []byte(`{"status":{"approvals":[{"by":"` + by + `","at":"2026-12-01T00:00:00Z","comment":"rollback confirmed"}]}}`)
		return f.hub.Status().Patch(ctx, &v1alpha1.ApprovalRequest{ObjectMeta: metav1.ObjectMeta{Name: gate, Namespace: f.ns}}, client.RawPatch(types.MergePatchType, patch))
	}
	if err := approve("jane"); err == nil || !strings.Contains(err.Error(), "under the name the API server knows them by") {
		t.Errorf("an approval in jane's name by %s: %v, want it refused", me, err)
	}
	var recorded v1alpha1.ApprovalRequest
	if err := f.hub.Get(ctx, types.NamespacedName{Namespace: f.ns, Name: gate}, &recorded); err != nil || len(recorded.Status.Approvals) != 0 {
		t.Errorf("the forged approval left a record: %+v %v", recorded.Status, err)
	}
	if run := runOf(res.Run); run.Status.State != v1alpha1.RunPending || !strings.Contains(run.Status.Message, "waiting for approval "+gate) {
		t.Errorf("the forged approval moved the run: %s %q", run.Status.State, run.Status.Message)
	}
	if err := approve(me); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the rollback run completes", 60*time.Second, func() bool { return runOf(res.Run).Status.State == v1alpha1.RunCompleted })
	if !availableEverywhere(t, "staged", "web", "example.invalid/web:1") {
		t.Errorf("revision 1 is not back everywhere")
	}
	for _, w := range workloads {
		if bd := deploymentOn(t, f, w.Name); bd.Spec.Released == nil || bd.Spec.Released.Index != 1 || bd.Spec.Staged.Index != 1 {
			t.Errorf("%s: staged %d, released %+v after the rollback", w.Name, bd.Spec.Staged.Index, bd.Spec.Released)
		}
	}
}

// approverClient is a hub client as another person: a user as the API server knows one (the
// suite's administrator impersonating them), not a ServiceAccount, since a gate's quorum counts
// people; they may read runs and approval requests and write the requests' status.
func approverClient(t *testing.T, f *fleetEnv, name string) (client.Client, string) {
	t.Helper()
	ctx := context.Background()
	user := name + "@" + f.ns
	rules := []rbacv1.PolicyRule{
		{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"stagedupdateruns", "approvalrequests"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"approvalrequests/status"}, Verbs: []string{"get", "update", "patch"}},
	}
	cs := kubernetes.NewForConfigOrDie(hubCluster.Config())
	if _, err := cs.RbacV1().Roles(f.ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().RoleBindings(f.ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(hubCluster.Config())
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	rulesHeld(t, cfg, f.ns, rules)
	c, err := client.New(cfg, client.Options{Scheme: f.hub.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c, user
}

// R3.9 through the hub: a gate with a quorum of two stays closed while one person approved
// (twice), opens when a second person approves; the next run's gate is rejected, and the run
// stops with who rejected it and why, releasing nothing past the gate.
func TestR3_9_ApprovalQuorumAndRejectionThroughTheHub(t *testing.T) {
	up, f, runOf := stagedFleet(t, "quorum",
		v1alpha1.StageConfig{Name: "canary", LabelSelector: canaryClusters},
		v1alpha1.StageConfig{Name: "rest", Selector: restClusters, BeforeStageTasks: []v1alpha1.StageTask{{Type: v1alpha1.TaskApproval, Quorum: 2}}})
	ctx := context.Background()
	rest := operate.Gate{Stage: "rest"}
	waitAtGate := func(run string) {
		t.Helper()
		eventually(t, "run "+run+" waits at the gate of stage rest", 60*time.Second, func() bool {
			return strings.Contains(runOf(run).Status.Message, "waiting for approval "+rollout.ApprovalName(run, "Before", "rest", ""))
		})
	}
	restReleased := func(rev int64) bool {
		for _, w := range workloads[1:] {
			if released(deploymentOn(t, f, w.Name)) >= rev {
				return true
			}
		}
		return false
	}
	waitAtGate("shop-web-r1")
	var ar v1alpha1.ApprovalRequest
	if err := f.hub.Get(ctx, types.NamespacedName{Namespace: f.ns, Name: rollout.ApprovalName("shop-web-r1", "Before", "rest", "")}, &ar); err != nil || ar.Spec.Quorum != 2 {
		t.Fatalf("the gate's request: quorum %d, %v; want 2", ar.Spec.Quorum, err)
	}
	releases := f.watchReleases(1, "shop-web")
	for i := range 2 {
		_, already, err := operate.Approve(ctx, f.hub, f.ns, "shop-web-r1", rest, "fine by me")
		if err != nil || already != (i == 1) {
			t.Fatalf("approval %d by the same person: already %v, %v", i+1, already, err)
		}
	}
	second, secondName := approverClient(t, f, "approver-2")
	secondApproval := time.Now()
	if _, _, err := operate.Approve(ctx, second, f.ns, "shop-web-r1", rest, "second pair of eyes"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "run shop-web-r1 completes after the second approval", 60*time.Second, func() bool {
		return runOf("shop-web-r1").Status.State == v1alpha1.RunCompleted
	})
	// The gate stayed closed while one person had approved: the rest stage was released only
	// after the second person's approval.
	releases.mu.Lock()
	for _, w := range workloads[1:] {
		key := f.clusterNamespaces[w.Name] + "/" + deploymentOn(t, f, w.Name).Name
		if at, ok := releases.releasedAt[key][1]; !ok || at.Before(secondApproval) {
			t.Errorf("%s was released at %v, before the second approval (%v): one person opened a gate with a quorum of 2", w.Name, at, secondApproval)
		}
	}
	releases.mu.Unlock()
	if err := f.hub.Get(ctx, client.ObjectKeyFromObject(&ar), &ar); err != nil || len(ar.Status.Approvals) != 2 || ar.Status.Approvals[1].By != secondName {
		t.Errorf("the approvals recorded: %+v %v; want two, the second %s's", ar.Status.Approvals, err, secondName)
	}

	up.Commit("main", map[string]string{"web/deployment.yaml": webManifest("example.invalid/web:2")})
	waitAtGate("shop-web-r2")
	if _, err := operate.Reject(ctx, second, f.ns, "shop-web-r2", rest, "canary error rate is up"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "run shop-web-r2 stops on the rejection", 60*time.Second, func() bool {
		run := runOf("shop-web-r2")
		return run.Status.State == v1alpha1.RunFailed && strings.Contains(run.Status.Message, "rejected by "+secondName+": canary error rate is up")
	})
	if restReleased(2) {
		t.Errorf("the rejected gate released the rest stage")
	}
	if _, _, err := operate.Approve(ctx, f.hub, f.ns, "shop-web-r2", rest, "too late"); err == nil || !strings.Contains(err.Error(), "was rejected by "+secondName) {
		t.Errorf("approving a rejected gate: %v", err)
	}
}

// R1.13 in a staged run: a cluster paused while the run waits at a gate is not started when
// the gate opens; it waits Pending with the reason, the other cluster of its stage goes on,
// and it starts once resumed.
func TestR1_13_StagedRunHoldsAPausedCluster(t *testing.T) {
	_, f, runOf := stagedFleet(t, "paused-run",
		v1alpha1.StageConfig{Name: "canary", LabelSelector: canaryClusters},
		v1alpha1.StageConfig{Name: "rest", Selector: restClusters, MaxConcurrency: &intstr.IntOrString{IntVal: 2},
			BeforeStageTasks: []v1alpha1.StageTask{{Type: v1alpha1.TaskApproval}}})
	ctx := context.Background()
	eventually(t, "run shop-web-r1 waits at the gate", 60*time.Second, func() bool {
		return strings.Contains(runOf("shop-web-r1").Status.Message, "waiting for approval")
	})
	held := workloads[2]
	setPaused := func(paused bool) {
		t.Helper()
		var cl v1alpha1.Cluster
		if err := f.hub.Get(ctx, types.NamespacedName{Namespace: f.ns, Name: held.Name}, &cl); err != nil {
			t.Fatal(err)
		}
		orig := cl.DeepCopy()
		cl.Spec.Paused = paused
		if err := f.hub.Patch(ctx, &cl, client.MergeFrom(orig)); err != nil {
			t.Fatal(err)
		}
	}
	setPaused(true)
	if _, _, err := operate.Approve(ctx, f.hub, f.ns, "shop-web-r1", operate.Gate{Stage: "rest"}, ""); err != nil {
		t.Fatal(err)
	}
	clusterStatus := func(name string) (v1alpha1.RunState, string) {
		for _, st := range runOf("shop-web-r1").Status.Stages {
			for _, g := range st.Groups {
				for _, c := range g.Clusters {
					if c.Name == name {
						return c.State, c.Message
					}
				}
			}
		}
		return "", ""
	}
	eventually(t, "the paused cluster waits with the reason while the other one runs the revision", 60*time.Second, func() bool {
		state, msg := clusterStatus(held.Name)
		return state == v1alpha1.RunPending && msg == "cluster paused (R1.13)" && deploymentAvailable(t, workloads[1], "paused-run", "web", "example.invalid/web:1")
	})
	if r := released(deploymentOn(t, f, held.Name)); r != 0 {
		t.Fatalf("the paused cluster was released revision %d", r)
	}
	setPaused(false)
	eventually(t, "the resumed cluster runs the revision and the run completes", 60*time.Second, func() bool {
		return runOf("shop-web-r1").Status.State == v1alpha1.RunCompleted && deploymentAvailable(t, held, "paused-run", "web", "example.invalid/web:1")
	})
}
