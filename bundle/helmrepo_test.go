package bundle

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/provenance"
	"helm.sh/helm/v3/pkg/repo"
)

// chartRepo is a Helm repository served on loopback with basic auth, holding the given charts.
type chartRepo struct {
	*httptest.Server
	downloads atomic.Int32
}

func newChartRepo(t *testing.T, user, pass string, charts ...*chart.Chart) *chartRepo {
	t.Helper()
	dir := t.TempDir()
	cr := &chartRepo{}
	cr.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != user || p != pass {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		if strings.HasSuffix(r.URL.Path, ".tgz") {
			cr.downloads.Add(1)
		}
		http.ServeFile(w, r, filepath.Join(dir, filepath.Base(r.URL.Path)))
	}))
	t.Cleanup(cr.Close)
	index := repo.NewIndexFile()
	for _, ch := range charts {
		archive, err := chartutil.Save(ch, dir)
		if err != nil {
			t.Fatal(err)
		}
		digest, err := provenance.DigestFile(archive)
		if err != nil {
			t.Fatal(err)
		}
		if err := index.MustAdd(ch.Metadata, filepath.Base(archive), cr.URL, digest); err != nil {
			t.Fatal(err)
		}
	}
	if err := index.WriteFile(filepath.Join(dir, "index.yaml"), 0o644); err != nil {
		t.Fatal(err)
	}
	return cr
}

func configMapChart(name, version string) *chart.Chart {
	return &chart.Chart{
		Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: name, Version: version},
		Values:   map[string]any{"greeting": "hello"},
		Templates: []*chart.File{{Name: "templates/cm.yaml", Data: []byte(
			"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-{{ .Chart.Name }}\ndata:\n  version: {{ .Chart.Version | quote }}\n  greeting: {{ .Values.greeting | quote }}\n")}},
	}
}

