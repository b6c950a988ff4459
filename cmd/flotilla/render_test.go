package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"filippo.io/age"

	"github.com/flotilla-dev/flotilla/e2e/reftools"
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

// A bundle that does not render fails alone: the others are printed, and the error (exit code 2)
// names every bundle that failed, in text and in -o json alike.
func TestRenderGoesOnPastABundleThatDoesNotRender(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "good/fleet.yaml", "defaultNamespace: good\n")
	writeFile(t, dir, "good/cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: fine}\n")
	writeFile(t, dir, "typo/fleet.yaml", "helm:\n  chart: ./chart\n  relaseName: x\n")
	writeFile(t, dir, "empty-chart/fleet.yaml", "helm: {chart: ./missing}\n")
	out, err := runCLI("render", dir, "--repo-name", "r")
	var in *operate.ErrInput
	if !errors.As(err, &in) || !strings.Contains(err.Error(), "2 of 3 bundles did not render") ||
		!strings.Contains(err.Error(), "bundle r-typo (typo)") || !strings.Contains(err.Error(), "bundle r-empty-chart (empty-chart)") {
		t.Errorf("error = %v", err)
	}
	for _, want := range []string{"# Bundle r-good (good), 1 objects", "name: fine", "# Bundle r-typo (typo): not rendered:", "# Bundle r-empty-chart (empty-chart): not rendered:"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	out, err = runCLI("render", dir, "--repo-name", "r", "-o", "json")
	if !errors.As(err, &in) || !strings.Contains(out, `"bundle": "r-good"`) || !strings.Contains(out, `"error": "typo/fleet.yaml:3: helm.relaseName: unknown field`) {
		t.Errorf("-o json: %v\n%s", err, out)
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

// A repository with a Secret encrypted by the sops command: without keys, render says the file
// is encrypted and prints nothing of it; with the key, the objects that hold a decrypted value
// are named, not printed, unless --show-decrypted asks for them.
func TestRenderDecryptsSOPSFilesAndShowsThemOnlyWhenAsked(t *testing.T) {
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	repo := filepath.Join(dir, "repo")
	if err := os.MkdirAll(filepath.Join(repo, "db"), 0o755); err != nil {
		t.Fatal(err)
	}
	secret := reftools.SOPSEncrypt(t, "secret.yaml", []byte("apiVersion: v1\nkind: Secret\nmetadata: {name: db}\nstringData: {password: plaintext-of-the-cli}\n"),
		reftools.SOPSOptions{Age: []string{id.Recipient().String()}, EncryptedRegex: "^(data|stringData)$"})
	writeFile(t, filepath.Join(repo, "db"), "secret.yaml", string(secret))
	writeFile(t, filepath.Join(repo, "db"), "fleet.yaml", "defaultNamespace: db\n")
	keyFile := writeFile(t, dir, "keys.txt", "# created: now\n"+id.String()+"\n")

	out, err := runCLI("render", repo, "--paths", "db")
	if !errors.As(err, new(*operate.ErrInput)) || !strings.Contains(err.Error(), "db/secret.yaml: is encrypted with SOPS") || strings.Contains(out, "plaintext-of-the-cli") {
		t.Errorf("without keys: %v\n%s", err, out)
	}
	for _, format := range []string{"manifests", "json"} {
		out, err = runCLI("render", repo, "--paths", "db", "--decryption-key", keyFile, "-o", format)
		if err != nil || strings.Contains(out, "plaintext-of-the-cli") || !strings.Contains(out, "hold values decrypted with SOPS") || !strings.Contains(out, "db") {
			t.Errorf("-o %s with the key, not asked to show: %v\n%s", format, err, out)
		}
	}
	out, err = runCLI("render", repo, "--paths", "db", "--decryption-key", keyFile, "--show-decrypted")
	if err != nil || !strings.Contains(out, "password: plaintext-of-the-cli") {
		t.Errorf("--show-decrypted: %v\n%s", err, out)
	}
	if _, err := runCLI("render", repo, "--decryption-key", writeFile(t, dir, "junk", "not a key")); !errors.As(err, new(*operate.ErrInput)) || !strings.Contains(err.Error(), "holds neither age identities") {
		t.Errorf("a key file that holds no key: %v", err)
	}
}
