package agent

import (
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// ObjMeta identifies a deployed object. Its string form, namespace_name_group_kind, is the
// inventory format, a stable API between agent versions.
type ObjMeta struct {
	Namespace, Name, Group, Kind string
}

func (o ObjMeta) String() string { return o.Namespace + "_" + o.Name + "_" + o.Group + "_" + o.Kind }

// ParseObjMeta reads the inventory form back.
func ParseObjMeta(s string) (ObjMeta, error) {
	// Kubernetes names, namespaces, groups and kinds never contain "_".
	parts := strings.Split(s, "_")
	if len(parts) != 4 || parts[1] == "" || parts[3] == "" {
		return ObjMeta{}, fmt.Errorf("invalid inventory entry %q: want namespace_name_group_kind", s)
	}
	return ObjMeta{Namespace: parts[0], Name: parts[1], Group: parts[2], Kind: parts[3]}, nil
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
var protectedNamespaces = map[string]bool{"default": true, "kube-system": true, "kube-public": true, "kube-node-lease": true}

// Namespaces lists, sorted, the namespaces that hold the inventory's namespaced objects or are
// themselves in it, leaving out protected namespaces and those in except: what deleteNamespace
// removes with the bundle.
func (inv Inventory) Namespaces(except ...string) []string {
	skip := map[string]bool{}
	for _, e := range except {
		skip[e] = true
	}
	set := map[string]bool{}
	for _, o := range inv {
		ns := o.Namespace
		if o.Group == "" && o.Kind == "Namespace" {
			ns = o.Name
		}
		if ns != "" && !protectedNamespaces[ns] && !skip[ns] {
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
