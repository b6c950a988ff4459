package bundle

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	k8syaml "sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite the expected.yaml golden files")

type testTarget struct {
	Name   string                       `json:"name"`
	Labels map[string]string            `json:"labels"`
	Groups map[string]map[string]string `json:"groups"`
}

// renderCase renders every bundle of testdata/<name>/repo for every target of targets.yaml.
func renderCase(t *testing.T, name string) []byte {
	t.Helper()
	dir := filepath.Join("testdata", name)
	var targets []testTarget
	data, err := os.ReadFile(filepath.Join(dir, "targets.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := k8syaml.UnmarshalStrict(data, &targets); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "repo")
	sources, err := Discover(root, name, nil)
	if err != nil {
		t.Fatalf("discover: %v", err)
	}
	r, err := NewRenderer(root, RendererOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	for _, tt := range targets {
		for i := range sources {
			src := &sources[i]
			res, err := r.Render(context.Background(), src, Target{ClusterName: tt.Name, Labels: tt.Labels, Groups: tt.Groups})
			if err != nil {
				t.Fatalf("render %s for %s: %v", src.Name, tt.Name, err)
			}
			fmt.Fprintf(&out, "# target %s, bundle %s (%s)", tt.Name, res.Bundle, src.Dir)
			if res.Customization != "" {
				fmt.Fprintf(&out, ", customization %s", res.Customization)
			}
			if res.DoNotDeploy {
				out.WriteString(": doNotDeploy\n")
				continue
			}
			fmt.Fprintf(&out, "\n# content %s\n", res.ContentID)
			out.Write(res.Manifest)
		}
	}
	return out.Bytes()
}

// TestGolden renders each example repository and compares with testdata/<case>/expected.yaml.
// Refresh with: go test ./bundle -run TestGolden -update
func TestGolden(t *testing.T) {
	for _, name := range []string{"manifests", "helm-multicluster", "kustomize", "overlays-nested", "fleet-shapes"} {
		t.Run(name, func(t *testing.T) {
			got := renderCase(t, name)
			path := filepath.Join("testdata", name, "expected.yaml")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (create it with -update)", err)
			}
			if diff := cmp.Diff(string(want), string(got)); diff != "" {
				t.Errorf("%s (-want +got):\n%s", path, diff)
			}
		})
	}
}
