package hub

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/flotilla-dev/flotilla/e2e/gitserver"
	"github.com/flotilla-dev/flotilla/hub/access"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/contentstore"
	"github.com/flotilla-dev/flotilla/hub/deploy"
	"github.com/flotilla-dev/flotilla/hub/model"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// One bundle on three clusters: its content is granted once to the three agents (not in each
// cluster's Role), to no other agent, and the grant goes once no deployment references it.
func TestSharedContentGrantFollowsTheDeployments(t *testing.T) {
	up := gitserver.New(t)
	fleetYAML := "defaultNamespace: web\nrolloutStrategy: {maxUnavailable: 100%}\n"
	up.Commit("main", map[string]string{"web/fleet.yaml": fleetYAML, "web/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {v: \"1\"}\n"})
	srv := up.ServeHTTP("", "")
	c, _ := startHub(t, Options{GrantPruneDelay: time.Second})
	ns := namespace(t, c)
	ctx := context.Background()
	for _, name := range []string{"a", "b", "c"} {
		registerCluster(t, c, ns, name, map[string]string{"fleet": "yes"})
	}
	registerCluster(t, c, ns, "outside", nil)
	agentNS := func(cluster string) string { return access.ClusterNamespace(ns, cluster) }
	// The hub has taken in the three clusters (their agents' Roles are written) before the
	// commit comes: the bundler then stages it for all three at once.
	waitUntil(t, "the hub granted the agents of a, b and c", func() bool {
		for _, name := range []string{"a", "b", "c"} {
			var role rbacv1.Role
			if err := c.Get(ctx, types.NamespacedName{Namespace: agentNS(name), Name: access.AgentServiceAccount}, &role); err != nil {
				return false
			}
		}
		return true
	})
	repo := &v1alpha1.GitRepo{ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: ns}, Spec: v1alpha1.GitRepoSpec{
		Repo: srv.URL + "/repo.git", PollingInterval: &metav1.Duration{Duration: time.Second},
		Targets: []v1alpha1.Target{{ClusterMatch: v1alpha1.ClusterMatch{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": "yes"}}}}},
	}}
	if err := c.Create(ctx, repo); err != nil {
		t.Fatal(err)
	}
	contentOn := func(rev int64) string {
		var id string
		waitUntil(t, fmt.Sprintf("revision %d released on a, b and c", rev), func() bool {
			bds := deploymentsOf(t, c, ns, "shop-web")
			for _, name := range []string{"a", "b", "c"} {
				if rel := bds[name].Spec.Released; rel == nil || rel.Index != rev {
					return false
				}
				id = bds[name].Spec.Released.ContentID
			}
			return len(bds) == 3
		})
		return id
	}
	first := contentOn(1)
	waitUntil(t, "the three agents may read revision 1's content", func() bool {
		return agentMayRead(t, c, agentNS("a"), ns, first) && agentMayRead(t, c, agentNS("b"), ns, first) && agentMayRead(t, c, agentNS("c"), ns, first)
	})
	if agentMayRead(t, c, agentNS("outside"), ns, first) {
		t.Errorf("the agent of a cluster the bundle does not target may read its content")
	}
	for _, name := range []string{"a", "b", "c"} {
		var role rbacv1.Role
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "flotilla-agent-" + name}, &role); err != nil {
			t.Fatal(err)
		}
		for _, rule := range role.Rules {
			if slices.Contains(rule.Resources, "contents") {
				t.Errorf("cluster %s's Role was written with content %v: the shared grant gives it", name, rule.ResourceNames)
			}
		}
	}

	// Revision 2 everywhere: revision 1's grant goes, revision 2's is the three agents'.
	up.Commit("main", map[string]string{"web/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {v: \"2\"}\n"})
	second := contentOn(2)
	waitUntil(t, "revision 1's grant removed", func() bool {
		var binding rbacv1.RoleBinding
		err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: access.ContentGrantName(first)}, &binding)
		return apierrors.IsNotFound(err)
	})
	// The authorizer forgets the grant from its own watch, a moment after the deletion.
	waitUntil(t, "agent a may no longer read revision 1's content, which no deployment references", func() bool {
		return !agentMayRead(t, c, agentNS("a"), ns, first)
	})
	waitUntil(t, "the three agents may read revision 2's content", func() bool {
		return agentMayRead(t, c, agentNS("a"), ns, second) && agentMayRead(t, c, agentNS("b"), ns, second) && agentMayRead(t, c, agentNS("c"), ns, second)
	})

	// Cluster c leaves the targets: its deployment goes, and then its agent's access.
	var cl v1alpha1.Cluster
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "c"}, &cl); err != nil {
		t.Fatal(err)
	}
	cl.Labels = nil
	if err := c.Update(ctx, &cl); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "cluster c's agent loses revision 2's content", func() bool {
		return !agentMayRead(t, c, agentNS("c"), ns, second)
	})
	if !agentMayRead(t, c, agentNS("a"), ns, second) || !agentMayRead(t, c, agentNS("b"), ns, second) {
		t.Errorf("agents a and b lost revision 2's content with cluster c")
	}
}

