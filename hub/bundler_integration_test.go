package hub

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/e2e/gitserver"
	"github.com/flotilla-dev/flotilla/hub/access"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/contentstore"
	"github.com/flotilla-dev/flotilla/hub/model"
)

// registerCluster creates a Cluster and admits it, as registration does.
func registerCluster(t *testing.T, c client.Client, ns, name string, labels map[string]string) {
	t.Helper()
	registerClusterWith(t, c, ns, name, labels, v1alpha1.ClusterSpec{})
}

// registerClusterWith registers a cluster with the given spec.
func registerClusterWith(t *testing.T, c client.Client, ns, name string, labels map[string]string, spec v1alpha1.ClusterSpec) {
	t.Helper()
	ctx := context.Background()
	cl := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels}, Spec: spec}
	if err := c.Create(ctx, cl); err != nil {
		t.Fatal(err)
	}
	if err := access.AdmitCluster(ctx, c, cl); err != nil {
		t.Fatal(err)
	}
}

func deploymentsOf(t *testing.T, c client.Client, bundleNS, bundle string) map[string]v1alpha1.BundleDeployment {
	t.Helper()
	var list v1alpha1.BundleDeploymentList
	if err := c.List(context.Background(), &list, client.MatchingLabels{model.LabelBundle: bundle, model.LabelBundleNamespace: bundleNS}); err != nil {
		t.Fatal(err)
	}
	out := map[string]v1alpha1.BundleDeployment{}
	for _, bd := range list.Items {
		out[bd.Labels[model.LabelCluster]] = bd
	}
	return out
}

