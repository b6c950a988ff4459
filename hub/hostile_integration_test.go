package hub

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	helmchart "helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/provenance"
	helmrepo "helm.sh/helm/v3/pkg/repo"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/e2e/gitserver"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/contentstore"
	"github.com/flotilla-dev/flotilla/hub/sources"
	"github.com/flotilla-dev/flotilla/hub/webhooks"
)

// hubLogs holds everything the hubs of this test binary logged (TestMain installs it), so that
// attack tests can assert that nothing of their target reached a log line.
var hubLogs lockedLog

type lockedLog struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (l *lockedLog) write(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.WriteString(line + "\n")
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// hostileHub is one hub serving an attacker's GitRepo and a well-behaved tenant's beside it.
type hostileHub struct {
	t      *testing.T
	c      client.Client
	ns     string // the attacker's namespace
	good   *gitserver.Upstream
	goodNS string
}

// startHostileHub starts a hub with a well-behaved tenant that deploys a ConfigMap to one
// cluster, and a namespace for the attacker with a cluster of its own.
func startHostileHub(t *testing.T, opts Options) *hostileHub {
	t.Helper()
	c, _ := startHub(t, opts)
	h := &hostileHub{t: t, c: c, ns: namespace(t, c), goodNS: namespace(t, c), good: gitserver.New(t)}
	registerCluster(t, c, h.ns, "attacked", map[string]string{"env": "prod"})
	registerCluster(t, c, h.goodNS, "neighbour", map[string]string{"env": "prod"})
	h.good.Commit("main", map[string]string{"app/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: good}\ndata: {v: \"1\"}\n"})
	h.createRepo(h.goodNS, "good", h.good.ServeHTTP("", "").URL+"/repo.git", nil)
	return h
}

func (h *hostileHub) createRepo(ns, name, url string, mutate func(*v1alpha1.GitRepoSpec)) client.ObjectKey {
	h.t.Helper()
	repo := &v1alpha1.GitRepo{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: v1alpha1.GitRepoSpec{
		Repo: url, PollingInterval: &metav1.Duration{Duration: time.Second},
		Targets: []v1alpha1.Target{{Name: "all", ClusterMatch: v1alpha1.ClusterMatch{ClusterSelector: &metav1.LabelSelector{}}}},
	}}
	if mutate != nil {
		mutate(&repo.Spec)
	}
	if err := h.c.Create(context.Background(), repo); err != nil {
		h.t.Fatal(err)
	}
	return client.ObjectKeyFromObject(repo)
}

// renderFailure waits for the GitRepo's Rendered condition to fail and returns its message.
func (h *hostileHub) renderFailure(key client.ObjectKey) string {
	h.t.Helper()
	got := waitFor(h.t, h.c, key, "the attack refused", func(r *v1alpha1.GitRepo) bool {
		cond := meta.FindStatusCondition(r.Status.Conditions, v1alpha1.RenderedCondition)
		return cond != nil && cond.Status == metav1.ConditionFalse
	})
	return meta.FindStatusCondition(got.Status.Conditions, v1alpha1.RenderedCondition).Message
}

// goodTenantKeepsDeploying pushes a change to the well-behaved tenant during the attack and
// waits until the hub has rendered it into a new revision of its bundle (its cluster has no
// agent here, so the revision is recorded and its content stored, ready for the rollout).
func (h *hostileHub) goodTenantKeepsDeploying(version string) {
	h.t.Helper()
	commit := h.good.Commit("main", map[string]string{"app/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: good}\ndata: {v: \"" + version + "\"}\n"})
	waitFor(h.t, h.c, client.ObjectKey{Namespace: h.goodNS, Name: "good"}, "the good tenant's commit "+commit[:8], func(r *v1alpha1.GitRepo) bool { return r.Status.Commit == commit })
	store := &contentstore.Store{Client: h.c}
	ctx := context.Background()
	waitUntil(h.t, "the good tenant's change is rendered during the attack", func() bool {
		var bun v1alpha1.Bundle
		if err := h.c.Get(ctx, client.ObjectKey{Namespace: h.goodNS, Name: "good"}, &bun); err != nil {
			return false
		}
		for _, rev := range bun.Spec.Revisions {
			if rev.Commit != commit {
				continue
			}
			var contents v1alpha1.ContentList
			if err := h.c.List(ctx, &contents, client.InNamespace(h.goodNS)); err != nil {
				return false
			}
			for _, ct := range contents.Items {
				if data, err := store.Get(ctx, h.goodNS, ct.Name); err == nil && strings.Contains(string(data), `v: "`+version+`"`) {
					return true
				}
			}
		}
		return false
	})
}

// leaks lists every place the hub exposes where secret appears: rendered Content, deployments,
// bundles, GitRepos and Clusters (status included), events, and the hub's log.
func (h *hostileHub) leaks(secret string) []string {
	h.t.Helper()
	return exposures(h.t, h.c, secret, nil)
}

// exposures lists every place of the hub where secret appears (see leaks), but the Contents
// that may hold it (allowed, by "namespace/name").
func exposures(t *testing.T, c client.Client, secret string, allowed map[string]bool) []string {
	t.Helper()
	ctx := context.Background()
	var found []string
	var contents v1alpha1.ContentList
	if err := c.List(ctx, &contents); err != nil {
		t.Fatal(err)
	}
	store := &contentstore.Store{Client: c}
	for _, ct := range contents.Items {
		data, err := store.Get(ctx, ct.Namespace, ct.Name)
		if err != nil {
			continue // a chunk of another content: read through its head
		}
		if strings.Contains(string(data), secret) && !allowed[ct.Namespace+"/"+ct.Name] {
			found = append(found, "content "+ct.Namespace+"/"+ct.Name)
		}
	}
	for what, list := range map[string]client.ObjectList{"deployment": &v1alpha1.BundleDeploymentList{}, "bundle": &v1alpha1.BundleList{},
		"gitrepo": &v1alpha1.GitRepoList{}, "cluster": &v1alpha1.ClusterList{}, "event": &corev1.EventList{}} {
		if err := c.List(ctx, list); err != nil {
			t.Fatal(err)
		}
		data, _ := json.Marshal(list)
		if strings.Contains(string(data), secret) {
			found = append(found, what+"s")
		}
	}
	if strings.Contains(hubLogs.String(), secret) {
		found = append(found, "the hub's log")
	}
	return found
}

func (h *hostileHub) assertNothingLeaked(secret string) {
	h.t.Helper()
	if where := h.leaks(secret); len(where) > 0 {
		h.t.Errorf("the attack's target leaked into %v", where)
	}
}

// A repository names another tenant's Secret in helm.valuesFrom: the reference is refused by
// file and field, and the Secret's value appears nowhere.
func TestHostileRepoValuesFromAnotherNamespace(t *testing.T) {
	h := startHostileHub(t, Options{})
	canary := fmt.Sprintf("canary-valuesfrom-%d", time.Now().UnixNano())
	victim := namespace(t, h.c)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: victim}, StringData: map[string]string{"values.yaml": "password: " + canary + "\n"}}
	if err := h.c.Create(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	up := gitserver.New(t)
	up.Commit("main", map[string]string{
		"web/fleet.yaml":        "helm:\n  chart: .\n  valuesFrom:\n  - secretKeyRef: {name: db, namespace: " + victim + "}\n",
		"web/Chart.yaml":        "apiVersion: v2\nname: web\nversion: 1.0.0\n",
		"web/templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: stolen}\ndata: {p: {{ .Values.password | quote }}}\n",
	})
	key := h.createRepo(h.ns, "attack", up.ServeHTTP("", "").URL+"/repo.git", nil)
	msg := h.renderFailure(key)
	if !strings.Contains(msg, "web/fleet.yaml: helm.valuesFrom[0]: secretKeyRef.namespace: \""+victim+"\" is not the GitRepo's namespace") {
		t.Errorf("condition %q does not name the file and field", msg)
	}
	h.goodTenantKeepsDeploying("2")
	h.assertNothingLeaked(canary)
	// The scan sees what the hub rendered: it would have found the canary.
	if where := h.leaks(`v: "2"`); !strings.Contains(strings.Join(where, " "), "content "+h.goodNS) {
		t.Errorf("the leak scan does not see the good tenant's rendered content: %v", where)
	}
}

