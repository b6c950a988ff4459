package gitsource

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/flotilla-dev/flotilla/e2e/gitserver"
)

func keyRing(t *testing.T, keys map[string]gitserver.SigningKey) *KeyRing {
	t.Helper()
	data := map[string][]byte{}
	for name, k := range keys {
		data[name] = []byte(k.Public)
	}
	ring, err := ParseKeys(data)
	if err != nil {
		t.Fatal(err)
	}
	return ring
}

// checkedOut reports whether anything of commit was written to the client's cache.
func checkedOut(t *testing.T, c *Client, commit string) bool {
	t.Helper()
	found := false
	_ = filepath.WalkDir(c.CacheDir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Name() == commit {
			found = true
		}
		return nil
	})
	return found
}

// Commits signed by the allowed keys (SSH and OpenPGP, made by ssh-keygen and gpg through git)
// are checked out; an unsigned commit, one signed by another key of either kind, and a signed
// commit altered after signing are refused, nothing of them written, with the reason and the
// keys allowed. Adding a key lets its commits through; a checkout made before is served again
// only to a commit that still verifies.
func TestOnlyCommitsSignedByAnAllowedKeyAreCheckedOut(t *testing.T) {
	up := gitserver.New(t)
	srv := up.ServeHTTP("", "")
	alice, bob := gitserver.NewSSHSigningKey(t, "alice"), gitserver.NewOpenPGPKey(t, "bob")
	mallory, eve := gitserver.NewSSHSigningKey(t, "mallory"), gitserver.NewOpenPGPKey(t, "eve")
	ring := keyRing(t, map[string]gitserver.SigningKey{"alice.pub": alice, "bob.asc": bob})
	c := newClient(t)
	repo := Repo{URL: srv.URL + "/repo.git", Branch: "main", Verify: &Verification{Commit: true, Keys: ring}}
	ctx := context.Background()

	commit := func(signer *gitserver.SigningKey, content string) string {
		up.Signing = nil
		if signer != nil {
			up.Signing = signer.Signing
		}
		return up.Commit("main", map[string]string{"app/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {v: " + content + "}\n"})
	}
	for _, tc := range []struct {
		name   string
		signer *gitserver.SigningKey
		reason string // "" when the commit is checked out
	}{
		{"signed by alice's SSH key", &alice, ""},
		{"signed by bob's OpenPGP key", &bob, ""},
		{"unsigned", nil, "it is not signed"},
		{"signed by another SSH key", &mallory, "it is signed with SSH key SHA256:"},
		{"signed by another OpenPGP key", &eve, "it is signed with an OpenPGP key that is not allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sha := commit(tc.signer, tc.name)
			dir, err := c.Checkout(ctx, repo, sha)
			if tc.reason == "" {
				if err != nil {
					t.Fatal(err)
				}
				if _, err := os.Stat(filepath.Join(dir, "app/cm.yaml")); err != nil {
					t.Errorf("the checkout lacks the commit's file: %v", err)
				}
				return
			}
			var ve *VerificationError
			if !errors.As(err, &ve) || !errors.Is(err, ErrUnverified) || !strings.Contains(ve.Reason, tc.reason) || dir != "" {
				t.Fatalf("checkout: %q, %v; want refused because %q", dir, err, tc.reason)
			}
			if !strings.HasPrefix(ve.Object, "commit "+sha[:12]) || len(ve.Allowed) != 2 || !strings.Contains(err.Error(), "alice.pub: SSH SHA256:") || !strings.Contains(err.Error(), "bob.asc: OpenPGP ") {
				t.Errorf("the refusal does not name the commit and the keys allowed: %v", err)
			}
			if checkedOut(t, c, sha) {
				t.Errorf("the refused commit %s was written to the cache", sha[:12])
			}
		})
	}

	// A signed commit altered after signing: its message changed, the signature kept, written
	// into the served repository under a new id.
	for _, signer := range []*gitserver.SigningKey{&alice, &bob} {
		signed := commit(signer, "to-alter")
		forged := alter(t, up.Bare, signed)
		if _, err := c.Checkout(ctx, repo, forged); !errors.Is(err, ErrUnverified) || !strings.Contains(err.Error(), "does not verify") || checkedOut(t, c, forged) {
			t.Errorf("an altered commit: %v", err)
		}
	}

	// Rotation: mallory's key added, her next commit goes through.
	sha := commit(&mallory, "rotated")
	repo.Verify.Keys = keyRing(t, map[string]gitserver.SigningKey{"alice.pub": alice, "bob.asc": bob, "mallory.pub": mallory})
	if _, err := c.Checkout(ctx, repo, sha); err != nil {
		t.Errorf("after mallory's key was added: %v", err)
	}
	// Alice's key removed: her commit, checked out before, is refused now.
	byAlice := commit(&alice, "alice-again")
	if _, err := c.Checkout(ctx, repo, byAlice); err != nil {
		t.Fatal(err)
	}
	repo.Verify.Keys = keyRing(t, map[string]gitserver.SigningKey{"bob.asc": bob})
	if _, err := c.Checkout(ctx, repo, byAlice); !errors.Is(err, ErrUnverified) {
		t.Errorf("a checkout on disk of a commit whose key was removed: %v", err)
	}
}

