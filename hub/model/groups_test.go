package model

import (
	"context"
	"maps"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// A cluster belongs to the groups of its namespace whose selector matches its labels (Fleet's
// clusterGroup targets and partitions, R1.3): an empty selector takes every cluster, a missing
// or invalid one none, and another namespace's groups never count.
func TestR1_3_AClusterBelongsToTheGroupsWhoseSelectorMatches(t *testing.T) {
	group := func(ns, name string, sel *metav1.LabelSelector) client.Object {
		return &v1alpha1.ClusterGroup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"tier": name}},
			Spec: v1alpha1.ClusterGroupSpec{Selector: sel}}
	}
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		group("fleet", "eu", &metav1.LabelSelector{MatchLabels: map[string]string{"region": "eu"}}),
		group("fleet", "prod", &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "env", Operator: metav1.LabelSelectorOpIn, Values: []string{"prod", "live"}}}}),
		group("fleet", "all", &metav1.LabelSelector{}),
		group("fleet", "unset", nil),
		group("fleet", "invalid", &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "env", Operator: "Near"}}}),
		group("other", "eu", &metav1.LabelSelector{MatchLabels: map[string]string{"region": "eu"}}),
	).Build()
	groupsOf, err := ClusterGroups(context.Background(), c, "fleet")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		labels map[string]string
		want   []string
	}{
		{map[string]string{"region": "eu", "env": "prod"}, []string{"all", "eu", "prod"}},
		{map[string]string{"region": "us", "env": "live"}, []string{"all", "prod"}},
		{map[string]string{"region": "eu"}, []string{"all", "eu"}},
		{nil, []string{"all"}},
	}
	for _, tc := range cases {
		got := groupsOf(&v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "c", Labels: tc.labels}})
		if names := slices.Sorted(maps.Keys(got)); !slices.Equal(names, tc.want) {
			t.Errorf("labels %v: groups %v, want %v", tc.labels, names, tc.want)
		}
		for name, l := range got {
			if l["tier"] != name {
				t.Errorf("labels %v: group %s comes with labels %v, want its own", tc.labels, name, l)
			}
		}
	}
}
