package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flotilla-dev/flotilla/hub/operate"
)

func TestRenderExampleRepository(t *testing.T) {
	out, err := runCLI("render", "../../bundle/testdata/helm-multicluster/repo", "--cluster-name", "prod-1", "--cluster-label", "env=prod", "--cluster-label", "region=us", "--repo-name", "shop")
	if err != nil {
		t.Fatalf("render: %v\n%s", err, out)
	}
	for _, want := range []string{"# Bundle shop-apps-web (apps/web), target customization prod, 1 objects", "replicas: 3", "region: us", "namespace: web"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	out, err = runCLI("render", "../../bundle/testdata/helm-multicluster/repo", "--cluster-name", "lab-1")
	if err != nil || !strings.Contains(out, "not deployed to lab-1 (doNotDeploy)") {
		t.Errorf("lab-1: %v\n%s", err, out)
	}
}

func TestRenderBadInput(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "fleet.yaml", "helm:\n  chart: ./chart\n  relaseName: x\n")
	_, err := runCLI("render", dir)
	var in *operate.ErrInput
	if !errors.As(err, &in) || !strings.Contains(err.Error(), "fleet.yaml:3: helm.relaseName: unknown field") {
		t.Errorf("error = %v", err)
	}
	if _, err := runCLI("render", dir, "--cluster-label", "novalue"); !errors.As(err, &in) {
		t.Errorf("bad label accepted: %v", err)
	}
}

// render reads the repository through the hub's confined view: a symlink leading out of it is
// refused with exit code 2 and the link's name, and nothing of its target is printed.
func TestRenderRefusesSymlinksLeavingTheRepository(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	writeFile(t, outside, "secret.yaml", "apiVersion: v1\nkind: Secret\nmetadata: {name: stolen}\n")
	writeFile(t, dir, "fleet.yaml", "{}\n")
	writeFile(t, dir, "cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ok}\n")
	if err := os.Symlink(filepath.Join(outside, "secret.yaml"), filepath.Join(dir, "linked.yaml")); err != nil {
		t.Fatal(err)
	}
	out, err := runCLI("render", dir)
	var in *operate.ErrInput
	if !errors.As(err, &in) || !strings.Contains(err.Error(), "linked.yaml is a symlink to") || strings.Contains(out, "stolen") {
		t.Errorf("error = %v, output:\n%s", err, out)
	}
}