// alter writes, into the bare repository, a copy of commit with another message and the same
// signature, and points main at it; it returns the copy's id.
func alter(t *testing.T, bare, commit string) string {
	t.Helper()
	r, err := git.PlainOpen(bare)
	if err != nil {
		t.Fatal(err)
	}
	co, err := r.CommitObject(plumbing.NewHash(commit))
	if err != nil {
		t.Fatal(err)
	}
	forged := *co
	forged.Message = "innocent change\n"
	obj := r.Storer.NewEncodedObject()
	if err := forged.Encode(obj); err != nil {
		t.Fatal(err)
	}
	h, err := r.Storer.SetEncodedObject(obj)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Storer.SetReference(plumbing.NewHashReference("refs/heads/main", h)); err != nil {
		t.Fatal(err)
	}
	if _, err := object.GetCommit(r.Storer, h); err != nil {
		t.Fatal(err)
	}
	return h.String()
}

// A tag-following repository verifies the annotated tag it resolves to: signed by an allowed
// key it passes; a lightweight tag, an unsigned annotated tag and one signed by another key are
// refused; a branch-following repository that asks for signed tags is refused too.
func TestSignedTagsOfATagFollowingRepository(t *testing.T) {
	up := gitserver.New(t)
	srv := up.ServeHTTP("", "")
	alice, mallory := gitserver.NewSSHSigningKey(t, "alice"), gitserver.NewSSHSigningKey(t, "mallory")
	c := newClient(t)
	repo := Repo{URL: srv.URL + "/repo.git", Semver: ">=1.0.0", Verify: &Verification{Tag: true, Keys: keyRing(t, map[string]gitserver.SigningKey{"alice.pub": alice})}}
	ctx := context.Background()
	release := func(tag string, signer *gitserver.SigningKey, annotated bool) Ref {
		up.Signing = nil
		up.Commit("main", map[string]string{"v": tag})
		if signer != nil {
			up.Signing = signer.Signing
		}
		up.Tag(tag, annotated)
		ref, err := c.Resolve(ctx, repo)
		if err != nil || ref.Name != "refs/tags/"+tag {
			t.Fatalf("resolve: %+v, %v", ref, err)
		}
		if _, err := c.Checkout(ctx, repo, ref.Commit); err != nil {
			t.Fatal(err) // commits need no signature in Tag mode
		}
		return ref
	}
	if err := c.VerifyTag(ctx, repo, release("v1.0.0", &alice, true)); err != nil {
		t.Errorf("a tag signed by alice: %v", err)
	}
	for _, tc := range []struct {
		tag       string
		signer    *gitserver.SigningKey
		annotated bool
		reason    string
	}{
		{"v1.1.0", nil, false, "lightweight"},
		{"v1.2.0", nil, true, "it is not signed"},
		{"v1.3.0", &mallory, true, "which is not allowed"},
	} {
		err := c.VerifyTag(ctx, repo, release(tc.tag, tc.signer, tc.annotated))
		var ve *VerificationError
		if !errors.As(err, &ve) || ve.Object != "tag "+tc.tag || !strings.Contains(ve.Reason, tc.reason) {
			t.Errorf("%s: %v; want refused: %s", tc.tag, err, tc.reason)
		}
	}
	branch := repo
	branch.Semver, branch.Branch = "", "main"
	ref, err := c.Resolve(ctx, branch)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.VerifyTag(ctx, branch, ref); !errors.Is(err, ErrUnverified) || !strings.Contains(err.Error(), "follows main, not a tag") {
		t.Errorf("a branch with signed tags required: %v", err)
	}
}

