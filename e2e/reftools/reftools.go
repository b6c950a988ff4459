// Package reftools runs, for tests, the reference tools whose output the hub must accept: the
// sops command that encrypts files and the cosign command that signs artifacts, each built from
// its module into the per-version cache (go run ./e2e/prepare builds them first), so that what
// the hub decrypts and verifies is what those tools themselves write.
package reftools

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/flotilla-dev/flotilla/e2e/controlplane"
)

// The releases the tests use: sops is the one the hub's library is.
var (
	Sops   = controlplane.Program{Name: "sops", Module: "github.com/getsops/sops/v3", Version: "v3.13.3", Package: "github.com/getsops/sops/v3/cmd/sops"}
	Cosign = controlplane.Program{Name: "cosign", Module: "github.com/sigstore/cosign/v2", Version: "v2.6.5", Package: "github.com/sigstore/cosign/v2/cmd/cosign"}
)

// Ensure builds the tools once and returns their paths, by name.
func Ensure(ctx context.Context, progress io.Writer) (map[string]string, error) {
	out := map[string]string{}
	for _, p := range []controlplane.Program{Sops, Cosign} {
		path, err := controlplane.EnsureProgram(ctx, progress, p)
		if err != nil {
			return nil, err
		}
		out[p.Name] = path
	}
	return out, nil
}

// T is what the helpers need of their test (testing.TB, or a fuzz target's F).
type T interface {
	Helper()
	TempDir() string
	Fatalf(format string, args ...any)
}

// run runs a tool in dir with only the environment given (HOME is dir: no configuration of the
// developer's is found) and returns its standard output.
func run(t T, p controlplane.Program, dir string, env []string, args ...string) []byte {
	t.Helper()
	bin, err := controlplane.EnsureProgram(context.Background(), os.Stderr, p)
	if err != nil {
		t.Fatalf("%s: %v", p.Name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = append([]string{"HOME=" + dir, "PATH=" + os.Getenv("PATH")}, env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", p.Name, strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// SOPSOptions are sops's recipients and what it encrypts.
type SOPSOptions struct {
	// Age recipients (age1…) and OpenPGP fingerprints the data key is encrypted for.
	Age, PGP []string
	// GnuPGHome holds the OpenPGP public keys, for PGP recipients.
	GnuPGHome string
	// EncryptedRegex limits what is encrypted to the keys it matches (as --encrypted-regex);
	// default every value.
	EncryptedRegex string
}

// SOPSEncrypt encrypts plain, a file named name (its extension says YAML or JSON), with sops.
func SOPSEncrypt(t T, name string, plain []byte, o SOPSOptions) []byte {
	t.Helper()
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
	var env []string
	if o.GnuPGHome != "" {
		env = append(env, "GNUPGHOME="+o.GnuPGHome)
	}
	return run(t, Sops, filepath.Dir(file), env, append(args, file)...)
}

// CosignKey is a cosign key pair: the private key's file (no password) and the public key, PEM.
type CosignKey struct {
	Private string
	Public  []byte
}

// NewCosignKey makes a key pair with cosign generate-key-pair.
func NewCosignKey(t T) CosignKey {
	t.Helper()
	dir := t.TempDir()
	run(t, Cosign, dir, cosignEnv(dir), "generate-key-pair")
	pub, err := os.ReadFile(filepath.Join(dir, "cosign.pub"))
	if err != nil {
		t.Fatalf("%v", err)
	}
	return CosignKey{Private: filepath.Join(dir, "cosign.key"), Public: pub}
}

// CosignSign signs ref (registry/path@sha256:…, on a loopback registry over HTTP) with key,
// without the transparency log.
func CosignSign(t T, key CosignKey, ref string) {
	t.Helper()
	dir := t.TempDir()
	run(t, Cosign, dir, cosignEnv(dir), "sign", "--key", key.Private, "--tlog-upload=false", "--yes", "--allow-http-registry", "--allow-insecure-registry", ref)
}

func cosignEnv(dir string) []string {
	return []string{"COSIGN_PASSWORD=", "TUF_ROOT=" + filepath.Join(dir, "tuf")}
}
