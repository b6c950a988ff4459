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
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/flotilla-dev/flotilla/agent/healthcheck"
	"github.com/flotilla-dev/flotilla/agent/kube"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
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
	// HealthChecks judge the kinds they name by CEL instead of kstatus (agent/healthcheck).
	HealthChecks []healthcheck.Rule
	// ComparePatches exclude fields from drift detection.
	ComparePatches []ComparePatch
	// Owner is the ownership mark of this deployment (its BundleDeployment's name): every
	// object applied carries it, and only objects carrying it are pruned. Required.
	Owner string
	// TakeOwnership adopts objects that exist and are not this deployment's: without it, such
	// an object is an error and is left alone.
	TakeOwnership bool
	// Force replaces an object the API server refuses to change in place (an immutable field
	// changed: a Job's template, a Service's clusterIP): it is deleted and applied anew.
	Force bool
	// Timeout bounds an apply; zero: none beyond the caller's.
	Timeout time.Duration
	// WaitForJobs counts a Job as ready only once it completed (kstatus counts a running Job
	// as current).
	WaitForJobs bool
	// Protected are namespaces never deleted, whatever the bundle says, beside the cluster's
	// own (default, kube-system, kube-public, kube-node-lease).
	Protected []string
	// TargetNamespace is the bundle's forced namespace: a cluster-scoped object then fails
	// the deployment (see admissible).
	TargetNamespace string
	// Restrictions are the FleetRestrictions of the bundle's namespace: every object must be
	// allowed by each, or nothing is applied.
	Restrictions []v1alpha1.DeploymentRestriction
}

// OwnerAnnotation marks what a deployment applied: its value is Options.Owner.
const OwnerAnnotation = "flotilla.dev/owned-by"

// ComparePatch excludes JSON pointers of matching objects from drift detection. Empty fields
// match every object.
type ComparePatch struct {
	APIVersion, Kind, Namespace, Name string
	JSONPointers                      []string
}

// Applier applies manifests to the cluster it runs in.
type Applier struct {
	dyn    dynamic.Interface
	mapper *kube.Mapper
}

