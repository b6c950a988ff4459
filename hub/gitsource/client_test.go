package gitsource

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flotilla-dev/flotilla/e2e/gitserver"

	"golang.org/x/crypto/ssh"
)

func newClient(t *testing.T) *Client { return &Client{CacheDir: t.TempDir()} }

func TestResolveAndCheckoutOverHTTP(t *testing.T) {
	up := gitserver.New(t)
	first := up.Commit("main", map[string]string{"app/fleet.yaml": "defaultNamespace: a\n", "app/cm.yaml": "kind: ConfigMap\n"})
	srv := up.ServeHTTP("", "")
	c := newClient(t)
	repo := Repo{URL: srv.URL + "/repo.git", Branch: "main"}
	ref, err := c.Resolve(context.Background(), repo)
	if err != nil || ref.Commit != first || ref.Name != "refs/heads/main" {
		t.Fatalf("resolve: %+v, %v; want %s", ref, err, first)
	}
	dir, err := c.Checkout(context.Background(), repo, ref.Commit)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "app", "fleet.yaml"))
	if err != nil || string(data) != "defaultNamespace: a\n" {
		t.Fatalf("checkout content %q, %v", data, err)
	}
	if info, _ := os.Stat(filepath.Join(dir, "app", "cm.yaml")); info.Mode().Perm()&0o222 != 0 {
		t.Errorf("checkout is writable: %v", info.Mode())
	}
	// Default branch when none is set.
	if ref, err := c.Resolve(context.Background(), Repo{URL: repo.URL}); err != nil || ref.Commit != first {
		t.Errorf("default branch: %+v, %v", ref, err)
	}
	// A new commit is seen and checked out incrementally.
	second := up.Commit("main", map[string]string{"app/cm.yaml": "kind: ConfigMap\ndata: {}\n"})
	if ref, _ = c.Resolve(context.Background(), repo); ref.Commit != second {
		t.Fatalf("after push: %s, want %s", ref.Commit, second)
	}
	dir2, err := c.Checkout(context.Background(), repo, second)
	if err != nil || dir2 == dir {
		t.Fatalf("second checkout %s, %v", dir2, err)
	}
	if data, _ := os.ReadFile(filepath.Join(dir2, "app", "cm.yaml")); !strings.Contains(string(data), "data") {
		t.Errorf("second checkout has old content: %q", data)
	}
}

func TestBasicAuthAndErrors(t *testing.T) {
	up := gitserver.New(t)
	commit := up.Commit("main", map[string]string{"a.yaml": "a: 1\n"})
	srv := up.ServeHTTP("fleet", "t0ken")
	c := newClient(t)
	repo := Repo{URL: srv.URL + "/repo.git", Branch: "main", Auth: &Auth{Username: "fleet", Password: "t0ken"}}
	if ref, err := c.Resolve(context.Background(), repo); err != nil || ref.Commit != commit {
		t.Fatalf("with credentials: %+v, %v", ref, err)
	}
	if _, err := c.Checkout(context.Background(), repo, commit); err != nil {
		t.Fatalf("checkout with credentials: %v", err)
	}
	repo.Auth = &Auth{Username: "fleet", Password: "wrong-password"}
	_, err := c.Resolve(context.Background(), repo)
	if Classify(err) != CauseAuthentication || strings.Contains(err.Error(), "wrong-password") {
		t.Errorf("wrong password: cause %s, error %v", Classify(err), err)
	}
	// Credentials in the URL never reach the error.
	withUser := strings.Replace(srv.URL, "http://", "http://fleet:secret-in-url@", 1) + "/missing.git"
	_, err = c.Resolve(context.Background(), Repo{URL: withUser})
	if err == nil || strings.Contains(err.Error(), "secret-in-url") {
		t.Errorf("error leaks the URL's password: %v", err)
	}
	// Server down.
	down := up.ServeHTTP("", "")
	down.Close()
	_, err = c.Resolve(context.Background(), Repo{URL: down.URL + "/repo.git"})
	if Classify(err) != CauseUnreachable {
		t.Errorf("server down: cause %s, error %v", Classify(err), err)
	}
}

