package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// FieldManager is the server-side apply field manager of everything the agent applies.
const FieldManager = "flotilla-agent"

// Options are the deployment options of a BundleDeployment that the engine honours.
type Options struct {
	// DefaultNamespace fills in namespaced objects without one (the hub normally did already).
	DefaultNamespace string
	// NamespaceLabels and NamespaceAnnotations are set on namespaces the agent creates.
	NamespaceLabels      map[string]string
	NamespaceAnnotations map[string]string
	// KeepResources leaves objects that left the bundle in place.
	KeepResources bool
	// DeleteNamespace deletes, when the bundle leaves the cluster, the namespaces its objects
	// were in (never default, kube-* or the agent's own); see Inventory.Namespaces.
	DeleteNamespace bool
	// IgnoreConditions: conditions matching every key/value of an entry do not make an object
	// unready.
	IgnoreConditions []map[string]string
	// ComparePatches exclude fields from drift detection.
	ComparePatches []ComparePatch
}

// ComparePatch excludes JSON pointers of matching objects from drift detection.
type ComparePatch struct {
	Kind, Namespace, Name string
	JSONPointers          []string
}

// Applier applies manifests to the cluster it runs in.
type Applier struct {
	dyn    dynamic.Interface
	mapper meta.ResettableRESTMapper
}

// NewApplier connects to a cluster.
func NewApplier(cfg *rest.Config) (*Applier, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("failed to create dynamic client: %w", err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("failed to create discovery client: %w", err)
	}
	return &Applier{dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))}, nil
}

// Result is the outcome of an apply.
type Result struct {
	// Inventory is what the bundle has deployed after this apply: the applied objects plus old
	// ones that could not be pruned.
	Inventory Inventory
	Pruned    Inventory
	// Errors per object; a failed object keeps its place in the inventory.
	Errors map[ObjMeta]error
}

// Err joins the per-object errors, in a stable order.
func (r *Result) Err() error {
	keys := make([]ObjMeta, 0, len(r.Errors))
	for k := range r.Errors {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	var errs []error
	for _, k := range keys {
		errs = append(errs, fmt.Errorf("%s %s/%s: %w", k.Kind, k.Namespace, k.Name, r.Errors[k]))
	}
	return errors.Join(errs...)
}

// Apply server-side-applies objects (CRDs and namespaces first, waiting for CRDs to be served),
// creates the namespaces they need, then prunes what the previous inventory had and this one
// does not.
func (a *Applier) Apply(ctx context.Context, objs []*unstructured.Unstructured, previous Inventory, opts Options) (*Result, error) {
	res := &Result{Errors: map[ObjMeta]error{}}
	ordered := orderForApply(objs)
	namespaces := map[string]bool{}
	for _, o := range ordered {
		if o.GetKind() == "Namespace" && o.GroupVersionKind().Group == "" {
			namespaces[o.GetName()] = true
		}
	}
	for _, o := range ordered {
		m, err := a.mapping(o.GroupVersionKind())
		if err != nil {
			res.Errors[MetaOf(o)] = err
			continue
		}
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			if o.GetNamespace() == "" {
				o.SetNamespace(orDefault(opts.DefaultNamespace, "default"))
			}
			if ns := o.GetNamespace(); !namespaces[ns] {
				if err := a.ensureNamespace(ctx, ns, opts); err != nil {
					res.Errors[MetaOf(o)] = err
					continue
				}
				namespaces[ns] = true
			}
		}
		if err := a.applyOne(ctx, o, m); err != nil {
			res.Errors[MetaOf(o)] = err
			continue
		}
		if o.GetKind() == "CustomResourceDefinition" {
			if err := a.waitEstablished(ctx, o.GetName()); err != nil {
				res.Errors[MetaOf(o)] = err
			}
			a.mapper.Reset() // its kinds are served now
		}
	}
	res.Inventory = NewInventory(objs)
	if !opts.KeepResources {
		for _, o := range Diff(previous, res.Inventory) {
			if err := a.delete(ctx, o); err != nil {
				res.Errors[o] = fmt.Errorf("failed to prune: %w", err)
				res.Inventory = append(res.Inventory, o) // keep tracking it
				continue
			}
			res.Pruned = append(res.Pruned, o)
		}
	}
	return res, nil
}

// orderForApply puts CRDs first, then namespaces, then everything else, keeping the given order.
func orderForApply(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
	rank := func(o *unstructured.Unstructured) int {
		switch o.GetKind() {
		case "CustomResourceDefinition":
			return 0
		case "Namespace":
			return 1
		}
		return 2
	}
	out := append([]*unstructured.Unstructured(nil), objs...)
	sort.SliceStable(out, func(i, j int) bool { return rank(out[i]) < rank(out[j]) })
	return out
}

func (a *Applier) mapping(gvk schema.GroupVersionKind) (*meta.RESTMapping, error) {
	m, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		a.mapper.Reset() // a CRD may have appeared since the last discovery
		m, err = a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if err != nil {
		return nil, fmt.Errorf("the cluster does not serve %s: %w", gvk, err)
	}
	return m, nil
}

func (a *Applier) resource(m *meta.RESTMapping, ns string) dynamic.ResourceInterface {
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		return a.dyn.Resource(m.Resource).Namespace(ns)
	}
	return a.dyn.Resource(m.Resource)
}

func (a *Applier) applyOne(ctx context.Context, o *unstructured.Unstructured, m *meta.RESTMapping) error {
	data, err := json.Marshal(o.Object)
	if err != nil {
		return fmt.Errorf("failed to encode: %w", err)
	}
	force := true
	_, err = a.resource(m, o.GetNamespace()).Patch(ctx, o.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: FieldManager, Force: &force})
	if err != nil {
		return fmt.Errorf("failed to apply: %w", err)
	}
	return nil
}

func (a *Applier) ensureNamespace(ctx context.Context, name string, opts Options) error {
	ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": name}}}
	if len(opts.NamespaceLabels) > 0 {
		ns.SetLabels(opts.NamespaceLabels)
	}
	if len(opts.NamespaceAnnotations) > 0 {
		ns.SetAnnotations(opts.NamespaceAnnotations)
	}
	m, err := a.mapping(ns.GroupVersionKind())
	if err != nil {
		return err
	}
	if err := a.applyOne(ctx, ns, m); err != nil {
		return fmt.Errorf("failed to create namespace %s: %w", name, err)
	}
	return nil
}

func (a *Applier) waitEstablished(ctx context.Context, name string) error {
	crds := a.dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	deadline := time.Now().Add(30 * time.Second)
	for {
		crd, err := crds.Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
			for _, c := range conds {
				if m, _ := c.(map[string]any); m["type"] == "Established" && m["status"] == "True" {
					return nil
				}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("CRD %s not established after 30s", name)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (a *Applier) delete(ctx context.Context, o ObjMeta) error {
	m, err := a.mapper.RESTMapping(o.GroupKind())
	if err != nil {
		if meta.IsNoMatchError(err) {
			return nil // the kind is gone, and the object with it
		}
		return err
	}
	policy := metav1.DeletePropagationBackground
	err = a.resource(m, o.Namespace).Delete(ctx, o.Name, metav1.DeleteOptions{PropagationPolicy: &policy})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