func TestBundlerStagesRevisions(t *testing.T) {
	up := gitserver.New(t)
	first := up.Commit("main", map[string]string{
		"web/fleet.yaml": "defaultNamespace: web\nrolloutStrategy: {maxUnavailable: 1}\ntargetCustomizations:\n- name: prod\n  clusterSelector: {matchLabels: {env: prod}}\n  namespace: web-prod\n",
		"web/cm.yaml":    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {color: blue}\n",
	})
	srv := up.ServeHTTP("", "")
	c, _ := startHub(t, Options{})
	ns := namespace(t, c)
	ctx := context.Background()
	registerCluster(t, c, ns, "dev-1", map[string]string{"env": "dev"})
	registerCluster(t, c, ns, "prod-1", map[string]string{"env": "prod"})
	repo := &v1alpha1.GitRepo{ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: ns}, Spec: v1alpha1.GitRepoSpec{
		Repo: srv.URL + "/repo.git", PollingInterval: &metav1.Duration{Duration: time.Second},
		Targets: []v1alpha1.Target{{Name: "all", ClusterMatch: v1alpha1.ClusterMatch{ClusterSelector: &metav1.LabelSelector{}}}},
	}}
	if err := c.Create(ctx, repo); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(repo)
	waitFor(t, c, key, "first commit rendered", func(r *v1alpha1.GitRepo) bool { return r.Status.Commit == first })
	var bun v1alpha1.Bundle
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "shop-web"}, &bun); err != nil {
		t.Fatalf("bundle shop-web: %v", err)
	}
	if bun.Spec.LatestRevision != 1 || len(bun.Spec.Revisions) != 1 || bun.Spec.Revisions[0].Commit != first || bun.Spec.RolloutStrategy == nil || bun.Spec.RolloutStrategy.MaxUnavailable.IntValue() != 1 {
		t.Fatalf("bundle spec: %+v", bun.Spec)
	}
	bds := deploymentsOf(t, c, ns, "shop-web")
	if len(bds) != 2 || bds["dev-1"].Spec.Staged.Index != 1 {
		t.Fatalf("deployments: %+v", bds)
	}
	if bds["dev-1"].Spec.Staged.ContentID == bds["prod-1"].Spec.Staged.ContentID || bds["prod-1"].Spec.Options.TargetNamespace != "web-prod" {
		t.Errorf("prod's customization (namespace web-prod) must render its own content: %+v %+v", bds["dev-1"].Spec, bds["prod-1"].Spec)
	}
	manifest, err := (&contentstore.Store{Client: c}).Get(ctx, ns, bds["prod-1"].Spec.Staged.ContentID)
	if err != nil || !strings.Contains(string(manifest), "namespace: web-prod") {
		t.Fatalf("prod content: %v\n%s", err, manifest)
	}

	// A new commit: revision 2, staged everywhere.
	second := up.Commit("main", map[string]string{"web/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {color: green}\n"})
	waitFor(t, c, key, "second commit rendered", func(r *v1alpha1.GitRepo) bool { return r.Status.Commit == second })
	bds = deploymentsOf(t, c, ns, "shop-web")
	if bds["dev-1"].Spec.Staged.Index != 2 || bds["prod-1"].Spec.Staged.Index != 2 {
		t.Fatalf("revision 2 not staged: %+v", bds)
	}
	// No agent applies anything here, so clusters stay WaitApplied. Clusters on an older
	// revision do not count as unavailable (§0), so each new revision goes out to both in one
	// batch (R1.8), and the partition then reports both unavailable.
	var bun2 v1alpha1.Bundle
	waitForBundle(t, c, types.NamespacedName{Namespace: ns, Name: "shop-web"}, &bun2, func(b *v1alpha1.Bundle) bool {
		return b.Status.ReleasingRevision == 2 && b.Status.Summary.WaitApplied == 2
	})
	bds = deploymentsOf(t, c, ns, "shop-web")
	for _, name := range []string{"dev-1", "prod-1"} {
		if rel := bds[name].Spec.Released; rel == nil || rel.Index != 2 {
			t.Errorf("%s released %+v, want revision 2", name, rel)
		}
	}
	if p := bun2.Status.Partitions; len(p) != 1 || p[0].Unavailable != 2 || p[0].Ready || bun2.Status.Display.ReadyClusters != "0/2" {
		t.Errorf("bundle status: %+v", bun2.Status)
	}

	// A broken fleet.yaml: the condition names the file and field; nothing changes.
	third := up.Commit("main", map[string]string{"web/fleet.yaml": "defaultNamespace: web\nrolloutStrategy: {maxUnavailabel: 1}\n"})
	got := waitFor(t, c, key, "render failure", func(r *v1alpha1.GitRepo) bool {
		return meta.IsStatusConditionFalse(r.Status.Conditions, v1alpha1.RenderedCondition)
	})
	cond := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.RenderedCondition)
	if !strings.Contains(cond.Message, "web/fleet.yaml:2: rolloutStrategy.maxUnavailabel: unknown field") || got.Status.Commit != second {
		t.Errorf("render failure: commit %s (want %s, not %s), message %q", got.Status.Commit, second, third, cond.Message)
	}
	if bds2 := deploymentsOf(t, c, ns, "shop-web"); bds2["dev-1"].Spec.Staged.Index != 2 || bds2["dev-1"].ResourceVersion != bds["dev-1"].ResourceVersion {
		t.Errorf("a broken commit changed a deployment: %+v", bds2["dev-1"])
	}
	// kubectl's STATUS column says what the Ready condition says, and sums the bundles again
	// once a commit renders.
	waitFor(t, c, key, "the printer columns show the render failure", func(r *v1alpha1.GitRepo) bool {
		ready := meta.FindStatusCondition(r.Status.Conditions, v1alpha1.ReadyCondition)
		return ready != nil && ready.Status == metav1.ConditionFalse && r.Status.Display.State == v1alpha1.RenderFailedReason && r.Status.Display.Message == ready.Message
	})
	fourth := up.Commit("main", map[string]string{"web/fleet.yaml": "defaultNamespace: web\n"})
	waitFor(t, c, key, "the printer columns sum the bundles again", func(r *v1alpha1.GitRepo) bool {
		return r.Status.Commit == fourth && meta.IsStatusConditionTrue(r.Status.Conditions, v1alpha1.ReadyCondition) &&
			r.Status.Display.State != v1alpha1.RenderFailedReason && !strings.Contains(r.Status.Display.Message, "unknown field")
	})
}

func waitForBundle(t *testing.T, c client.Client, key types.NamespacedName, into *v1alpha1.Bundle, cond func(*v1alpha1.Bundle) bool) {
	t.Helper()
	*into = *waitForObject(t, c, key, "the bundle's condition", cond)
}

