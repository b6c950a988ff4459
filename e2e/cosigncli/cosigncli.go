// Package cosigncli signs OCI artifacts for tests with the real cosign command, built from its
// module into the per-version cache (go run ./e2e/prepare builds it first): keys made by
// cosign generate-key-pair, signatures by cosign sign, offline (no transparency log).
package cosigncli

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/flotilla-dev/flotilla/e2e/controlplane"
)

// Program is the cosign release the tests sign with.
var Program = controlplane.Program{Name: "cosign", Module: "github.com/sigstore/cosign/v2", Version: "v2.6.5", Package: "github.com/sigstore/cosign/v2/cmd/cosign"}

// Ensure builds cosign once and returns its path.
func Ensure(ctx context.Context, progress io.Writer) (string, error) {
	return controlplane.EnsureProgram(ctx, progress, Program)
}

// T is what the helpers need of their test.
type T interface {
	Helper()
	TempDir() string
	Fatalf(format string, args ...any)
}

// Key is a cosign key pair: the private key's file (no password) and the public key, PEM.
type Key struct {
	Private string
	Public  []byte
}

// NewKey makes a key pair with cosign generate-key-pair.
func NewKey(t T) Key {
	t.Helper()
	dir := t.TempDir()
	run(t, dir, "generate-key-pair")
	pub, err := os.ReadFile(filepath.Join(dir, "cosign.pub"))
	if err != nil {
		t.Fatalf("%v", err)
	}
	return Key{Private: filepath.Join(dir, "cosign.key"), Public: pub}
}

// Sign signs ref (registry/path@sha256:…, on a loopback registry over HTTP) with key, without
// the transparency log.
func Sign(t T, key Key, ref string) {
	t.Helper()
	run(t, t.TempDir(), "sign", "--key", key.Private, "--tlog-upload=false", "--yes", "--allow-http-registry", "--allow-insecure-registry", ref)
}

func run(t T, dir string, args ...string) {
	t.Helper()
	bin, err := Ensure(context.Background(), os.Stderr)
	if err != nil {
		t.Fatalf("cosign: %v", err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = []string{"HOME=" + dir, "PATH=" + os.Getenv("PATH"), "COSIGN_PASSWORD=", "TUF_ROOT=" + filepath.Join(dir, "tuf")}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if _, err := cmd.Output(); err != nil {
		t.Fatalf("cosign %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
}
