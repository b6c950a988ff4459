package model

import (
	"maps"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

func TestBlockingObject(t *testing.T) {
	bd := func(cluster string, applied int64, ready bool, objects ...v1alpha1.ResourceSummary) *v1alpha1.BundleDeployment {
		return &v1alpha1.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{LabelCluster: cluster}},
			Status: v1alpha1.BundleDeploymentStatus{AppliedRevision: applied, Ready: ready, NonReadyResources: objects}}
	}
	db := v1alpha1.ResourceSummary{Kind: "Database", Namespace: "shop", Name: "orders", Message: "InProgress: phase Provisioning"}
	web := v1alpha1.ResourceSummary{Kind: "Deployment", Namespace: "shop", Name: "web", Message: "InProgress: 1/3 replicas"}
	ns := v1alpha1.ResourceSummary{Kind: "Namespace", Name: "shop"}
	for _, tc := range []struct {
		name string
		bds  []*v1alpha1.BundleDeployment
		want string
	}{
		{"nothing not ready", []*v1alpha1.BundleDeployment{bd("a", 2, true), bd("b", 2, true)}, ""},
		{"the first cluster by name, its first object", []*v1alpha1.BundleDeployment{bd("zeta", 2, false, web), bd("alpha", 2, false, db, web)},
			"not ready on alpha: Database shop/orders: InProgress: phase Provisioning (and 1 more objects); 2 clusters name objects not ready"},
		{"a cluster-scoped object without a message", []*v1alpha1.BundleDeployment{bd("a", 2, false, ns)}, "not ready on a: Namespace shop"},
		{"a cluster on another revision is not this revision's", []*v1alpha1.BundleDeployment{bd("a", 1, false, db), bd("b", 2, false, web)},
			"not ready on b: Deployment shop/web: InProgress: 1/3 replicas"},
		{"not ready without a named object", []*v1alpha1.BundleDeployment{bd("a", 2, false)}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			byName := map[string]*v1alpha1.BundleDeployment{}
			for _, b := range tc.bds {
				byName[b.Labels[LabelCluster]] = b
			}
			if got := BlockingObject(2, maps.Values(byName)); got != tc.want {
				t.Fatalf("BlockingObject = %q\nwant            %q", got, tc.want)
			}
		})
	}
}
