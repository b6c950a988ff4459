package hub

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/e2e/gitserver"
	"github.com/flotilla-dev/flotilla/hub/access"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// waitCluster polls a Cluster until cond holds.
func waitCluster(t *testing.T, c client.Client, ns, name, what string, cond func(*v1alpha1.Cluster) bool) *v1alpha1.Cluster {
	t.Helper()
	return waitForObject(t, c, types.NamespacedName{Namespace: ns, Name: name}, "cluster: "+what, cond)
}

// Fleet namespace "team" with cluster "prod-x" and "team-prod" with "x" once shared a namespace;
// now every Cluster gets its own, owned by it, and a namespace owned by another is never handed
// to a Cluster: that Cluster is not admitted, says why, and gets no deployments.
func TestClusterNamespacesAreUniqueAndOwned(t *testing.T) {
	up := gitserver.New(t)
	up.Commit("main", map[string]string{"web/fleet.yaml": "defaultNamespace: web\n", "web/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {color: blue}\n"})
	srv := up.ServeHTTP("", "")
	c, _ := startHub(t, Options{})
	ctx := context.Background()
	team := namespace(t, c)
	teamProd := team + "-prod"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: teamProd}}); err != nil {
		t.Fatal(err)
	}
	squatted := access.ClusterNamespace(team, "squat")
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: squatted, Annotations: map[string]string{access.AnnotationOwnerCluster: "elsewhere/victim"}}}); err != nil {
		t.Fatal(err)
	}
	for _, cl := range []*v1alpha1.Cluster{
		{ObjectMeta: metav1.ObjectMeta{Name: "prod-x", Namespace: team}},
		{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: teamProd}},
		{ObjectMeta: metav1.ObjectMeta{Name: "squat", Namespace: team}},
	} {
		if err := c.Create(ctx, cl); err != nil {
			t.Fatal(err)
		}
	}
	// The hub admits Clusters that an operator creates, as it does registered ones.
	admitted := func(cl *v1alpha1.Cluster) bool { return cl.Status.Namespace != "" }
	a := waitCluster(t, c, team, "prod-x", "admitted", admitted)
	b := waitCluster(t, c, teamProd, "x", "admitted", admitted)
	if a.Status.Namespace == b.Status.Namespace {
		t.Fatalf("%s/prod-x and %s/x share namespace %s", team, teamProd, a.Status.Namespace)
	}
	for _, cl := range []*v1alpha1.Cluster{a, b} {
		var ns corev1.Namespace
		if err := c.Get(ctx, types.NamespacedName{Name: cl.Status.Namespace}, &ns); err != nil {
			t.Fatal(err)
		}
		if owner := ns.Annotations[access.AnnotationOwnerCluster]; owner != cl.Namespace+"/"+cl.Name {
			t.Errorf("namespace %s is owned by %q, want %s/%s", ns.Name, owner, cl.Namespace, cl.Name)
		}
	}
	squat := waitCluster(t, c, team, "squat", "refused its namespace", func(cl *v1alpha1.Cluster) bool {
		cond := meta.FindStatusCondition(cl.Status.Conditions, v1alpha1.AdmittedCondition)
		return cond != nil && cond.Status == metav1.ConditionFalse && cond.Reason == v1alpha1.NamespaceConflictReason
	})
	if squat.Status.Namespace != "" {
		t.Errorf("the squatted cluster was given namespace %s", squat.Status.Namespace)
	}
	if msg := meta.FindStatusCondition(squat.Status.Conditions, v1alpha1.AdmittedCondition).Message; !strings.Contains(msg, squatted) || !strings.Contains(msg, "elsewhere/victim") {
		t.Errorf("the refusal does not say which namespace and whose: %q", msg)
	}
	waitCluster(t, c, team, "squat", "Ready says why", func(cl *v1alpha1.Cluster) bool {
		cond := meta.FindStatusCondition(cl.Status.Conditions, v1alpha1.ReadyCondition)
		return cond != nil && cond.Status == metav1.ConditionFalse && cond.Reason == v1alpha1.NamespaceConflictReason
	})
	// A GitRepo that targets every cluster of the namespace deploys to prod-x, not to squat.
	repo := &v1alpha1.GitRepo{ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: team}, Spec: v1alpha1.GitRepoSpec{
		Repo: srv.URL + "/repo.git", PollingInterval: &metav1.Duration{Duration: time.Second},
		Targets: []v1alpha1.Target{{Name: "all", ClusterMatch: v1alpha1.ClusterMatch{ClusterSelector: &metav1.LabelSelector{}}}},
	}}
	if err := c.Create(ctx, repo); err != nil {
		t.Fatal(err)
	}
	bds := waitDeployments(t, c, team, "shop-web", "prod-x")
	if len(bds) != 1 {
		t.Errorf("deployments of shop-web: %v, want prod-x's alone", keysOf(bds))
	}
	var inSquatted v1alpha1.BundleDeploymentList
	if err := c.List(ctx, &inSquatted, client.InNamespace(squatted)); err != nil || len(inSquatted.Items) != 0 {
		t.Errorf("deployments written into the squatted namespace: %d %v", len(inSquatted.Items), err)
	}
}

