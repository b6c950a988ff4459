// Package sopscli encrypts files for tests with the real sops command, built from its module
// into the per-version cache (go run ./e2e/prepare builds it first), so that what the hub
// decrypts is what SOPS itself writes.
package sopscli

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/flotilla-dev/flotilla/e2e/controlplane"
)

// Program is the sops release the tests encrypt with: the one the hub's library is.
var Program = controlplane.Program{Name: "sops", Module: "github.com/getsops/sops/v3", Version: "v3.13.3", Package: "github.com/getsops/sops/v3/cmd/sops"}

// Ensure builds sops once and returns its path.
func Ensure(ctx context.Context, progress io.Writer) (string, error) {
	return controlplane.EnsureProgram(ctx, progress, Program)
}

// T is what Encrypt needs of its test (testing.TB, or a fuzz target's F).
type T interface {
	Helper()
	TempDir() string
	Fatalf(format string, args ...any)
}

// Options are sops's recipients and what it encrypts.
type Options struct {
	// Age recipients (age1…) and OpenPGP fingerprints the data key is encrypted for.
	Age, PGP []string
	// GnuPGHome holds the OpenPGP public keys, for PGP recipients.
	GnuPGHome string
	// EncryptedRegex limits what is encrypted to the keys it matches (as
	// --encrypted-regex); default every value.
	EncryptedRegex string
}

// Encrypt encrypts plain, a file named name (its extension says YAML or JSON), with sops.
func Encrypt(t T, name string, plain []byte, o Options) []byte {
	t.Helper()
	bin, err := Ensure(context.Background(), os.Stderr)
	if err != nil {
		t.Fatalf("sops: %v", err)
	}
	file := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(file, plain, 0o600); err != nil {
		t.Fatalf("%v", err)
	}
	args := []string{"--encrypt"}
	if len(o.Age) > 0 {
		args = append(args, "--age", strings.Join(o.Age, ","))
	}
	if len(o.PGP) > 0 {
		args = append(args, "--pgp", strings.Join(o.PGP, ","))
	}
	if o.EncryptedRegex != "" {
		args = append(args, "--encrypted-regex", o.EncryptedRegex)
	}
	cmd := exec.Command(bin, append(args, file)...)
	cmd.Dir = filepath.Dir(file) // no .sops.yaml of the developer's is found
	cmd.Env = []string{"HOME=" + filepath.Dir(file), "PATH=" + os.Getenv("PATH")}
	if o.GnuPGHome != "" {
		cmd.Env = append(cmd.Env, "GNUPGHOME="+o.GnuPGHome)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("sops %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}