// NewApplier connects to a cluster.
func NewApplier(cfg *rest.Config) (*Applier, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("failed to create dynamic client: %w", err)
	}
	mapper, err := kube.NewMapper(cfg)
	if err != nil {
		return nil, err
	}
	return &Applier{dyn: dyn, mapper: mapper}, nil
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
//
// Ownership: an object that exists and is neither in the previous inventory nor marked with
// opts.Owner belongs to someone else (another tool, another bundle) and is not applied unless
// opts.TakeOwnership; prune deletes only objects marked with opts.Owner (or, from before the
// mark, applied by this agent), never a protected namespace.
func (a *Applier) Apply(ctx context.Context, objs []*unstructured.Unstructured, previous Inventory, opts Options) (*Result, error) {
	if opts.Owner == "" {
		return nil, errors.New("apply: no owner: every deployment marks what it applies")
	}
	if err := a.admissible(objs, opts); err != nil {
		return nil, err
	}
	if err := a.served(objs); err != nil {
		return nil, err
	}
	if opts.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, opts.Timeout, fmt.Errorf("apply did not finish within %s (timeoutSeconds)", opts.Timeout))
		defer cancel()
	}
	res := &Result{Errors: map[ObjMeta]error{}}
	fail := func(o ObjMeta, err error) { res.Errors[o] = withCause(ctx, err) }
	ours := make(map[ObjMeta]bool, len(previous))
	for _, o := range previous {
		ours[o] = true
	}
	ordered := orderForApply(objs)
	namespaces := map[string]bool{}
	for _, o := range ordered {
		if o.GetKind() == "Namespace" && o.GroupVersionKind().Group == "" {
			namespaces[o.GetName()] = true
		}
	}
	declared := declaredByCRDs(objs)
	for _, o := range ordered {
		m, err := a.mapping(o.GroupVersionKind())
		if meta.IsNoMatchError(err) && declared[o.GroupVersionKind()] {
			m, err = a.awaitServed(ctx, o.GroupVersionKind())
		}
		if err != nil {
			fail(MetaOf(o), err)
			continue
		}
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			if o.GetNamespace() == "" {
				o.SetNamespace(orDefault(opts.DefaultNamespace, "default"))
			}
			if ns := o.GetNamespace(); !namespaces[ns] {
				if err := a.ensureNamespace(ctx, ns, opts); err != nil {
					fail(MetaOf(o), err)
					continue
				}
				namespaces[ns] = true
			}
		}
		if !ours[MetaOf(o)] && !opts.TakeOwnership {
			if err := a.notSomeoneElses(ctx, o, m, opts.Owner); err != nil {
				fail(MetaOf(o), err)
				continue
			}
		}
		markOwner(o, opts.Owner)
		err = a.applyOne(ctx, o, m)
		if apierrors.IsInvalid(err) && opts.Force {
			err = a.replace(ctx, o, m)
		}
		if err != nil {
			fail(MetaOf(o), err)
			continue
		}
		if o.GetKind() == "CustomResourceDefinition" {
			if err := a.waitEstablished(ctx, o.GetName()); err != nil {
				fail(MetaOf(o), err)
			}
			a.mapper.Reset() // its kinds are served now
		}
	}
	res.Inventory = NewInventory(objs)
	for o := range res.Errors {
		if !ours[o] {
			res.Inventory = res.Inventory.without(o) // never applied: not ours to prune later
		}
	}
	if !opts.KeepResources {
		protected := protectedSet(opts.Protected)
		for _, o := range Diff(previous, res.Inventory) {
			if o.isNamespace() && protected[o.Name] {
				continue // dropped from the bundle, kept on the cluster, no longer tracked
			}
			deleted, err := a.prune(ctx, o, opts.Owner)
			if err != nil {
				res.Errors[o] = fmt.Errorf("failed to prune: %w", err)
				res.Inventory = append(res.Inventory, o) // keep tracking it
				continue
			}
			if deleted {
				res.Pruned = append(res.Pruned, o)
			}
		}
	}
	return res, nil
}

// notSomeoneElses fails when o exists on the cluster and belongs to another owner: marked by
// another deployment, or not marked at all (made by another tool or by hand).
func (a *Applier) notSomeoneElses(ctx context.Context, o *unstructured.Unstructured, m *meta.RESTMapping, owner string) error {
	live, err := a.resource(m, o.GetNamespace()).Get(ctx, o.GetName(), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("failed to read it before applying: %w", err)
	}
	switch mark := live.GetAnnotations()[OwnerAnnotation]; mark {
	case owner:
		return nil
	case "":
		return errors.New("it exists and was not created by this bundle: set takeOwnership to adopt it")
	default:
		return fmt.Errorf("it exists and belongs to the deployment %q: set takeOwnership to adopt it", mark)
	}
}

// markOwner sets the ownership mark on an object about to be applied.
func markOwner(o *unstructured.Unstructured, owner string) {
	ann := o.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[OwnerAnnotation] = owner
	o.SetAnnotations(ann)
}