// The access reconciler runs a moment after the bundler staged a commit, and the rollout
// controller may release a cluster as soon: when their cache does not hold the commit's shared
// grant yet, they read the grant past the cache instead of writing the content into the
// cluster's own Role, where it would stay until the next revision.
func TestAccessRecomputeConfirmsSharedGrantsPastTheCache(t *testing.T) {
	c := apiClient(t)
	ctx := context.Background()
	ns := namespace(t, c)
	cl := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: ns}}
	if err := c.Create(ctx, cl); err != nil {
		t.Fatal(err)
	}
	if err := access.AdmitCluster(ctx, c, cl); err != nil {
		t.Fatal(err)
	}
	shared := revisionRef(1, "shared")
	bd := &v1alpha1.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Name: "fleet-web", Namespace: cl.Status.Namespace},
		Spec: v1alpha1.BundleDeploymentSpec{Bundle: "web", BundleNamespace: ns, Staged: shared}}
	if err := c.Create(ctx, bd); err != nil {
		t.Fatal(err)
	}
	if err := access.GrantShared(ctx, c, access.SharedGrant{Ref: model.ContentRef{Namespace: ns, ID: shared.ContentID}, ClusterNamespaces: []string{cl.Status.Namespace}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	ownContent := func() []string {
		var role rbacv1.Role
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: access.AgentRoleName(cl)}, &role); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, rule := range role.Rules {
			if slices.Contains(rule.Resources, "contents") {
				names = append(names, rule.ResourceNames...)
			}
		}
		return names
	}

	if err := access.GrantAccessWith(ctx, staleGrants{c}, cl, nil, access.AccessRewrite{Live: c}); err != nil {
		t.Fatal(err)
	}
	if got := ownContent(); len(got) != 0 {
		t.Errorf("with the grant read past the stale cache, the cluster's Role names content %v", got)
	}
	// The rollout controller's release of a cluster the cache shows no deployment of yet
	// confirms the same way.
	bun := &v1alpha1.Bundle{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns}}
	if _, err := deploy.GrantAndWrite(ctx, staleGrants{c}, c, bun, cl, nil, model.RevisionTarget{Ref: revisionRef(2, "shared")}, true, time.Now()); err != nil {
		t.Fatal(err)
	}
	if got := ownContent(); len(got) != 0 {
		t.Errorf("a release past the stale cache wrote content %v into the cluster's Role", got)
	}
	waitUntil(t, "the agent may read the content its shared grant gives it", func() bool {
		return agentMayRead(t, c, cl.Status.Namespace, ns, shared.ContentID)
	})

	// Without the live read, the stale cache puts the content in the Role: the case guarded.
	if err := access.GrantAccessWith(ctx, staleGrants{c}, cl, nil, access.AccessRewrite{}); err != nil {
		t.Fatal(err)
	}
	if got := ownContent(); !slices.Contains(got, shared.ContentID) {
		t.Errorf("a stale cache without the live read left the Role with %v; the guard above proves nothing", got)
	}
}

