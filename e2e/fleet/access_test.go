package fleet

import (
	"context"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
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
