package bundle

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// canary is a file outside every checkout whose content must never come out of a render.
type canary struct {
	dir, file, secret string
}

func newCanary(t testing.TB) canary {
	t.Helper()
	dir := t.TempDir()
	c := canary{dir: dir, file: filepath.Join(dir, "token"), secret: fmt.Sprintf("CANARY-%d", os.Getpid())}
	if err := os.WriteFile(c.file, []byte(c.secret), 0o600); err != nil {
		t.Fatal(err)
	}
	// A chart and a manifest beside it, for attacks that point a whole directory outside.
	for name, content := range map[string]string{
		"Chart.yaml":        "apiVersion: v2\nname: stolen\nversion: 1.0.0\n",
		"templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: stolen}\ndata: {token: " + c.secret + "}\n",
		"cm.yaml":           "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: stolen}\ndata: {token: " + c.secret + "}\n",
	} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

func symlink(t testing.TB, target, link string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// renderEverything discovers and renders every bundle of root, returning what came out and the
// first error.
func renderEverything(root string, paths []string) (string, error) {
	sources, err := Discover(root, "repo", paths)
	if err != nil {
		return "", err
	}
	r, err := NewRenderer(root, RendererOptions{})
	if err != nil {
		return "", err
	}
	defer r.Close()
	var out strings.Builder
	for i := range sources {
		res, err := r.Render(context.Background(), &sources[i], Target{ClusterName: "c"})
		if err != nil {
			return out.String(), err
		}
		out.Write(res.Manifest)
	}
	return out.String(), nil
}

// A repository author tries every way of laying symlinks to make the hub read a host file (its
// service-account token, say) or another tenant's checkout. Each attempt is refused with an
// error that names the file, the field and the link, and nothing of the target comes out.
func TestHostileCheckoutCannotReadOutside(t *testing.T) {
	cases := []struct {
		name  string
		files map[string]string
		links map[string]string // link → target; "CANARY" stands for the canary's directory
		paths []string
		want  []string
	}{
		{"chart directory symlinked to a directory of links",
			map[string]string{"app/fleet.yaml": "helm: {chart: ./chart}\n",
				"real/Chart.yaml":        "apiVersion: v2\nname: c\nversion: 1.0.0\n",
				"real/templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {leak: {{ .Files.Get \"leak\" | quote }}}\n"},
			map[string]string{"app/chart": "../real", "real/leak": "CANARY/token"},
			[]string{"app"}, []string{"app/fleet.yaml: helm.chart:", "real/leak is a symlink to", "which leaves the repository"}},
		{"chart directory symlinked outside",
			map[string]string{"app/fleet.yaml": "helm: {chart: ./chart}\n"},
			map[string]string{"app/chart": "CANARY"},
			nil, []string{"app/fleet.yaml: helm.chart:", "app/chart is a symlink to", "which leaves the repository"}},
		{"relative link climbing out of a chart",
			map[string]string{"app/fleet.yaml": "helm: {chart: .}\n", "app/Chart.yaml": "apiVersion: v2\nname: c\nversion: 1.0.0\n"},
			map[string]string{"app/files/leak": "../../../../../../../../../../../../CANARY/token"},
			nil, []string{"app/fleet.yaml: helm.chart:", "app/files/leak is a symlink to", "which leaves the repository"}},
		{"values file through a symlinked directory",
			map[string]string{"app/fleet.yaml": "helm: {chart: ., valuesFiles: [v/token]}\n", "app/Chart.yaml": "apiVersion: v2\nname: c\nversion: 1.0.0\n"},
			map[string]string{"app/v": "CANARY"},
			nil, []string{"app/fleet.yaml: helm.valuesFiles[0]:", "app/v is a symlink to"}},
		{"paths glob through a symlinked directory",
			map[string]string{"mine/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: mine}\n"},
			map[string]string{"tenants": "CANARY/.."},
			[]string{"tenants/*"}, []string{`paths: "tenants/*"`, "tenants is a symlink to", "which leaves the repository"}},
		{"manifest symlinked outside",
			map[string]string{"app/fleet.yaml": "{}\n", "app/ok.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ok}\n"},
			map[string]string{"app/stolen.yaml": "CANARY/cm.yaml"},
			nil, []string{"app/stolen.yaml is a symlink to", "which leaves the repository"}},
		{"kustomize resource through a symlink",
			map[string]string{"app/fleet.yaml": "kustomize: {dir: k}\n", "app/k/kustomization.yaml": "resources: [stolen/cm.yaml]\n"},
			map[string]string{"app/k/stolen": "CANARY"},
			nil, []string{"app/k/kustomization.yaml: resources[0]:", "app/k/stolen is a symlink to"}},
		{"kustomize generator file through a symlink",
			map[string]string{"app/fleet.yaml": "kustomize: {dir: k}\n", "app/k/kustomization.yaml": "configMapGenerator:\n- name: g\n  files: [token=t]\n"},
			map[string]string{"app/k/t": "CANARY/token"},
			nil, []string{"app/k/kustomization.yaml: configMapGenerator[0].files[0]:", "app/k/t is a symlink to"}},
		{"absolute link to a file inside the checkout's own directory",
			map[string]string{"app/fleet.yaml": "{}\n", "app/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ok}\n"},
			map[string]string{"app/abs.yaml": "ROOT/app/cm.yaml"},
			nil, []string{"app/abs.yaml is a symlink to", "which leaves the repository"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			can := newCanary(t)
			root := writeRepo(t, c.files)
			for link, target := range c.links {
				target = strings.Replace(target, "CANARY", can.dir, 1)
				target = strings.Replace(target, "ROOT", root, 1)
				symlink(t, target, filepath.Join(root, filepath.FromSlash(link)))
			}
			out, err := renderEverything(root, c.paths)
			if err == nil {
				t.Fatalf("no error; rendered:\n%s", out)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if strings.Contains(out, can.secret) || strings.Contains(err.Error(), can.secret) || strings.Contains(out, "stolen") {
				t.Errorf("the canary leaked: err %v, rendered:\n%s", err, out)
			}
		})
	}
}

// Symlinks that stay inside the checkout keep working, as they do in git: a symlinked chart
// directory, values file, manifest and kustomize resource.
func TestSymlinksInsideTheCheckoutWork(t *testing.T) {
	root := writeRepo(t, map[string]string{
		"shared/chart/Chart.yaml":        "apiVersion: v2\nname: c\nversion: 1.0.0\n",
		"shared/chart/templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: chart}\ndata: {size: {{ .Values.size | quote }}, file: {{ .Files.Get \"extra/note\" | quote }}}\n",
		"shared/values.yaml":             "size: large\n",
		"shared/note":                    "hello",
		"shared/cm.yaml":                 "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: plain}\n",
		"helm/fleet.yaml":                "helm: {chart: ./chart, valuesFiles: [values.yaml]}\n",
		"plain/fleet.yaml":               "{}\n",
		"kust/fleet.yaml":                "{}\n",
		"kust/kustomization.yaml":        "resources: [linked.yaml]\n",
	})
	symlink(t, "../shared/chart", filepath.Join(root, "helm", "chart"))
	symlink(t, "../shared/values.yaml", filepath.Join(root, "helm", "values.yaml"))
	symlink(t, "../../note", filepath.Join(root, "shared", "chart", "extra", "note"))
	symlink(t, "../shared/cm.yaml", filepath.Join(root, "plain", "cm.yaml"))
	symlink(t, "../shared/cm.yaml", filepath.Join(root, "kust", "linked.yaml"))
	out, err := renderEverything(root, []string{"helm", "plain", "kust"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"name: chart", "size: large", "file: hello", "name: plain"} {
		if !strings.Contains(out, want) {
			t.Errorf("rendered output lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "name: plain"); n != 2 {
		t.Errorf("the linked manifest came out %d times, want once per bundle (2):\n%s", n, out)
	}
}

// Kustomize fetches URLs given almost anywhere in a kustomization. None of them may make the
// hub reach the network: each is refused by file and field before Kustomize runs, and the
// server behind the URL receives no request.
func TestKustomizeReachesNoNetwork(t *testing.T) {
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		requests.Add(1)
		fmt.Fprint(w, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: fetched}\n")
	}))
	defer srv.Close()
	u := srv.URL + "/x.yaml"
	cm := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: base}\n"
	cases := map[string]struct{ kustomization, field string }{
		"resource":           {"resources: [" + u + "]\n", "resources[0]"},
		"generator file":     {"resources: [cm.yaml]\nconfigMapGenerator:\n- name: g\n  files: [k=" + u + "]\n", "configMapGenerator[0].files[0]"},
		"generator env":      {"resources: [cm.yaml]\nsecretGenerator:\n- name: g\n  envs: [" + u + "]\n", "secretGenerator[0].envs[0]"},
		"patch path":         {"resources: [cm.yaml]\npatches:\n- path: " + u + "\n", "patches[0].path"},
		"strategic patch":    {"resources: [cm.yaml]\npatchesStrategicMerge: [" + u + "]\n", "patchesStrategicMerge[0]"},
		"json patch":         {"resources: [cm.yaml]\npatchesJson6902:\n- target: {kind: ConfigMap, name: base}\n  path: " + u + "\n", "patchesJson6902[0].path"},
		"openapi":            {"resources: [cm.yaml]\nopenapi: {path: " + u + "}\n", "openapi.path"},
		"component":          {"resources: [cm.yaml]\ncomponents: [" + u + "]\n", "components[0]"},
		"transformer config": {"resources: [cm.yaml]\ntransformers: [" + u + "]\n", "transformers[0]"},
		"replacement":        {"resources: [cm.yaml]\nreplacements:\n- path: " + u + "\n", "replacements[0].path"},
		"configuration":      {"resources: [cm.yaml]\nconfigurations: [" + u + "]\n", "configurations[0]"},
		"helm chart":         {"helmCharts:\n- name: c\n  repo: " + srv.URL + "\n", "helmCharts"},
		"git remote":         {"resources:\n- github.com/example/repo//base?ref=v1\n", "resources[0]"},
		"missing local path": {"resources: [nope.yaml]\n", "resources[0]"},
		// Plugin configurations, inline and in files: only built-in plugins that read the
		// repository's files, strictly decoded, their paths inside the checkout.
		"inline transformer's patch":    {"resources: [cm.yaml]\ntransformers:\n- |\n  apiVersion: builtin\n  kind: PatchTransformer\n  metadata: {name: p}\n  path: " + u + "\n", "transformers[0].path"},
		"inline generator's files":      {"generators:\n- |\n  apiVersion: builtin\n  kind: ConfigMapGenerator\n  metadata: {name: g}\n  files: [k=" + u + "]\n", "generators[0].files[0]"},
		"inline chart inflation":        {"generators:\n- |\n  apiVersion: builtin\n  kind: HelmChartInflationGenerator\n  metadata: {name: h}\n  repo: " + srv.URL + "\n  chartName: c\n", "generators[0].kind"},
		"inline plugin of no kind":      {"resources: [cm.yaml]\ntransformers:\n- |\n  apiVersion: example.com/v1\n  kind: Fetcher\n  url: " + u + "\n", "transformers[0].kind"},
		"a field no plugin has":         {"resources: [cm.yaml]\ntransformers:\n- |\n  apiVersion: builtin\n  kind: LabelTransformer\n  metadata: {name: l}\n  labels: {a: b}\n  url: " + u + "\n", "transformers[0].LabelTransformer"},
		"a directory of configurations": {"resources: [cm.yaml]\ntransformers: [configs]\n", "transformers[0]"},
		"a transformer file's patch":    {"resources: [cm.yaml]\ntransformers: [plugins/t.yaml]\n", "@app/plugins/t.yaml: path"},
		"a generator file's kind":       {"generators: [plugins/g.yaml]\n", "@app/plugins/g.yaml: kind"},
		"a replacement's source":        {"resources: [cm.yaml]\ntransformers: [plugins/r.yaml]\n", "@app/plugins/r.yaml: replacements[0].path"},
	}
	plugins := map[string]string{
		"app/plugins/t.yaml":             "apiVersion: builtin\nkind: LabelTransformer\nmetadata: {name: ok}\nlabels: {team: a}\n---\napiVersion: builtin\nkind: PatchTransformer\nmetadata: {name: p}\npath: " + u + "\n",
		"app/plugins/g.yaml":             "apiVersion: builtin\nkind: IAMPolicyGenerator\nmetadata: {name: i}\ncloud: gke\n",
		"app/plugins/r.yaml":             "apiVersion: builtin\nkind: ReplacementTransformer\nmetadata: {name: r}\nreplacements:\n- path: " + u + "\n",
		"app/configs/kustomization.yaml": "resources: [t.yaml]\n",
		"app/configs/t.yaml":             "apiVersion: builtin\nkind: LabelTransformer\nmetadata: {name: l}\nlabels: {a: b}\n",
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			files := map[string]string{"app/fleet.yaml": "{}\n", "app/cm.yaml": cm, "app/kustomization.yaml": c.kustomization}
			maps.Copy(files, plugins)
			root := writeRepo(t, files)
			out, err := renderEverything(root, nil)
			want := "app/kustomization.yaml: " + c.field
			if at, ok := strings.CutPrefix(c.field, "@"); ok {
				want = at
			}
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("error %v does not name %s", err, want)
			}
			if strings.Contains(out, "fetched") {
				t.Errorf("fetched content came out:\n%s", out)
			}
		})
	}
	if n := requests.Load(); n != 0 {
		t.Errorf("the server behind the URLs received %d requests, want none", n)
	}
}

