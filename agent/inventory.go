package agent

import (
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// ObjMeta identifies a deployed object. Its string form, namespace_name_group_kind (the form
// cli-utils' inventories use), is the inventory format, a stable API between agent versions.
type ObjMeta struct {
	Namespace, Name, Group, Kind string
}

func (o ObjMeta) String() string { return o.Namespace + "_" + o.Name + "_" + o.Group + "_" + o.Kind }

// ParseObjMeta reads the inventory form back. Namespaces, groups and kinds never hold "_", but
// names may (RBAC objects' names are path segments: "a_b" and "system:x" are valid), so the
// fields are taken from both ends and the name is what stands between. cli-utils' own parser
// refuses such names ("too many fields"), which would leave a deployment stuck for good.
func ParseObjMeta(s string) (ObjMeta, error) {
	ns, rest, ok1 := strings.Cut(s, "_")
	rest, kind, ok2 := cutLast(rest, "_")
	name, group, ok3 := cutLast(rest, "_")
	if !ok1 || !ok2 || !ok3 || name == "" || kind == "" {
		return ObjMeta{}, fmt.Errorf("invalid inventory entry %q: want namespace_name_group_kind", s)
	}
	return ObjMeta{Namespace: ns, Name: name, Group: group, Kind: kind}, nil
}

func cutLast(s, sep string) (before, after string, found bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}

// isNamespace reports whether the object is a Namespace.
func (o ObjMeta) isNamespace() bool { return o.Group == "" && o.Kind == "Namespace" }

// without returns the inventory less o.
func (inv Inventory) without(o ObjMeta) Inventory {
	out := inv[:0:0]
	for _, e := range inv {
		if e != o {
			out = append(out, e)
		}
	}
	return out
}

// MetaOf is an object's identity.
func MetaOf(u *unstructured.Unstructured) ObjMeta {
	gvk := u.GroupVersionKind()
	return ObjMeta{Namespace: u.GetNamespace(), Name: u.GetName(), Group: gvk.Group, Kind: gvk.Kind}
}

// GroupKind of the object.
func (o ObjMeta) GroupKind() schema.GroupKind { return schema.GroupKind{Group: o.Group, Kind: o.Kind} }

// Inventory is the set of objects a BundleDeployment deployed, sorted.
type Inventory []ObjMeta

// NewInventory builds a sorted inventory from objects.
func NewInventory(objs []*unstructured.Unstructured) Inventory {
	inv := make(Inventory, 0, len(objs))
	for _, o := range objs {
		inv = append(inv, MetaOf(o))
	}
	sort.Slice(inv, func(i, j int) bool { return inv[i].String() < inv[j].String() })
	return inv
}

// Strings renders the inventory for storage.
func (inv Inventory) Strings() []string {
	out := make([]string, len(inv))
	for i, o := range inv {
		out[i] = o.String()
	}
	return out
}

// Diff returns what is in old but not in new: the objects to prune. It is pure.
func Diff(old, new Inventory) Inventory {
	keep := make(map[ObjMeta]bool, len(new))
	for _, o := range new {
		keep[o] = true
	}
	var prune Inventory
	for _, o := range old {
		if !keep[o] {
			prune = append(prune, o)
		}
	}
	return prune
}

// protectedNamespaces are never deleted with a bundle, whatever it asks.
var protectedNamespaces = []string{"default", "kube-system", "kube-public", "kube-node-lease"}

// protectedSet is the cluster's own namespaces and extra.
func protectedSet(extra []string) map[string]bool {
	set := make(map[string]bool, len(protectedNamespaces)+len(extra))
	for _, ns := range append(append([]string(nil), protectedNamespaces...), extra...) {
		set[ns] = true
	}
	return set
}

// Namespaces lists, sorted, the namespaces that hold the inventory's namespaced objects or are
// themselves in it, leaving out protected namespaces and those in except: what deleteNamespace
// removes with the bundle.
func (inv Inventory) Namespaces(except ...string) []string {
	skip := protectedSet(except)
	set := map[string]bool{}
	for _, o := range inv {
		ns := o.Namespace
		if o.isNamespace() {
			ns = o.Name
		}
		if ns != "" && !skip[ns] {
			set[ns] = true
		}
	}
	out := make([]string, 0, len(set))
	for ns := range set {
		out = append(out, ns)
	}
	sort.Strings(out)
	return out
}
