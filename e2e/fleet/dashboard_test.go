package fleet

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/e2e/browser"
	"github.com/flotilla-dev/flotilla/e2e/controlplane"
	"github.com/flotilla-dev/flotilla/e2e/testpki"
	"github.com/flotilla-dev/flotilla/hub"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/dashboard"
	"github.com/flotilla-dev/flotilla/rollout"
)

// The dashboard in a browser, against the real hub, agents and workload clusters: a staged
// run watched live, its gate approved from the page (and refused to a person whose RBAC does not
// allow it, and approved through the in-cluster proxy mode under the user the proxy asserts),
// rejected, its run stopped and started, a gate skipped.
func TestDashboard_R3_9_R3_11_StagedRunWatchedAndActedOnInThePage(t *testing.T) {
	up, f, runOf := stagedFleet(t, "dash-staged",
		v1alpha1.StageConfig{Name: "canary", LabelSelector: canaryClusters},
		v1alpha1.StageConfig{Name: "rest", Selector: restClusters, BeforeStageTasks: []v1alpha1.StageTask{{Type: v1alpha1.TaskApproval, Quorum: 2}}})
	ctx := context.Background()
	admin := serveDashboard(t, hubCluster.Config(), f.ns)
	p := openBrowser(t)
	p.Navigate(admin)
	p.Until("the fleet view lists the bundle", `!!document.querySelector('[data-bundle="shop-web"]')`, time.Minute)
	p.GoTo("#/" + f.ns + "/bundle/shop-web")
	p.Mark()
	p.Until("the canary's chip turns ready live", count("canary", "ready")+` === '1 ready'`, 2*time.Minute)
	gate := `[data-gate="rest//before"] [data-action="approve"]`
	p.Until("the gate of stage rest waits for approvals", `!!document.querySelector('`+gate+`')`, time.Minute)
	p.Until("the lane says why it waits", `document.querySelector('[data-lane="rest"]').textContent.includes('waiting for approval')`, 30*time.Second)
	p.Screenshot("dashboard-staged-gate")

	// A person who may read but not approve sees the refusal; nothing changes.
	viewerCfg, _ := personConfig(t, f, "watcher", readFleet, readDeployments)
	watcher := openBrowser(t)
	watcher.Navigate(serveDashboard(t, viewerCfg, f.ns))
	watcher.GoTo("#/" + f.ns + "/bundle/shop-web")
	result, text := watcher.Act(gate, map[string]string{"f-comment": "let me"})
	if result != "Forbidden" || !strings.Contains(text, "forbidden") {
		t.Errorf("a watcher's approval: %s %q, want the API server's refusal", result, text)
	}
	request := rollout.ApprovalName("shop-web-r1", "Before", "rest", "")
	var ar v1alpha1.ApprovalRequest
	if err := f.hub.Get(ctx, types.NamespacedName{Namespace: f.ns, Name: request}, &ar); err != nil || len(ar.Status.Approvals) != 0 {
		t.Errorf("the refused approval left a record: %+v %v", ar.Status, err)
	}

	// The admin approves from the page: one of two.
	if result, text := p.Act(gate, map[string]string{"f-comment": "ship it"}); result != "ok" || !strings.Contains(text, "approved "+request) {
		t.Fatalf("approving from the page: %s %q", result, text)
	}
	p.Until("the page shows one approval of two", `document.querySelector('[data-gate="rest//before"] [data-quorum]').textContent.startsWith('1/2')`, 30*time.Second)

	// The second approval comes through the in-cluster mode, as alice.
	approveThroughProxy(t, f, "shop-web-r1")
	eventually(t, "run shop-web-r1 completes", time.Minute, func() bool { return runOf("shop-web-r1").Status.State == v1alpha1.RunCompleted })
	if err := f.hub.Get(ctx, types.NamespacedName{Namespace: f.ns, Name: request}, &ar); err != nil || len(ar.Status.Approvals) != 2 || ar.Status.Approvals[1].By != "alice" {
		t.Errorf("approvals: %+v %v; want the page's and then alice's", ar.Status.Approvals, err)
	}
	p.Until("the rest stage's chips turn ready live", count("rest", "ready")+` === '2 ready'`, 2*time.Minute)
	p.StillLive()

	// Revision 2: stop and start its run from the page, then reject its gate.
	up.Commit("main", map[string]string{"web/deployment.yaml": webManifest("example.invalid/web:2")})
	p.Until("run shop-web-r2 is listed as current", `!!document.querySelector('[data-run="shop-web-r2"] [data-action="stop-run"]')`, time.Minute)
	if result, _ := p.Act(`[data-run="shop-web-r2"] [data-action="stop-run"]`, nil); result != "ok" {
		t.Fatalf("stopping the run: %s", result)
	}
	eventually(t, "run shop-web-r2 is asked to stop", 30*time.Second, func() bool { return runOf("shop-web-r2").Spec.State == v1alpha1.RunStop })
	if result, _ := p.Act(`[data-run="shop-web-r2"] [data-action="start-run"]`, nil); result != "ok" {
		t.Fatalf("starting the run: %s", result)
	}
	eventually(t, "run shop-web-r2 runs again", 30*time.Second, func() bool { return runOf("shop-web-r2").Spec.State == v1alpha1.RunRun })
	reject := `[data-gate="rest//before"] [data-action="reject"]`
	p.Until("the gate of revision 2 waits", `!!document.querySelector('`+reject+`') && document.querySelector('[data-run="shop-web-r2"]').textContent.includes('(current)')`, time.Minute)
	if result, text := p.Act(reject, map[string]string{"f-comment": "wrong image"}); result != "ok" {
		t.Fatalf("rejecting: %s %q", result, text)
	}
	eventually(t, "run shop-web-r2 stops on the rejection", time.Minute, func() bool {
		s := runOf("shop-web-r2").Status.State
		return s == v1alpha1.RunStopped || s == v1alpha1.RunFailed
	})
	if !availableEverywhere(t, "dash-staged", "web", "example.invalid/web:1", workloads[1:]...) {
		t.Errorf("the rejected revision reached the rest stage")
	}

	// Revision 3: the gate is skipped from the page (R3.11) and the run completes.
	up.Commit("main", map[string]string{"web/deployment.yaml": webManifest("example.invalid/web:3")})
	skip := `[data-gate="rest//before"] [data-action="skip"]`
	p.Until("the gate of revision 3 waits", `!!document.querySelector('`+skip+`') && document.querySelector('[data-run="shop-web-r3"]')?.textContent.includes('(current)')`, time.Minute)
	if result, text := p.Act(skip, nil); result != "ok" {
		t.Fatalf("skipping the gate: %s %q", result, text)
	}
	eventually(t, "run shop-web-r3 completes past the skipped gate", time.Minute, func() bool { return runOf("shop-web-r3").Status.State == v1alpha1.RunCompleted })

	// Revision 4: the stage rest is skipped from the page (R3.11); its clusters keep revision 3.
	up.Commit("main", map[string]string{"web/deployment.yaml": webManifest("example.invalid/web:4")})
	skipStage := `[data-lane="rest"] > .toolbar [data-action="skip"]`
	p.Until("the stage rest of revision 4 can be skipped", `!!document.querySelector('`+skipStage+`') && document.querySelector('[data-run="shop-web-r4"]')?.textContent.includes('(current)')`, time.Minute)
	if result, text := p.Act(skipStage, nil); result != "ok" {
		t.Fatalf("skipping the stage: %s %q", result, text)
	}
	eventually(t, "run shop-web-r4 completes with the stage skipped", time.Minute, func() bool { return runOf("shop-web-r4").Status.State == v1alpha1.RunCompleted })
	if !availableEverywhere(t, "dash-staged", "web", "example.invalid/web:3", workloads[1:]...) {
		t.Errorf("the skipped stage's clusters do not keep revision 3")
	}
	p.StillLive()
}

