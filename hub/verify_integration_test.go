package hub

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/e2e/gitserver"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// A GitRepo that requires signed commits, on a real git server and hub: a commit signed by an
// allowed key deploys; an unsigned commit and one signed by another key are refused with the
// commit, the reason and the keys allowed, and the signed revision stays deployed (no new
// Bundle revision, no deployment touched); adding the other key to the Secret lets the next
// sync deploy its commit.
func TestSignedCommitsFailClosed(t *testing.T) {
	up := gitserver.New(t)
	alice, mallory := gitserver.NewSSHSigningKey(t, "alice"), gitserver.NewOpenPGPKey(t, "mallory")
	up.Signing = alice.Signing
	signed := up.Commit("main", map[string]string{"web/fleet.yaml": "defaultNamespace: web\n", "web/cm.yaml": configMap("signed")})
	srv := up.ServeHTTP("", "")
	c, _ := startHub(t, Options{})
	ns := namespace(t, c)
	ctx := context.Background()
	registerCluster(t, c, ns, "dev-1", map[string]string{"env": "dev"})
	keys := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "signers", Namespace: ns}, Data: map[string][]byte{"alice.pub": []byte(alice.Public)}}
	repo := &v1alpha1.GitRepo{ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: ns}, Spec: v1alpha1.GitRepoSpec{
		Repo: srv.URL + "/repo.git", PollingInterval: &metav1.Duration{Duration: time.Second},
		Verify:  &v1alpha1.SourceVerification{SecretRef: &v1alpha1.LocalObjectReference{Name: "signers"}},
		Targets: []v1alpha1.Target{{Name: "all", ClusterMatch: v1alpha1.ClusterMatch{ClusterSelector: &metav1.LabelSelector{}}}},
	}}
	for _, o := range []client.Object{keys, repo} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	key := client.ObjectKeyFromObject(repo)
	waitFor(t, c, key, "the signed commit deployed", func(r *v1alpha1.GitRepo) bool { return r.Status.Commit == signed })
	before := deploymentsOf(t, c, ns, "shop-web")["dev-1"]
	if before.Spec.Staged.Index != 1 {
		t.Fatalf("dev-1: %+v", before.Spec)
	}

	for _, tc := range []struct {
		name    string
		signing *gitserver.SigningKey
		reason  string
	}{
		{"unsigned", nil, "it is not signed"},
		{"signed by another key", &mallory, "it is signed with OpenPGP and no OpenPGP key is allowed"},
	} {
		up.Signing = nil
		if tc.signing != nil {
			up.Signing = tc.signing.Signing
		}
		refused := up.Commit("main", map[string]string{"web/cm.yaml": configMap(strings.ReplaceAll(tc.name, " ", "-"))})
		got := waitFor(t, c, key, tc.name+" refused", func(r *v1alpha1.GitRepo) bool {
			cond := sourceReady(r)
			return cond != nil && cond.Reason == v1alpha1.UnverifiedReason && strings.Contains(cond.Message, refused[:12])
		})
		cond := sourceReady(got)
		if got.Status.Commit != signed || !strings.Contains(cond.Message, tc.reason) || !strings.Contains(cond.Message, "alice.pub: SSH SHA256:") {
			t.Errorf("%s: commit %s, SourceReady %q; want the signed commit kept and the reason and allowed keys named", tc.name, got.Status.Commit, cond.Message)
		}
		if ready := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ReadyCondition); ready == nil || ready.Status != metav1.ConditionFalse {
			t.Errorf("%s: Ready %+v", tc.name, ready)
		}
		var bun v1alpha1.Bundle
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "shop-web"}, &bun); err != nil || bun.Spec.LatestRevision != 1 {
			t.Errorf("%s: the Bundle has revision %d (%v), want 1 only", tc.name, bun.Spec.LatestRevision, err)
		}
		if now := deploymentsOf(t, c, ns, "shop-web")["dev-1"]; now.ResourceVersion != before.ResourceVersion {
			t.Errorf("%s: dev-1's deployment was written: %+v", tc.name, now.Spec)
		}
	}

	// Mallory's key is added: her commit, the newest, deploys at the next sync.
	head := up.Commit("main", nil) // the work tree as it is, signed by mallory still
	keys.Data["mallory.asc"] = []byte(mallory.Public)
	if err := c.Update(ctx, keys); err != nil {
		t.Fatal(err)
	}
	waitFor(t, c, key, "mallory's commit deployed after her key was added", func(r *v1alpha1.GitRepo) bool { return r.Status.Commit == head })
	if bds := deploymentsOf(t, c, ns, "shop-web"); bds["dev-1"].Spec.Staged.Index != 2 {
		t.Errorf("after the key rotation: %+v", bds["dev-1"].Spec)
	}
}

