package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/flotilla-dev/flotilla/agent/kube"
)

// laggingDiscovery leaves a group out of the first reads of the cluster's aggregated
// discovery, as the API server does for a moment after it marks a new CRD Established.
type laggingDiscovery struct {
	next   http.RoundTripper
	group  string
	hidden atomic.Int32 // reads left that leave the group out
}

func (d *laggingDiscovery) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := d.next.RoundTrip(req)
	if err != nil || req.URL.Path != "/apis" || resp.StatusCode != http.StatusOK || d.hidden.Add(-1) < 0 {
		return resp, err
	}
	defer resp.Body.Close()
	var groups apidiscoveryv2.APIGroupDiscoveryList
	if err := json.NewDecoder(resp.Body).Decode(&groups); err != nil {
		return nil, err
	}
	groups.Items = slices.DeleteFunc(groups.Items, func(g apidiscoveryv2.APIGroupDiscovery) bool { return g.Name == d.group })
	body, err := json.Marshal(groups)
	if err != nil {
		return nil, err
	}
	resp.Body, resp.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	resp.Header.Del("Content-Length")
	return resp, nil
}

// A custom resource applied with its CRD waits for discovery to name its kind, past the moment
// the CRD is Established, instead of failing as a kind the cluster does not serve.
func TestCustomResourceWaitsForDiscoveryOfItsCRD(t *testing.T) {
	lag := &laggingDiscovery{group: "lagging.example.com"}
	lag.hidden.Store(6)
	cfg := rest.CopyConfig(workload.Config())
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { lag.next = rt; return lag })
	mapper, err := kube.NewMapper(cfg)
	if err != nil {
		t.Fatal(err)
	}
	a := &Applier{dyn: dynamic.NewForConfigOrDie(workload.Config()), mapper: mapper}
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