// approveThroughProxy runs the dashboard as the hub chart runs it, behind an authenticating
// proxy, with a service account that may impersonate and nothing else; it checks that nothing
// but the proxy's certificate gets in, and approves the gate as alice through it.
func approveThroughProxy(t *testing.T, f *fleetEnv, run string) {
	t.Helper()
	ctx := context.Background()
	// The dashboard's account has what the hub chart grants it: impersonation, nothing else.
	saCfg, _ := personConfig(t, f, "dashboard", nil, dashboardRules(t))
	// alice may approve in the fleet namespace; the dashboard's own account may not.
	cs := kubernetes.NewForConfigOrDie(hubCluster.Config())
	rules := append(readFleet, rbacv1.PolicyRule{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"approvalrequests/status"}, Verbs: []string{"get", "patch", "update"}})
	if _, err := cs.RbacV1().Roles(f.ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "alice"}, Rules: rules}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().RoleBindings(f.ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "alice"},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "alice"}, Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "alice"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	alice := rest.CopyConfig(hubCluster.Config())
	alice.Impersonate = rest.ImpersonationConfig{UserName: "alice"}
	rulesHeld(t, alice, f.ns, rules)
	proxyCA := testpki.NewCA(t, "proxy-ca")
	proxyCert := proxyCA.Client(t, "auth-proxy")
	otherCA := testpki.NewCA(t, "someone-else")
	serving := testpki.NewCA(t, "dashboard-ca")
	scheme, _ := hub.Scheme()
	proxy := &dashboard.ProxyAuth{ClientCA: proxyCA.Pool, AllowedNames: []string{"auth-proxy"}}
	srv, err := dashboard.New(ctx, dashboard.Options{Config: saCfg, Scheme: scheme, Namespace: f.ns, Proxy: proxy, Version: hubVersion})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(sctx, ln, dashboard.ProxyTLS(serving.Server(t, "127.0.0.1"), proxy)) }()
	defer func() { cancel(); <-done }()
	base := "https://" + ln.Addr().String()
	clientWith := func(certs ...tls.Certificate) *http.Client {
		return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: serving.Pool, Certificates: certs}}}
	}
	send := func(c *http.Client, method, path string, headers map[string]string, body []byte) (int, []byte, error) {
		req, _ := http.NewRequest(method, base+path, bytes.NewReader(body))
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, data, nil
	}
	asAlice := map[string]string{"X-Remote-User": "alice", "X-Remote-Group": "approvers"}
	// Without the proxy's certificate, the asserted user is nobody: 401, and nothing of the fleet.
	code, body, err := send(clientWith(), "GET", "/api/view?view=fleet&namespace="+f.ns, asAlice, nil)
	if err != nil || code != http.StatusUnauthorized || strings.Contains(string(body), "shop") {
		t.Errorf("a forged user header without the proxy's certificate: %d %q %v; want 401 and nothing shown", code, body, err)
	}
	if code, _, err := send(clientWith(otherCA.Client(t, "auth-proxy")), "GET", "/api/session", asAlice, nil); err == nil && code != http.StatusUnauthorized {
		t.Errorf("a certificate of another CA: %d, want the handshake refused or 401", code)
	}
	if code, _, err := send(clientWith(proxyCA.Client(t, "not-the-proxy")), "GET", "/api/session", asAlice, nil); err != nil || code != http.StatusUnauthorized {
		t.Errorf("a certificate of the proxy's CA with another name: %d %v, want 401", code, err)
	}
	proxied := clientWith(proxyCert)
	code, body, err = send(proxied, "GET", "/api/session", asAlice, nil)
	var sess struct {
		User string `json:"user"`
		CSRF string `json:"csrf"`
	}
	if err != nil || code != http.StatusOK || json.Unmarshal(body, &sess) != nil || sess.User != "alice" {
		t.Fatalf("the session through the proxy: %d %s %v", code, body, err)
	}
	approve, _ := json.Marshal(map[string]any{"action": "approve", "namespace": f.ns, "run": run, "stage": "rest", "comment": "through the proxy"})
	// Without its CSRF token, a request is one another site's page could send: refused.
	if code, _, _ := send(proxied, "POST", "/api/action", map[string]string{"X-Remote-User": "alice", "Content-Type": "application/json"}, approve); code != http.StatusForbidden {
		t.Errorf("an approval without the CSRF token: %d, want 403", code)
	}
	headers := map[string]string{"X-Remote-User": "alice", "X-Remote-Group": "approvers", "Content-Type": "application/json", "X-Flotilla-CSRF": sess.CSRF}
	if code, body, err := send(proxied, "POST", "/api/action", headers, approve); err != nil || code != http.StatusOK {
		t.Fatalf("approving through the proxy: %d %s %v", code, body, err)
	}
	var ar v1alpha1.ApprovalRequest
	if err := f.hub.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: rollout.ApprovalName(run, "Before", "rest", "")}, &ar); err != nil {
		t.Fatal(err)
	}
	if n := len(ar.Status.Approvals); n == 0 || ar.Status.Approvals[n-1].By != "alice" {
		t.Errorf("the approval through the proxy is recorded as %+v, want alice's", ar.Status.Approvals)
	}
}