func TestForcePushAndDeletedBranch(t *testing.T) {
	up := gitserver.New(t)
	up.Commit("main", map[string]string{"a.yaml": "a: 1\n"})
	srv := up.ServeHTTP("", "")
	c := newClient(t)
	repo := Repo{URL: srv.URL + "/repo.git", Branch: "main"}
	ref, _ := c.Resolve(context.Background(), repo)
	if _, err := c.Checkout(context.Background(), repo, ref.Commit); err != nil {
		t.Fatal(err)
	}
	// Rewrite history: an orphan commit force-pushed over main.
	up.Git(up.Work, "checkout", "-q", "--orphan", "rewrite")
	up.Git(up.Work, "rm", "-q", "-rf", ".")
	rewritten := up.Commit("rewrite", map[string]string{"b.yaml": "b: 2\n"})
	up.Git(up.Work, "push", "-q", "-f", "origin", "rewrite:main")
	ref, err := c.Resolve(context.Background(), repo)
	if err != nil || ref.Commit != rewritten {
		t.Fatalf("after force push: %+v, %v", ref, err)
	}
	dir, err := c.Checkout(context.Background(), repo, rewritten)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "a.yaml")); !os.IsNotExist(err) {
		t.Errorf("force-pushed checkout still has a.yaml")
	}
	up.Commit("feature", map[string]string{"f.yaml": "f: 1\n"})
	up.Git(up.Work, "push", "-q", "origin", "--delete", "feature")
	_, err = c.Resolve(context.Background(), Repo{URL: repo.URL, Branch: "feature"})
	if Classify(err) != CauseRefNotFound || !strings.Contains(err.Error(), `branch "feature"`) {
		t.Errorf("deleted branch: cause %s, error %v", Classify(err), err)
	}
}

func TestSemverTagsAndPinnedRevisions(t *testing.T) {
	up := gitserver.New(t)
	c1 := up.Commit("main", map[string]string{"v": "1.0.0"})
	up.Tag("v1.0.0", false)
	c2 := up.Commit("main", map[string]string{"v": "1.2.0"})
	up.Tag("v1.2.0", true) // annotated: resolved through its peeled entry
	c3 := up.Commit("main", map[string]string{"v": "2.0.0"})
	up.Tag("v2.0.0", false)
	srv := up.ServeHTTP("", "")
	c := newClient(t)
	url := srv.URL + "/repo.git"
	ref, err := c.Resolve(context.Background(), Repo{URL: url, Semver: ">=1.0.0 <2.0.0"})
	if err != nil || ref.Commit != c2 || ref.Name != "refs/tags/v1.2.0" {
		t.Fatalf("semver: %+v, %v; want v1.2.0 at %s", ref, err, c2)
	}
	// A new matching tag moves the channel; a non-matching one does not.
	c4 := up.Commit("main", map[string]string{"v": "3.0.0"})
	up.Tag("v3.0.0", false)
	if ref, _ = c.Resolve(context.Background(), Repo{URL: url, Semver: "~1.2"}); ref.Commit != c2 {
		t.Errorf("v3.0.0 must not match ~1.2: %+v", ref)
	}
	up.Git(up.Work, "tag", "v1.2.5", c3)
	up.Git(up.Work, "push", "-q", "origin", "v1.2.5")
	if ref, _ = c.Resolve(context.Background(), Repo{URL: url, Semver: "~1.2"}); ref.Commit != c3 || ref.Name != "refs/tags/v1.2.5" {
		t.Errorf("v1.2.5 must match ~1.2: %+v", ref)
	}
	if _, err := c.Resolve(context.Background(), Repo{URL: url, Semver: ">=9"}); Classify(err) != CauseRefNotFound {
		t.Errorf("no matching tag: %v", err)
	}
	// Pinned tag and pinned commit (the commit needs a full fetch).
	if ref, _ = c.Resolve(context.Background(), Repo{URL: url, Revision: "v1.0.0"}); ref.Commit != c1 {
		t.Errorf("pinned tag: %+v", ref)
	}
	dir, err := c.Checkout(context.Background(), Repo{URL: url, Revision: c1}, c1)
	if err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(filepath.Join(dir, "v")); string(data) != "1.0.0" {
		t.Errorf("pinned commit content %q", data)
	}
	_ = c4
	if _, err := c.Checkout(context.Background(), Repo{URL: url}, strings.Repeat("ab", 20)); Classify(err) != CauseRefNotFound {
		t.Errorf("unknown commit: %v", err)
	}
}

