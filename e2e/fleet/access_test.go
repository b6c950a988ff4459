package fleet

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// e2e scenario 6: an agent's credentials reach its own BundleDeployments and nothing of another
// cluster, nor any Secret.
func TestAgentCredentialsAreScoped(t *testing.T) {
	_, f := deployWeb(t, "defaultNamespace: scoped\n")

	me, other := workloads[0].Name, workloads[1].Name
	dyn := dynamic.NewForConfigOrDie(f.agentConfigs[me])
	cs := kubernetes.NewForConfigOrDie(f.agentConfigs[me])
	bds := schema.GroupVersionResource{Group: v1alpha1.GroupVersion.Group, Version: v1alpha1.GroupVersion.Version, Resource: "bundledeployments"}
	contents := schema.GroupVersionResource{Group: v1alpha1.GroupVersion.Group, Version: v1alpha1.GroupVersion.Version, Resource: "contents"}
	ctx := context.Background()
	if _, err := dyn.Resource(bds).Namespace(f.clusterNamespaces[me]).List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("own deployments: %v", err)
	}
	forbidden := map[string]error{}
	_, forbidden["another cluster's deployments"] = dyn.Resource(bds).Namespace(f.clusterNamespaces[other]).List(ctx, metav1.ListOptions{})
	_, forbidden["secrets in its own namespace"] = cs.CoreV1().Secrets(f.clusterNamespaces[me]).List(ctx, metav1.ListOptions{})
	_, forbidden["secrets in the fleet namespace"] = cs.CoreV1().Secrets(f.ns).Get(ctx, "anything", metav1.GetOptions{})
	_, forbidden["listing content"] = dyn.Resource(contents).Namespace(f.ns).List(ctx, metav1.ListOptions{})
	_, forbidden["another cluster's Cluster"] = dyn.Resource(schema.GroupVersionResource{Group: "flotilla.dev", Version: "v1alpha1", Resource: "clusters"}).Namespace(f.ns).Get(ctx, other, metav1.GetOptions{})
	_, forbidden["GitRepos"] = dyn.Resource(schema.GroupVersionResource{Group: "flotilla.dev", Version: "v1alpha1", Resource: "gitrepos"}).Namespace(f.ns).List(ctx, metav1.ListOptions{})
	// Its Events (drift corrected) go to its own namespace; it writes none elsewhere, reads none.
	event := func(ns string) *eventsv1.Event {
		return &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: "forged-", Namespace: ns}, EventTime: metav1.NowMicro(), Type: "Normal",
			Reason: "Forged", Action: "Forge", ReportingController: "flotilla.dev/agent", ReportingInstance: "x", Note: "forged"}
	}
	_, forbidden["an Event in another cluster's namespace"] = cs.EventsV1().Events(f.clusterNamespaces[other]).Create(ctx, event(f.clusterNamespaces[other]), metav1.CreateOptions{})
	_, forbidden["an Event in the fleet namespace"] = cs.EventsV1().Events(f.ns).Create(ctx, event(f.ns), metav1.CreateOptions{})
	_, forbidden["reading the Events of its own namespace"] = cs.EventsV1().Events(f.clusterNamespaces[me]).List(ctx, metav1.ListOptions{})
	for what, err := range forbidden {
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s: want 403, got %v", what, err)
		}
	}
}

// A compromised agent rewrites its Cluster: it may report its heartbeat and version, and
// nothing else. Moving where its deployments live (to another cluster's namespace), or its
// conditions and labels, is refused by the API server, and the hub keeps deploying where it did.
func TestCompromisedAgentCannotRewriteItsCluster(t *testing.T) {
	_, f := deployWeb(t, "defaultNamespace: rewrite\n")
	me, other := workloads[0].Name, workloads[1].Name
	dyn := dynamic.NewForConfigOrDie(f.agentConfigs[me])
	clusters := dyn.Resource(schema.GroupVersionResource{Group: "flotilla.dev", Version: "v1alpha1", Resource: "clusters"}).Namespace(f.ns)
	ctx := context.Background()
	patch := func(body string) error {
		_, err := clusters.Patch(ctx, me, types.MergePatchType, []byte(body), metav1.PatchOptions{}, "status")
		return err
	}
	if err := patch(`{"status":{"agentLastSeen":"` + time.Now().UTC().Format(time.RFC3339) + `","agentVersion":"v9"}}`); err != nil {
		t.Fatalf("the agent's heartbeat: %v", err)
	}
	for what, body := range map[string]string{
		"its deployments' namespace, to another cluster's": `{"status":{"namespace":"` + f.clusterNamespaces[other] + `"}}`,
		"its conditions":                         `{"status":{"conditions":[{"type":"Ready","status":"True","reason":"Forged","message":"all fine","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}`,
		"its summary":                            `{"status":{"summary":{"ready":99}}}`,
		"a move, to another cluster's namespace": `{"status":{"namespace":"` + f.clusterNamespaces[other] + `","previousNamespace":"` + f.clusterNamespaces[me] + `"}}`,
		"the namespace it moves from":            `{"status":{"previousNamespace":"` + f.clusterNamespaces[other] + `"}}`,
	} {
		if err := patch(body); !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
			t.Errorf("%s: want the write refused, got %v", what, err)
		}
	}
	if _, err := clusters.Patch(ctx, me, types.MergePatchType, []byte(`{"metadata":{"labels":{"env":"prod-eu"}}}`), metav1.PatchOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("its labels: want 403, got %v", err)
	}
	var c v1alpha1.Cluster
	if err := f.hub.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: me}, &c); err != nil {
		t.Fatal(err)
	}
	if c.Status.Namespace != f.clusterNamespaces[me] || c.Labels["env"] != "prod" {
		t.Errorf("the Cluster changed: namespace %q, labels %v", c.Status.Namespace, c.Labels)
	}
	if bd := deploymentOn(t, f, me); bd.Namespace != f.clusterNamespaces[me] {
		t.Errorf("the deployment moved to %q", bd.Namespace)
	}
}

