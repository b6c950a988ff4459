package kube

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// TestSchemeHoldsWhatTheAgentExchanges: every kind the agent reads or writes on the hub and
// for its own state on its cluster is known to its clients' scheme, and Kubernetes' other kinds
// are not (the agent applies workloads through the dynamic client, which needs no scheme).
func TestSchemeHoldsWhatTheAgentExchanges(t *testing.T) {
	scheme, err := NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		obj   runtime.Object
		known bool
	}{
		{&v1alpha1.Cluster{}, true},
		{&v1alpha1.BundleDeployment{}, true},
		{&v1alpha1.BundleDeploymentList{}, true}, // the agent's cache lists and watches them
		{&v1alpha1.Content{}, true},
		{&v1alpha1.ClusterRegistration{}, true},
		{&coordinationv1.Lease{}, true},
		{&eventsv1.Event{}, true},
		{&appsv1.Deployment{}, false},
		{&authenticationv1.TokenRequest{}, true},
		{&corev1.Secret{}, true},
		{&corev1.ConfigMapList{}, true}, // the inventories, listed by the sweep
		{&corev1.Namespace{}, true},
		{&corev1.Pod{}, true}, // core/v1 is registered whole: its kinds cost nothing apart
		{&batchv1.Job{}, false},
		{&rbacv1.Role{}, false},
	}
	for _, c := range cases {
		gvks, _, err := scheme.ObjectKinds(c.obj)
		if known := err == nil && len(gvks) > 0; known != c.known {
			t.Errorf("%T known to the agent's scheme: %v, want %v (%v)", c.obj, known, c.known, err)
		}
	}
}