func TestSSHWithKnownHosts(t *testing.T) {
	up := gitserver.New(t)
	commit := up.Commit("main", map[string]string{"a.yaml": "a: 1\n"})
	srv := up.ServeSSH()
	c := newClient(t)
	auth, err := AuthFromSecret(map[string][]byte{SecretSSHKey: srv.ClientKey, SecretKnownHosts: srv.KnownHosts()})
	if err != nil {
		t.Fatal(err)
	}
	repo := Repo{URL: srv.URL(), Branch: "main", Auth: auth}
	ref, err := c.Resolve(context.Background(), repo)
	if err != nil || ref.Commit != commit {
		t.Fatalf("ssh resolve: %+v, %v", ref, err)
	}
	if _, err := c.Checkout(context.Background(), repo, commit); err != nil {
		t.Fatalf("ssh checkout: %v", err)
	}
	// A known_hosts entry for another key: the connection is refused.
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	otherSigner, _ := ssh.NewSignerFromKey(other)
	wrong := strings.Replace(string(srv.KnownHosts()), strings.TrimSpace(string(ssh.MarshalAuthorizedKey(srv.HostKey.PublicKey()))), strings.TrimSpace(string(ssh.MarshalAuthorizedKey(otherSigner.PublicKey()))), 1)
	repo.Auth = &Auth{SSHPrivateKey: srv.ClientKey, KnownHosts: []byte(wrong)}
	_, err = c.Resolve(context.Background(), repo)
	if Classify(err) != CauseAuthentication || !strings.Contains(err.Error(), "not in known_hosts") {
		t.Errorf("wrong host key: cause %s, error %v", Classify(err), err)
	}
	if _, err := AuthFromSecret(map[string][]byte{SecretSSHKey: srv.ClientKey}); err == nil {
		t.Errorf("an ssh key without known_hosts was accepted")
	}
}

func TestCheckoutCacheIsBounded(t *testing.T) {
	up := gitserver.New(t)
	srv := up.ServeHTTP("", "")
	c := &Client{CacheDir: t.TempDir(), KeepCheckouts: 2}
	repo := Repo{URL: srv.URL + "/repo.git", Branch: "main"}
	for i := range 4 {
		commit := up.Commit("main", map[string]string{"n": string(rune('a' + i))})
		if _, err := c.Checkout(context.Background(), repo, commit); err != nil {
			t.Fatal(err)
		}
	}
	entries, _ := os.ReadDir(filepath.Join(c.repoDir(repo), "checkouts"))
	if len(entries) != 2 {
		t.Errorf("%d checkouts kept, want 2", len(entries))
	}
}

// One tenant's GitRepo fetches a private commit with its credentials; another tenant's GitRepo
// on the same URL, pinned to that commit, must not get it from the cache: it has to prove
// access with its own credentials, and with none or wrong ones it gets an error and no files.
func TestCacheKeepsTenantsCommitsApart(t *testing.T) {
	up := gitserver.New(t)
	commit := up.Commit("main", map[string]string{"secret.yaml": "private: true\n"})
	srv := up.ServeHTTP("alice", "alice-token")
	c := newClient(t)
	url := srv.URL + "/repo.git"
	owner := Repo{URL: url, Revision: commit, Auth: &Auth{Username: "alice", Password: "alice-token"}}
	if _, err := c.Checkout(context.Background(), owner, commit); err != nil {
		t.Fatalf("the owner's checkout: %v", err)
	}
	for name, auth := range map[string]*Auth{"anonymous": nil, "wrong credentials": {Username: "mallory", Password: "guess"}} {
		other := Repo{URL: url, Revision: commit, Auth: auth}
		ref, err := c.Resolve(context.Background(), other)
		if err != nil {
			t.Fatalf("%s: resolving a pinned commit asks no remote: %v", name, err)
		}
		dir, err := c.Checkout(context.Background(), other, ref.Commit)
		if err == nil {
			data, _ := os.ReadFile(filepath.Join(dir, "secret.yaml"))
			t.Errorf("%s: got the owner's commit from the cache (%q)", name, data)
		}
	}
	if c.repoDir(owner) == c.repoDir(Repo{URL: url}) {
		t.Errorf("the owner's and an anonymous GitRepo's caches are the same directory")
	}
}

