package fleet

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

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
	for what, err := range forbidden {
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s: want 403, got %v", what, err)
		}
	}
}