// partitionedShop serves a bundle with a canary partition ahead of two main clusters, no
// unavailability allowed, to a hub, and waits for its first pass: the canary released.
func partitionedShop(t *testing.T) (client.Client, string, *gitserver.Upstream, types.NamespacedName) {
	up := gitserver.New(t)
	up.Commit("main", map[string]string{"web/fleet.yaml": partitionedFleetYAML, "web/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\n"})
	srv := up.ServeHTTP("", "")
	c, _ := startHub(t, Options{StatusDelay: 200 * time.Millisecond})
	ns := namespace(t, c)
	registerCluster(t, c, ns, "canary-1", map[string]string{"ring": "canary"})
	registerCluster(t, c, ns, "main-1", map[string]string{"ring": "main"})
	registerCluster(t, c, ns, "main-2", map[string]string{"ring": "main"})
	repo := &v1alpha1.GitRepo{ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: ns}, Spec: v1alpha1.GitRepoSpec{
		Repo: srv.URL + "/repo.git", PollingInterval: &metav1.Duration{Duration: time.Second},
		Targets: []v1alpha1.Target{{ClusterMatch: v1alpha1.ClusterMatch{ClusterSelector: &metav1.LabelSelector{}}}},
	}}
	if err := c.Create(context.Background(), repo); err != nil {
		t.Fatal(err)
	}
	return c, ns, up, types.NamespacedName{Namespace: ns, Name: "shop-web"}
}

const partitionedFleetYAML = `defaultNamespace: web
rolloutStrategy:
  maxUnavailable: 0
  partitions:
  - {name: canary, clusterSelector: {matchLabels: {ring: canary}}}
  - {name: rest, clusterSelector: {matchLabels: {ring: main}}}
`

// R1.12 and §0: on a first deployment the clusters the rollout has not reached are Pending and
// have no BundleDeployment; a reached cluster's deployment is created staged and released in
// one write. No agent runs here, so the canary never becomes ready and holds the rest (R1.6).
func TestR1_12_FirstDeploymentCreatesDeploymentsOnlyWhereReleased(t *testing.T) {
	c, ns, _, key := partitionedShop(t)
	var bun v1alpha1.Bundle
	// The Bundle may report the canary's release a moment before the bundler's write of it
	// lands (a pass that leaves the write to the bundler reports the plan): wait for both.
	var bds map[string]v1alpha1.BundleDeployment
	waitForBundle(t, c, key, &bun, func(b *v1alpha1.Bundle) bool {
		bds = deploymentsOf(t, c, ns, "shop-web")
		return b.Status.Summary.Pending == 2 && b.Status.Summary.WaitApplied == 1 && len(bds) > 0
	})
	if len(bds) != 1 {
		t.Fatalf("deployments on %d clusters, want only the canary's: %+v", len(bds), bds)
	}
	canary := bds["canary-1"]
	if canary.Spec.Released == nil || *canary.Spec.Released != canary.Spec.Staged || canary.Generation != 1 {
		t.Errorf("the canary's deployment must be created staged and released in one write: generation %d, %+v", canary.Generation, canary.Spec)
	}
	if cond := meta.FindStatusCondition(bun.Status.Conditions, v1alpha1.RolloutPausedCondition); cond == nil || !strings.Contains(cond.Message, "canary") {
		t.Errorf("the rollout must say it waits for the canary: %+v", bun.Status.Conditions)
	}
}

