package main

import (
	"context"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"

	"github.com/flotilla-dev/flotilla/hub/gitsource"
	"github.com/flotilla-dev/flotilla/hub/operate"
)

// flotilla push artifact packs a directory that a GitRepo of repo oci://… then checks out file
// for file (a symbolic link inside it too, .git left out); the digest it prints is the one the
// hub resolves.
func TestPushArtifactIsWhatTheHubChecksOut(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	dir := t.TempDir()
	for name, content := range map[string]string{"web/fleet.yaml": "defaultNamespace: web\n", "web/cm.yaml": "kind: ConfigMap\n", ".git/config": "[core]\n"} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, filepath.Dir(name)), filepath.Base(name), content)
	}
	if err := os.Symlink("cm.yaml", filepath.Join(dir, "web", "alias.yaml")); err != nil {
		t.Fatal(err)
	}
	out, err := runCLI("push", "artifact", dir, "oci://"+host+"/fleet/shop:1.2.0", "--source", "https://git.example/shop", "--revision", "abc123")
	if err != nil || !strings.HasPrefix(out, "pushed oci://"+host+"/fleet/shop:1.2.0@sha256:") {
		t.Fatalf("%v\n%s", err, out)
	}
	digest := strings.TrimSpace(out[strings.LastIndex(out, "sha256:")+len("sha256:"):])

	c := &gitsource.Client{CacheDir: t.TempDir()}
	repo := gitsource.Repo{URL: "oci://" + host + "/fleet/shop", Semver: "^1"}
	ref, err := c.Resolve(context.Background(), repo)
	if err != nil || ref.Commit != digest {
		t.Fatalf("resolved %+v, %v; want %s", ref, err, digest)
	}
	co, err := c.Checkout(context.Background(), repo, ref.Commit)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"web/fleet.yaml": "defaultNamespace: web\n", "web/alias.yaml": "kind: ConfigMap\n"} {
		if data, err := os.ReadFile(filepath.Join(co, name)); err != nil || string(data) != want {
			t.Errorf("%s: %q, %v", name, data, err)
		}
	}
	if _, err := os.Stat(filepath.Join(co, ".git")); !os.IsNotExist(err) {
		t.Errorf(".git was pushed: %v", err)
	}
	if again, err := runCLI("push", "artifact", dir, "oci://"+host+"/fleet/shop:1.2.1", "--source", "https://git.example/shop", "--revision", "abc123"); err != nil || !strings.HasSuffix(strings.TrimSpace(again), digest) {
		t.Errorf("the same directory pushed again: %v %s, want digest %s", err, again, digest)
	}
	for _, bad := range [][]string{
		{"push", "artifact", dir, "https://" + host + "/fleet/shop:1"},
		{"push", "artifact", filepath.Join(dir, "missing"), "oci://" + host + "/fleet/shop:1"},
		{"push", "artifact", dir, "oci://" + host + "/fleet/shop:1", "--username", "u"},
	} {
		if _, err := runCLI(bad...); !errors.As(err, new(*operate.ErrInput)) {
			t.Errorf("%v: %v, want bad input", bad, err)
		}
	}
}