// A commit whose files exceed the checkout limit is refused, and no partial checkout stays.
func TestCheckoutSizeIsBounded(t *testing.T) {
	up := gitserver.New(t)
	commit := up.Commit("main", map[string]string{"big.yaml": strings.Repeat("x", 4096), "small.yaml": "a: 1\n"})
	srv := up.ServeHTTP("", "")
	c := &Client{CacheDir: t.TempDir(), MaxCheckoutBytes: 1024}
	repo := Repo{URL: srv.URL + "/repo.git", Branch: "main"}
	if _, err := c.Checkout(context.Background(), repo, commit); !errors.Is(err, ErrCheckoutTooLarge) {
		t.Fatalf("err = %v, want ErrCheckoutTooLarge", err)
	}
	if entries, _ := os.ReadDir(filepath.Join(c.repoDir(repo), "checkouts")); len(entries) != 0 {
		t.Errorf("a partial checkout stayed: %v", entries)
	}
	// And by files: a tree of more entries than the limit is refused as it is listed.
	many := map[string]string{}
	for i := range 20 {
		many[fmt.Sprintf("app/cm-%02d.yaml", i)] = "a: 1\n"
	}
	commit = up.Commit("main", many)
	c = &Client{CacheDir: t.TempDir(), MaxCheckoutFiles: 10}
	if _, err := c.Checkout(context.Background(), repo, commit); !errors.Is(err, ErrCheckoutTooManyFiles) || !strings.Contains(err.Error(), "--checkout-max-files") {
		t.Fatalf("a tree of 21 files with a limit of 10: %v, want ErrCheckoutTooManyFiles naming the flag", err)
	}
	if entries, _ := os.ReadDir(filepath.Join(c.repoDir(repo), "checkouts")); len(entries) != 0 {
		t.Errorf("a partial checkout stayed: %v", entries)
	}
}

func TestSanitize(t *testing.T) {
	for in, want := range map[string]string{
		"failed to list https://user:pass@git.example.com/r.git: x": "failed to list https://git.example.com/r.git: x",
		"ssh://git@host/r.git": "ssh://host/r.git",
		"no credentials here":  "no credentials here",
	} {
		if got := Sanitize(in); got != want {
			t.Errorf("Sanitize(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestHTTPSWithCABundle(t *testing.T) {
	up := gitserver.New(t)
	commit := up.Commit("main", map[string]string{"a.yaml": "a: 1\n"})
	srv, ca := up.ServeHTTPS()
	c := newClient(t)
	url := srv.URL + "/repo.git"
	if _, err := c.Resolve(context.Background(), Repo{URL: url}); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("untrusted certificate accepted: %v", err)
	}
	repo := Repo{URL: url, Auth: &Auth{CABundle: ca}}
	if ref, err := c.Resolve(context.Background(), repo); err != nil || ref.Commit != commit {
		t.Fatalf("with the CA bundle: %+v, %v", ref, err)
	}
	if _, err := c.Checkout(context.Background(), repo, commit); err != nil {
		t.Fatalf("checkout with the CA bundle: %v", err)
	}
	if _, err := c.Resolve(context.Background(), Repo{URL: url, Auth: &Auth{InsecureSkipTLSVerify: true}}); err != nil {
		t.Errorf("insecureSkipTLSVerify: %v", err)
	}
}