// FuzzCheckoutConfinement builds checkouts from random trees of directories, files and
// symlinks (to places inside, to the canary outside, absolute and relative, in cycles) and
// reads all of them through the confined view in every way the renderer does: not one byte of
// the canary comes back, and every refusal is an EscapeError naming a path of the checkout.
func FuzzCheckoutConfinement(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte{3, 3, 3, 7, 7, 7, 2, 2, 9, 1, 0, 4})
	f.Add([]byte("symlink trees all the way down"))
	can := newCanary(f)
	f.Fuzz(func(t *testing.T, plan []byte) {
		root := t.TempDir()
		// Names the tree may use, and targets a link may point at.
		names := []string{"a", "b", "a/c", "b/d", "a/c/e", "chart", "chart/templates", "x.yaml"}
		targets := []string{can.dir, can.file, "../" + filepath.Base(can.dir), "..", "../..", "a", "../a", "../../b/d",
			"c", ".", "x.yaml", "e", can.dir + "/../" + filepath.Base(can.dir) + "/token", strings.Repeat("../", 12) + strings.TrimPrefix(can.file, "/")}
		for i := 0; i+2 < len(plan) && i < 60; i += 3 {
			name := filepath.Join(root, names[int(plan[i+1])%len(names)])
			_ = os.MkdirAll(filepath.Dir(name), 0o755)
			switch plan[i] % 3 {
			case 0:
				_ = os.MkdirAll(name, 0o755)
			case 1:
				_ = os.WriteFile(name, []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: in}\n"), 0o644)
			case 2:
				_ = os.Symlink(targets[int(plan[i+2])%len(targets)], name)
			}
		}
		c, err := OpenCheckout(root)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		check := func(data []byte, err error) {
			if bytes.Contains(data, []byte(can.secret)) {
				t.Fatalf("the confined view returned the canary")
			}
			var esc *EscapeError
			if errors.As(err, &esc) && (strings.HasPrefix(esc.Path, "/") || strings.HasPrefix(esc.Path, "..")) {
				t.Fatalf("an escape names %q, not a path of the checkout", esc.Path)
			}
		}
		_ = c.Walk(".", func(p string, info fs.FileInfo, err error) error {
			check(nil, err)
			if err == nil && !info.IsDir() {
				check(c.ReadFile(p, maxFileSize))
			}
			return nil
		})
		for _, n := range append(names, "a/c/e/token", "chart/token", "b/d/cm.yaml") {
			check(c.ReadFile(n, maxFileSize))
			if ch, err := c.loadChartDir(n); err == nil {
				for _, file := range append(ch.Files, ch.Templates...) {
					check(file.Data, nil)
				}
			}
		}
		for _, g := range []string{"*", "*/*", "a/*/*", "b/*"} {
			matches, err := c.Glob(g)
			check(nil, err)
			for _, m := range matches {
				check(c.ReadFile(m, maxFileSize))
			}
		}
		for _, namesOnly := range []bool{false, true} {
			if k, err := c.memFS(true, namesOnly); err == nil {
				_ = k.mem.Walk("/", func(p string, info fs.FileInfo, err error) error {
					if err == nil && !info.IsDir() {
						check(k.readFile(p))
					}
					return nil
				})
			}
		}
	})
}