// R1.12, R1.13: an update stages a cluster's deployment when the rollout reaches it, staged and
// released in one write; until then the cluster keeps its revision and is OutOfSync. A paused
// bundle receives staged revisions on every cluster and releases none.
func TestR1_12_R1_13_UpdateStagesAClusterWhenTheRolloutReachesIt(t *testing.T) {
	c, ns, up, key := partitionedShop(t)
	var bun v1alpha1.Bundle
	rollOut := func(rev int64) {
		t.Helper()
		// Agents report each release ready, as they would; the rollout moves on.
		waitForBundle(t, c, key, &bun, func(b *v1alpha1.Bundle) bool {
			for _, bd := range deploymentsOf(t, c, ns, "shop-web") {
				if bd.Spec.Released != nil && bd.Status.AppliedDeploymentID != bd.Spec.Released.DeploymentID {
					reportReady(t, c, bd)
				}
			}
			return b.Status.ReleasingRevision == rev && b.Status.Summary.Ready == 3
		})
	}
	rollOut(1)
	before := deploymentsOf(t, c, ns, "shop-web")
	waitForClusterSummary(t, c, types.NamespacedName{Namespace: ns, Name: "main-1"}, "its bundle Ready", func(s v1alpha1.StateCounts) bool { return s.Ready == 1 })

	second := up.Commit("main", map[string]string{"web/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {v: \"2\"}\n"})
	// R1.12: the GitRepo never shows the new commit with the previous revision's counts.
	if repo := waitFor(t, c, types.NamespacedName{Namespace: ns, Name: "shop"}, "commit 2 recorded", func(r *v1alpha1.GitRepo) bool { return r.Status.Commit == second }); repo.Status.Summary.Ready == 3 {
		t.Errorf("the GitRepo on the new commit counts every cluster Ready on the old revision: %+v", repo.Status.Summary)
	}
	// The Bundle may report the canary's release a moment before the bundler's write of it
	// lands (a pass that leaves the write to the bundler reports the plan): wait for both.
	var held map[string]v1alpha1.BundleDeployment
	waitForBundle(t, c, key, &bun, func(b *v1alpha1.Bundle) bool {
		held = deploymentsOf(t, c, ns, "shop-web")
		rel := held["canary-1"].Spec.Released
		return b.Status.ReleasingRevision == 2 && b.Status.Summary.WaitApplied == 1 && b.Status.Summary.OutOfSync == 2 && rel != nil && rel.Index == 2
	})
	if rel := held["canary-1"].Spec.Released; rel == nil || rel.Index != 2 || held["canary-1"].Spec.Staged.Index != 2 {
		t.Errorf("the canary must run revision 2 first: %+v", held["canary-1"].Spec)
	}
	for _, name := range []string{"main-1", "main-2"} {
		bd := held[name]
		if bd.Spec.Staged.Index != 1 || bd.Generation != before[name].Generation {
			t.Errorf("%s was written before the rollout reached it: generation %d → %d, %+v", name, before[name].Generation, bd.Generation, bd.Spec)
		}
		if got := model.DeploymentState(&bun, &bd); got != v1alpha1.StateOutOfSync {
			t.Errorf("%s: state %s, want OutOfSync", name, got)
		}
	}
	// Its agent may already read revision 2's content: its release will be one write, and the
	// agent will not wait for access.
	rev2 := held["canary-1"].Spec.Staged.ContentID
	waitUntil(t, "main-1's agent is granted revision 2's content "+rev2, func() bool {
		return agentMayRead(t, c, access.ClusterNamespace(ns, "main-1"), ns, rev2)
	})
	// Its Cluster says so too, though nothing wrote its deployment: the new revision did.
	waitForClusterSummary(t, c, types.NamespacedName{Namespace: ns, Name: "main-1"}, "its bundle OutOfSync", func(s v1alpha1.StateCounts) bool { return s.OutOfSync == 1 })

	rollOut(2)
	for name, bd := range deploymentsOf(t, c, ns, "shop-web") {
		if bd.Spec.Released == nil || *bd.Spec.Released != bd.Spec.Staged || bd.Spec.Staged.Index != 2 || bd.Generation != before[name].Generation+1 {
			t.Errorf("%s: revision 2 must be staged and released in one write: generation %d → %d, %+v", name, before[name].Generation, bd.Generation, bd.Spec)
		}
	}

	up.Commit("main", map[string]string{"web/fleet.yaml": "paused: true\n" + partitionedFleetYAML,
		"web/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {v: \"3\"}\n"})
	waitForBundle(t, c, key, &bun, func(b *v1alpha1.Bundle) bool {
		bds := deploymentsOf(t, c, ns, "shop-web")
		for _, bd := range bds {
			if bd.Spec.Staged.Index != 3 {
				return false
			}
		}
		return len(bds) == 3
	})
	for name, bd := range deploymentsOf(t, c, ns, "shop-web") {
		if bd.Spec.Released.Index != 2 {
			t.Errorf("%s: a paused bundle released revision %d", name, bd.Spec.Released.Index)
		}
	}
}