// A shared grant is kept for the whole prune delay after it was made, to the sub-second: the
// deployments it was made for are written just after it and may not be in the cache yet.
func TestSharedGrantIsKeptForTheWholePruneDelay(t *testing.T) {
	c := apiClient(t)
	ctx := context.Background()
	ns := namespace(t, c)
	// Late in a second: truncated to the second, the delay would end 0.9 s early.
	granted := time.Date(2026, 3, 1, 10, 0, 0, 900_000_000, time.UTC)
	ref := model.ContentRef{Namespace: ns, ID: "s-1234"}
	if err := access.GrantShared(ctx, c, access.SharedGrant{Ref: ref, ClusterNamespaces: []string{"cluster-ns-a", "cluster-ns-b"}}, granted); err != nil {
		t.Fatal(err)
	}
	key := types.NamespacedName{Namespace: ns, Name: access.ContentGrantName(ref.ID)}
	for _, after := range []time.Duration{0, 500 * time.Millisecond, 999 * time.Millisecond} {
		pruner := &access.ContentGrantReconciler{Client: c, Delay: time.Second, Now: func() time.Time { return granted.Add(after) }}
		res, err := pruner.Reconcile(ctx, reconcile.Request{NamespacedName: key})
		if err != nil {
			t.Fatalf("%v after the grant: %v", after, err)
		}
		if want := time.Second - after; res.RequeueAfter != want {
			t.Errorf("%v after the grant: the pruner looks again in %v, want %v", after, res.RequeueAfter, want)
		}
		var binding rbacv1.RoleBinding
		if err := c.Get(ctx, key, &binding); err != nil || len(binding.Subjects) != 2 {
			t.Errorf("%v after the grant, within the prune delay: the grant was pruned (%v, %d subjects)", after, err, len(binding.Subjects))
		}
	}
}

