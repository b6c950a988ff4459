package fleet

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/e2e/gitserver"
	"github.com/flotilla-dev/flotilla/hub"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/model"
)

// writeLog records the paths a hub wrote to.
type writeLog struct {
	rt    http.RoundTripper
	mu    sync.Mutex
	paths []string
}

func (w *writeLog) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.mu.Lock()
		w.paths = append(w.paths, r.Method+" "+r.URL.Path)
		w.mu.Unlock()
	}
	return w.rt.RoundTrip(r)
}

// about lists the writes whose path names s.
func (w *writeLog) about(s string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, p := range w.paths {
		if strings.Contains(p, s) {
			out = append(out, p)
		}
	}
	return out
}

// startShard runs a hub shard whose writes are logged.
func (f *fleetEnv) startShard(name string) *writeLog {
	log := &writeLog{}
	opts := hubOptions(f.t)
	opts.Config.Wrap(func(rt http.RoundTripper) http.RoundTripper { log.rt = rt; return log })
	opts.CacheDir, opts.StatusDelay, opts.Namespace, opts.Shard = f.t.TempDir(), time.Second, f.ns, name
	f.start("hub "+name, func(ctx context.Context) error { return hub.Run(ctx, opts) })
	return log
}

// shardRepo creates a GitRepo targeting every cluster, labelled for shard (none: the default).
func shardRepo(t *testing.T, f *fleetEnv, name, url, shard string) {
	t.Helper()
	repo := &v1alpha1.GitRepo{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns}, Spec: v1alpha1.GitRepoSpec{
		Repo: url, PollingInterval: &metav1.Duration{Duration: time.Second},
		Targets: []v1alpha1.Target{{ClusterMatch: v1alpha1.ClusterMatch{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}}}},
	}}
	if shard != "" {
		repo.Labels = map[string]string{v1alpha1.ShardLabel: shard}
	}
	if err := f.hub.Create(context.Background(), repo); err != nil {
		t.Fatal(err)
	}
}

// Two hub shards on one API server: each rolls out the GitRepos labelled for it and writes
// nothing of the other's; what a GitRepo derives carries its shard. Moving a GitRepo to the
// other shard hands it over: the new owner adopts its objects without releasing anything
// again, and rolls out its next commit, each cluster released once.
func TestShardsOwnTheirGitReposAndHandThemOver(t *testing.T) {
	red, blue := gitserver.New(t), gitserver.New(t)
	red.Commit("main", map[string]string{"web/fleet.yaml": "defaultNamespace: shard-red\n", "web/deployment.yaml": webManifest("example.invalid/web:1")})
	blue.Commit("main", map[string]string{"web/fleet.yaml": "defaultNamespace: shard-blue\n", "web/deployment.yaml": webManifest("example.invalid/web:1")})
	redSrv, blueSrv := red.ServeHTTP("", ""), blue.ServeHTTP("", "")
	var defaultWrites, blueWrites *writeLog
	f := startFleetWith(t, func(f *fleetEnv) {
		defaultWrites, blueWrites = f.startShard(""), f.startShard("blue")
	})
	shardRepo(t, f, "red", redSrv.URL+"/repo.git", "")
	shardRepo(t, f, "blue", blueSrv.URL+"/repo.git", "blue")
	ctx := context.Background()
	eventually(t, "both repositories run everywhere", 90*time.Second, func() bool {
		return availableEverywhere(t, "shard-red", "web", "example.invalid/web:1") && availableEverywhere(t, "shard-blue", "web", "example.invalid/web:1")
	})

	bundleKey := types.NamespacedName{Namespace: f.ns, Name: "blue-web"}
	var bun v1alpha1.Bundle
	if err := f.hub.Get(ctx, bundleKey, &bun); err != nil {
		t.Fatal(err)
	}
	if bun.Labels[v1alpha1.ShardLabel] != "blue" {
		t.Errorf("the blue GitRepo's Bundle is labelled %q, want blue", bun.Labels[v1alpha1.ShardLabel])
	}
	blueDeployments := func() []v1alpha1.BundleDeployment {
		var bds v1alpha1.BundleDeploymentList
		if err := f.hub.List(ctx, &bds, client.MatchingLabels{model.LabelBundle: "blue-web", model.LabelBundleNamespace: f.ns}); err != nil {
			t.Fatal(err)
		}
		return bds.Items
	}
	for _, bd := range blueDeployments() {
		if bd.Labels[v1alpha1.ShardLabel] != "blue" {
			t.Errorf("deployment %s/%s is labelled %q, want blue", bd.Namespace, bd.Name, bd.Labels[v1alpha1.ShardLabel])
		}
	}
	var content v1alpha1.Content
	if err := f.hub.Get(ctx, types.NamespacedName{Namespace: f.ns, Name: blueDeployments()[0].Spec.Staged.ContentID}, &content); err != nil || content.Labels[v1alpha1.ShardLabel] != "blue" {
		t.Errorf("the blue bundle's content: labels %v, %v; want the blue shard's", content.Labels, err)
	}
	if w := defaultWrites.about("blue-web"); len(w) > 0 {
		t.Errorf("the default shard wrote the blue shard's objects: %v", w)
	}
	if w := blueWrites.about("red-web"); len(w) > 0 {
		t.Errorf("the blue shard wrote the default shard's objects: %v", w)
	}
	releasedBefore := map[string]string{}
	for _, bd := range blueDeployments() {
		releasedBefore[bd.Namespace] = bd.Spec.Released.DeploymentID
	}

	// The blue GitRepo moves to the default shard.
	releases := f.watchReleases(2, "blue-web")
	var repo v1alpha1.GitRepo
	if err := f.hub.Get(ctx, types.NamespacedName{Namespace: f.ns, Name: "blue"}, &repo); err != nil {
		t.Fatal(err)
	}
	if err := f.hub.Patch(ctx, &repo, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"`+v1alpha1.ShardLabel+`":null}}}`))); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the default shard adopts the blue GitRepo's bundle and deployments", 60*time.Second, func() bool {
		if err := f.hub.Get(ctx, bundleKey, &bun); err != nil || bun.Labels[v1alpha1.ShardLabel] != "" {
			return false
		}
		return true
	})
	blue.Commit("main", map[string]string{"web/deployment.yaml": webManifest("example.invalid/web:2")})
	eventually(t, "the moved repository's next commit runs everywhere", 90*time.Second, func() bool {
		return availableEverywhere(t, "shard-blue", "web", "example.invalid/web:2")
	})
	for _, bd := range blueDeployments() {
		if _, ok := bd.Labels[v1alpha1.ShardLabel]; ok {
			t.Errorf("deployment %s/%s still carries the blue shard's label after the move", bd.Namespace, bd.Name)
		}
	}
	releases.mu.Lock()
	defer releases.mu.Unlock()
	for key, revs := range releases.released {
		if revs[1] != 0 {
			t.Errorf("%s: revision 1 was released again during the move (%d times)", key, revs[1])
		}
		if revs[2] != 1 {
			t.Errorf("%s: the next commit was released %d times, want once", key, revs[2])
		}
	}
	if len(releases.released) < len(releasedBefore) {
		t.Errorf("the next commit reached %d of %d clusters: %v", len(releases.released), len(releasedBefore), releases.released)
	}
	if t.Failed() {
		t.Logf("the deployments after the move:\n%s", strings.Join(releases.timeline, "\n"))
	}
}
