package hub

import (
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/e2e/reftools"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/gitsource"
)

// ociRegistry is a registry on loopback that counts the tag listings it serves.
type ociRegistry struct {
	host     string
	listings atomic.Int64
}

func newOCIRegistry(t *testing.T) *ociRegistry {
	t.Helper()
	r := &ociRegistry{}
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if strings.HasSuffix(req.URL.Path, "/tags/list") {
			defer r.listings.Add(1)
		}
		reg.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	r.host = strings.TrimPrefix(srv.URL, "http://")
	return r
}

// push packs files as `flotilla push artifact` does and pushes them as path:tag; it returns
// the artifact's digest (hex).
func (r *ociRegistry) push(t *testing.T, path, tag string, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	img, err := gitsource.BuildArtifact(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.NewTag(r.host + "/" + path + ":" + tag)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()
	return d.Hex
}

// A GitRepo of an OCI artifact follows the newest tag of its semver range through the whole
// path of a git source: a new tag in the range becomes a new revision staged to the clusters;
// a tag outside it changes nothing; a GitRepo pinned to a digest stays on it.
func TestOCIArtifactSourceFollowsItsSemverRange(t *testing.T) {
	reg := newOCIRegistry(t)
	files := func(color string) map[string]string {
		return map[string]string{"web/fleet.yaml": "defaultNamespace: web\n", "web/settings.yaml": configMap(color)}
	}
	first := reg.push(t, "fleet/shop", "1.0.0", files("blue"))
	c, _ := startHub(t, Options{})
	ns := namespace(t, c)
	ctx := context.Background()
	registerCluster(t, c, ns, "c1", map[string]string{"env": "prod"})
	all := []v1alpha1.Target{{Name: "all", ClusterMatch: v1alpha1.ClusterMatch{ClusterSelector: &metav1.LabelSelector{}}}}
	following := &v1alpha1.GitRepo{ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: ns}, Spec: v1alpha1.GitRepoSpec{
		Repo: "oci://" + reg.host + "/fleet/shop", Semver: "~1.0", PollingInterval: &metav1.Duration{Duration: time.Second}, Targets: all}}
	pinned := &v1alpha1.GitRepo{ObjectMeta: metav1.ObjectMeta{Name: "pinned", Namespace: ns}, Spec: v1alpha1.GitRepoSpec{
		Repo: "oci://" + reg.host + "/fleet/shop", Revision: "sha256:" + first, PollingInterval: &metav1.Duration{Duration: time.Second}, Paths: []string{"web"}, Targets: all}}
	for _, o := range []client.Object{following, pinned} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	key := client.ObjectKeyFromObject(following)
	got := waitFor(t, c, key, "artifact 1.0.0 rendered", func(r *v1alpha1.GitRepo) bool { return r.Status.Commit == first })
	if cond := sourceReady(got); cond == nil || !strings.Contains(cond.Message, "1.0.0") {
		t.Errorf("SourceReady: %+v", cond)
	}
	if bds := deploymentsOf(t, c, ns, "shop-web"); bds["c1"].Spec.Staged.Index != 1 {
		t.Fatalf("c1: %+v", bds["c1"].Spec)
	}

	second := reg.push(t, "fleet/shop", "1.0.1", files("green"))
	waitFor(t, c, key, "artifact 1.0.1 rendered", func(r *v1alpha1.GitRepo) bool { return r.Status.Commit == second })
	if bds := deploymentsOf(t, c, ns, "shop-web"); bds["c1"].Spec.Staged.Index != 2 {
		t.Errorf("c1 after 1.0.1: %+v", bds["c1"].Spec)
	}

	reg.push(t, "fleet/shop", "2.0.0", files("red"))
	seen := reg.listings.Load()
	waitUntil(t, "the hub lists the tags twice after 2.0.0 is pushed", func() bool { return reg.listings.Load() >= seen+2 })
	var now v1alpha1.GitRepo
	if err := c.Get(ctx, key, &now); err != nil || now.Status.Commit != second {
		t.Errorf("after 2.0.0, outside ~1.0: commit %s (%v), want 1.0.1's", now.Status.Commit, err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(pinned), &now); err != nil || now.Status.Commit != first {
		t.Errorf("the GitRepo pinned to 1.0.0's digest: commit %s (%v)", now.Status.Commit, err)
	}
}

// A GitRepo of an OCI artifact that requires cosign signatures: the signed artifact deploys; a
// newer unsigned tag is refused (SourceReady Unverified naming the artifact) and the signed
// revision stays; once the new artifact is signed, the next sync deploys it.
func TestSignedArtifactsFailClosed(t *testing.T) {
	reg := newOCIRegistry(t)
	key := reftools.NewCosignKey(t)
	files := func(color string) map[string]string {
		return map[string]string{"web/fleet.yaml": "defaultNamespace: web\n", "web/settings.yaml": configMap(color)}
	}
	first := reg.push(t, "fleet/signed", "1.0.0", files("blue"))
	reftools.CosignSign(t, key, reg.host+"/fleet/signed@sha256:"+first)
	c, _ := startHub(t, Options{})
	ns := namespace(t, c)
	ctx := context.Background()
	registerCluster(t, c, ns, "c1", nil)
	keys := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "release-keys", Namespace: ns}, Data: map[string]string{"release.pub": string(key.Public)}}
	repo := &v1alpha1.GitRepo{ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: ns}, Spec: v1alpha1.GitRepoSpec{
		Repo: "oci://" + reg.host + "/fleet/signed", Semver: ">=1", PollingInterval: &metav1.Duration{Duration: time.Second},
		Verify:  &v1alpha1.SourceVerification{ConfigMapRef: &v1alpha1.LocalObjectReference{Name: "release-keys"}},
		Targets: []v1alpha1.Target{{Name: "all", ClusterMatch: v1alpha1.ClusterMatch{ClusterSelector: &metav1.LabelSelector{}}}}}}
	for _, o := range []client.Object{keys, repo} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	key2 := client.ObjectKeyFromObject(repo)
	waitFor(t, c, key2, "the signed artifact deployed", func(r *v1alpha1.GitRepo) bool { return r.Status.Commit == first })

	unsigned := reg.push(t, "fleet/signed", "1.1.0", files("green"))
	got := waitFor(t, c, key2, "the unsigned artifact refused", func(r *v1alpha1.GitRepo) bool {
		cond := sourceReady(r)
		return cond != nil && cond.Reason == v1alpha1.UnverifiedReason && strings.Contains(cond.Message, unsigned[:12])
	})
	if !strings.Contains(sourceReady(got).Message, "it has no cosign signature") || got.Status.Commit != first {
		t.Errorf("SourceReady %q, commit %s", sourceReady(got).Message, got.Status.Commit)
	}
	if bds := deploymentsOf(t, c, ns, "shop-web"); bds["c1"].Spec.Staged.Index != 1 {
		t.Errorf("c1 was staged %+v while the artifact was unsigned", bds["c1"].Spec.Staged)
	}
	reftools.CosignSign(t, key, reg.host+"/fleet/signed@sha256:"+unsigned)
	waitFor(t, c, key2, "the artifact deployed once signed", func(r *v1alpha1.GitRepo) bool { return r.Status.Commit == unsigned })
}