func writeRepo(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func renderOnly(t *testing.T, root string, opts RendererOptions, target Target) (*Rendered, error) {
	t.Helper()
	sources, err := Discover(root, "repo", nil)
	if err != nil {
		return nil, err
	}
	if len(sources) != 1 {
		t.Fatalf("want one bundle, found %d", len(sources))
	}
	r, err := NewRenderer(root, opts)
	if err != nil {
		t.Fatal(err)
	}
	return r.Render(context.Background(), &sources[0], target)
}

func TestHelmChartFromRepositoryWithBasicAuth(t *testing.T) {
	srv := newChartRepo(t, "fleet", "s3cret", configMapChart("greeter", "1.2.0"), configMapChart("greeter", "1.3.1"), configMapChart("greeter", "2.0.0"))
	root := writeRepo(t, map[string]string{"fleet.yaml": "helm:\n  repo: " + srv.URL + "\n  chart: greeter\n  version: \"~1.3\"\n  values: {greeting: hi}\n"})
	creds := ChartAccess{Username: "fleet", Password: "s3cret", CredentialsFor: forServer(t, srv.URL)}
	cache := t.TempDir()
	res, err := renderOnly(t, root, RendererOptions{Charts: &ChartFetcher{CacheDir: cache, Access: creds}}, Target{ClusterName: "c1"})
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	if m := string(res.Manifest); !strings.Contains(m, `version: 1.3.1`) || !strings.Contains(m, "greeting: hi") || !strings.Contains(m, "name: repo-greeter") {
		t.Errorf("manifest:\n%s", m)
	}
	// The archive is cached by digest: a new fetcher on the same cache does not download again.
	if _, err := renderOnly(t, root, RendererOptions{Charts: &ChartFetcher{CacheDir: cache, Access: creds}}, Target{ClusterName: "c1"}); err != nil {
		t.Fatal(err)
	}
	if n := srv.downloads.Load(); n != 1 {
		t.Errorf("chart downloaded %d times, want 1", n)
	}
	// Wrong credentials: a clear error naming the field, without the password.
	_, err = renderOnly(t, root, RendererOptions{Charts: &ChartFetcher{Access: ChartAccess{Username: "fleet", Password: "wrong", CredentialsFor: forServer(t, srv.URL)}}}, Target{ClusterName: "c1"})
	if err == nil || !strings.Contains(err.Error(), "fleet.yaml: helm.chart") || !strings.Contains(err.Error(), "authentication failed") || strings.Contains(err.Error(), "wrong") {
		t.Errorf("error = %v", err)
	}
	// A constraint nothing satisfies.
	root2 := writeRepo(t, map[string]string{"fleet.yaml": "helm:\n  repo: " + srv.URL + "\n  chart: greeter\n  version: \">=3\"\n"})
	if _, err := renderOnly(t, root2, RendererOptions{Charts: &ChartFetcher{Access: creds}}, Target{}); err == nil || !strings.Contains(err.Error(), "greeter >=3 not found") {
		t.Errorf("error = %v", err)
	}
}

func TestHelmDependencyFromRepository(t *testing.T) {
	srv := newChartRepo(t, "u", "p", configMapChart("lib", "0.4.2"))
	root := writeRepo(t, map[string]string{
		"Chart.yaml":             "apiVersion: v2\nname: app\nversion: 1.0.0\ndependencies:\n- name: lib\n  version: ^0.4.0\n  repository: " + srv.URL + "\n",
		"templates/app.yaml":     "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app}\ndata: {a: b}\n",
		"fleet.yaml":             "defaultNamespace: apps\n",
		"charts/.gitkeep":        "",
		"templates/_helpers.tpl": "{{- define \"x\" -}}x{{- end -}}\n",
	})
	res, err := renderOnly(t, root, RendererOptions{Charts: &ChartFetcher{Access: ChartAccess{Username: "u", Password: "p", CredentialsFor: forServer(t, srv.URL)}}}, Target{})
	if err != nil {
		t.Fatal(err)
	}
	if m := string(res.Manifest); !strings.Contains(m, "name: repo-lib") || !strings.Contains(m, "namespace: apps") {
		t.Errorf("dependency not rendered:\n%s", m)
	}
	// disableDependencyUpdate: the missing dependency is an error.
	if err := os.WriteFile(filepath.Join(root, "fleet.yaml"), []byte("helm: {disableDependencyUpdate: true}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := renderOnly(t, root, RendererOptions{}, Target{}); err == nil || !strings.Contains(err.Error(), "dependency lib is not in charts/") {
		t.Errorf("error = %v", err)
	}
}

// A chart repository's index is read again after IndexTTL: a version published later is picked
// up by the same fetcher without a restart.
func TestHelmRepositoryIndexExpires(t *testing.T) {
	dir := t.TempDir()
	var indexReads atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "index.yaml") {
			indexReads.Add(1)
		}
		http.ServeFile(w, r, filepath.Join(dir, filepath.Base(r.URL.Path)))
	}))
	defer srv.Close()
	publish := func(versions ...string) {
		index := repo.NewIndexFile()
		for _, v := range versions {
			archive, err := chartutil.Save(configMapChart("greeter", v), dir)
			if err != nil {
				t.Fatal(err)
			}
			digest, _ := provenance.DigestFile(archive)
			if err := index.MustAdd(configMapChart("greeter", v).Metadata, filepath.Base(archive), srv.URL, digest); err != nil {
				t.Fatal(err)
			}
		}
		if err := index.WriteFile(filepath.Join(dir, "index.yaml"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	publish("1.0.0")
	f := &ChartFetcher{IndexTTL: time.Nanosecond}
	version := func() string {
		ch, err := f.FromRepository(context.Background(), srv.URL, "greeter", "")
		if err != nil {
			t.Fatal(err)
		}
		return ch.Metadata.Version
	}
	if v := version(); v != "1.0.0" {
		t.Fatalf("version %s", v)
	}
	publish("1.0.0", "1.1.0")
	if v := version(); v != "1.1.0" {
		t.Errorf("after the TTL the fetcher still sees %s", v)
	}
	cached := &ChartFetcher{IndexTTL: time.Hour}
	for range 3 {
		if _, err := cached.FromRepository(context.Background(), srv.URL, "greeter", ""); err != nil {
			t.Fatal(err)
		}
	}
	if n := indexReads.Load(); n != 3 {
		t.Errorf("index read %d times, want 3 (two with a TTL of 1ns, one within an hour's TTL)", n)
	}
}

// With an allow-list of chart hosts, a chart, a dependency or a registry elsewhere is refused
// A closed fetcher (the hub's, the preview's) reaches no chart server until one is listed, and
// any with "*"; an open one (a person rendering their own repository) reaches any.
func TestAClosedFetcherReachesOnlyListedChartHosts(t *testing.T) {
	var contacted atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { contacted.Add(1); http.NotFound(w, nil) }))
	defer srv.Close()
	for _, tc := range []struct {
		name    string
		f       *ChartFetcher
		reached bool
	}{
		{"closed, nothing listed", &ChartFetcher{Closed: true}, false},
		{"closed, another host listed", &ChartFetcher{Closed: true, AllowedHosts: []string{"charts.example.com"}}, false},
		{"closed, every host", &ChartFetcher{Closed: true, AllowedHosts: []string{"*"}}, true},
		{"open", &ChartFetcher{}, true},
	} {
		before := contacted.Load()
		_, err := tc.f.FromRepository(context.Background(), srv.URL, "greeter", "")
		if reached := contacted.Load() > before; reached != tc.reached {
			t.Errorf("%s: reached %v (%v), want %v", tc.name, reached, err, tc.reached)
		}
		if !tc.reached && (err == nil || !strings.Contains(err.Error(), "--allowed-chart-hosts")) {
			t.Errorf("%s: %v, want the flag that allows it named", tc.name, err)
		}
	}
}

