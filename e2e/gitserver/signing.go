package gitserver

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/flotilla-dev/flotilla/e2e/gitrepo"
)

// SigningKey is a key git signs with, made by the reference tools (ssh-keygen, gpg), and its
// public half as a GitRepo's key list holds it.
type SigningKey struct {
	Signing *gitrepo.Signing
	// Public is an SSH public key line or an armored OpenPGP public key block.
	Public string
	// Fingerprint and GnuPGHome, for an OpenPGP key: where gpg keeps it.
	Fingerprint, GnuPGHome string
}

// Private exports an OpenPGP key's private half, armored, as a decryption Secret holds it.
func (k SigningKey) Private(t T) string {
	t.Helper()
	return run(t, []string{"GNUPGHOME=" + k.GnuPGHome}, "gpg", "--batch", "--pinentry-mode", "loopback", "--passphrase", "", "--armor", "--export-secret-keys", k.Fingerprint)
}

// NewSSHSigningKey makes an ed25519 key with ssh-keygen, which git signs with (ssh-keygen -Y
// sign).
func NewSSHSigningKey(t T, name string) SigningKey {
	t.Helper()
	key := filepath.Join(t.TempDir(), name)
	run(t, nil, "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", key)
	pub, err := os.ReadFile(key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	return SigningKey{Signing: &gitrepo.Signing{Config: []string{"gpg.format=ssh", "user.signingkey=" + key}}, Public: string(pub)}
}

// NewOpenPGPKey makes an ed25519 OpenPGP key with gpg in a keyring of its own; its agent is
// stopped when the test ends.
func NewOpenPGPKey(t T, name string) SigningKey {
	t.Helper()
	// Short: gpg-agent's socket lives in it, and a socket path has at most 107 bytes.
	home, err := os.MkdirTemp("", "gpg-")
	if err != nil {
		t.Fatal(err)
	}
	env := []string{"GNUPGHOME=" + home}
	t.Cleanup(func() {
		_ = exec.Command("gpgconf", "--homedir", home, "--kill", "all").Run()
		_ = os.RemoveAll(home)
	})
	if err := os.Chmod(home, 0o700); err != nil {
		t.Fatal(err)
	}
	uid := name + " <" + name + "@example.com>"
	run(t, env, "gpg", "--batch", "--quiet", "--passphrase", "", "--quick-gen-key", uid, "ed25519", "sign", "never")
	// An encryption subkey too, for SOPS files encrypted to the key.
	fprOf := func() string {
		for _, line := range strings.Split(run(t, env, "gpg", "--batch", "--with-colons", "--list-keys", name+"@example.com"), "\n") {
			if f := strings.Split(line, ":"); f[0] == "fpr" {
				return f[9]
			}
		}
		return ""
	}
	run(t, env, "gpg", "--batch", "--quiet", "--passphrase", "", "--quick-add-key", fprOf(), "cv25519", "encr", "never")
	public := run(t, env, "gpg", "--batch", "--armor", "--export", name+"@example.com")
	fpr := fprOf()
	if fpr == "" {
		t.Fatalf("gpg made no key for %s", name)
	}
	return SigningKey{Signing: &gitrepo.Signing{Config: []string{"gpg.format=openpgp", "user.signingkey=" + fpr}, Env: env}, Public: public, Fingerprint: fpr, GnuPGHome: home}
}

func run(t T, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}
