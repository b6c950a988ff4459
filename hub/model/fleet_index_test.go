package model

import (
	"context"
	"fmt"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// informersOf hands out client-go informers, never started: their stores are filled by hand.
type informersOf struct {
	cache.Informers
	byType map[string]toolscache.SharedIndexInformer
}

func (f informersOf) GetInformer(_ context.Context, o client.Object, _ ...cache.InformerGetOption) (cache.Informer, error) {
	return f.byType[fmt.Sprintf("%T", o)], nil
}

// ReadFleet through the FleetIndex reads a bundle's deployments (not another bundle's, nor one of
// the same name in another namespace) and the Clusters of the bundle's namespace, as the
// cache's own objects; it follows the informer's later changes.
func TestFleetIndexReadsABundlesFleetFromTheCache(t *testing.T) {
	inf := informersOf{byType: map[string]toolscache.SharedIndexInformer{
		"*v1alpha1.BundleDeployment": toolscache.NewSharedIndexInformer(&toolscache.ListWatch{}, &v1alpha1.BundleDeployment{}, 0, toolscache.Indexers{}),
		"*v1alpha1.Cluster":          toolscache.NewSharedIndexInformer(&toolscache.ListWatch{}, &v1alpha1.Cluster{}, 0, toolscache.Indexers{}),
	}}
	idx, err := NewFleetIndex(context.Background(), inf)
	if err != nil {
		t.Fatal(err)
	}
	deployment := func(bundleNS, bundle, cluster string) *v1alpha1.BundleDeployment {
		return &v1alpha1.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: "cluster-" + cluster, Name: bundleNS + "-" + bundle,
			Labels: map[string]string{LabelBundleNamespace: bundleNS, LabelBundle: bundle, LabelCluster: cluster}}}
	}
	bds, clusters := inf.byType["*v1alpha1.BundleDeployment"].GetIndexer(), inf.byType["*v1alpha1.Cluster"].GetIndexer()
	mine := []*v1alpha1.BundleDeployment{deployment("fleet", "web", "a"), deployment("fleet", "web", "b")}
	for _, o := range append(slices.Clone(mine), deployment("fleet", "db", "a"), deployment("other", "web", "a"),
		&v1alpha1.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: "cluster-a", Name: "unlabelled"}}) {
		if err := bds.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	ours := []*v1alpha1.Cluster{{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "a"}}, {ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "b"}}}
	for _, o := range append(slices.Clone(ours), &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "a"}}) {
		if err := clusters.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	c := IndexedClient{Fleet: idx}
	bun := &v1alpha1.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "web"}}
	gotBds, gotClusters, err := ReadFleet(context.Background(), c, bun)
	if err != nil {
		t.Fatal(err)
	}
	if !sameObjects(gotBds, mine) {
		t.Errorf("deployments: got %v, want %v", names(gotBds), names(mine))
	}
	if !sameObjects(gotClusters, ours) {
		t.Errorf("clusters: got %v, want %v", names(gotClusters), names(ours))
	}
	// A deployment deleted from the cache is gone from the next read.
	if err := bds.Delete(mine[0]); err != nil {
		t.Fatal(err)
	}
	if gotBds, _, _ = ReadFleet(context.Background(), c, bun); !sameObjects(gotBds, mine[1:]) {
		t.Errorf("after a deletion: got %v, want %v", names(gotBds), names(mine[1:]))
	}
}

// sameObjects says whether got holds exactly want's objects: the very pointers, not copies.
func sameObjects[T any](got, want []*T) bool {
	if len(got) != len(want) {
		return false
	}
	for _, w := range want {
		if !slices.Contains(got, w) {
			return false
		}
	}
	return true
}

func names[T any, P interface {
	*T
	client.Object
}](objs []*T) []string {
	var out []string
	for _, o := range objs {
		out = append(out, client.ObjectKeyFromObject(P(o)).String())
	}
	slices.Sort(out)
	return out
}
