package image

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// moduleDir is the checkout the test builds in.
func moduleDir(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

// The agent image, built twice from the same sources, has the same digest; pushed to a registry
// on loopback and pulled back it is a two-platform index whose images run as non-root, carry
// the labels and CA certificates and no shell, and whose binary prints the stamped version.
func TestImagesAreReproducibleAndRun(t *testing.T) {
	ctx := context.Background()
	stamp := Stamp{Version: "v0.9.1", Commit: "0123456789abcdef0123456789abcdef01234567", Created: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	opts := Options{ModuleDir: moduleDir(t), Stamp: stamp, Log: t.Logf}
	agent := Binary{Name: "flotilla-agent", Package: "./cmd/flotilla-agent"}
	first, err := Build(ctx, opts, agent)
	if err != nil {
		t.Fatal(err)
	}
	second, err := Build(ctx, opts, agent)
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := first.Digest()
	d2, _ := second.Digest()
	if d1 != d2 {
		t.Errorf("two builds of the same sources: %s and %s", d1, d2)
	}

	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	ref, err := name.ParseReference(u.Host+"/flotilla/flotilla-agent:v0.9.1", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(ref, first, remote.WithContext(ctx)); err != nil {
		t.Fatal(err)
	}
	pulled, err := remote.Index(ref, remote.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := pulled.Digest(); d != d1 {
		t.Errorf("pulled %s, pushed %s", d, d1)
	}
	manifest, err := pulled.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var platforms []string
	for _, m := range manifest.Manifests {
		platforms = append(platforms, m.Platform.String())
	}
	if strings.Join(platforms, ",") != "linux/amd64,linux/arm64" {
		t.Errorf("platforms %v", platforms)
	}
	ran := false
	for _, m := range manifest.Manifests {
		img, err := pulled.Image(m.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Config.User != "65532:65532" || cfg.Config.Labels["org.opencontainers.image.revision"] != stamp.Commit ||
			cfg.Config.Labels["org.opencontainers.image.version"] != stamp.Version || cfg.Config.Labels["org.opencontainers.image.source"] != Source ||
			cfg.Architecture != m.Platform.Architecture || !cfg.Created.Time.Equal(stamp.Created) {
			t.Errorf("%s config: user %q, labels %v, arch %s, created %v", m.Platform, cfg.Config.User, cfg.Config.Labels, cfg.Architecture, cfg.Created)
		}
		files := extract(t, img, "usr/local/bin/flotilla-agent", "etc/ssl/certs/ca-certificates.crt")
		if _, ok := files["bin/sh"]; ok {
			t.Errorf("%s has a shell", m.Platform)
		}
		for name, h := range files {
			if !h.ModTime.Equal(stamp.Created) || h.Uid != 0 && strings.TrimSuffix(name, "/") != "home/nonroot" {
				t.Errorf("%s %s: mtime %v owner %d", m.Platform, name, h.ModTime, h.Uid)
			}
		}
		if m.Platform.OS != runtime.GOOS || m.Platform.Architecture != runtime.GOARCH {
			continue
		}
		// The binary of the host's platform prints the stamped version.
		bin := filepath.Join(t.TempDir(), "flotilla-agent")
		if err := os.WriteFile(bin, files["usr/local/bin/flotilla-agent"].data, 0o755); err != nil {
			t.Fatal(err)
		}
		ran = true
		out, err := exec.Command(bin, "--version").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "flotilla-agent v0.9.1 (commit "+stamp.Commit) {
			t.Errorf("--version: %q %v", out, err)
		}
	}
	if !ran {
		t.Errorf("no image for this machine's platform %s/%s: the binary was not run", runtime.GOOS, runtime.GOARCH)
	}
}

type entry struct {
	*tar.Header
	data []byte
}

// extract reads the image's flattened file system: every header, and the contents of want.
func extract(t *testing.T, img v1.Image, want ...string) map[string]entry {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	out := map[string]entry{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		e := entry{Header: h}
		for _, w := range want {
			if h.Name == w {
				if e.data, err = io.ReadAll(tr); err != nil {
					t.Fatal(err)
				}
			}
		}
		out[h.Name] = e
	}
	for _, w := range want {
		if len(out[w].data) == 0 {
			t.Errorf("%s is missing or empty", w)
		}
	}
	return out
}