// A repository names a Secret of its own namespace that the operator did not mark for values
// (one holding the namespace's credentials, say): the reference is refused by file and field,
// naming the label, and the Secret's value appears nowhere; once the operator marks a Secret,
// its values render.
func TestHostileRepoValuesFromAnUnmarkedSecret(t *testing.T) {
	h := startHostileHub(t, Options{})
	canary := fmt.Sprintf("canary-unmarked-%d", time.Now().UnixNano())
	ctx := context.Background()
	for _, s := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Name: "operator-credentials", Namespace: h.ns}, StringData: map[string]string{"values.yaml": "password: " + canary + "\n"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "app-values", Namespace: h.ns, Labels: map[string]string{v1alpha1.ValuesFromLabel: "true"}}, StringData: map[string]string{"values.yaml": "password: meant-for-the-app\n"}},
	} {
		if err := h.c.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	files := func(secret string) map[string]string {
		return map[string]string{
			"web/fleet.yaml":        "helm:\n  chart: .\n  valuesFrom:\n  - secretKeyRef: {name: " + secret + "}\n",
			"web/Chart.yaml":        "apiVersion: v2\nname: web\nversion: 1.0.0\n",
			"web/templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: stolen}\ndata: {p: {{ .Values.password | quote }}}\n",
		}
	}
	up := gitserver.New(t)
	up.Commit("main", files("operator-credentials"))
	key := h.createRepo(h.ns, "attack", up.ServeHTTP("", "").URL+"/repo.git", nil)
	msg := h.renderFailure(key)
	if !strings.Contains(msg, "web/fleet.yaml: helm.valuesFrom[0]: secretKeyRef: secret operator-credentials is not marked for values") || !strings.Contains(msg, v1alpha1.ValuesFromLabel) {
		t.Errorf("condition %q does not name the file, the field and the label", msg)
	}
	h.goodTenantKeepsDeploying("2")
	h.assertNothingLeaked(canary)

	up.Commit("main", files("app-values"))
	waitFor(t, h.c, key, "the marked Secret's values render", func(r *v1alpha1.GitRepo) bool {
		cond := meta.FindStatusCondition(r.Status.Conditions, v1alpha1.RenderedCondition)
		return cond != nil && cond.Status == metav1.ConditionTrue
	})
}