// A partitioned rollout in the page: watched live, a cluster and the bundle paused and resumed
// from it, a regressed canary shown rolled back with its quarantine (R5.4, R5.5, R5.6), retried
// and rolled back from it, and what revision 2 changes on the canary.
func TestDashboard_R1_13_R5_5_PartitionedRolloutRegressionInThePage(t *testing.T) {
	up, f := deployWeb(t, canaryFirst("dash-parts", "onFailure: Rollback", "failureTimeout: 20s"))
	ctx := context.Background()
	p := openBrowser(t)
	p.Navigate(serveDashboard(t, hubCluster.Config(), f.ns))
	p.GoTo("#/" + f.ns + "/bundle/shop-web")
	p.Mark()
	p.Until("every partition's chips turn ready live", count("canary", "ready")+` === '1 ready' && `+count("rest", "ready")+` === '2 ready'`, 2*time.Minute)

	// Pause and resume a cluster, then the bundle, from the page.
	edge := workloads[2].Name
	p.GoTo("#/" + f.ns + "/cluster/" + edge)
	p.Until("the cluster view shows its deployment", `!!document.querySelector('[data-deployment="shop-web"]') && document.querySelector('[data-online]').dataset.online === 'true'`, time.Minute)
	paused := func(c client.Object, get func() bool) func() bool {
		return func() bool {
			if err := f.hub.Get(ctx, client.ObjectKeyFromObject(c), c); err != nil {
				return false
			}
			return get()
		}
	}
	cl := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: edge}}
	if result, _ := p.Act(`[data-action="pause-cluster"]`, nil); result != "ok" {
		t.Fatalf("pausing the cluster: %s", result)
	}
	eventually(t, "the cluster is paused", 30*time.Second, paused(cl, func() bool { return cl.Spec.Paused }))
	if result, _ := p.Act(`[data-action="resume-cluster"]`, nil); result != "ok" {
		t.Fatalf("resuming the cluster: %s", result)
	}
	eventually(t, "the cluster is resumed", 30*time.Second, paused(cl, func() bool { return !cl.Spec.Paused }))
	p.GoTo("#/" + f.ns + "/bundle/shop-web")
	b := &v1alpha1.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "shop-web"}}
	if result, _ := p.Act(`[data-action="pause-bundle"]`, nil); result != "ok" {
		t.Fatalf("pausing the bundle: %s", result)
	}
	eventually(t, "the bundle is paused", 30*time.Second, paused(b, func() bool { return b.Spec.Paused }))
	if result, _ := p.Act(`[data-action="resume-bundle"]`, nil); result != "ok" {
		t.Fatalf("resuming the bundle: %s", result)
	}
	eventually(t, "the bundle is resumed", 30*time.Second, paused(b, func() bool { return !b.Spec.Paused }))

	// A revision whose pods never turn ready fails on the canary and is rolled back.
	up.Commit("main", map[string]string{"web/deployment.yaml": labelledManifest("example.invalid/web:2", controlplane.NeverReadyLabel, "true")})
	p.Until("the page shows the rollback and the quarantine", `document.querySelector('[data-outcome]').dataset.outcome === 'RolledBack' && !!document.querySelector('[data-quarantined="2"]')`, 3*time.Minute)
	text := p.Text("[data-outcome]")
	if !strings.Contains(text, "Revision 2") || !strings.Contains(text, workloads[0].Name) || !strings.Contains(text, "flotilla rollout retry shop-web --revision 2") {
		t.Errorf("the outcome shown: %q", text)
	}
	p.Screenshot("dashboard-rolled-back")

	// What revision 2 changes on the canary, side by side.
	p.GoTo("#/" + f.ns + "/diff/shop-web/" + workloads[0].Name + "/1/2")
	p.Until("the diff shows the Deployment changed", `!!document.querySelector('[data-change="changed"]') && document.querySelector('[data-change="changed"]').textContent.includes('example.invalid/web:2')`, 30*time.Second)
	p.GoTo("#/" + f.ns + "/bundle/shop-web")

	// Retry the quarantined revision, then roll back to revision 1, from the page.
	if result, text := p.Act(`[data-quarantined="2"] [data-action="retry"]`, nil); result != "ok" {
		t.Fatalf("retrying: %s %q", result, text)
	}
	eventually(t, "the bundle records the retry", 30*time.Second, paused(b, func() bool { return b.Spec.Retry != nil && b.Spec.Retry.Revision == 2 }))
	if result, text := p.Act(`[data-action="rollback"]`, map[string]string{"select:f-revision": "1"}); result != "ok" {
		t.Fatalf("rolling back: %s %q", result, text)
	}
	eventually(t, "the bundle rolls back to revision 1", 30*time.Second, paused(b, func() bool { return b.Spec.TargetRevision != nil && *b.Spec.TargetRevision == 1 }))
	p.StillLive()
}

