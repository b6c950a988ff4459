package kube

import (
	"context"
	"fmt"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/content"
	"github.com/flotilla-dev/flotilla/hub/events"
)

// Hub reaches the hub with the cluster's credentials.
type Hub struct {
	Scheme                               *runtime.Scheme
	flotilla, coordination, events, core group
}

// NewHub makes the agent's clients of the hub.
func NewHub(cfg *rest.Config) (*Hub, error) {
	sc, err := codecs()
	if err != nil {
		return nil, err
	}
	h := &Hub{Scheme: sc.scheme}
	for _, g := range []struct {
		into *group
		gv   schema.GroupVersion
	}{{&h.flotilla, v1alpha1.GroupVersion}, {&h.coordination, coordinationv1.SchemeGroupVersion},
		{&h.events, eventsv1.SchemeGroupVersion}, {&h.core, corev1.SchemeGroupVersion}} {
		if *g.into, err = newGroup(cfg, sc, g.gv); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// BundleDeployments of namespace.
func (h *Hub) BundleDeployments(namespace string) Resource[v1alpha1.BundleDeployment, *v1alpha1.BundleDeployment] {
	return resource[v1alpha1.BundleDeployment](h.flotilla, "bundledeployments", namespace)
}

// Clusters of namespace.
func (h *Hub) Clusters(namespace string) Resource[v1alpha1.Cluster, *v1alpha1.Cluster] {
	return resource[v1alpha1.Cluster](h.flotilla, "clusters", namespace)
}

// ClusterRegistrations of namespace.
func (h *Hub) ClusterRegistrations(namespace string) Resource[v1alpha1.ClusterRegistration, *v1alpha1.ClusterRegistration] {
	return resource[v1alpha1.ClusterRegistration](h.flotilla, "clusterregistrations", namespace)
}

// Leases of namespace.
func (h *Hub) Leases(namespace string) Resource[coordinationv1.Lease, *coordinationv1.Lease] {
	return resource[coordinationv1.Lease](h.coordination, "leases", namespace)
}

// Content reads the hub's Content objects (content.Read, content.Cache).
func (h *Hub) Content() content.Getter {
	return func(ctx context.Context, key types.NamespacedName, into *v1alpha1.Content) error {
		return h.flotilla.rest.Get().Namespace(key.Namespace).Resource("contents").Name(key.Name).Do(ctx).Into(into)
	}
}

// Events writes an events.Recorder's Events.
func (h *Hub) Events() events.Sink { return eventSink{h.events} }

type eventSink struct{ g group }

func (s eventSink) Create(ctx context.Context, ev *eventsv1.Event) error {
	_, err := resource[eventsv1.Event](s.g, "events", ev.Namespace).Create(ctx, ev)
	return err
}

func (s eventSink) MergePatch(ctx context.Context, ev *eventsv1.Event, patch []byte) error {
	_, err := resource[eventsv1.Event](s.g, "events", ev.Namespace).Patch(ctx, ev.Name, types.MergePatchType, patch)
	return err
}

// RequestToken asks for a token of service account name in namespace, valid for seconds.
func (h *Hub) RequestToken(ctx context.Context, namespace, name string, seconds int64) (string, error) {
	var tr authenticationv1.TokenRequest
	err := h.core.rest.Post().Namespace(namespace).Resource("serviceaccounts").Name(name).SubResource("token").
		Body(&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &seconds}}).Do(ctx).Into(&tr)
	if err != nil {
		return "", fmt.Errorf("failed to request a token of %s/%s: %w", namespace, name, err)
	}
	return tr.Status.Token, nil
}

// Local reaches the cluster the agent deploys to, for its own state there.
type Local struct{ core group }

// NewLocal makes the agent's clients of its cluster.
func NewLocal(cfg *rest.Config) (*Local, error) {
	sc, err := codecs()
	if err != nil {
		return nil, err
	}
	core, err := newGroup(cfg, sc, corev1.SchemeGroupVersion)
	if err != nil {
		return nil, err
	}
	return &Local{core: core}, nil
}

// Secrets of namespace.
func (l *Local) Secrets(namespace string) Resource[corev1.Secret, *corev1.Secret] {
	return resource[corev1.Secret](l.core, "secrets", namespace)
}

// ConfigMaps of namespace.
func (l *Local) ConfigMaps(namespace string) Resource[corev1.ConfigMap, *corev1.ConfigMap] {
	return resource[corev1.ConfigMap](l.core, "configmaps", namespace)
}

// Namespaces of the cluster.
func (l *Local) Namespaces() Resource[corev1.Namespace, *corev1.Namespace] {
	return resource[corev1.Namespace](l.core, "namespaces", "")
}