// A signed tag counts only under the name it was signed with: the release v1.0.0 pushed again
// as v9.9.9 (by someone with push access and no key) is refused by VerifyTag, and a semver
// repository with SignedTags never selects it: it keeps resolving to the newest tag signed under
// its own name. A client whose cache is empty (a fresh hub) verifies a tag before it has checked
// anything out.
func TestASignedTagCountsOnlyUnderItsOwnName(t *testing.T) {
	up := gitserver.New(t)
	srv := up.ServeHTTP("", "")
	alice := gitserver.NewSSHSigningKey(t, "alice")
	repo := Repo{URL: srv.URL + "/repo.git", Semver: ">=1.0.0", SignedTags: true,
		Verify: &Verification{Tag: true, Keys: keyRing(t, map[string]gitserver.SigningKey{"alice.pub": alice})}}
	ctx := context.Background()
	up.Commit("main", map[string]string{"v": "1.0.0"})
	up.Signing = alice.Signing
	up.Tag("v1.0.0", true)

	fresh := newClient(t)
	ref, err := fresh.Resolve(ctx, repo)
	if err != nil || ref.Name != "refs/tags/v1.0.0" || ref.Tag == "" {
		t.Fatalf("resolve: %+v, %v", ref, err)
	}
	if err := fresh.VerifyTag(ctx, repo, ref); err != nil {
		t.Fatalf("a signed tag on a client with an empty cache: %v", err)
	}
	signed := ref

	up.Commit("main", map[string]string{"v": "unsigned work"})
	up.Git(up.Work, "push", "-q", "origin", "refs/tags/v1.0.0:refs/tags/v9.9.9")
	c := newClient(t)
	if ref, err := c.Resolve(ctx, repo); err != nil || ref != signed {
		t.Errorf("with v9.9.9 a copy of v1.0.0: resolved %+v, %v; want v1.0.0 (%s)", ref, err, signed.Commit[:12])
	}
	listedOnly := repo
	listedOnly.SignedTags = false
	impostor, err := c.Resolve(ctx, listedOnly)
	if err != nil || impostor.Name != "refs/tags/v9.9.9" {
		t.Fatalf("the listing's newest: %+v, %v", impostor, err)
	}
	err = c.VerifyTag(ctx, repo, impostor)
	var ve *VerificationError
	if !errors.As(err, &ve) || ve.Object != "tag v9.9.9" || !strings.Contains(ve.Reason, `names tag "v1.0.0"`) {
		t.Errorf("v9.9.9, a copy of v1.0.0: %v; want refused as signed under v1.0.0", err)
	}

	// A release signed under its own name is selected again.
	up.Commit("main", map[string]string{"v": "1.1.0"})
	up.Tag("v1.1.0", true)
	// v9.9.9 stays the newest name; the newest signed under its own name is v1.1.0.
	if ref, err := c.Resolve(ctx, repo); err != nil || ref.Name != "refs/tags/v1.1.0" {
		t.Errorf("after v1.1.0: resolved %+v, %v", ref, err)
	} else if err := c.VerifyTag(ctx, repo, ref); err != nil {
		t.Errorf("v1.1.0: %v", err)
	}
}

// A key list that holds no key, or a value that is no key, is an error naming it: an empty list
// would quietly refuse everything.
func TestParseKeysRefusesWhatIsNoKey(t *testing.T) {
	for name, tc := range map[string]struct {
		data map[string][]byte
		want string
	}{
		"empty":       {map[string][]byte{}, "holds no public key"},
		"not a key":   {map[string][]byte{"team.pub": []byte("hello\n")}, "team.pub: line 1: not an SSH public key"},
		"only blanks": {map[string][]byte{"team.pub": []byte("\n# nobody\n")}, "team.pub: holds neither"},
		"broken pgp":  {map[string][]byte{"k.asc": []byte("-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nxx\n-----END PGP PUBLIC KEY BLOCK-----\n")}, "k.asc: not an OpenPGP public key block"},
	} {
		if _, err := ParseKeys(tc.data); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
}

// FuzzSignaturesNeverVerifyByAccident feeds a key ring signatures no key made: whatever their
// bytes (armour, SSHSIG fields, namespaces, hash names, key blobs, OpenPGP packets), none is
// accepted and none panics.
func FuzzSignaturesNeverVerifyByAccident(f *testing.F) {
	const sshKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl alice"
	ring, err := ParseKeys(map[string][]byte{"alice.pub": []byte(sshKey)})
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte("tree 1\n"), "-----BEGIN SSH SIGNATURE-----\nU1NIU0lHAAAAAQ==\n-----END SSH SIGNATURE-----\n")
	f.Add([]byte("tree 1\n"), "-----BEGIN PGP SIGNATURE-----\n\nwnUEABYKAB0WIQQ=\n-----END PGP SIGNATURE-----\n")
	f.Add([]byte(""), "-----BEGIN SSH SIGNATURE-----\n-----END SSH SIGNATURE-----")
	f.Fuzz(func(t *testing.T, payload []byte, signature string) {
		var obj plumbing.MemoryObject
		_, _ = obj.Write(payload)
		if reason := ring.verify(&obj, signature); reason == "" {
			t.Fatalf("a signature no key made was accepted: %q", signature)
		}
	})
}