// A namespace whose FleetRestriction requires verified sources: a GitRepo there without
// spec.verify is refused before anything is fetched.
func TestARestrictionRequiresVerifiedSources(t *testing.T) {
	up := gitserver.New(t)
	up.Commit("main", map[string]string{"web/cm.yaml": configMap("1")})
	srv := up.ServeHTTP("", "")
	c, _ := startHub(t, Options{})
	ns := namespace(t, c)
	ctx := context.Background()
	restriction := &v1alpha1.FleetRestriction{ObjectMeta: metav1.ObjectMeta{Name: "signed-only", Namespace: ns}, Spec: v1alpha1.FleetRestrictionSpec{RequireVerifiedSources: true}}
	repo := &v1alpha1.GitRepo{ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: ns}, Spec: v1alpha1.GitRepoSpec{Repo: srv.URL + "/repo.git",
		Targets: []v1alpha1.Target{{Name: "all", ClusterMatch: v1alpha1.ClusterMatch{ClusterSelector: &metav1.LabelSelector{}}}}}}
	for _, o := range []client.Object{restriction, repo} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	got := waitFor(t, c, client.ObjectKeyFromObject(repo), "refused", func(r *v1alpha1.GitRepo) bool {
		cond := sourceReady(r)
		return cond != nil && cond.Reason == v1alpha1.RestrictedReason
	})
	if msg := sourceReady(got).Message; !strings.Contains(msg, "requireVerifiedSources") || !strings.Contains(msg, "signed-only") || got.Status.Commit != "" {
		t.Errorf("SourceReady %q, commit %q", msg, got.Status.Commit)
	}
	if n := up.RefReads(); n != 0 {
		t.Errorf("the repository was read %d times", n)
	}
}

// Tag and CommitAndTag, on a fresh hub: a semver GitRepo whose release v1.0.0 is a tag signed by
// an allowed key deploys it (the hub verified the tag before its cache held anything); the same
// signed tag pushed again as v9.9.9 by someone with push access and no key is not selected: the
// GitRepo stays at v1.0.0, its deployment unwritten. With CommitAndTag, a signed tag on an
// unsigned commit is refused as the commit.
func TestSignedTagModesThroughTheHub(t *testing.T) {
	c, _ := startHub(t, Options{})
	ctx := context.Background()
	for _, mode := range []v1alpha1.VerificationMode{v1alpha1.VerifyTag, v1alpha1.VerifyCommitAndTag} {
		t.Run(string(mode), func(t *testing.T) {
			up := gitserver.New(t)
			alice := gitserver.NewSSHSigningKey(t, "alice")
			up.Signing = alice.Signing
			release := up.Commit("main", map[string]string{"web/fleet.yaml": "defaultNamespace: web\n", "web/cm.yaml": configMap("1.0.0")})
			up.Tag("v1.0.0", true)
			srv := up.ServeHTTP("", "")
			ns := namespace(t, c)
			registerCluster(t, c, ns, "dev-1", map[string]string{"env": "dev"})
			keys := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "signers", Namespace: ns}, Data: map[string][]byte{"alice.pub": []byte(alice.Public)}}
			repo := &v1alpha1.GitRepo{ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: ns}, Spec: v1alpha1.GitRepoSpec{
				Repo: srv.URL + "/repo.git", Semver: ">=1.0.0", PollingInterval: &metav1.Duration{Duration: time.Second},
				Verify:  &v1alpha1.SourceVerification{Mode: mode, SecretRef: &v1alpha1.LocalObjectReference{Name: "signers"}},
				Targets: []v1alpha1.Target{{Name: "all", ClusterMatch: v1alpha1.ClusterMatch{ClusterSelector: &metav1.LabelSelector{}}}},
			}}
			for _, o := range []client.Object{keys, repo} {
				if err := c.Create(ctx, o); err != nil {
					t.Fatal(err)
				}
			}
			key := client.ObjectKeyFromObject(repo)
			waitFor(t, c, key, "the signed release deployed", func(r *v1alpha1.GitRepo) bool { return r.Status.Commit == release })
			before := deploymentsOf(t, c, ns, "shop-web")["dev-1"]

			up.Commit("main", map[string]string{"web/cm.yaml": configMap("unsigned-work")})
			reads := up.RefReads()
			up.Git(up.Work, "push", "-q", "origin", "refs/tags/v1.0.0:refs/tags/v9.9.9")
			// Two polls after the push: the hub has listed the copy and passed it over.
			waitFor(t, c, key, "two polls after the copy was pushed", func(r *v1alpha1.GitRepo) bool { return up.RefReads() >= reads+2 })
			var got v1alpha1.GitRepo
			if err := c.Get(ctx, key, &got); err != nil {
				t.Fatal(err)
			}
			if got.Status.Commit != release {
				t.Errorf("the GitRepo moved to %s; want v1.0.0's %s", got.Status.Commit, release[:12])
			}
			if now := deploymentsOf(t, c, ns, "shop-web")["dev-1"]; now.ResourceVersion != before.ResourceVersion {
				t.Errorf("dev-1's deployment was written: %+v", now.Spec)
			}

			if mode == v1alpha1.VerifyCommitAndTag {
				up.Signing = nil
				unsigned := up.Commit("main", map[string]string{"web/cm.yaml": configMap("1.1.0")})
				up.Signing = alice.Signing
				up.Tag("v10.0.0", true) // the newest name, signed, on an unsigned commit
				refused := waitFor(t, c, key, "the unsigned commit refused", func(r *v1alpha1.GitRepo) bool {
					cond := sourceReady(r)
					return cond != nil && cond.Reason == v1alpha1.UnverifiedReason && strings.Contains(cond.Message, unsigned[:12])
				})
				if refused.Status.Commit != release {
					t.Errorf("after the refusal the GitRepo is at %s; want %s", refused.Status.Commit, release[:12])
				}
			}
		})
	}
}