// before any request is sent.
func TestChartHostsOutsideTheAllowListAreNeverContacted(t *testing.T) {
	srv := newChartRepo(t, "u", "p", configMapChart("greeter", "1.0.0"))
	var contacted atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { contacted.Add(1) }))
	defer other.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	f := &ChartFetcher{AllowedHosts: []string{host}, Access: ChartAccess{Username: "u", Password: "p", CredentialsFor: forServer(t, srv.URL)}}
	if _, err := f.FromRepository(context.Background(), srv.URL, "greeter", ""); err != nil {
		t.Fatalf("the allowed host: %v", err)
	}
	for _, try := range []func() error{
		func() error { _, err := f.FromRepository(context.Background(), other.URL, "greeter", ""); return err },
		func() error {
			_, err := f.FromOCI(context.Background(), "oci://"+strings.TrimPrefix(other.URL, "http://")+"/charts/greeter", "1.0.0")
			return err
		},
	} {
		if err := try(); err == nil || !strings.Contains(err.Error(), "is not among the hosts the operator allows") {
			t.Errorf("error = %v", err)
		}
	}
	root := writeRepo(t, map[string]string{
		"Chart.yaml": "apiVersion: v2\nname: app\nversion: 1.0.0\ndependencies:\n- name: lib\n  version: ^0.4.0\n  repository: " + other.URL + "\n",
		"fleet.yaml": "{}\n",
	})
	if _, err := renderOnly(t, root, RendererOptions{Charts: f}, Target{}); err == nil || !strings.Contains(err.Error(), "fleet.yaml: helm.chart: dependency lib") {
		t.Errorf("dependency elsewhere: %v", err)
	}
	if n := contacted.Load(); n != 0 {
		t.Errorf("the host outside the allow-list received %d requests", n)
	}
}

// The GitRepo's CA bundle is trusted for chart servers; credentials go only to the servers the
// GitRepo's helmRepoURLRegex matches; archives fetched with credentials are cached apart.
func TestChartAccessCABundleAndCredentialScope(t *testing.T) {
	var authSeen atomic.Int32
	dir := t.TempDir()
	archive, err := chartutil.Save(configMapChart("greeter", "1.0.0"), dir)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, _, ok := r.BasicAuth(); ok {
			authSeen.Add(1)
		}
		http.ServeFile(w, r, filepath.Join(dir, filepath.Base(r.URL.Path)))
	}))
	defer srv.Close()
	digest, _ := provenance.DigestFile(archive)
	index := repo.NewIndexFile()
	if err := index.MustAdd(configMapChart("greeter", "1.0.0").Metadata, filepath.Base(archive), srv.URL, digest); err != nil {
		t.Fatal(err)
	}
	if err := index.WriteFile(filepath.Join(dir, "index.yaml"), 0o644); err != nil {
		t.Fatal(err)
	}
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	base := &ChartFetcher{CacheDir: t.TempDir()}
	if _, err := base.For(ChartAccess{}).FromRepository(context.Background(), srv.URL, "greeter", ""); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("an untrusted server was accepted: %v", err)
	}
	scoped := base.For(ChartAccess{Username: "u", Password: "p", CABundle: ca, CredentialsFor: ForURLsMatching(regexp.MustCompile(`https://charts\.example\.com/.*`))})
	if _, err := scoped.FromRepository(context.Background(), srv.URL, "greeter", ""); err != nil {
		t.Fatalf("with the CA bundle: %v", err)
	}
	if n := authSeen.Load(); n != 0 {
		t.Errorf("credentials were sent to a server helmRepoURLRegex does not match (%d requests)", n)
	}
	withCreds := base.For(ChartAccess{Username: "u", Password: "p", CABundle: ca, CredentialsFor: forServer(t, srv.URL)})
	anonymous := base.For(ChartAccess{CABundle: ca})
	if withCreds.archiveFile(digest) == anonymous.archiveFile(digest) {
		t.Errorf("archives fetched with and without credentials share a cache file")
	}
}