// A repository's chart directory is a symlink to a directory of links to a host file (such as
// the hub's service-account token): the link is refused by name and the file's bytes appear
// nowhere.
func TestHostileRepoSymlinksToHostFiles(t *testing.T) {
	h := startHostileHub(t, Options{})
	canary := fmt.Sprintf("canary-hostfile-%d", time.Now().UnixNano())
	hostFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(hostFile, []byte(canary), 0o600); err != nil {
		t.Fatal(err)
	}
	up := gitserver.New(t)
	up.Link("web/chart", "../real")
	up.Link("real/leak", hostFile)
	up.Commit("main", map[string]string{
		"web/fleet.yaml":         "helm: {chart: ./chart}\n",
		"real/Chart.yaml":        "apiVersion: v2\nname: web\nversion: 1.0.0\n",
		"real/templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: stolen}\ndata: {leak: {{ .Files.Get \"leak\" | quote }}}\n",
	})
	key := h.createRepo(h.ns, "attack", up.ServeHTTP("", "").URL+"/repo.git", func(s *v1alpha1.GitRepoSpec) { s.Paths = []string{"web"} })
	msg := h.renderFailure(key)
	if !strings.Contains(msg, "web/fleet.yaml: helm.chart: real/leak is a symlink to") || !strings.Contains(msg, "which leaves the repository") {
		t.Errorf("condition %q does not name the file, the field and the link", msg)
	}
	h.goodTenantKeepsDeploying("3")
	h.assertNothingLeaked(canary)
}

