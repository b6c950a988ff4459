package agent

import (
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// RestrictedError lists the objects of a deployment that its options do not allow: cluster-scoped
// objects under a forced namespace, and objects outside a FleetRestriction. Nothing of such a
// deployment is applied.
type RestrictedError struct {
	Violations []string
}

func (e *RestrictedError) Error() string {
	return fmt.Sprintf("%d objects are not allowed, nothing was applied: %s", len(e.Violations), strings.Join(e.Violations, "; "))
}

// admissible checks every object against opts before anything is applied. A kind's scope is
// what the cluster serves, or what a CustomResourceDefinition of the same set declares.
func (a *Applier) admissible(objs []*unstructured.Unstructured, opts Options) error {
	if opts.TargetNamespace == "" && len(opts.Restrictions) == 0 {
		return nil
	}
	declared := map[string]bool{} // group/Kind → cluster-scoped, from CRDs in the set
	for _, o := range objs {
		if o.GetKind() == "CustomResourceDefinition" {
			group, _, _ := unstructured.NestedString(o.Object, "spec", "group")
			kind, _, _ := unstructured.NestedString(o.Object, "spec", "names", "kind")
			scope, _, _ := unstructured.NestedString(o.Object, "spec", "scope")
			declared[group+"/"+kind] = scope == "Cluster"
		}
	}
	var violations []string
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		clusterScoped, known := declared[gvk.Group+"/"+gvk.Kind]
		if m, err := a.mapping(gvk); err == nil {
			clusterScoped, known = m.Scope.Name() == meta.RESTScopeNameRoot, true
		}
		if !known {
			continue // applying it fails with the reason
		}
		id := o.GetKind() + " " + o.GetName()
		if clusterScoped && opts.TargetNamespace != "" {
			violations = append(violations, fmt.Sprintf("%s is cluster-scoped, but the bundle forces namespace %q", id, opts.TargetNamespace))
			continue
		}
		for _, r := range opts.Restrictions {
			if why := restrictionRefuses(r, o, clusterScoped, orDefault(opts.DefaultNamespace, "default")); why != "" {
				violations = append(violations, fmt.Sprintf("%s: %s (FleetRestriction %s)", id, why, r.Name))
			}
		}
	}
	if len(violations) == 0 {
		return nil
	}
	sort.Strings(violations)
	return &RestrictedError{Violations: violations}
}

// UnservedError lists the APIs of a deployment that the cluster does not serve: the cluster is
// ineligible for its revision and nothing of it is applied (ROLLOUT.md R1.15).
type UnservedError struct {
	APIs []string
}

func (e *UnservedError) Error() string {
	return fmt.Sprintf("the cluster does not serve %s: nothing was applied", strings.Join(e.APIs, ", "))
}

// Bounds of what an UnservedError reports, as the BundleDeployment's status admits it.
const (
	maxUnservedAPIs   = 10
	maxUnservedAPILen = 317
)

// declaredByCRDs is the set of served kinds that the CustomResourceDefinitions among objs declare.
func declaredByCRDs(objs []*unstructured.Unstructured) map[schema.GroupVersionKind]bool {
	declared := map[schema.GroupVersionKind]bool{}
	for _, o := range objs {
		if o.GetKind() != "CustomResourceDefinition" || o.GroupVersionKind().Group != "apiextensions.k8s.io" {
			continue
		}
		group, _, _ := unstructured.NestedString(o.Object, "spec", "group")
		kind, _, _ := unstructured.NestedString(o.Object, "spec", "names", "kind")
		versions, _, _ := unstructured.NestedSlice(o.Object, "spec", "versions")
		for _, v := range versions {
			v, _ := v.(map[string]any)
			if name, _ := v["name"].(string); name != "" && v["served"] == true {
				declared[schema.GroupVersionKind{Group: group, Version: name, Kind: kind}] = true
			}
		}
	}
	return declared
}

// served checks that the cluster serves every apiVersion and kind of objs, or that a
// CustomResourceDefinition of the same set declares it. Discovery is read again, once, only
// when something is missing: a CRD installed since, or a cluster upgraded, is seen then.
func (a *Applier) served(objs []*unstructured.Unstructured) error {
	declared := declaredByCRDs(objs)
	missing := func() []schema.GroupVersionKind {
		seen := map[schema.GroupVersionKind]bool{}
		var out []schema.GroupVersionKind
		for _, o := range objs {
			gvk := o.GroupVersionKind()
			if seen[gvk] || declared[gvk] {
				continue
			}
			seen[gvk] = true
			if _, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version); meta.IsNoMatchError(err) {
				out = append(out, gvk)
			}
		}
		return out
	}
	unserved := missing()
	if len(unserved) == 0 {
		return nil
	}
	a.mapper.Reset()
	if unserved = missing(); len(unserved) == 0 {
		return nil
	}
	apis := make([]string, 0, len(unserved))
	for _, gvk := range unserved {
		api := gvk.GroupVersion().String() + " " + gvk.Kind
		if len(api) > maxUnservedAPILen {
			api = api[:maxUnservedAPILen]
		}
		apis = append(apis, api)
	}
	sort.Strings(apis)
	if len(apis) > maxUnservedAPIs {
		apis = apis[:maxUnservedAPIs]
	}
	return &UnservedError{APIs: apis}
}

// restrictionRefuses says why r does not allow o, or "".
func restrictionRefuses(r v1alpha1.DeploymentRestriction, o *unstructured.Unstructured, clusterScoped bool, defaultNamespace string) string {
	gvk := o.GroupVersionKind()
	if clusterScoped {
		if !r.AllowsClusterScopedKind(gvk.Group, gvk.Kind) {
			kind := gvk.Kind
			if gvk.Group != "" {
				kind = gvk.Group + "/" + gvk.Kind
			}
			return "cluster-scoped kind " + kind + " is not allowed"
		}
		if gvk.Group == "" && gvk.Kind == "Namespace" && !r.AllowsNamespace(o.GetName()) {
			return fmt.Sprintf("namespace %q is not allowed", o.GetName())
		}
		return ""
	}
	ns := o.GetNamespace()
	if ns == "" {
		ns = defaultNamespace
	}
	if !r.AllowsNamespace(ns) {
		return fmt.Sprintf("namespace %q is not allowed", ns)
	}
	return ""
}