// A chart archive named by its URL is downloaded; one that cannot be reached says so (the
// chart is not looked for as a path of the repository, which "does not exist").
func TestHelmChartFromAnArchiveURL(t *testing.T) {
	srv := newChartRepo(t, "u", "p", configMapChart("greeter", "1.0.0"))
	root := writeRepo(t, map[string]string{"fleet.yaml": "helm:\n  chart: " + srv.URL + "/greeter-1.0.0.tgz\n"})
	res, err := renderOnly(t, root, RendererOptions{Charts: &ChartFetcher{Access: ChartAccess{Username: "u", Password: "p", CredentialsFor: forServer(t, srv.URL)}}}, Target{ClusterName: "c1"})
	if err != nil || !strings.Contains(string(res.Manifest), "version: 1.0.0") {
		t.Fatalf("render: %v\n%v", err, res)
	}
	unreachable := httptest.NewServer(http.NotFoundHandler())
	unreachable.Close() // nothing listens there any more
	root = writeRepo(t, map[string]string{"fleet.yaml": "helm:\n  chart: " + unreachable.URL + "/greeter-1.0.0.tgz\n"})
	_, err = renderOnly(t, root, RendererOptions{Charts: &ChartFetcher{}}, Target{ClusterName: "c1"})
	if err == nil || !strings.Contains(err.Error(), "fleet.yaml: helm.chart: failed to fetch "+unreachable.URL) || strings.Contains(err.Error(), "does not exist") {
		t.Errorf("error = %v, want the failed download named", err)
	}
}

func forServer(t *testing.T, server string) func(string) bool {
	t.Helper()
	f, err := ForServer(server)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// The servers a GitRepo's chart credentials go to are an allow-list of the operator's: one
// server exactly (scheme and host with port), or URLs a pattern matches as a whole over https
// and oci; nothing else, and nothing without a scope.
func TestChartCredentialsGoOnlyWhereTheOperatorSaid(t *testing.T) {
	exact := forServer(t, "https://charts.example.com")
	pattern := ForURLsMatching(regexp.MustCompile(`https://charts\.example\.com(/.*)?`))
	plain := forServer(t, "http://127.0.0.1:8080")
	for _, c := range []struct {
		url                     string
		exact, pattern, asPlain bool
	}{
		{"https://charts.example.com", true, true, false},
		{"https://charts.example.com/stable/index.yaml", true, true, false},
		{"https://CHARTS.example.com/x", true, false, false},
		{"http://charts.example.com", false, false, false},              // the scheme, exactly
		{"https://charts.example.com:8443", false, false, false},        // the port, exactly
		{"https://charts.example.com.evil.test/x", false, false, false}, // an unanchored pattern admitted this
		{"https://evil.test/https://charts.example.com/", false, false, false},
		{"https://user@charts.example.com/", true, false, false},
		{"oci://charts.example.com/x", false, false, false},
		{"http://127.0.0.1:8080/index.yaml", false, false, true},
		{"http://127.0.0.1:8081/index.yaml", false, false, false},
	} {
		if got := exact(c.url); got != c.exact {
			t.Errorf("ForServer(https://charts.example.com)(%s) = %v", c.url, got)
		}
		if got := pattern(c.url); got != c.pattern {
			t.Errorf("ForURLsMatching(%s) = %v", c.url, got)
		}
		if got := plain(c.url); got != c.asPlain {
			t.Errorf("ForServer(http://127.0.0.1:8080)(%s) = %v", c.url, got)
		}
	}
	if _, _, ok := (ChartAccess{Username: "u", Password: "p"}).credentials("https://charts.example.com"); ok {
		t.Errorf("credentials without a scope were sent")
	}
	for _, bad := range []string{"charts.example.com", "ftp://charts.example.com", "https://u:p@charts.example.com", "https://"} {
		if _, err := ForServer(bad); err == nil {
			t.Errorf("ForServer(%q) accepted", bad)
		}
	}
}