func waitForClusterSummary(t *testing.T, c client.Client, key types.NamespacedName, what string, cond func(v1alpha1.StateCounts) bool) {
	t.Helper()
	waitForObject(t, c, key, "the cluster counts "+what, func(cl *v1alpha1.Cluster) bool { return cond(cl.Status.Summary) })
}

// reportReady writes what an agent writes once the deployment's release is applied and ready.
func reportReady(t *testing.T, c client.Client, bd v1alpha1.BundleDeployment) {
	t.Helper()
	reportApplied(t, c, bd, true, time.Now())
}

// reportApplied writes what an agent writes once it applied the deployment's release at the
// given time: Ready, or applied and not ready.
func reportApplied(t *testing.T, c client.Client, bd v1alpha1.BundleDeployment, ready bool, at time.Time) {
	t.Helper()
	orig := bd.DeepCopy()
	applied := metav1.NewTime(at)
	if bd.Status.AppliedDeploymentID != bd.Spec.Released.DeploymentID {
		bd.Status.ReadyAt = nil // as an agent does: a new revision has not been ready yet
	}
	bd.Status.AppliedRevision, bd.Status.AppliedDeploymentID, bd.Status.AppliedAt = bd.Spec.Released.Index, bd.Spec.Released.DeploymentID, &applied
	bd.Status.Ready, bd.Status.State = ready, v1alpha1.StateReady
	readyCond := metav1.Condition{Type: v1alpha1.ReadyCondition, Status: metav1.ConditionTrue, Reason: v1alpha1.SucceededReason}
	if ready && bd.Status.ReadyAt == nil {
		bd.Status.ReadyAt = &applied
	}
	if !ready {
		bd.Status.State = v1alpha1.StateNotReady
		readyCond.Status, readyCond.Reason = metav1.ConditionFalse, v1alpha1.NotReadyReason
	}
	meta.SetStatusCondition(&bd.Status.Conditions, metav1.Condition{Type: v1alpha1.AppliedCondition, Status: metav1.ConditionTrue, Reason: "Applied"})
	meta.SetStatusCondition(&bd.Status.Conditions, readyCond)
	if err := c.Status().Patch(context.Background(), &bd, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
}

// One bundle that does not render fails alone, as in Fleet: the commit's other bundles roll
// out, the broken one keeps its last revision deployed and says why on its Bundle and on the
// GitRepo, and a bundle that never rendered blocks nothing.
func TestABundleThatDoesNotRenderFailsAlone(t *testing.T) {
	up := gitserver.New(t)
	cm := func(color string) string {
		return "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {color: " + color + "}\n"
	}
	up.Commit("main", map[string]string{
		"web/fleet.yaml": "defaultNamespace: web\n", "web/cm.yaml": cm("blue"),
		"api/fleet.yaml": "defaultNamespace: api\n", "api/cm.yaml": cm("blue"),
		// Never renders: its kustomization names a URL (refused), which blocks no other bundle.
		"broken/fleet.yaml": "{}\n", "broken/kustomization.yaml": "resources: [https://example.com/remote.yaml]\n",
	})
	srv := up.ServeHTTP("", "")
	c, _ := startHub(t, Options{StatusDelay: 200 * time.Millisecond})
	ns := namespace(t, c)
	ctx := context.Background()
	registerCluster(t, c, ns, "prod-1", map[string]string{"env": "prod"})
	repo := &v1alpha1.GitRepo{ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: ns}, Spec: v1alpha1.GitRepoSpec{
		Repo: srv.URL + "/repo.git", PollingInterval: &metav1.Duration{Duration: time.Second},
		Targets: []v1alpha1.Target{{ClusterMatch: v1alpha1.ClusterMatch{ClusterSelector: &metav1.LabelSelector{}}}},
	}}
	if err := c.Create(ctx, repo); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(repo)
	rendered := func(r *v1alpha1.GitRepo) *metav1.Condition {
		return meta.FindStatusCondition(r.Status.Conditions, v1alpha1.RenderedCondition)
	}
	got := waitFor(t, c, key, "the first commit, but for the broken bundle", func(r *v1alpha1.GitRepo) bool {
		cond := rendered(r)
		return r.Status.Commit != "" && cond != nil && cond.Status == metav1.ConditionFalse
	})
	if msg := rendered(got).Message; !strings.Contains(msg, "1 of 3 bundles do not render") || !strings.Contains(msg, "broken/kustomization.yaml: resources[0]: \"https://example.com/remote.yaml\" is remote") {
		t.Errorf("the GitRepo's Rendered condition: %q", msg)
	}
	for _, name := range []string{"shop-web", "shop-api"} {
		if bds := deploymentsOf(t, c, ns, name); len(bds) != 1 || bds["prod-1"].Spec.Staged.Index != 1 {
			t.Fatalf("%s: the bundles that render roll out: %+v", name, bds)
		}
	}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "shop-broken"}, &v1alpha1.Bundle{}); !apierrors.IsNotFound(err) {
		t.Errorf("a bundle that never rendered has no Bundle: %v", err)
	}
	apiBefore := deploymentsOf(t, c, ns, "shop-api")["prod-1"]

	// api breaks (a field of no fleet.yaml) while web changes: web rolls out revision 2, api
	// keeps revision 1 deployed, untouched, and says why.
	second := up.Commit("main", map[string]string{"web/cm.yaml": cm("green"), "api/fleet.yaml": "defaultNamespace: api\nrolloutStrategy: {maxUnavailabel: 1}\n", "api/cm.yaml": cm("green")})
	got = waitFor(t, c, key, "the second commit, but for api", func(r *v1alpha1.GitRepo) bool { return r.Status.Commit == second })
	if msg := rendered(got).Message; !strings.Contains(msg, "2 of 3 bundles do not render") || !strings.Contains(msg, "api/fleet.yaml:2: rolloutStrategy.maxUnavailabel: unknown field") {
		t.Errorf("the GitRepo's Rendered condition: %q", msg)
	}
	if bd := deploymentsOf(t, c, ns, "shop-web")["prod-1"]; bd.Spec.Staged.Index != 2 {
		t.Errorf("web was not staged revision 2: %+v", bd.Spec.Staged)
	}
	var api v1alpha1.Bundle
	waitForBundle(t, c, types.NamespacedName{Namespace: ns, Name: "shop-api"}, &api, func(b *v1alpha1.Bundle) bool {
		cond := meta.FindStatusCondition(b.Status.Conditions, v1alpha1.RenderedCondition)
		return cond != nil && cond.Status == metav1.ConditionFalse
	})
	if f := api.Status.RenderFailure; f == nil || f.Commit != second || !strings.Contains(f.Message, "api/fleet.yaml:2: rolloutStrategy.maxUnavailabel") {
		t.Errorf("api's render failure: %+v", f)
	}
	if msg := meta.FindStatusCondition(api.Status.Conditions, v1alpha1.RenderedCondition).Message; !strings.Contains(msg, "revision 1 stays deployed") {
		t.Errorf("api's Rendered condition: %q", msg)
	}
	if api.Spec.LatestRevision != 1 {
		t.Errorf("api got a revision from a commit it does not render at: %d", api.Spec.LatestRevision)
	}
	if bd := deploymentsOf(t, c, ns, "shop-api")["prod-1"]; bd.ResourceVersion != apiBefore.ResourceVersion {
		t.Errorf("api's deployment was written: %+v", bd.Spec)
	}

	// api is mended: it rolls out, and its Bundle and the GitRepo no longer speak of it.
	third := up.Commit("main", map[string]string{"api/fleet.yaml": "defaultNamespace: api\n"})
	waitForBundle(t, c, types.NamespacedName{Namespace: ns, Name: "shop-api"}, &api, func(b *v1alpha1.Bundle) bool {
		return b.Spec.LatestRevision == 2 && b.Status.RenderFailure == nil && meta.FindStatusCondition(b.Status.Conditions, v1alpha1.RenderedCondition) == nil
	})
	got = waitFor(t, c, key, "the third commit", func(r *v1alpha1.GitRepo) bool {
		return r.Status.Commit == third && rendered(r) != nil && strings.Contains(rendered(r).Message, "1 of 3 bundles do not render")
	})
	if strings.Contains(rendered(got).Message, "api/") {
		t.Errorf("the GitRepo still names api: %q", rendered(got).Message)
	}
}

