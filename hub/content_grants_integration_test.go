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
	"github.com/flotilla-dev/flotilla/hub/deploy"
	"github.com/flotilla-dev/flotilla/hub/model"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
	if agentMayRead(t, c, agentNS("a"), ns, first) {
		t.Errorf("agent a may still read revision 1's content, which no deployment references")
	}
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
	if err := access.GrantShared(ctx, c, model.ContentRef{Namespace: ns, ID: shared.ContentID}, []string{cl.Status.Namespace}, time.Now()); err != nil {
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
	if !agentMayRead(t, c, cl.Status.Namespace, ns, shared.ContentID) {
		t.Errorf("the agent may not read the content its shared grant gives it")
	}

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
	if err := access.GrantShared(ctx, c, ref, []string{"cluster-ns-a", "cluster-ns-b"}, granted); err != nil {
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

// A shared grant made for clusters whose deployments are not written yet (a staging slower
// than the prune delay: a large fleet, a slow API server) is kept by the hub's pruner for as
// long as the staging renews it, however far past the delay, and goes once the staging ended
// (nothing references its content here). A grant that is not renewed goes after the delay.
func TestSharedGrantIsKeptWhileItsStagingLasts(t *testing.T) {
	const delay = 400 * time.Millisecond
	c, _ := startHub(t, Options{GrantPruneDelay: delay})
	ctx := context.Background()
	ns := namespace(t, c)
	gone := func(key types.NamespacedName) bool {
		var binding rbacv1.RoleBinding
		return apierrors.IsNotFound(c.Get(ctx, key, &binding))
	}
	grant := func(id string) types.NamespacedName {
		if err := access.GrantShared(ctx, c, model.ContentRef{Namespace: ns, ID: id}, []string{"cluster-ns-a", "cluster-ns-b"}, time.Now()); err != nil {
			t.Fatal(err)
		}
		return types.NamespacedName{Namespace: ns, Name: access.ContentGrantName(id)}
	}
	// The hub's pruner at work: a grant nobody renews and nothing references goes.
	unrenewed := grant("s-unrenewed")
	waitUntil(t, "a grant nobody renews goes", func() bool { return gone(unrenewed) })

	ref := model.ContentRef{Namespace: ns, ID: "s-slow"}
	key := grant(ref.ID)
	stop := access.KeepShared(ctx, c, []model.ContentRef{ref}, delay)
	renewals, last := 0, ""
	// Five prune delays of staging, the grant read as often as the pruner could act on it.
	for end := time.Now().Add(5 * delay); time.Now().Before(end); time.Sleep(delay / 8) {
		var binding rbacv1.RoleBinding
		if err := c.Get(ctx, key, &binding); err != nil || len(binding.Subjects) != 2 {
			stop()
			t.Fatalf("the grant was pruned while its staging renewed it: %v, %d subjects", err, len(binding.Subjects))
		}
		if at := binding.Annotations["flotilla.dev/granted-at"]; at != last {
			renewals, last = renewals+1, at
		}
	}
	stop()
	if renewals < 5 {
		t.Errorf("the grant was renewed %d times in five prune delays", renewals-1)
	}
	waitUntil(t, "the grant goes once its staging ended", func() bool { return gone(key) })
}