// A tenant of the fleet namespace who may write its Clusters' status (clusters/status in a
// Role there) points its cluster at another cluster's namespace, as a move the hub would make
// (the old namespace recorded): the API server refuses it, whoever writes it but the hub, and
// nothing moves: the victim's deployments, namespace and grants stay as they were, and the
// tenant's cluster gains no access to them.
func TestTenantCannotMoveAClusterIntoAnotherClustersNamespace(t *testing.T) {
	_, f := deployWeb(t, "defaultNamespace: tenancy\n")
	attacker, victim := workloads[0].Name, workloads[1].Name
	ctx := context.Background()
	tenant := "tenant-" + f.ns
	rules := []rbacv1.PolicyRule{
		{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"clusters"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"clusters/status"}, Verbs: []string{"get", "update", "patch"}}}
	for _, o := range []client.Object{
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: tenant, Namespace: f.ns}, Rules: rules},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: tenant, Namespace: f.ns}, Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: tenant}},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: tenant}},
	} {
		if err := f.hub.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	before := map[string]v1alpha1.Cluster{}
	for _, name := range []string{attacker, victim} {
		var c v1alpha1.Cluster
		if err := f.hub.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: name}, &c); err != nil {
			t.Fatal(err)
		}
		before[name] = c
	}
	as := rest.CopyConfig(hubCluster.Config())
	as.Impersonate = rest.ImpersonationConfig{UserName: tenant}
	clusters := dynamic.NewForConfigOrDie(as).Resource(schema.GroupVersionResource{Group: "flotilla.dev", Version: "v1alpha1", Resource: "clusters"}).Namespace(f.ns)
	// Refusals below must come from the policy, not from an authorizer that has not seen the
	// tenant's Role yet.
	rulesHeld(t, as, f.ns, rules)
	if _, err := clusters.Get(ctx, attacker, metav1.GetOptions{}, "status"); err != nil {
		t.Fatalf("the tenant reads its Cluster's status: %v", err)
	}
	mine, theirs := f.clusterNamespaces[attacker], f.clusterNamespaces[victim]
	for what, write := range map[string]struct{ cluster, body string }{
		"a move into the victim's namespace":        {attacker, `{"status":{"namespace":"` + theirs + `","previousNamespace":"` + mine + `"}}`},
		"a move that names the victim's as its old": {attacker, `{"status":{"previousNamespace":"` + theirs + `"}}`},
		"the namespace alone, to the victim's":      {attacker, `{"status":{"namespace":"` + theirs + `"}}`},
		"the victim moved into the tenant's":        {victim, `{"status":{"namespace":"` + mine + `","previousNamespace":"` + theirs + `"}}`},
		"the victim moved to a namespace of theirs": {victim, `{"status":{"namespace":"tenant-owned","previousNamespace":"` + theirs + `"}}`},
	} {
		_, err := clusters.Patch(ctx, write.cluster, types.MergePatchType, []byte(write.body), metav1.PatchOptions{}, "status")
		if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
			t.Errorf("%s: want the write refused, got %v", what, err)
		}
	}
	// A status field the tenant may write still goes through: the policy refuses the move, not
	// the tenant's access.
	if _, err := clusters.Patch(ctx, attacker, types.MergePatchType, []byte(`{"status":{"agentVersion":"v9.9.9"}}`), metav1.PatchOptions{}, "status"); err != nil {
		t.Errorf("a status field the tenant may write: %v", err)
	}
	for name, was := range before {
		var now v1alpha1.Cluster
		if err := f.hub.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: name}, &now); err != nil {
			t.Fatal(err)
		}
		if now.Status.Namespace != was.Status.Namespace || now.Status.PreviousNamespace != "" {
			t.Errorf("cluster %s moved: namespace %q, previous %q (was %q)", name, now.Status.Namespace, now.Status.PreviousNamespace, was.Status.Namespace)
		}
	}
	if bd := deploymentOn(t, f, victim); bd.Namespace != theirs || !bd.DeletionTimestamp.IsZero() {
		t.Errorf("the victim's deployment: namespace %q, deleted at %v", bd.Namespace, bd.DeletionTimestamp)
	}
	var ns corev1.Namespace
	if err := f.hub.Get(ctx, client.ObjectKey{Name: theirs}, &ns); err != nil || !ns.DeletionTimestamp.IsZero() {
		t.Errorf("the victim's namespace: %v, deleted at %v", err, ns.DeletionTimestamp)
	}
	var bindings rbacv1.RoleBindingList
	if err := f.hub.List(ctx, &bindings, client.InNamespace(theirs)); err != nil {
		t.Fatal(err)
	}
	for _, b := range bindings.Items {
		for _, s := range b.Subjects {
			if s.Namespace == mine {
				t.Errorf("RoleBinding %s in the victim's namespace names the tenant's agent %s/%s", b.Name, s.Namespace, s.Name)
			}
		}
	}
}