// R1.1: a continuous rollout writes a cluster's deployment only when it reaches the cluster,
// minutes after the commit staged it at fleet size. The shared grant staging made keeps, past
// the prune delay, the agents of the clusters the bundle's wanted revision deploys its content
// to, deployment written or not (each would otherwise cost a write of its own Role when the
// rollout reaches it); it drops every other agent, and goes once the bundle moved on.
func TestR1_1_SharedGrantKeepsTheClustersARolloutHasNotReachedYet(t *testing.T) {
	c, cached := apiClient(t), indexedClient(t)
	ctx := context.Background()
	ns := namespace(t, c)
	revisions := &model.RevisionStore{Content: &contentstore.Store{Client: c}}
	clusterNS := map[string]string{}
	for _, name := range []string{"reached", "later", "other-content", "untargeted"} {
		cl := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
		if err := c.Create(ctx, cl); err != nil {
			t.Fatal(err)
		}
		cl.Status.Namespace = namespace(t, c)
		if err := c.Status().Update(ctx, cl); err != nil {
			t.Fatal(err)
		}
		clusterNS[name] = cl.Status.Namespace
	}
	target := func(index int64, content string) model.RevisionTarget {
		return model.RevisionTarget{Ref: revisionRef(index, content)}
	}
	bun := &v1alpha1.Bundle{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns}}
	if err := c.Create(ctx, bun); err != nil {
		t.Fatal(err)
	}
	setRevision := func(index int64, targets model.RevisionTargets) {
		t.Helper()
		id, err := revisions.Put(ctx, ns, targets)
		if err != nil {
			t.Fatal(err)
		}
		bun.Spec.Revisions = append(bun.Spec.Revisions, v1alpha1.BundleRevision{RevisionRef: revisionRef(index, fmt.Sprint(index)), TargetsID: id, Created: metav1.Now()})
		bun.Spec.LatestRevision = index
		if err := c.Update(ctx, bun); err != nil {
			t.Fatal(err)
		}
	}
	setRevision(1, model.RevisionTargets{"reached": target(1, "1"), "later": target(1, "1"), "other-content": target(1, "other")})
	// Only the cluster the rollout reached has a deployment.
	bd := &v1alpha1.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: clusterNS["reached"], Labels: map[string]string{model.LabelBundleNamespace: ns, model.LabelBundle: "web"}},
		Spec: v1alpha1.BundleDeploymentSpec{Bundle: "web", BundleNamespace: ns, Staged: revisionRef(1, "1")}}
	if err := c.Create(ctx, bd); err != nil {
		t.Fatal(err)
	}
	granted := time.Now()
	ref := model.ContentRef{Namespace: ns, ID: revisionRef(1, "1").ContentID}
	var all []string
	for _, name := range []string{"reached", "later", "other-content", "untargeted"} {
		all = append(all, clusterNS[name])
	}
	if err := access.GrantShared(ctx, c, access.SharedGrant{Ref: ref, Bundles: []string{"web"}, ClusterNamespaces: all}, granted); err != nil {
		t.Fatal(err)
	}
	key := types.NamespacedName{Namespace: ns, Name: access.ContentGrantName(ref.ID)}
	now := granted.Add(time.Hour)
	pruner := &access.ContentGrantReconciler{Client: cached, Revisions: revisions, Delay: time.Minute, Now: func() time.Time { return now }}
	// The pruner reads the cache: each pass waits until the cache shows what the test wrote.
	var clusters []client.Object
	for name := range clusterNS {
		clusters = append(clusters, &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}})
	}
	seen := func(grant string) {
		t.Helper()
		cacheShows(t, c, cached, append(clusters, bun.DeepCopy(), bd.DeepCopy(), &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: grant, Namespace: ns}})...)
	}
	prune := func() []string {
		t.Helper()
		now = now.Add(2 * time.Minute) // past the prune delay since the last pass
		seen(key.Name)
		if _, err := pruner.Reconcile(ctx, reconcile.Request{NamespacedName: key}); err != nil {
			t.Fatal(err)
		}
		var binding rbacv1.RoleBinding
		if err := c.Get(ctx, key, &binding); apierrors.IsNotFound(err) {
			return nil
		} else if err != nil {
			t.Fatal(err)
		}
		var agents []string
		for name, cns := range clusterNS {
			if slices.Contains(binding.Subjects, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: access.AgentServiceAccount, Namespace: cns}) {
				agents = append(agents, name)
			}
		}
		slices.Sort(agents)
		return agents
	}
	if got, want := prune(), []string{"later", "reached"}; !slices.Equal(got, want) {
		t.Errorf("an hour after the grant, while revision 1 rolls out, it names the agents of %v, want %v", got, want)
	}
	// Its own patch wakes the pruner: within the prune delay it looks again later, writing nothing.
	seen(key.Name)
	var before rbacv1.RoleBinding
	if err := c.Get(ctx, key, &before); err != nil {
		t.Fatal(err)
	}
	if res, err := pruner.Reconcile(ctx, reconcile.Request{NamespacedName: key}); err != nil || res.RequeueAfter != time.Minute {
		t.Errorf("right after a prune: requeue after %v (%v), want the rest of the prune delay", res.RequeueAfter, err)
	}
	var after rbacv1.RoleBinding
	if err := c.Get(ctx, key, &after); err != nil || after.ResourceVersion != before.ResourceVersion {
		t.Errorf("a pass right after a prune wrote the grant (%v)", err)
	}
	waitUntil(t, "the API server enforces the grant as kept: later may read, untargeted may not", func() bool {
		return agentMayRead(t, c, clusterNS["later"], ns, ref.ID) && !agentMayRead(t, c, clusterNS["untargeted"], ns, ref.ID)
	}, func() string {
		return fmt.Sprintf("later may read %v, untargeted %v", agentMayRead(t, c, clusterNS["later"], ns, ref.ID), agentMayRead(t, c, clusterNS["untargeted"], ns, ref.ID))
	})
	// A grant naming another bundle, or none, keeps only the deployments' agents.
	other := model.ContentRef{Namespace: ns, ID: "s-1-elsewhere"}
	if err := access.GrantShared(ctx, c, access.SharedGrant{Ref: other, Bundles: []string{"api"}, ClusterNamespaces: all}, granted); err != nil {
		t.Fatal(err)
	}
	seen(access.ContentGrantName(other.ID))
	if _, err := pruner.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: access.ContentGrantName(other.ID)}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: access.ContentGrantName(other.ID)}, &rbacv1.RoleBinding{}); !apierrors.IsNotFound(err) {
		t.Errorf("a grant of content no deployment and no wanted revision uses was kept (%v)", err)
	}

	// The bundle moves on: revision 2 deploys other content; the reached cluster's deployment
	// still runs revision 1, so its agent alone keeps it.
	setRevision(2, model.RevisionTargets{"reached": target(2, "2"), "later": target(2, "2")})
	if got, want := prune(), []string{"reached"}; !slices.Equal(got, want) {
		t.Errorf("with revision 2 wanted, the grant of revision 1's content names %v, want %v", got, want)
	}
	bd.Spec.Staged = revisionRef(2, "2")
	if err := c.Update(ctx, bd); err != nil {
		t.Fatal(err)
	}
	if got := prune(); got != nil {
		t.Errorf("with no deployment left on revision 1, its content's grant names %v", got)
	}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: access.ContentGrantName(ref.ID)}, &rbacv1.Role{}); !apierrors.IsNotFound(err) {
		t.Errorf("the grant's Role outlived its binding (%v)", err)
	}
}