// Template functions that would reach outside the render see nothing: lookup finds no cluster,
// DNS lookups return nothing, and the environment is not readable; in process and in the
// sandbox alike.
func TestTemplatesCannotReachOutsideTheRender(t *testing.T) {
	t.Setenv("FLOTILLA_TEST_SECRET", "canary-environment")
	root := writeRepo(t, map[string]string{
		"fleet.yaml":        "helm: {chart: .}\n",
		"Chart.yaml":        "apiVersion: v2\nname: c\nversion: 1.0.0\n",
		"templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata:\n  lookup: {{ lookup \"v1\" \"Secret\" \"kube-system\" \"\" | toJson | quote }}\n  dns: {{ getHostByName \"localhost\" | quote }}\n",
	})
	for name, opts := range map[string]RendererOptions{"in process": {}, "sandbox": {Sandbox: &Sandbox{}}} {
		res, err := renderOnly(t, root, opts, Target{})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if m := string(res.Manifest); !strings.Contains(m, `lookup: '{}'`) || !strings.Contains(m, `dns: ""`) {
			t.Errorf("%s: lookup or DNS reached outside the render:\n%s", name, m)
		}
	}
	env := writeRepo(t, map[string]string{
		"fleet.yaml":        "helm: {chart: .}\n",
		"Chart.yaml":        "apiVersion: v2\nname: c\nversion: 1.0.0\n",
		"templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {e: {{ env \"FLOTILLA_TEST_SECRET\" | quote }}}\n",
	})
	res, err := renderOnly(t, env, RendererOptions{Sandbox: &Sandbox{}}, Target{})
	if err == nil || !strings.Contains(err.Error(), `function "env" not defined`) || res != nil {
		t.Errorf("env: err %v, rendered %v", err, res)
	}
}