// A repository's paths glob passes through a symlink to another tenant's files: refused, and
// nothing of them is rendered.
func TestHostileRepoPathsThroughASymlink(t *testing.T) {
	h := startHostileHub(t, Options{})
	canary := fmt.Sprintf("canary-tenant-%d", time.Now().UnixNano())
	other := t.TempDir()
	if err := os.MkdirAll(filepath.Join(other, "app"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(other, "app", "secret.yaml"), []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {s: "+canary+"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	up := gitserver.New(t)
	up.Link("tenants", other)
	up.Commit("main", map[string]string{"mine/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: mine}\n"})
	key := h.createRepo(h.ns, "attack", up.ServeHTTP("", "").URL+"/repo.git", func(s *v1alpha1.GitRepoSpec) { s.Paths = []string{"tenants/*"} })
	msg := h.renderFailure(key)
	if !strings.Contains(msg, `paths: "tenants/*": tenants is a symlink to`) {
		t.Errorf("condition %q does not name the field and the link", msg)
	}
	h.goodTenantKeepsDeploying("4")
	h.assertNothingLeaked(canary)
}

// A kustomization asks for URLs in every field Kustomize fetches: each is refused by file and
// field, and the server behind them receives no request at all.
func TestHostileRepoKustomizeReachesNoNetwork(t *testing.T) {
	h := startHostileHub(t, Options{})
	canary := fmt.Sprintf("canary-ssrf-%d", time.Now().UnixNano())
	// The server counts what is asked for under the path the kustomization names (a file, or a
	// repository Kustomize would clone); a request for anything else comes from another client
	// of this machine that reached the port (one left over by an earlier test) and is only shown.
	const attacked = "/latest/meta-data"
	var mu sync.Mutex
	var fetched, other []string
	internal := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		req := r.Method + " " + r.URL.String() + " (" + r.UserAgent() + ")"
		if !strings.HasPrefix(r.URL.Path, attacked) {
			other = append(other, req)
			http.NotFound(w, r)
			return
		}
		fetched = append(fetched, req)
		fmt.Fprintf(w, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ssrf}\ndata: {s: %s}\n", canary)
	}))
	defer internal.Close()
	up := gitserver.New(t)
	up.Commit("main", map[string]string{
		"k/fleet.yaml":         "{}\n",
		"k/cm.yaml":            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: base}\n",
		"k/kustomization.yaml": "resources: [cm.yaml]\nconfigMapGenerator:\n- name: leak\n  files: [metadata=" + internal.URL + attacked + "]\n",
	})
	key := h.createRepo(h.ns, "attack", up.ServeHTTP("", "").URL+"/repo.git", nil)
	msg := h.renderFailure(key)
	if !strings.Contains(msg, "k/kustomization.yaml: configMapGenerator[0].files[0]:") || !strings.Contains(msg, "is remote") {
		t.Errorf("condition %q does not name the file and field", msg)
	}
	h.goodTenantKeepsDeploying("5")
	mu.Lock()
	if len(fetched) > 0 {
		t.Errorf("the internal server received %d requests for what the kustomization names: %v", len(fetched), fetched)
	}
	if len(other) > 0 {
		t.Logf("requests for other paths, not the attack's: %v", other)
	}
	mu.Unlock()
	h.assertNothingLeaked(canary)
}

// A second tenant pins the first tenant's private commit without credentials of its own: the
// hub's cache does not serve it, the GitRepo fails on authentication, and nothing of the
// commit is rendered for it.
func TestHostileRepoPinsAnotherTenantsPrivateCommit(t *testing.T) {
	h := startHostileHub(t, Options{})
	canary := fmt.Sprintf("canary-private-%d", time.Now().UnixNano())
	up := gitserver.New(t)
	private := up.Commit("main", map[string]string{"app/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: private}\ndata: {s: " + canary + "}\n"})
	url := up.ServeHTTP("owner", "owner-token").URL + "/repo.git"
	owner := namespace(t, h.c)
	registerCluster(t, h.c, owner, "owners", nil)
	if err := h.c.Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "git", Namespace: owner},
		StringData: map[string]string{"username": "owner", "password": "owner-token"}}); err != nil {
		t.Fatal(err)
	}
	ownerKey := h.createRepo(owner, "private", url, func(s *v1alpha1.GitRepoSpec) {
		s.SecretRef = &v1alpha1.LocalObjectReference{Name: "git"}
	})
	waitFor(t, h.c, ownerKey, "the owner's commit", func(r *v1alpha1.GitRepo) bool { return r.Status.Commit == private })
	key := h.createRepo(h.ns, "attack", url, func(s *v1alpha1.GitRepoSpec) { s.Revision = private })
	got := waitFor(t, h.c, key, "the pinned commit refused", func(r *v1alpha1.GitRepo) bool {
		cond := sourceReady(r)
		return cond != nil && cond.Status == metav1.ConditionFalse
	})
	if cond := sourceReady(got); cond.Reason != "AuthenticationFailed" || got.Status.Commit != "" {
		t.Errorf("the attacker's GitRepo: reason %s, commit %q", cond.Reason, got.Status.Commit)
	}
	var bundles v1alpha1.BundleList
	if err := h.c.List(context.Background(), &bundles, client.InNamespace(h.ns)); err != nil || len(bundles.Items) != 0 {
		t.Errorf("the attacker's namespace has bundles: %v %v", bundles.Items, err)
	}
	h.goodTenantKeepsDeploying("6")
	// The owner's own Content holds the canary; the attacker's namespace must hold none of it.
	var contents v1alpha1.ContentList
	if err := h.c.List(context.Background(), &contents, client.InNamespace(h.ns)); err != nil || len(contents.Items) != 0 {
		t.Errorf("content rendered into the attacker's namespace: %d objects, %v", len(contents.Items), err)
	}
}