// A staged run's stage or a sequence's group that is under way releases its clusters from a
// revision's record as soon as the revision shows on the Bundle, without granting anything: the
// commit's shared grant must be there by then, or the release of a cluster would have its content
// written into the cluster's own Role. Each revision the Bundle shows, as a watch sees it, has its
// shared grant in the API server already.
func TestANewRevisionShowsOnlyOnceItsSharedGrantIsInPlace(t *testing.T) {
	up := gitserver.New(t)
	commit := func(v string) {
		up.Commit("main", map[string]string{"web/fleet.yaml": "defaultNamespace: web\nrolloutStrategy: {maxUnavailable: 100%}\n",
			"web/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {v: \"" + v + "\"}\n"})
	}
	commit("1")
	srv := up.ServeHTTP("", "")
	c, _ := startHub(t, Options{})
	ns := namespace(t, c)
	ctx := context.Background()
	names := []string{"a", "b", "c"}
	for _, name := range names {
		registerCluster(t, c, ns, name, map[string]string{"fleet": "yes"})
	}
	clusters := map[string]*v1alpha1.Cluster{}
	waitUntil(t, "the three clusters are admitted", func() bool {
		for _, name := range names {
			var cl v1alpha1.Cluster
			if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &cl); err != nil || cl.Status.Namespace == "" {
				return false
			}
			clusters[name] = &cl
		}
		return true
	})
	scheme, _ := Scheme()
	watcher, err := client.NewWithWatch(hubCluster.Config(), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	w, err := watcher.Watch(ctx, &v1alpha1.BundleList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	repo := &v1alpha1.GitRepo{ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: ns}, Spec: v1alpha1.GitRepoSpec{
		Repo: srv.URL + "/repo.git", PollingInterval: &metav1.Duration{Duration: time.Second},
		Targets: []v1alpha1.Target{{ClusterMatch: v1alpha1.ClusterMatch{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": "yes"}}}}},
	}}
	if err := c.Create(ctx, repo); err != nil {
		t.Fatal(err)
	}
	// Each revision is checked the moment the watch shows it, before the hub moves on.
	checked := map[int64]bool{}
	deadline := time.After(2 * time.Minute)
	for len(checked) < 2 {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("the Bundle watch ended")
			}
			bun, isBundle := ev.Object.(*v1alpha1.Bundle)
			if !isBundle || len(bun.Spec.Revisions) == 0 || checked[bun.Spec.LatestRevision] {
				continue
			}
			latest := bun.Spec.Revisions[len(bun.Spec.Revisions)-1]
			for _, name := range names {
				if !access.HasContent(ctx, c, clusters[name], ns, latest.ContentID) {
					t.Errorf("revision %d shows on the Bundle while the agent of %s has no grant of its content %s", latest.Index, name, latest.ContentID)
				}
			}
			checked[latest.Index] = true
			if latest.Index == 1 {
				commit("2")
			}
		case <-deadline:
			t.Fatalf("revisions seen on the Bundle: %v, want 1 and 2", checked)
		}
	}
	waitUntil(t, "revision 2 released on a, b and c", func() bool {
		bds := deploymentsOf(t, c, ns, "shop-web")
		for _, name := range names {
			if rel := bds[name].Spec.Released; rel == nil || rel.Index != 2 {
				return false
			}
		}
		return true
	})
	// Nothing was written into the clusters' own Roles: the shared grant gave the content.
	for _, name := range names {
		var role rbacv1.Role
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: access.AgentRoleName(clusters[name])}, &role); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		for _, rule := range role.Rules {
			if slices.Contains(rule.Resources, "contents") && len(rule.ResourceNames) > 0 {
				t.Errorf("the own Role of %s names content %v: a release did not find the shared grant", name, rule.ResourceNames)
			}
		}
	}
}