// fleet.yaml's name is the repository author's: a GitRepo whose bundle names another GitRepo's
// Bundle of the namespace fails that bundle, naming the owner, and the other's Bundle and
// deployments stay as they were.
func TestABundleNameNeverTakesOverAnotherGitReposBundle(t *testing.T) {
	up := gitserver.New(t)
	up.Commit("main", map[string]string{"web/fleet.yaml": "defaultNamespace: web\n", "web/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {owner: shop}\n"})
	intruder := gitserver.New(t)
	intruder.Commit("main", map[string]string{
		"app/fleet.yaml": "name: shop-web\ndefaultNamespace: web\n", "app/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {owner: intruder}\n",
		"own/fleet.yaml": "defaultNamespace: other\n", "own/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: own}\n",
	})
	c, _ := startHub(t, Options{StatusDelay: 200 * time.Millisecond})
	ns := namespace(t, c)
	ctx := context.Background()
	registerCluster(t, c, ns, "prod-1", map[string]string{"env": "prod"})
	all := []v1alpha1.Target{{ClusterMatch: v1alpha1.ClusterMatch{ClusterSelector: &metav1.LabelSelector{}}}}
	shop := &v1alpha1.GitRepo{ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: ns}, Spec: v1alpha1.GitRepoSpec{
		Repo: up.ServeHTTP("", "").URL + "/repo.git", PollingInterval: &metav1.Duration{Duration: time.Second}, Targets: all}}
	if err := c.Create(ctx, shop); err != nil {
		t.Fatal(err)
	}
	waitFor(t, c, client.ObjectKeyFromObject(shop), "shop rendered", func(r *v1alpha1.GitRepo) bool { return r.Status.Commit != "" })
	var before v1alpha1.Bundle
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "shop-web"}, &before); err != nil {
		t.Fatal(err)
	}
	bdBefore := deploymentsOf(t, c, ns, "shop-web")["prod-1"]
	other := &v1alpha1.GitRepo{ObjectMeta: metav1.ObjectMeta{Name: "intruder", Namespace: ns}, Spec: v1alpha1.GitRepoSpec{
		Repo: intruder.ServeHTTP("", "").URL + "/repo.git", PollingInterval: &metav1.Duration{Duration: time.Second}, Targets: all}}
	if err := c.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	got := waitFor(t, c, client.ObjectKeyFromObject(other), "the intruder's own bundle rendered, the other refused", func(r *v1alpha1.GitRepo) bool {
		cond := meta.FindStatusCondition(r.Status.Conditions, v1alpha1.RenderedCondition)
		return r.Status.Commit != "" && cond != nil && cond.Status == metav1.ConditionFalse
	})
	if msg := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.RenderedCondition).Message; !strings.Contains(msg, "bundle shop-web (app): the name is taken by a Bundle of GitRepo shop") || !strings.Contains(msg, "app/fleet.yaml") {
		t.Errorf("the intruder's Rendered condition: %q", msg)
	}
	var after v1alpha1.Bundle
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "shop-web"}, &after); err != nil {
		t.Fatal(err)
	}
	if after.Labels[model.LabelGitRepo] != "shop" || after.Spec.LatestRevision != before.Spec.LatestRevision || after.Status.RenderFailure != nil {
		t.Errorf("shop's Bundle moved: labels %v, revision %d (was %d), render failure %+v", after.Labels, after.Spec.LatestRevision, before.Spec.LatestRevision, after.Status.RenderFailure)
	}
	if bd := deploymentsOf(t, c, ns, "shop-web")["prod-1"]; bd.ResourceVersion != bdBefore.ResourceVersion {
		t.Errorf("shop's deployment was written: %+v", bd.Spec)
	}
	if bds := deploymentsOf(t, c, ns, "intruder-own"); len(bds) != 1 {
		t.Errorf("the intruder's own bundle did not roll out: %v", bds)
	}
}