// A chart that loops forever and one that allocates without end each fail their GitRepo at the
// render limits, while the well-behaved tenant keeps deploying; the hub stays up.
func TestHostileRepoRunawayChartIsStopped(t *testing.T) {
	h := startHostileHub(t, Options{RenderTimeout: time.Second, RenderMemory: 256 << 20})
	for name, template := range map[string]string{
		"loop":   "{{ range 100000000000 }}{{ end }}",
		"memory": "{{ $s := repeat 200000000 \"xxxxxxxxxx\" }}{{ $t := print $s $s }}{{ len $t }}",
	} {
		up := gitserver.New(t)
		up.Commit("main", map[string]string{
			"web/fleet.yaml":        "helm: {chart: .}\n",
			"web/Chart.yaml":        "apiVersion: v2\nname: web\nversion: 1.0.0\n",
			"web/templates/cm.yaml": template,
		})
		key := h.createRepo(h.ns, "runaway-"+name, up.ServeHTTP("", "").URL+"/repo.git", nil)
		msg := h.renderFailure(key)
		if !strings.Contains(msg, "web/fleet.yaml: helm: the render passed its") {
			t.Errorf("%s: condition %q does not name the file, the field and the limit", name, msg)
		}
	}
	h.goodTenantKeepsDeploying("7")
}

// A kustomization that asks for 2^22 objects (each overlay names its base twice) is stopped in
// the sandbox at its deadline, on the real hub: its GitRepo fails naming the file and field,
// the good tenant keeps deploying. In the hub's own process it would never have stopped.
func TestHostileRepoKustomizeBombIsStopped(t *testing.T) {
	h := startHostileHub(t, Options{RenderTimeout: 2 * time.Second, RenderMemory: 256 << 20})
	files := map[string]string{
		"web/fleet.yaml":            "kustomize: {dir: l22}\n",
		"web/l0/kustomization.yaml": "resources: [cm.yaml]\n",
		"web/l0/cm.yaml":            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
	}
	for i := 1; i <= 22; i++ {
		l := fmt.Sprintf("web/l%d", i)
		files[l+"/kustomization.yaml"] = "resources: [a, b]\n"
		for _, side := range []string{"a", "b"} {
			files[l+"/"+side+"/kustomization.yaml"] = fmt.Sprintf("namePrefix: %s-\nresources: [../../l%d]\n", side, i-1)
		}
	}
	up := gitserver.New(t)
	up.Commit("main", files)
	key := h.createRepo(h.ns, "bomb", up.ServeHTTP("", "").URL+"/repo.git", nil)
	if msg := h.renderFailure(key); !strings.Contains(msg, "web/fleet.yaml: kustomize: the render passed its") {
		t.Errorf("condition %q does not name the file, the field and the limit", msg)
	}
	h.goodTenantKeepsDeploying("8")
}

// A repository whose bundles each run to the sandbox's deadline holds its poll worker for the
// commit's render budget, not for a deadline per bundle: the bundles past the budget fail
// alone, named, and the good tenant keeps deploying.
func TestHostileRepoSpendsOnlyItsRenderBudget(t *testing.T) {
	h := startHostileHub(t, Options{RenderTimeout: time.Second, RenderMemory: 256 << 20, RenderBudget: 2500 * time.Millisecond})
	files := map[string]string{}
	for _, b := range []string{"a", "b", "c", "d", "e", "f"} {
		files[b+"/fleet.yaml"] = "helm: {chart: .}\n"
		files[b+"/Chart.yaml"] = "apiVersion: v2\nname: " + b + "\nversion: 1.0.0\n"
		files[b+"/templates/cm.yaml"] = "{{ range 100000000000 }}{{ end }}"
	}
	up := gitserver.New(t)
	up.Commit("main", files)
	key := h.createRepo(h.ns, "slow", up.ServeHTTP("", "").URL+"/repo.git", nil)
	msg := h.renderFailure(key)
	if !strings.Contains(msg, "6 of 6 bundles do not render") || !strings.Contains(msg, "render budget of 2.5s was spent") {
		t.Errorf("condition %q: want the bundles past the budget named as such", msg)
	}
	h.goodTenantKeepsDeploying("9")
}