// prune deletes an object that left the bundle if it is still this deployment's (ownedBy). One
// that changed hands (adopted by another bundle, re-created by someone else) is left alone. The
// delete is conditioned on the object read, so a replacement made meanwhile is not deleted.
func (a *Applier) prune(ctx context.Context, o ObjMeta, owner string) (deleted bool, err error) {
	m, err := a.mapper.RESTMapping(o.GroupKind())
	if err != nil {
		if meta.IsNoMatchError(err) {
			return false, nil // the kind is gone, and the object with it
		}
		return false, err
	}
	ri := a.resource(m, o.Namespace)
	live, err := ri.Get(ctx, o.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if !ownedBy(live, owner) {
		return false, nil
	}
	policy := metav1.DeletePropagationBackground
	uid := live.GetUID()
	err = ri.Delete(ctx, o.Name, metav1.DeleteOptions{PropagationPolicy: &policy, Preconditions: &metav1.Preconditions{UID: &uid}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return false, nil
	}
	return err == nil, err
}

// ownedBy reports whether a live object is the deployment owner's to delete: it carries the
// owner's mark or, applied before marks existed (it is in the deployment's inventory), no mark
// and this agent's server-side apply (or no writer at all). Controllers writing an object's status or annotations
// (a Deployment's revision) do not make it theirs; another bundle adopting it marks it.
func ownedBy(live *unstructured.Unstructured, owner string) bool {
	if mark, ok := live.GetAnnotations()[OwnerAnnotation]; ok {
		return mark == owner
	}
	managers := live.GetManagedFields()
	for _, f := range managers {
		if f.Manager == FieldManager && f.Operation == metav1.ManagedFieldsOperationApply {
			return true
		}
	}
	// An object applied with nothing but its name has no managed fields at all: nobody else
	// has written it either.
	return len(managers) == 0
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

// replace deletes an object the API server refused to change in place and applies it anew,
// once the old one is gone (Options.Force).
func (a *Applier) replace(ctx context.Context, o *unstructured.Unstructured, m *meta.RESTMapping) error {
	ri := a.resource(m, o.GetNamespace())
	background := metav1.DeletePropagationBackground
	if err := ri.Delete(ctx, o.GetName(), metav1.DeleteOptions{PropagationPolicy: &background}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("failed to delete for replacement (force): %w", err)
	}
	if err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := ri.Get(ctx, o.GetName(), metav1.GetOptions{})
		return apierrors.IsNotFound(err), ignoreNotFound(err)
	}); err != nil {
		return fmt.Errorf("replaced object not gone (force): %w", err)
	}
	log.FromContext(ctx).Info("object replaced: its change cannot be applied in place (force)", "object", MetaOf(o).String())
	return a.applyOne(ctx, o, m)
}

// withCause names why an apply's context ended (its timeout) in an error it caused.
func withCause(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); cause != nil && ctx.Err() != nil && !errors.Is(err, cause) {
		return fmt.Errorf("%w: %w", cause, err)
	}
	return err
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
	if len(opts.NamespaceLabels) == 0 && len(opts.NamespaceAnnotations) == 0 {
		// Nothing to set on a namespace that exists: a deployment that applies as a tenant's
		// service account needs no write access to namespaces for it.
		if _, err := a.resource(m, "").Get(ctx, name, metav1.GetOptions{}); err == nil {
			return nil
		}
	}
	if err := a.applyOne(ctx, ns, m); err != nil {
		return fmt.Errorf("failed to create namespace %s: %w", name, err)
	}
	return nil
}

// DeleteNamespace deletes a namespace as the applier's identity: a deployment that applies as
// a tenant's service account removes only a namespace that account may delete itself. It
// reports whether the namespace is gone or going; a namespace the identity may not delete is
// kept, and that is no error (deleteNamespace asks; RBAC decides).
func (a *Applier) DeleteNamespace(ctx context.Context, name string) (deleted bool, err error) {
	m, err := a.mapping(schema.GroupVersionKind{Version: "v1", Kind: "Namespace"})
	if err != nil {
		return false, err
	}
	err = a.resource(m, "").Delete(ctx, name, metav1.DeleteOptions{})
	switch {
	case apierrors.IsForbidden(err):
		return false, nil
	case ignoreNotFound(err) != nil:
		return false, fmt.Errorf("failed to delete namespace %s: %w", name, err)
	}
	return true, nil
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

// awaitServed waits for discovery to list a kind that a CRD of this apply declares: the API
// server marks a CRD Established before its discovery document names the new kinds.
func (a *Applier) awaitServed(ctx context.Context, gvk schema.GroupVersionKind) (*meta.RESTMapping, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		m, err := a.mapping(gvk)
		if err == nil || time.Now().After(deadline) {
			return m, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// ignoreNotFound is err unless it says the object is not there.
func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