// A Bundle's status written (a rollout's progress) after the bundler read the Bundle for a new
// commit and before it wrote the new revision: the write is refused (it is conditional on the
// Bundle as read) and the commit is drafted again at once, not left to the next poll an hour
// later. The status write is made by the test at the moment the hub's write goes out.
func TestR1_10_AStatusWrittenWhileACommitIsPublishedDoesNotDelayTheCommit(t *testing.T) {
	ctx := context.Background()
	tc := apiClient(t)
	ns := namespace(t, tc)
	bundlePath := "/apis/flotilla.dev/v1alpha1/namespaces/" + ns + "/bundles/shop-web"
	var armed atomic.Bool
	var raced, refused atomic.Int32
	cfg := rest.CopyConfig(hubCluster.Config())
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(req *http.Request) (*http.Response, error) {
			if req.Method != http.MethodPatch || req.URL.Path != bundlePath {
				return rt.RoundTrip(req)
			}
			if armed.CompareAndSwap(true, false) {
				var bun v1alpha1.Bundle
				if err := tc.Get(ctx, types.NamespacedName{Namespace: ns, Name: "shop-web"}, &bun); err != nil {
					return nil, err
				}
				orig := bun.DeepCopy()
				bun.Status.Display.ReadyClusters = "0/9"
				if err := tc.Status().Patch(ctx, &bun, client.MergeFrom(orig)); err != nil {
					return nil, err
				}
				raced.Add(1)
			}
			resp, err := rt.RoundTrip(req)
			if err == nil && resp.StatusCode == http.StatusConflict {
				refused.Add(1)
			}
			return resp, err
		})
	})
	c, webhook := startHub(t, Options{Config: cfg})
	registerCluster(t, c, ns, "dev-1", map[string]string{"env": "dev"})
	up := gitserver.New(t)
	first := up.Commit("main", map[string]string{"web/fleet.yaml": "defaultNamespace: web\n",
		"web/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {color: blue}\n"})
	url := up.ServeHTTP("", "").URL + "/repo.git"
	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "hook", Namespace: ns}, StringData: map[string]string{"token": "s3cret"}}); err != nil {
		t.Fatal(err)
	}
	repo := &v1alpha1.GitRepo{ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: ns}, Spec: v1alpha1.GitRepoSpec{
		Repo: url, PollingInterval: &metav1.Duration{Duration: time.Hour}, WebhookSecretRef: &v1alpha1.LocalObjectReference{Name: "hook"},
		Targets: []v1alpha1.Target{{Name: "all", ClusterMatch: v1alpha1.ClusterMatch{ClusterSelector: &metav1.LabelSelector{}}}},
	}}
	if err := c.Create(ctx, repo); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(repo)
	waitFor(t, c, key, "first commit rendered", func(r *v1alpha1.GitRepo) bool { return r.Status.Commit == first })

	armed.Store(true)
	second := up.Commit("main", map[string]string{"web/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {color: green}\n"})
	if code, out := deliverPush(t, webhook, fmt.Sprintf(`{"ref":"refs/heads/main","repository":{"clone_url":%q}}`, url), "s3cret"); code != http.StatusAccepted {
		t.Fatalf("webhook delivery: %d %q", code, out)
	}
	got := waitFor(t, c, key, "second commit rendered within the webhook's wake-up, not the next poll", func(r *v1alpha1.GitRepo) bool { return r.Status.Commit == second })
	if raced.Load() != 1 || refused.Load() == 0 {
		t.Fatalf("the status write was to land between the read and the write of the new revision, and refuse it: %d status writes, %d refused", raced.Load(), refused.Load())
	}
	var bun v1alpha1.Bundle
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "shop-web"}, &bun); err != nil {
		t.Fatal(err)
	}
	if bun.Spec.LatestRevision != 2 || len(bun.Spec.Revisions) != 2 || bun.Spec.Revisions[1].Commit != second || bun.Spec.Revisions[1].Index != 2 {
		t.Errorf("the commit must be revision 2, recorded once: latest %d, history %+v", bun.Spec.LatestRevision, bun.Spec.Revisions)
	}
	if c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ReadyCondition); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("the GitRepo must not show the refused write as a failed sync: %+v", got.Status.Conditions)
	}
}