// A GitRepo's helmSecretRef and caBundle reach its chart server: a chart behind basic auth on
// TLS renders with them, and a GitRepo of another tenant naming the same repository without
// them is refused by the server, with its field named.
func TestHelmSecretRefAndCABundleReachTheChartServer(t *testing.T) {
	h := startHostileHub(t, Options{})
	dir := t.TempDir()
	chart := &helmchart.Chart{Metadata: &helmchart.Metadata{APIVersion: "v2", Name: "greeter", Version: "1.0.0"},
		Templates: []*helmchart.File{{Name: "templates/cm.yaml", Data: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: greeter}\ndata: {from: private-chart}\n")}}}
	archive, err := chartutil.Save(chart, dir)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "charts" || p != "chart-token" {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		http.ServeFile(w, r, filepath.Join(dir, filepath.Base(r.URL.Path)))
	}))
	defer srv.Close()
	index := helmrepo.NewIndexFile()
	digest, _ := provenance.DigestFile(archive)
	if err := index.MustAdd(chart.Metadata, filepath.Base(archive), srv.URL, digest); err != nil {
		t.Fatal(err)
	}
	if err := index.WriteFile(filepath.Join(dir, "index.yaml"), 0o644); err != nil {
		t.Fatal(err)
	}
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	up := gitserver.New(t)
	commit := up.Commit("main", map[string]string{"web/fleet.yaml": "helm:\n  repo: " + srv.URL + "\n  chart: greeter\n"})
	url := up.ServeHTTP("", "").URL + "/repo.git"
	if err := h.c.Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "charts", Namespace: h.goodNS},
		StringData: map[string]string{"username": "charts", "password": "chart-token"}}); err != nil {
		t.Fatal(err)
	}
	// Without a server named for them, the credentials go nowhere, and the GitRepo says so.
	unscoped := h.createRepo(h.goodNS, "unscoped", url, func(s *v1alpha1.GitRepoSpec) {
		s.HelmSecretRef, s.CABundle = &v1alpha1.LocalObjectReference{Name: "charts"}, ca
	})
	if msg := h.renderFailure(unscoped); !strings.Contains(msg, "spec.helmSecretRef: name the chart server its credentials are for in spec.helmRepoURL") {
		t.Errorf("credentials without a server: %q", msg)
	}
	owner := h.createRepo(h.goodNS, "charts", url, func(s *v1alpha1.GitRepoSpec) {
		s.HelmSecretRef, s.HelmRepoURL, s.CABundle = &v1alpha1.LocalObjectReference{Name: "charts"}, srv.URL, ca
	})
	waitFor(t, h.c, owner, "rendered with the GitRepo's credentials", func(r *v1alpha1.GitRepo) bool { return r.Status.Commit == commit })
	other := h.createRepo(h.ns, "charts", url, func(s *v1alpha1.GitRepoSpec) { s.CABundle = ca })
	if msg := h.renderFailure(other); !strings.Contains(msg, "web/fleet.yaml: helm.chart:") || !strings.Contains(msg, "authentication failed") {
		t.Errorf("without credentials: %q", msg)
	}
}

