package bundle

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/flotilla-dev/flotilla/e2e/controlplane"
)

// benchChart writes a chart of 40 templates and a bundle using it; values depend on the
// cluster's region label.
func benchChart(b *testing.B) string {
	b.Helper()
	root := b.TempDir()
	files := map[string]string{
		"fleet.yaml":        "defaultNamespace: bench\nhelm:\n  chart: ./chart\n  releaseName: bench\n  values: {region: \"${ .ClusterLabels.region }\"}\n",
		"chart/Chart.yaml":  "apiVersion: v2\nname: bench\nversion: 1.0.0\n",
		"chart/values.yaml": "replicas: 2\nregion: none\nimage: {repository: nginx, tag: \"1.27\"}\n",
		"chart/templates/_helpers.tpl": `{{- define "bench.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
region: {{ .Values.region | quote }}
{{- end -}}
`,
	}
	for i := range 40 {
		files[fmt.Sprintf("chart/templates/deploy-%02d.yaml", i)] = fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}-%02d
  labels:
    {{- include "bench.labels" . | nindent 4 }}
spec:
  replicas: {{ .Values.replicas }}
  selector:
    matchLabels: {app: {{ .Release.Name }}-%02d}
  template:
    metadata:
      labels: {app: {{ .Release.Name }}-%02d}
    spec:
      containers:
      - name: app
        image: "{{ .Values.image.repository }}:{{ .Values.image.tag }}"
        env:
        {{- range $k, $v := .Values }}
        {{- if kindIs "string" $v }}
        - {name: {{ upper $k | quote }}, value: {{ $v | quote }}}
        {{- end }}
        {{- end }}
`, i, i, i)
	}
	for name, content := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	return root
}

// BenchmarkRender200Targets4ValueSets renders the 40-template chart for 200 clusters in 4
// regions with a fresh renderer per op, in the sandbox as the hub does: 4 renders, not 200
// (reported as renders/op), in one child process.
func BenchmarkRender200Targets4ValueSets(b *testing.B) {
	root := benchChart(b)
	sources, err := Discover(root, "bench", nil)
	if err != nil {
		b.Fatal(err)
	}
	var renders int
	for b.Loop() {
		r, _ := NewRenderer(root, RendererOptions{Sandbox: &Sandbox{}})
		for i := range 200 {
			if _, err := r.Render(context.Background(), &sources[0], Target{ClusterName: fmt.Sprint("c", i), Labels: map[string]string{"region": fmt.Sprint("r", i%4)}}); err != nil {
				b.Fatal(err)
			}
		}
		renders = r.Renders()
		r.Close()
	}
	b.ReportMetric(float64(renders), "renders/op")
}

// BenchmarkRenderOneChart is one render of the chart through the SDK, in process and in the
// sandbox the hub renders in (a child process of the benchmark's binary).
func BenchmarkRenderOneChart(b *testing.B) {
	benchRenderInAndOutOfSandbox(b, benchChart(b), Target{ClusterName: "c", Labels: map[string]string{"region": "eu"}})
}

// benchRenderInAndOutOfSandbox renders the first bundle of root for t with a new Renderer per
// iteration, in process and in the sandbox.
func benchRenderInAndOutOfSandbox(b *testing.B, root string, t Target) {
	sources, err := Discover(root, "bench", nil)
	if err != nil {
		b.Fatal(err)
	}
	for name, sandbox := range map[string]*Sandbox{"in-process": nil, "sandboxed": {}} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				r, _ := NewRenderer(root, RendererOptions{Sandbox: sandbox})
				if _, err := r.Render(context.Background(), &sources[0], t); err != nil {
					b.Fatal(err)
				}
				r.Close()
			}
		})
	}
}

// BenchmarkHelmTemplateCLI is `helm template` on the same chart and values, with the helm CLI
// built from helm.sh/helm/v3 (the version this module uses) into the tool cache.
func BenchmarkHelmTemplateCLI(b *testing.B) {
	helm, err := controlplane.EnsureProgram(b.Context(), os.Stderr, controlplane.Program{Name: "helm", Module: "helm.sh/helm/v3", Version: "v3.22.0", Package: "helm.sh/helm/v3/cmd/helm"})
	if err != nil {
		b.Fatal(err)
	}
	root := benchChart(b)
	home := b.TempDir()
	for b.Loop() {
		cmd := exec.Command(helm, "template", "bench", filepath.Join(root, "chart"), "--namespace", "bench", "--set", "region=eu")
		cmd.Env = []string{"HOME=" + home, "HELM_CACHE_HOME=" + home, "HELM_CONFIG_HOME=" + home, "HELM_DATA_HOME=" + home}
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("helm template: %v\n%s", err, out)
		}
	}
}

// BenchmarkRenderOneKustomization is one build of an overlay with its base, in process and in
// the sandbox the hub renders in (a child process started per Renderer, as per commit).
func BenchmarkRenderOneKustomization(b *testing.B) {
	benchRenderInAndOutOfSandbox(b, "testdata/kustomize/repo", Target{ClusterName: "c", Labels: map[string]string{"env": "prod"}})
}