// waitDeployments waits until the bundle has a deployment on cluster and returns them all.
func waitDeployments(t *testing.T, c client.Client, ns, bundle, cluster string) map[string]v1alpha1.BundleDeployment {
	t.Helper()
	var bds map[string]v1alpha1.BundleDeployment
	waitUntil(t, fmt.Sprintf("a deployment of %s on %s", bundle, cluster), func() bool {
		bds = deploymentsOf(t, c, ns, bundle)
		_, ok := bds[cluster]
		return ok
	}, func() string {
		var bun v1alpha1.Bundle
		_ = c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: bundle}, &bun)
		var repos v1alpha1.GitRepoList
		_ = c.List(context.Background(), &repos, client.InNamespace(ns))
		return fmt.Sprintf("there are %v\nbundle status: %+v\ngitrepos: %+v", keysOf(bds), bun.Status, repos.Items)
	})
	return bds
}

func keysOf[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// A FleetRestriction bounds its namespace: a GitRepo of a repository it does not allow is
// refused before the hub contacts the server; a bundle deploying outside the allowed namespaces
// or as a service account it does not allow fails to render, naming the restriction, and the
// deployed revision stays; an allowed bundle's deployments carry the restriction and the
// service account the agent applies as.
func TestFleetRestrictionBoundsRepositoriesAndBundles(t *testing.T) {
	var contacted atomic.Int32
	// At a path of its own: requests for earlier tests' repositories on a reused port are not this.
	forbiddenPath := gitserver.OwnPath()
	forbiddenServer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, forbiddenPath+"/") {
			http.NotFound(w, r)
			return
		}
		contacted.Add(1)
		http.NotFound(w, nil)
	}))
	defer forbiddenServer.Close()
	up := gitserver.New(t)
	up.Commit("main", map[string]string{
		"web/fleet.yaml": "defaultNamespace: tenant-a\n",
		"web/cm.yaml":    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {color: blue}\n",
	})
	srv := up.ServeHTTP("", "")
	c, _ := startHub(t, Options{})
	ctx := context.Background()
	ns := namespace(t, c)
	registerCluster(t, c, ns, "edge-1", nil)
	restriction := &v1alpha1.FleetRestriction{ObjectMeta: metav1.ObjectMeta{Name: "tenant-a", Namespace: ns}, Spec: v1alpha1.FleetRestrictionSpec{
		AllowedRepoPatterns:     []string{strings.ReplaceAll(srv.URL, ".", `\.`) + "/.*"},
		AllowedTargetNamespaces: []string{"tenant-a", "tenant-a-*"},
		DefaultServiceAccount:   "tenant-a-deployer",
		AllowedServiceAccounts:  []string{"tenant-a-admin"},
	}}
	if err := c.Create(ctx, restriction); err != nil {
		t.Fatal(err)
	}
	create := func(name, url string) client.ObjectKey {
		repo := &v1alpha1.GitRepo{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: v1alpha1.GitRepoSpec{
			Repo: url, PollingInterval: &metav1.Duration{Duration: time.Second},
			Targets: []v1alpha1.Target{{Name: "all", ClusterMatch: v1alpha1.ClusterMatch{ClusterSelector: &metav1.LabelSelector{}}}},
		}}
		if err := c.Create(ctx, repo); err != nil {
			t.Fatal(err)
		}
		return client.ObjectKeyFromObject(repo)
	}
	refused := waitFor(t, c, create("elsewhere", forbiddenServer.URL+forbiddenPath+"/repo.git"), "refused", func(r *v1alpha1.GitRepo) bool {
		cond := sourceReady(r)
		return cond != nil && cond.Reason == v1alpha1.RestrictedReason
	})
	if msg := sourceReady(refused).Message; !strings.Contains(msg, "FleetRestriction tenant-a") {
		t.Errorf("the refusal does not name the restriction: %q", msg)
	}
	if n := contacted.Load(); n != 0 {
		t.Errorf("the hub contacted a repository the restriction does not allow (%d requests)", n)
	}

	key := create("shop", srv.URL+"/repo.git")
	bd := waitDeployments(t, c, ns, "shop-web", "edge-1")["edge-1"]
	if o := bd.Spec.Options; o.ServiceAccount != "tenant-a-deployer" || len(o.Restrictions) != 1 || o.Restrictions[0].Name != "tenant-a" ||
		strings.Join(o.Restrictions[0].AllowedNamespaces, ",") != "tenant-a,tenant-a-*" {
		t.Errorf("the deployment does not carry the restriction: %+v", o)
	}
	good := bd.Spec.Staged

	for _, bad := range []struct{ name, fleetYAML, want string }{
		{"a namespace outside", "defaultNamespace: tenant-b\n", `namespace "tenant-b" is not allowed by FleetRestriction tenant-a`},
		{"a service account it does not allow", "defaultNamespace: tenant-a\nserviceAccount: cluster-admin-sa\n", `serviceAccount "cluster-admin-sa" is not allowed by FleetRestriction tenant-a`},
	} {
		up.Commit("main", map[string]string{"web/fleet.yaml": bad.fleetYAML})
		repo := waitFor(t, c, key, bad.name+" refused", func(r *v1alpha1.GitRepo) bool {
			cond := meta.FindStatusCondition(r.Status.Conditions, v1alpha1.RenderedCondition)
			return cond != nil && cond.Reason == v1alpha1.RestrictedReason && strings.Contains(cond.Message, bad.want)
		})
		if ready := meta.FindStatusCondition(repo.Status.Conditions, v1alpha1.ReadyCondition); ready == nil || ready.Status != metav1.ConditionFalse {
			t.Errorf("%s: Ready %+v, want False", bad.name, ready)
		}
		if now := deploymentsOf(t, c, ns, "shop-web")["edge-1"].Spec.Staged; now != good {
			t.Errorf("%s: the deployed revision changed to %+v", bad.name, now)
		}
	}
}