// Webhook senders, against the real hub: two tenants follow one repository, each with its own
// webhook secret, and a third without one. A delivery signed with one tenant's secret makes the
// hub poll that tenant's GitRepo alone; an unsigned or wrongly signed delivery gets 401 and
// triggers nothing; no response names a GitRepo. A flood of deliveries costs the API server
// nothing: no list of GitRepos, and each webhook secret read at most once per SecretTTL.
func TestHostileWebhookSenders(t *testing.T) {
	requests := &requestCounter{}
	cfg := rest.CopyConfig(hubCluster.Config())
	cfg.Wrap(requests.wrap)
	c, webhook := startHub(t, Options{Config: cfg})
	ctx := context.Background()
	up := gitserver.New(t)
	up.Commit("main", map[string]string{"app/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n"})
	url := up.ServeHTTP("", "").URL + "/repo.git"
	keys := map[string]client.ObjectKey{}
	for _, tenant := range []string{"alpha", "beta", "open"} {
		ns := namespace(t, c)
		repo := &v1alpha1.GitRepo{ObjectMeta: metav1.ObjectMeta{Name: "fleet", Namespace: ns}, Spec: v1alpha1.GitRepoSpec{
			Repo: url, PollingInterval: &metav1.Duration{Duration: time.Hour}}}
		if tenant != "open" {
			if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "hook", Namespace: ns},
				StringData: map[string]string{"token": tenant + "-secret"}}); err != nil {
				t.Fatal(err)
			}
			repo.Spec.WebhookSecretRef = &v1alpha1.LocalObjectReference{Name: "hook"}
		}
		if err := c.Create(ctx, repo); err != nil {
			t.Fatal(err)
		}
		keys[tenant] = client.ObjectKeyFromObject(repo)
		waitFor(t, c, keys[tenant], "the first poll", func(r *v1alpha1.GitRepo) bool { return r.Status.Commit != "" })
	}
	body := fmt.Sprintf(`{"ref":"refs/heads/main","repository":{"clone_url":%q}}`, url)
	for what, secret := range map[string]string{"unsigned": "", "signed with a guess": "guess"} {
		if code, out := deliverPush(t, webhook, body, secret); code != http.StatusUnauthorized || strings.Contains(out, "fleet") {
			t.Errorf("%s: %d %q, want 401 naming nothing", what, code, out)
		}
	}

	// A flood, for the followed repository and for one nobody follows.
	requests.reset()
	flooded := time.Now()
	unknown := fmt.Sprintf(`{"ref":"refs/heads/main","repository":{"clone_url":%q}}`, "https://git.example/nobody/follows.git")
	for i := 0; i < 50; i++ {
		for _, b := range []string{body, unknown} {
			if code, _ := deliverPush(t, webhook, b, fmt.Sprint("guess-", i)); code != http.StatusUnauthorized {
				t.Fatalf("flooding delivery %d: %d, want 401", i, code)
			}
		}
	}
	lists, secretReads := requests.count("list", "gitrepos"), requests.count("get", "secrets")
	// Two tenants' secrets, each read at most once per SecretTTL while the flood lasted.
	if allowed := 2 * int(1+time.Since(flooded)/webhooks.SecretTTL); lists != 0 || secretReads > allowed {
		t.Errorf("100 refused deliveries cost the API server %d lists of gitrepos and %d secret reads, want none and at most %d", lists, secretReads, allowed)
	}
	code, out := deliverPush(t, webhook, body, "alpha-secret")
	if code != http.StatusAccepted || strings.Contains(out, "fleet") || strings.Contains(out, keys["alpha"].Namespace) {
		t.Fatalf("alpha's delivery: %d %q", code, out)
	}
	waitFor(t, c, keys["alpha"], "alpha polled on its webhook", func(r *v1alpha1.GitRepo) bool { return r.Status.LastWebhookTime != nil })
	for _, tenant := range []string{"beta", "open"} {
		var r v1alpha1.GitRepo
		if err := c.Get(ctx, keys[tenant], &r); err != nil {
			t.Fatal(err)
		}
		if r.Status.LastWebhookTime != nil {
			t.Errorf("%s was triggered by alpha's delivery", tenant)
		}
	}
}

// requestCounter counts a client's reads of the API server: lists and gets, by resource.
type requestCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *requestCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		if parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/"); req.Method == http.MethodPatch && len(parts) >= 2 && parts[len(parts)-2] == "gitrepos" {
			r.mu.Lock()
			if r.n == nil {
				r.n = map[string]int{}
			}
			r.n["patch gitrepos"]++ // of the object (a status write's path ends in /status)
			r.mu.Unlock()
		}
		if req.Method == http.MethodGet && req.URL.Query().Get("watch") != "true" {
			// .../<resource> lists, .../<resource>/<name> gets (no subresource is read here).
			parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
			verb, resource := "list", parts[len(parts)-1]
			if len(parts) >= 2 && (parts[len(parts)-2] == "secrets" || parts[len(parts)-2] == "gitrepos") {
				verb, resource = "get", parts[len(parts)-2]
			}
			r.mu.Lock()
			if r.n == nil {
				r.n = map[string]int{}
			}
			r.n[verb+" "+resource]++
			r.mu.Unlock()
		}
		return rt.RoundTrip(req)
	})
}

