package main

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// copyTree copies a directory of the repository's test data into dst.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// `flotilla dev --once` deploys a repository of one's own that mixes a Helm chart, a Kustomize
// overlay and plain YAML (the renderer's test repositories, side by side) to the clusters a
// clusters.yaml describes, and exits 0 once every bundle is Ready on every cluster it targets;
// a repository that does not render makes it exit with the file and field at fault.
func TestDevOnceDeploysARepositoryOfOnesOwn(t *testing.T) {
	repo := t.TempDir()
	copyTree(t, "../../bundle/testdata/helm-multicluster/repo", repo)
	copyTree(t, "../../bundle/testdata/kustomize/repo", filepath.Join(repo, "kustomized"))
	copyTree(t, "../../bundle/testdata/manifests/repo", filepath.Join(repo, "plain"))
	clusters := filepath.Join(t.TempDir(), "clusters.yaml")
	if err := os.WriteFile(clusters, []byte("clusters:\n- {name: dev-1, labels: {env: dev, region: eu}, groups: [europe]}\n- {name: prod-1, labels: {env: prod, region: us}}\nclusterGroups:\n- {name: europe}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd := newRootCommand()
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs([]string{"dev", repo, "--clusters", clusters, "--once", "--timeout", "5m"})
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		t.Fatalf("dev --once: %v\n%s", err, out.String())
	}
	text := out.String()
	for _, want := range []string{"every bundle is Ready on every cluster it targets", "Bundle dev-apps-web", "Bundle dev-kustomized", "Bundle dev (.)", "dev-1", "prod-1"} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}

	if err := os.WriteFile(filepath.Join(repo, "kustomized", "fleet.yaml"), []byte("kustomize: {dir: overlays/missing}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	cmd = newRootCommand()
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs([]string{"dev", repo, "--clusters", clusters, "--once", "--timeout", "5m"})
	err := cmd.ExecuteContext(context.Background())
	if err == nil || !strings.Contains(err.Error(), "does not render") || !strings.Contains(err.Error(), "kustomized/fleet.yaml") {
		t.Errorf("dev --once on a repository that does not render: %v\n%s", err, out.String())
	}
}