// What a repository's author or a tenant writes reaches the page as text, never as markup: a
// GitRepo whose URL and branch are built to inject a script shows them literally, and no
// element or script of theirs exists in the page.
func TestDashboardShowsHostileTextAsText(t *testing.T) {
	f := startFleet(t)
	ctx := context.Background()
	repoURL := `http://127.0.0.1:9/<img/src=x/onerror=window.__xss=1>.git`
	branch := `"><script>window.__xss=2</script><b id=injected>x</b>`
	repo := &v1alpha1.GitRepo{ObjectMeta: metav1.ObjectMeta{Name: "hostile", Namespace: f.ns}, Spec: v1alpha1.GitRepoSpec{Repo: repoURL, Branch: branch,
		Targets: []v1alpha1.Target{{Name: "all", ClusterMatch: v1alpha1.ClusterMatch{ClusterSelector: &metav1.LabelSelector{}}}}}}
	if err := f.hub.Create(ctx, repo); err != nil {
		t.Fatal(err)
	}
	p := openBrowser(t)
	p.Navigate(serveDashboard(t, hubCluster.Config(), f.ns))
	row := `(document.querySelector('[data-gitrepo="hostile"]') || {textContent: ''}).textContent`
	p.Until("the GitRepo's row shows its URL as text", row+`.includes('<img/src=x/onerror=window.__xss=1>')`, time.Minute)
	p.Until("the row says why it is not ready", `!!document.querySelector('[data-gitrepo="hostile"] .problems li')`, time.Minute)
	injected, err := browser.Eval[string](p, `JSON.stringify({xss: window.__xss ?? null, imgs: document.querySelectorAll('img').length,
		inline: [...document.scripts].filter((s) => !s.src).length, b: !!document.getElementById('injected')})`)
	if err != nil {
		t.Fatal(err)
	}
	if injected != `{"xss":null,"imgs":0,"inline":0,"b":false}` {
		t.Errorf("markup of the repository's fields got into the page: %s\n%s", injected, p.Text("body"))
	}
}

// A dashboard newer than the hub it talks to says so on every page.
func TestDashboardSaysItsHubIsOlder(t *testing.T) {
	f := startFleet(t)
	p := openBrowser(t)
	p.Navigate(serveDashboardOf(t, hubCluster.Config(), f.ns, "v0.10.0"))
	banner := `(document.querySelector('[data-banner="older-hub"]') || {textContent: ''}).textContent`
	p.Until("the page says the hub is older", banner+`.includes('`+hubVersion+`') && `+banner+`.includes('v0.10.0')`, time.Minute)
	current := openBrowser(t)
	current.Navigate(serveDashboard(t, hubCluster.Config(), f.ns))
	current.Until("the fleet view is drawn", `!!document.querySelector('h1')`, time.Minute)
	if n, err := browser.Eval[int](current, `document.querySelectorAll('[data-banner="older-hub"]').length`); err != nil || n != 0 {
		t.Errorf("a dashboard of the hub's own version shows %d older-hub banners (%v)", n, err)
	}
}