// The built-in plugins that read only the repository's files work as Kustomize runs them,
// inline and from files, with their paths inside the checkout.
func TestBuiltinPluginConfigurationsRender(t *testing.T) {
	root := writeRepo(t, map[string]string{
		"app/fleet.yaml": "{}\n",
		"app/cm.yaml":    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: base}\ndata: {a: b}\n",
		"app/kustomization.yaml": "resources: [cm.yaml]\ntransformers:\n- |\n  apiVersion: builtin\n  kind: LabelTransformer\n  metadata: {name: team}\n  labels: {team: shop}\n  fieldSpecs: [{path: metadata/labels, create: true}]\n- plugins/patch.yaml\n" +
			"generators:\n- plugins/gen.yaml\n",
		"app/plugins/patch.yaml":   "apiVersion: builtin\nkind: PatchTransformer\nmetadata: {name: p}\npath: plugins/fix.yaml\ntarget: {kind: ConfigMap, name: base}\n",
		"app/plugins/fix.yaml":     "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: base}\ndata: {a: patched}\n",
		"app/plugins/gen.yaml":     "apiVersion: builtin\nkind: ConfigMapGenerator\nmetadata: {name: generated}\nfiles: [plugins/settings.ini]\noptions: {disableNameSuffixHash: true}\n",
		"app/plugins/settings.ini": "x=1\n",
	})
	out, err := renderEverything(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"team: shop", "a: patched", "name: generated", "settings.ini: |"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// FuzzKustomizationReachesNoNetwork renders kustomizations of any text, with a server on
// loopback behind every URL the seeds name (SERVER stands for it): whatever the kustomization
// says, and whether it renders or not, the server receives no request and nothing it serves
// comes out.
func FuzzKustomizationReachesNoNetwork(f *testing.F) {
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		requests.Add(1)
		fmt.Fprint(w, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: fetched}\n")
	}))
	f.Cleanup(srv.Close)
	for _, seed := range []string{
		"resources: [SERVER/x.yaml]\n",
		"resources: [cm.yaml]\ntransformers:\n- |\n  apiVersion: builtin\n  kind: PatchTransformer\n  metadata: {name: p}\n  path: SERVER/p.yaml\n",
		"generators:\n- |\n  apiVersion: builtin\n  kind: ConfigMapGenerator\n  metadata: {name: g}\n  files: [k=SERVER/f]\n",
		"resources: [cm.yaml]\nconfigMapGenerator:\n- name: g\n  envs: [SERVER/e]\n",
		"resources: [cm.yaml]\npatches:\n- path: SERVER/p.yaml\n  target: {kind: ConfigMap}\n",
		"helmCharts:\n- {name: c, repo: SERVER}\n",
		"resources: [cm.yaml]\nreplacements:\n- path: SERVER/r.yaml\n",
		"components: [SERVER/c]\n",
		"resources: [cm.yaml]\nopenapi: {path: SERVER/o.json}\n",
		"resources: [cm.yaml]\ncrds: [SERVER/crd.yaml]\n",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, kustomization string) {
		kustomization = strings.ReplaceAll(kustomization, "SERVER", srv.URL)
		root := writeRepo(t, map[string]string{"app/fleet.yaml": "{}\n", "app/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: base}\n", "app/kustomization.yaml": kustomization})
		before := requests.Load()
		out, _ := renderEverything(root, nil)
		if n := requests.Load() - before; n != 0 {
			t.Fatalf("the kustomization made %d requests:\n%s", n, kustomization)
		}
		if strings.Contains(out, "fetched") {
			t.Fatalf("fetched content came out of:\n%s", kustomization)
		}
	})
}
