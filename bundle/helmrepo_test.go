package bundle

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

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
	creds := func(string) (string, string, bool) { return "fleet", "s3cret", true }
	cache := t.TempDir()
	res, err := renderOnly(t, root, RendererOptions{Charts: &ChartFetcher{CacheDir: cache, Credentials: creds}}, Target{ClusterName: "c1"})
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	if m := string(res.Manifest); !strings.Contains(m, `version: 1.3.1`) || !strings.Contains(m, "greeting: hi") || !strings.Contains(m, "name: repo-greeter") {
		t.Errorf("manifest:\n%s", m)
	}
	// The archive is cached by digest: a new fetcher on the same cache does not download again.
	if _, err := renderOnly(t, root, RendererOptions{Charts: &ChartFetcher{CacheDir: cache, Credentials: creds}}, Target{ClusterName: "c1"}); err != nil {
		t.Fatal(err)
	}
	if n := srv.downloads.Load(); n != 1 {
		t.Errorf("chart downloaded %d times, want 1", n)
	}
	// Wrong credentials: a clear error naming the field, without the password.
	_, err = renderOnly(t, root, RendererOptions{Charts: &ChartFetcher{Credentials: func(string) (string, string, bool) { return "fleet", "wrong", true }}}, Target{ClusterName: "c1"})
	if err == nil || !strings.Contains(err.Error(), "fleet.yaml: helm.chart") || !strings.Contains(err.Error(), "authentication failed") || strings.Contains(err.Error(), "wrong") {
		t.Errorf("error = %v", err)
	}
	// A constraint nothing satisfies.
	root2 := writeRepo(t, map[string]string{"fleet.yaml": "helm:\n  repo: " + srv.URL + "\n  chart: greeter\n  version: \">=3\"\n"})
	if _, err := renderOnly(t, root2, RendererOptions{Charts: &ChartFetcher{Credentials: creds}}, Target{}); err == nil || !strings.Contains(err.Error(), "greeter >=3 not found") {
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
	res, err := renderOnly(t, root, RendererOptions{Charts: &ChartFetcher{Credentials: func(string) (string, string, bool) { return "u", "p", true }}}, Target{})
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
