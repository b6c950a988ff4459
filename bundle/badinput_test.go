package bundle

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBadInputNamesFileAndField: every broken repository gets an error naming the file and,
// where there is one, the line and field.
func TestBadInputNamesFileAndField(t *testing.T) {
	cases := []struct {
		name  string
		files map[string]string
		want  []string
	}{
		{"unknown field", map[string]string{"app/fleet.yaml": "defaultNamespace: a\nhelm:\n  chart: x\n  valuesFile: [a.yaml]\n"},
			[]string{"app/fleet.yaml:4: helm.valuesFile: unknown field", `did you mean "valuesFiles"?`}},
		{"wrong type", map[string]string{"app/fleet.yaml": "helm:\n  timeoutSeconds: soon\n"},
			[]string{"app/fleet.yaml:2: helm.timeoutSeconds: wrong type"}},
		{"not YAML", map[string]string{"app/fleet.yaml": "helm: [\n"},
			[]string{"app/fleet.yaml", "did not find expected"}},
		{"rollout strategy", map[string]string{"app/fleet.yaml": "rolloutStrategy:\n  maxUnavailable: 120%\n"},
			[]string{"app/fleet.yaml: rolloutStrategy.maxUnavailable: 120% is above 100%"}},
		{"percentage that is no number", map[string]string{"app/fleet.yaml": "rolloutStrategy:\n  partitions:\n  - name: canary\n    clusterName: c\n    maxUnavailable: abc%\n"},
			[]string{`app/fleet.yaml:5: rolloutStrategy.partitions[0].maxUnavailable: invalid value "abc%": want an integer or a percentage like "25%"`}},
		{"comparePatches operation that does not remove", map[string]string{"app/fleet.yaml": "diff:\n  comparePatches:\n  - {kind: Deployment, operations: [{op: replace, path: /spec/replicas, value: \"3\"}]}\n"},
			[]string{`app/fleet.yaml: diff.comparePatches[0].operations[0].op: "replace" is not supported: remove excludes a field from drift detection`}},
		{"health check that is no CEL", map[string]string{"app/fleet.yaml": "healthChecks:\n- {apiVersion: db.example.com/v1, kind: Database, current: \"status.phase ==\"}\n"},
			[]string{"app/fleet.yaml: healthChecks[0].current: is not a valid CEL expression"}},
		{"health check of a target customization that gives no bool", map[string]string{"app/fleet.yaml": "targetCustomizations:\n- name: prod\n  clusterName: a\n  healthChecks:\n  - {apiVersion: v1, kind: Pod, current: \"true\", failed: \"status.phase\"}\n  - {apiVersion: v1, kind: ConfigMap, current: \"status.size()\"}\n"},
			[]string{"app/fleet.yaml: targetCustomizations[0].healthChecks[1].current:", "must give a bool"}},
		{"health check naming an undeclared variable", map[string]string{"app/fleet.yaml": "healthChecks:\n- {apiVersion: v1, kind: Pod, current: \"object.status.phase == 'Running'\"}\n"},
			[]string{"app/fleet.yaml: healthChecks[0].current:", "undeclared reference to 'object'"}},
		{"analysis check naming an address for its provider", map[string]string{"app/fleet.yaml": "rolloutStrategy:\n  analysis:\n  - {name: errors, provider: \"http://127.0.0.1:9/api\", query: up, condition: result > 0}\n"},
			[]string{"app/fleet.yaml: rolloutStrategy.analysis[0].provider:", "never an address"}},
		{"analysis check with a url of its own", map[string]string{"app/fleet.yaml": "rolloutStrategy:\n  analysis:\n  - name: errors\n    provider: prometheus\n    url: http://127.0.0.1:9/api\n    query: up\n    condition: result > 0\n"},
			[]string{"app/fleet.yaml:5: rolloutStrategy.analysis[0].url: unknown field"}},
		{"analysis condition that is no CEL", map[string]string{"app/fleet.yaml": "rolloutStrategy:\n  analysis:\n  - {name: errors, provider: prometheus, query: up, condition: \"result <\"}\n"},
			[]string{"app/fleet.yaml: rolloutStrategy.analysis[0].condition: is not a valid CEL expression over result"}},
		{"analysis query that is no template", map[string]string{"app/fleet.yaml": "placement:\n  type: PickAll\n  rollingUpdate:\n    analysis:\n    - {name: errors, provider: prometheus, query: \"up{cluster=\\\"{{ .Cluster.Name \\\"}\", condition: \"result > 0\"}\n"},
			[]string{"app/fleet.yaml: placement.rollingUpdate.analysis[0].query: is not a valid template"}},
		{"analysis query built to loop in the hub", map[string]string{"app/fleet.yaml": "rolloutStrategy:\n  analysis:\n  - {name: errors, provider: prometheus, query: \"{{ range 1000000000 }}{{ end }}\", condition: \"result > 0.0\"}\n"},
			[]string{"app/fleet.yaml: rolloutStrategy.analysis[0].query: is not allowed: range over something other than"}},
		{"two strategies", map[string]string{"app/fleet.yaml": "rolloutStrategy: {}\nsequence: {name: s}\n"},
			[]string{"app/fleet.yaml: choose at most one of rolloutStrategy"}},
		{"target customization without selector", map[string]string{"app/fleet.yaml": "targetCustomizations:\n- name: x\n  namespace: apps\n"},
			[]string{"app/fleet.yaml: targetCustomizations[0]: needs clusterName"}},
		{"invalid explicit name", map[string]string{"app/fleet.yaml": "name: Web_App\n"},
			[]string{"app/fleet.yaml: name: \"Web_App\" is not a valid bundle name"}},
		{"chart path leaving the repository", map[string]string{"app/fleet.yaml": "helm: {chart: ../../etc}\n"},
			[]string{"app/fleet.yaml: helm.chart:", "leaves the repository"}},
		{"absolute chart path", map[string]string{"app/fleet.yaml": "helm: {chart: /etc}\n"},
			[]string{"app/fleet.yaml: helm.chart:", "is absolute"}},
		{"missing values file", map[string]string{"app/fleet.yaml": "helm: {chart: ., valuesFiles: [nope.yaml]}\n", "app/Chart.yaml": "apiVersion: v2\nname: c\nversion: 1.0.0\n"},
			[]string{"app/fleet.yaml: helm.valuesFiles[0]:", "does not exist"}},
		{"manifest without kind", map[string]string{"app/fleet.yaml": "{}\n", "app/cm.yaml": "apiVersion: v1\nmetadata: {name: x}\n"},
			[]string{"app/cm.yaml:1: kind: is required"}},
		{"remote kustomize base", map[string]string{"app/fleet.yaml": "kustomize: {dir: k}\n", "app/k/kustomization.yaml": "resources:\n- https://github.com/example/repo//base?ref=main\n"},
			[]string{"app/k/kustomization.yaml: resources[0]:", "is remote: only paths inside the repository are allowed"}},
		{"kustomize dir leaving the repository", map[string]string{"app/fleet.yaml": "kustomize: {dir: ../../..}\n"},
			[]string{"app/fleet.yaml: kustomize.dir:", "leaves the repository"}},
		{"broken template", map[string]string{"app/fleet.yaml": "helm: {chart: .}\n", "app/Chart.yaml": "apiVersion: v2\nname: c\nversion: 1.0.0\n", "app/templates/x.yaml": "{{ .Values.missing.deep }}\n"},
			[]string{"app/fleet.yaml: helm: helm template c:", "nil pointer"}},
		{"valuesFrom in the CLI", map[string]string{"app/fleet.yaml": "helm:\n  chart: .\n  valuesFrom: [{configMapKeyRef: {name: v}}]\n", "app/Chart.yaml": "apiVersion: v2\nname: c\nversion: 1.0.0\n"},
			[]string{"app/fleet.yaml: helm.valuesFrom[0]: values from ConfigMaps and Secrets are only available on the hub"}},
		{"forced namespace with cluster-scoped objects", map[string]string{"app/fleet.yaml": "namespace: apps\n", "app/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
			"app/rbac.yaml": "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: reader}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: other}\n"},
			[]string{"fleet.yaml: namespace:", `forces every object into namespace "apps"`, "ClusterRole reader, Namespace other"}},
		{"cluster no kustomize overlay selects", map[string]string{
			"app/fleet.yaml":                      "targetCustomizations:\n- name: dev\n  clusterSelector: {matchLabels: {env: dev}}\n  kustomize: {dir: overlays/dev}\n",
			"app/base/kustomization.yaml":         "resources: [cm.yaml]\n",
			"app/base/cm.yaml":                    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
			"app/overlays/dev/kustomization.yaml": "resources: [../../base]\n"},
			[]string{"app/fleet.yaml: kustomize.dir: cluster c (labels none) gets no kustomize.dir", "base/kustomization.yaml would be applied as a manifest",
				"select: dev (clusterSelector env=dev)"}},
		{"helm with a kustomize dir without kustomization", map[string]string{"app/fleet.yaml": "helm: {chart: .}\nkustomize: {dir: overlays}\n", "app/Chart.yaml": "apiVersion: v2\nname: c\nversion: 1.0.0\n",
			"app/overlays/readme.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"},
			[]string{`app/fleet.yaml: kustomize.dir: "overlays" has no kustomization.yaml to apply to the chart`}},
		{"overlay patching a missing file", map[string]string{"app/fleet.yaml": "yaml: {overlays: [o]}\n", "app/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n", "app/overlays/o/other_patch.yaml": "data: {a: b}\n"},
			[]string{"app/overlays/o/other_patch.yaml: patches other.yaml, which the bundle does not have"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := writeRepo(t, c.files)
			err := discoverAndRenderAll(root)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func discoverAndRenderAll(root string) error {
	sources, err := Discover(root, "repo", nil)
	if err != nil {
		return err
	}
	r, err := NewRenderer(root, RendererOptions{})
	if err != nil {
		return err
	}
	for i := range sources {
		if _, err := r.Render(context.Background(), &sources[i], Target{ClusterName: "c"}); err != nil {
			return err
		}
	}
	return nil
}

func TestSymlinksLeavingTheCheckoutAreRejected(t *testing.T) {
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "Chart.yaml"), []byte("apiVersion: v2\nname: stolen\nversion: 1.0.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	root := writeRepo(t, map[string]string{"app/fleet.yaml": "helm: {chart: ./chart}\n"})
	if err := os.Symlink(outside, filepath.Join(root, "app", "chart")); err != nil {
		t.Fatal(err)
	}
	if err := discoverAndRenderAll(root); err == nil || !strings.Contains(err.Error(), "app/fleet.yaml: helm.chart: app/chart is a symlink to") || !strings.Contains(err.Error(), "which leaves the repository") {
		t.Errorf("error = %v", err)
	}
	// A symlinked manifest leading out of the checkout is refused by name.
	root2 := writeRepo(t, map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ok}\n"})
	if err := os.WriteFile(filepath.Join(outside, "secret.yaml"), []byte("apiVersion: v1\nkind: Secret\nmetadata: {name: stolen}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "secret.yaml"), filepath.Join(root2, "secret.yaml")); err != nil {
		t.Fatal(err)
	}
	res, err := renderOnly(t, root2, RendererOptions{}, Target{})
	if err == nil || !strings.Contains(err.Error(), "secret.yaml is a symlink to") || res != nil {
		t.Errorf("err %v, rendered %v", err, res)
	}
}

// TestEqualInputsShareOneRender: 200 targets with 4 distinct value sets render 4 times.
func TestEqualInputsShareOneRender(t *testing.T) {
	root := writeRepo(t, map[string]string{
		"fleet.yaml":        "helm:\n  chart: .\n  values: {region: \"${ .ClusterLabels.region }\"}\n",
		"Chart.yaml":        "apiVersion: v2\nname: c\nversion: 1.0.0\n",
		"templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {region: {{ .Values.region }}}\n",
	})
	sources, err := Discover(root, "repo", nil)
	if err != nil {
		t.Fatal(err)
	}
	r, _ := NewRenderer(root, RendererOptions{})
	ids := map[string]bool{}
	for i := range 200 {
		labels := map[string]string{"region": fmt.Sprint("r", i%4)}
		res, err := r.Render(context.Background(), &sources[0], Target{ClusterName: fmt.Sprint("c", i), Labels: labels})
		if err != nil {
			t.Fatal(err)
		}
		ids[res.ContentID] = true
	}
	if r.Renders() != 4 || len(ids) != 4 {
		t.Errorf("%d renders, %d content ids; want 4 and 4", r.Renders(), len(ids))
	}
}

func TestBundleNames(t *testing.T) {
	cases := []struct{ repo, dir, want string }{
		{"platform", ".", "platform"},
		{"platform", "apps/web", "platform-apps-web"},
		{"Platform", "apps/Web_API", "platform-apps-web-api"},
		{"platform", strings.Repeat("very-long-path/", 6), "platform-very-long-path-very-long-path-"},
	}
	for _, c := range cases {
		got := BundleName(c.repo, c.dir)
		if !strings.HasPrefix(got, c.want) || len(got) > 53 || !validName.MatchString(got) {
			t.Errorf("BundleName(%q, %q) = %q (len %d), want prefix %q, valid, ≤ 53", c.repo, c.dir, got, len(got), c.want)
		}
	}
	// Derived names that collide after cleaning get distinct suffixes.
	root := writeRepo(t, map[string]string{"a_b/fleet.yaml": "{}\n", "a-b/fleet.yaml": "{}\n"})
	sources, err := Discover(root, "repo", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(sources) != 2 || sources[0].Name == sources[1].Name {
		t.Errorf("names %q and %q", sources[0].Name, sources[1].Name)
	}
}

func FuzzDecodeFleetYAML(f *testing.F) {
	for _, s := range []string{"defaultNamespace: a\n", "helm: {chart: x, values: {a: [1, 2]}}\n", "rolloutStrategy: {maxUnavailable: 10%}\n", "targetCustomizations: [{clusterSelector: 'a=b'}]\n", "- a\n", "helm: 3\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fy FleetYAML
		if err := decodeStrict("fleet.yaml", data, &fy); err != nil {
			if !strings.HasPrefix(err.Error(), "fleet.yaml") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		_ = validateFleet("fleet.yaml", &fy)
	})
}

func FuzzDiscoverPaths(f *testing.F) {
	for _, s := range []string{".", "apps/*", "../x", "/abs", "apps/[", "a/../../b", "**"} {
		f.Add(s)
	}
	root := f.TempDir()
	for _, d := range []string{"apps/web", "apps/db", "infra"} {
		_ = os.MkdirAll(filepath.Join(root, d), 0o755)
		_ = os.WriteFile(filepath.Join(root, d, "fleet.yaml"), []byte("{}\n"), 0o644)
	}
	f.Fuzz(func(t *testing.T, p string) {
		sources, err := Discover(root, "repo", []string{p})
		if err != nil {
			return
		}
		for _, s := range sources {
			if strings.HasPrefix(s.Dir, "..") || strings.HasPrefix(s.Dir, "/") {
				t.Fatalf("path %q discovered %q outside the repository", p, s.Dir)
			}
		}
	})
}

// A kustomization refused for what it names fails the bundles that build it, and no other
// bundle of the checkout: each bundle of a commit renders or fails on its own.
func TestARefusedKustomizationFailsOnlyItsBundles(t *testing.T) {
	root := writeRepo(t, map[string]string{
		"good/fleet.yaml": "{}\n", "good/kustomization.yaml": "resources: [cm.yaml]\n", "good/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
		"bad/fleet.yaml": "{}\n", "bad/kustomization.yaml": "resources: [https://example.com/remote.yaml]\n",
		"uses-bad/fleet.yaml": "{}\n", "uses-bad/kustomization.yaml": "resources: [../bad]\n",
	})
	sources, err := Discover(root, "repo", nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRenderer(root, RendererOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got := map[string]string{}
	for i := range sources {
		_, err := r.Render(context.Background(), &sources[i], Target{ClusterName: "c"})
		got[sources[i].Dir] = fmt.Sprint(err)
	}
	if got["good"] != "<nil>" {
		t.Errorf("the good bundle: %s", got["good"])
	}
	for _, dir := range []string{"bad", "uses-bad"} {
		if !strings.Contains(got[dir], "bad/kustomization.yaml: resources[0]:") || !strings.Contains(got[dir], "is remote") {
			t.Errorf("%s: %s", dir, got[dir])
		}
	}
}