func (r *requestCounter) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n = nil
}

func (r *requestCounter) count(verb, resource string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[verb+" "+resource]
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// Every replica of every shard receives webhooks: a delivery that reaches a hub which does not
// follow the GitRepo (another shard's) is forwarded to the hub that does, which polls at once.
func TestWebhookForAnotherShardIsForwarded(t *testing.T) {
	up := gitserver.New(t)
	up.Commit("main", map[string]string{"app/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n"})
	url := up.ServeHTTP("", "").URL + "/repo.git"
	requests := &requestCounter{}
	cfg := rest.CopyConfig(hubCluster.Config())
	cfg.Wrap(requests.wrap)
	c, defaultShard := startHub(t, Options{Config: cfg})
	startHub(t, Options{Shard: "east"})
	ctx := context.Background()
	ns := namespace(t, c)
	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "hook", Namespace: ns}, StringData: map[string]string{"token": "east-secret"}}); err != nil {
		t.Fatal(err)
	}
	repo := &v1alpha1.GitRepo{ObjectMeta: metav1.ObjectMeta{Name: "fleet", Namespace: ns, Labels: map[string]string{v1alpha1.ShardLabel: "east"}},
		Spec: v1alpha1.GitRepoSpec{Repo: url, PollingInterval: &metav1.Duration{Duration: time.Hour}, WebhookSecretRef: &v1alpha1.LocalObjectReference{Name: "hook"}}}
	if err := c.Create(ctx, repo); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(repo)
	waitFor(t, c, key, "the east shard's first poll", func(r *v1alpha1.GitRepo) bool { return r.Status.Commit != "" })

	second := up.Commit("main", map[string]string{"app/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\n"})
	pushed := func(commit string) string {
		return fmt.Sprintf(`{"ref":"refs/heads/main","after":%q,"repository":{"clone_url":%q}}`, commit, url)
	}
	body := pushed(second)
	if code, _ := deliverPush(t, defaultShard, body, "east-secret"); code != http.StatusAccepted {
		t.Fatalf("the default shard answered the east shard's delivery with %d, want 202", code)
	}
	got := waitFor(t, c, key, "the east shard polled on the forwarded delivery", func(r *v1alpha1.GitRepo) bool {
		return r.Status.Commit == second && r.Status.LastWebhookTime != nil
	})
	if got.Annotations[sources.AnnotationWebhookForwarded] == "" {
		t.Errorf("the GitRepo carries no %s: the delivery was not forwarded", sources.AnnotationWebhookForwarded)
	}

	// The first delivery sent again, thirty times: answered as before, forwarded never (the
	// receiver drops replays of a signed delivery within its window).
	requests.reset()
	for range 30 {
		if code, _ := deliverPush(t, defaultShard, body, "east-secret"); code != http.StatusAccepted {
			t.Fatalf("a replayed delivery: %d", code)
		}
	}
	// A burst of deliveries costs a write per ForwardEvery, and its last is forwarded: the
	// push it announces is polled without waiting for the next poll. Distinct deliveries of
	// one push (a forge's redelivery carries the same body: only the first counts).
	third := up.Commit("main", map[string]string{"app/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n"})
	if n := requests.count("patch", "gitrepos"); n != 0 {
		t.Errorf("30 replays of a delivery cost %d forwarding writes, want none", n)
	}
	start := time.Now()
	for i := range 30 {
		burst := fmt.Sprintf(`{"ref":"refs/heads/main","after":%q,"delivery":%d,"repository":{"clone_url":%q}}`, third, i, url)
		if code, _ := deliverPush(t, defaultShard, burst, "east-secret"); code != http.StatusAccepted {
			t.Fatalf("a delivery of the burst: %d", code)
		}
	}
	burst := time.Since(start)
	waitFor(t, c, key, "the east shard polled the burst's push", func(r *v1alpha1.GitRepo) bool { return r.Status.Commit == third })
	waitUntil(t, "the burst forwarded", func() bool { return requests.count("patch", "gitrepos") >= 1 })
	if n, most := requests.count("patch", "gitrepos"), int(burst/sources.ForwardEvery)+2; n > most {
		t.Errorf("30 deliveries in %s cost %d forwarding writes, want at most %d", burst.Round(time.Millisecond), n, most)
	}
}
