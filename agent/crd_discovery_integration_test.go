package agent

import (
	"context"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
)

// laggingDiscovery leaves a group out of the first reads of the cluster's groups, as the API
// server's discovery does for a moment after it marks a new CRD Established.
type laggingDiscovery struct {
	discovery.DiscoveryInterface
	group  string
	hidden atomic.Int32 // reads left that leave the group out
}

func (d *laggingDiscovery) ServerGroups() (*metav1.APIGroupList, error) {
	groups, err := d.DiscoveryInterface.ServerGroups()
	if err != nil || d.hidden.Add(-1) < 0 {
		return groups, err
	}
	kept := &metav1.APIGroupList{}
	for _, g := range groups.Groups {
		if g.Name != d.group {
			kept.Groups = append(kept.Groups, g)
		}
	}
	return kept, nil
}

// A custom resource applied with its CRD waits for discovery to name its kind, past the moment
// the CRD is Established, instead of failing as a kind the cluster does not serve.
func TestCustomResourceWaitsForDiscoveryOfItsCRD(t *testing.T) {
	dc := discovery.NewDiscoveryClientForConfigOrDie(workload.Config())
	lag := &laggingDiscovery{DiscoveryInterface: dc, group: "lagging.example.com"}
	lag.hidden.Store(6)
	a := &Applier{dyn: dynamic.NewForConfigOrDie(workload.Config()), mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(lag))}
	crd := `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gadgets.lagging.example.com}
spec:
  group: lagging.example.com
  names: {kind: Gadget, plural: gadgets, singular: gadget}
  scope: Namespaced
  versions:
  - {name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}
`
	gadget := "apiVersion: lagging.example.com/v1\nkind: Gadget\nmetadata: {name: g, namespace: gadgets}\nspec: {size: 3}\n"
	res, err := a.Apply(context.Background(), objects(t, gadget, crd), nil, Options{Owner: "gadgets"})
	if err != nil || res.Err() != nil {
		t.Fatalf("apply: %v %v", err, res.Err())
	}
	if lag.hidden.Load() >= 0 {
		t.Fatalf("discovery was read %d times fewer than it lags: the test did not exercise the lag", lag.hidden.Load()+1)
	}
	if _, err := a.dyn.Resource(gadgetsResource).Namespace("gadgets").Get(context.Background(), "g", metav1.GetOptions{}); err != nil {
		t.Fatalf("the Gadget was not applied: %v", err)
	}
}

var gadgetsResource = schema.GroupVersionResource{Group: "lagging.example.com", Version: "v1", Resource: "gadgets"}
