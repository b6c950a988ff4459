package bundle

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// A chart or a values template that loops, allocates or writes without end is stopped at the
// sandbox's limit with an error naming the file, the field and the limit; the same renderer
// renders the well-behaved bundle beside it.
func TestSandboxStopsRunawayTemplates(t *testing.T) {
	chart := func(template string) map[string]string {
		return map[string]string{
			"bad/fleet.yaml":              "helm: {chart: .}\n",
			"bad/Chart.yaml":              "apiVersion: v2\nname: bad\nversion: 1.0.0\n",
			"bad/templates/cm.yaml":       template,
			"good/fleet.yaml":             "helm: {chart: .}\n",
			"good/Chart.yaml":             "apiVersion: v2\nname: good\nversion: 1.0.0\n",
			"good/templates/cm.yaml":      "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: good}\ndata: {a: {{ .Values.a | default \"b\" | quote }}}\n",
			"values-loop/fleet.yaml":      "helm:\n  chart: ../good\n  values: {a: '${ range 100000000000 }${ end }'}\n",
			"values-loop/templates/.keep": "",
		}
	}
	// The deadline is short where a deadline should stop the render, and long where another
	// limit should: what a loaded machine does in a second must not decide which limit comes
	// first.
	cases := []struct {
		name, template, bundle, limit string
		timeout                       time.Duration
	}{
		{"endless loop", "{{ range 100000000000 }}{{ end }}", "bad", "deadline", time.Second},
		{"memory", "{{ $s := repeat 20000000 \"xxxxxxxxxx\" }}{{ $t := print $s $s }}{{ len $t }}", "bad", "memory", time.Minute},
		// One allocation of 2 GB: a sampler of the heap never saw it before the machine did.
		{"one allocation past the limit", "{{ len (repeat 200000000 \"xxxxxxxxxx\") }}", "bad", "memory", time.Minute},
		{"output", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: big}\ndata: {a: {{ repeat 2000000 \"x\" }}}\n", "bad", "output", time.Minute},
		{"values template loop", "{{ .Values.a }}", "values-loop", "deadline", time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := writeRepo(t, chart(c.template))
			sources, err := Discover(root, "repo", []string{"bad", "good", "values-loop"})
			if err != nil {
				t.Fatal(err)
			}
			r, err := NewRenderer(root, RendererOptions{Sandbox: &Sandbox{Timeout: c.timeout, Memory: 256 << 20, Output: 1 << 20}})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			byName := map[string]*Source{}
			for i := range sources {
				byName[sources[i].Dir] = &sources[i]
			}
			start := time.Now()
			_, err = r.Render(context.Background(), byName[c.bundle], Target{ClusterName: "c"})
			var limit *LimitError
			if !errors.As(err, &limit) || limit.Limit != c.limit || !strings.Contains(err.Error(), c.bundle+"/fleet.yaml: helm") {
				t.Fatalf("err = %v, want the %s limit named with the file and field", err, c.limit)
			}
			if took := time.Since(start); took > 20*time.Second {
				t.Errorf("stopping the render took %s", took)
			}
			good, err := r.Render(context.Background(), byName["good"], Target{ClusterName: "c"})
			if err != nil || !strings.Contains(string(good.Manifest), "name: good") {
				t.Errorf("the good bundle: %v", err)
			}
			// The kernel holds the child to its limit (and the runtime's share): no mapping of
			// memory past it succeeds, whatever the templates do.
			limits, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", r.sandbox.w.cmd.Process.Pid))
			if err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprint(256<<20 + runtimeOverhead); !regexp.MustCompile(`Max data size\s+` + want + `\s+` + want + `\s+bytes`).Match(limits) {
				t.Errorf("the child's limits, want a data size of %s bytes:\n%s", want, limits)
			}
			if !regexp.MustCompile(`Max address space\s+(\d+)\s+(\d+)\s+bytes`).Match(limits) {
				t.Errorf("the child's limits, want its address space bounded:\n%s", limits)
			}
		})
	}
}

// The sandbox renders exactly what the renderer renders in process.
func TestSandboxRendersTheSameManifests(t *testing.T) {
	root := "testdata/helm-multicluster/repo"
	sources, err := Discover(root, "repo", nil)
	if err != nil {
		t.Fatal(err)
	}
	inProcess, err := NewRenderer(root, RendererOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sandboxed, err := NewRenderer(root, RendererOptions{Sandbox: &Sandbox{}})
	if err != nil {
		t.Fatal(err)
	}
	defer sandboxed.Close()
	target := Target{ClusterName: "prod-1", Labels: map[string]string{"env": "prod", "region": "eu"}}
	for i := range sources {
		a, errA := inProcess.Render(context.Background(), &sources[i], target)
		b, errB := sandboxed.Render(context.Background(), &sources[i], target)
		if errA != nil || errB != nil {
			t.Fatalf("%s: in process %v, sandboxed %v", sources[i].Name, errA, errB)
		}
		if a.ContentID != b.ContentID {
			t.Errorf("%s: in process and sandboxed renders differ:\n%s\n---\n%s", sources[i].Name, a.Manifest, b.Manifest)
		}
	}
}

// The runtime's reports of memory the kernel refused are told apart from its other crashes.
func TestOutOfMemoryReports(t *testing.T) {
	for _, c := range []struct {
		stderr string
		want   bool
	}{
		{"runtime: out of memory: cannot allocate 2000003072-byte block (4194304 in use)\nfatal error: out of memory\n\ngoroutine 1", true},
		{"fatal error: runtime: out of memory\n\nruntime stack:", true},
		{"fatal error: runtime: cannot allocate memory\n\nruntime stack:", true},
		{"fatal error: all goroutines are asleep - deadlock!\n", false},
		{"panic: out of memory in my template\n", false},
		{"fatal error: concurrent map writes\nout of memory\n", false},
		{"", false},
	} {
		if got := outOfMemory([]byte(c.stderr)); got != c.want {
			t.Errorf("outOfMemory(%q) = %v, want %v", c.stderr, got, c.want)
		}
	}
}

// A kustomization whose overlays each name their base twice asks for 2^levels objects: the
// sandbox stops its build at a limit, and the well-behaved kustomization beside it builds.
func TestSandboxStopsRunawayKustomizations(t *testing.T) {
	const levels = 22
	files := map[string]string{
		"good/kustomization.yaml":    "resources: [cm.yaml]\n",
		"good/cm.yaml":               "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: good}\n",
		"bomb/l0/kustomization.yaml": "resources: [cm.yaml]\n",
		"bomb/l0/cm.yaml":            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: '" + strings.Repeat("x", 512) + "'}\n",
	}
	for i := 1; i <= levels; i++ {
		l := fmt.Sprintf("bomb/l%d", i)
		files[l+"/kustomization.yaml"] = "resources: [a, b]\n"
		for _, side := range []string{"a", "b"} {
			files[l+"/"+side+"/kustomization.yaml"] = fmt.Sprintf("namePrefix: %s-\nresources: [../../l%d]\n", side, i-1)
		}
	}
	files["bomb/fleet.yaml"] = fmt.Sprintf("kustomize: {dir: l%d}\n", levels)
	root := writeRepo(t, files)
	sources, err := Discover(root, "repo", []string{"bomb", "good"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRenderer(root, RendererOptions{Sandbox: &Sandbox{Timeout: 3 * time.Second, Memory: 256 << 20, Output: 1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	byDir := map[string]*Source{}
	for i := range sources {
		byDir[sources[i].Dir] = &sources[i]
	}
	_, err = r.Render(context.Background(), byDir["bomb"], Target{ClusterName: "c"})
	var limit *LimitError
	if !errors.As(err, &limit) {
		t.Fatalf("err = %v, want the build stopped at one of the sandbox's limits", err)
	}
	if !strings.Contains(err.Error(), "bomb/fleet.yaml") {
		t.Errorf("err = %v, want the bundle's fleet.yaml named", err)
	}
	good, err := r.Render(context.Background(), byDir["good"], Target{ClusterName: "c"})
	if err != nil || !strings.Contains(string(good.Manifest), "name: good") {
		t.Errorf("the good kustomization: %v", err)
	}
}

// With a sandbox, the hub's copy of a checkout for Kustomize holds the kustomizations' bytes
// and no other file's: thirty 256 KiB files of a kustomize bundle cost the hub their names, while
// the sandbox's child, which builds, reads them all and renders the same objects as a render in
// process. A plugin configuration in a file is still checked (its bytes read when asked for).
func TestTheHubsCopyOfAKustomizeCheckoutHoldsNamesNotBytes(t *testing.T) {
	files := map[string]string{
		"kustomization.yaml": "resources:\n" + func() string {
			var b strings.Builder
			for i := range 30 {
				fmt.Fprintf(&b, "- cm-%02d.yaml\n", i)
			}
			return b.String()
		}() + "transformers: [labels.yaml]\n",
		"labels.yaml": "apiVersion: builtin\nkind: LabelTransformer\nmetadata: {name: team}\nlabels: {team: shop}\nfieldSpecs: [{path: metadata/labels, create: true}]\n",
	}
	big := strings.Repeat("x", 256<<10)
	for i := range 30 {
		files[fmt.Sprintf("cm-%02d.yaml", i)] = fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm-%02d}\ndata: {blob: %s}\n", i, big)
	}
	root := writeRepo(t, files)
	sources, err := Discover(root, "repo", nil)
	if err != nil || len(sources) != 1 {
		t.Fatalf("discover: %d bundles, %v", len(sources), err)
	}
	sandboxed, err := NewRenderer(root, RendererOptions{Sandbox: &Sandbox{}})
	if err != nil {
		t.Fatal(err)
	}
	defer sandboxed.Close()
	inProcess, err := NewRenderer(root, RendererOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a, errA := sandboxed.Render(context.Background(), &sources[0], Target{})
	b, errB := inProcess.Render(context.Background(), &sources[0], Target{})
	if errA != nil || errB != nil {
		t.Fatalf("sandboxed: %v; in process: %v", errA, errB)
	}
	if a.ContentID != b.ContentID || len(a.Objects) != 30 || a.Objects[0].str("metadata", "labels", "team") != "shop" {
		t.Fatalf("sandboxed and in process: the same %v, %d objects, the first labelled %q", a.ContentID == b.ContentID, len(a.Objects), a.Objects[0].str("metadata", "labels", "team"))
	}
	var held int
	_ = sandboxed.memFS.mem.Walk("/", func(p string, info fs.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			data, _ := sandboxed.memFS.mem.ReadFile(p)
			held += len(data)
		}
		return nil
	})
	if kust := len(files["kustomization.yaml"]); held > kust {
		t.Errorf("the hub's copy holds %d bytes; want the kustomization's %d alone (the checkout's files are %d MiB)", held, kust, 30*len(big)>>20)
	}
}
