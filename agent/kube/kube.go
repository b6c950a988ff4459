// Package kube is the agent's access to its API servers: typed clients of the few kinds it
// reads and writes (on the hub its deployments, Cluster, Lease, Contents, Events, registration
// and tokens; on its cluster Secrets, ConfigMaps and Namespaces), on a scheme of those kinds
// alone, and a REST mapper fed by the cluster's aggregated discovery for what it applies.
//
// It links neither client-go's clientsets and discovery client nor controller-runtime's client:
// they register every Kubernetes kind, OpenAPI and protobuf descriptors when a process starts,
// which cost each agent several megabytes of memory it never uses (README "Measured").
package kube

import (
	"encoding/json"

	"context"
	"fmt"
	"sync"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// NewScheme holds the kinds the agent exchanges with the hub and its cluster, and no others.
func NewScheme() (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{v1alpha1.AddToScheme, coordinationv1.AddToScheme, eventsv1.AddToScheme,
		authenticationv1.AddToScheme, corev1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	return scheme, nil
}

// codecs are the process's one scheme and its codecs, built once: the hub's and the cluster's
// clients, a registration and each run after a move share them (read-only once built).
var codecs = sync.OnceValues(func() (schemeCodecs, error) {
	scheme, err := NewScheme()
	if err != nil {
		return schemeCodecs{}, err
	}
	return schemeCodecs{scheme: scheme, serializer: serializer.NewCodecFactory(scheme).WithoutConversion(), params: runtime.NewParameterCodec(scheme)}, nil
})

type schemeCodecs struct {
	scheme     *runtime.Scheme
	serializer runtime.NegotiatedSerializer
	params     runtime.ParameterCodec
}

// Object is a pointer to an API type.
type Object[T any] interface {
	*T
	runtime.Object
	metav1.Object
}

// Resource is a typed client of one resource, in one namespace ("" for a cluster-scoped one).
type Resource[T any, PT Object[T]] struct {
	rest      rest.Interface
	params    runtime.ParameterCodec
	resource  string
	namespace string
}

func (r Resource[T, PT]) request(req *rest.Request) *rest.Request {
	return req.NamespaceIfScoped(r.namespace, r.namespace != "").Resource(r.resource)
}

// Get reads the object named name.
func (r Resource[T, PT]) Get(ctx context.Context, name string) (PT, error) {
	out := PT(new(T))
	return out, r.request(r.rest.Get()).Name(name).Do(ctx).Into(out)
}

// Create creates obj and returns it as written.
func (r Resource[T, PT]) Create(ctx context.Context, obj PT) (PT, error) {
	out := PT(new(T))
	return out, r.request(r.rest.Post()).Body(obj).Do(ctx).Into(out)
}

// Update replaces obj, conditional on its resourceVersion when set, and returns it as written.
func (r Resource[T, PT]) Update(ctx context.Context, obj PT) (PT, error) {
	out := PT(new(T))
	return out, r.request(r.rest.Put()).Name(obj.GetName()).Body(obj).Do(ctx).Into(out)
}

// Patch applies patch to the object named name, or to its subresource.
func (r Resource[T, PT]) Patch(ctx context.Context, name string, pt types.PatchType, patch []byte, subresource ...string) (PT, error) {
	out := PT(new(T))
	return out, r.request(r.rest.Patch(pt)).Name(name).SubResource(subresource...).Body(patch).Do(ctx).Into(out)
}

// Delete deletes the object named name.
func (r Resource[T, PT]) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	return r.request(r.rest.Delete()).Name(name).Body(&opts).Do(ctx).Error()
}

// List lists the resource into a list of its kind.
func (r Resource[T, PT]) List(ctx context.Context, opts metav1.ListOptions, into runtime.Object) error {
	return r.request(r.rest.Get()).VersionedParams(&opts, r.params).Do(ctx).Into(into)
}

// Watch watches the resource.
func (r Resource[T, PT]) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return r.request(r.rest.Get()).VersionedParams(&opts, r.params).Watch(ctx)
}

// groupQPS and groupBurst bound the requests of one API group's client where the configuration
// sets no bound (the hub's credentials from a registration): a revision of many bundles is
// reported at this pace, and a runaway agent cannot go past it.
const (
	groupQPS   = 20
	groupBurst = 40
)

// group is a REST client of one API group version and its scheme's codecs.
type group struct {
	rest   rest.Interface
	params runtime.ParameterCodec
}

func newGroup(cfg *rest.Config, sc schemeCodecs, gv schema.GroupVersion) (group, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &gv
	c.APIPath = "/apis"
	if gv.Group == "" {
		c.APIPath = "/api"
	}
	c.NegotiatedSerializer = sc.serializer
	if c.QPS == 0 && c.RateLimiter == nil {
		c.QPS, c.Burst = groupQPS, groupBurst
	}
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return group{}, fmt.Errorf("failed to make a client of %s for %s: %w", gv, cfg.Host, err)
	}
	return group{rest: rc, params: sc.params}, nil
}

func resource[T any, PT Object[T]](g group, name, namespace string) Resource[T, PT] {
	return Resource[T, PT]{rest: g.rest, params: g.params, resource: name, namespace: namespace}
}

// StatusPatch is the JSON merge patch that turns status orig into status, for a status
// subresource; with resourceVersion set, the API server applies it only to that version of the
// object (an optimistic lock: a status derived from a late copy is derived again).
func StatusPatch(orig, status any, resourceVersion string) ([]byte, error) {
	type statusOnly struct {
		Status any `json:"status"`
	}
	from, err := json.Marshal(statusOnly{orig})
	if err != nil {
		return nil, err
	}
	to, err := json.Marshal(statusOnly{status})
	if err != nil {
		return nil, err
	}
	patch, err := jsonpatch.CreateMergePatch(from, to)
	if err != nil || resourceVersion == "" {
		return patch, err
	}
	var fields map[string]any
	if err := json.Unmarshal(patch, &fields); err != nil {
		return nil, err
	}
	fields["metadata"] = map[string]any{"resourceVersion": resourceVersion}
	return json.Marshal(fields)
}
