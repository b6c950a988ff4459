package bundle

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	yaml "go.yaml.in/yaml/v3"
	k8syaml "sigs.k8s.io/yaml"
)

// Object is one Kubernetes object as rendered.
type Object map[string]any

func (o Object) str(path ...string) string {
	var cur any = map[string]any(o)
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return ""
		}
		cur = m[p]
	}
	s, _ := cur.(string)
	return s
}

// APIVersion, Kind, Namespace and Name read the object's identity.
func (o Object) APIVersion() string { return o.str("apiVersion") }
func (o Object) Kind() string       { return o.str("kind") }
func (o Object) Namespace() string  { return o.str("metadata", "namespace") }
func (o Object) Name() string       { return o.str("metadata", "name") }

// Group is the API group ("" for the core group).
func (o Object) Group() string {
	if g, _, ok := strings.Cut(o.APIVersion(), "/"); ok {
		return g
	}
	return ""
}

// ID is the object's identity as the agent's inventory writes it: namespace_name_group_kind.
func (o Object) ID() string {
	return o.Namespace() + "_" + o.Name() + "_" + o.Group() + "_" + o.Kind()
}

func (o Object) setNamespace(ns string) {
	meta, ok := o["metadata"].(map[string]any)
	if !ok {
		meta = map[string]any{}
		o["metadata"] = meta
	}
	meta["namespace"] = ns
}

// parseObjects reads a multi-document YAML or JSON stream; `kind: List` documents are
// expanded. Every object needs apiVersion, kind and metadata.name.
func parseObjects(file string, data []byte) ([]Object, error) {
	var out []Object
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for doc := 1; ; doc++ {
		var node yaml.Node
		err := dec.Decode(&node)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, &FieldError{File: file, Message: fmt.Sprintf("document %d: %s", doc, strings.TrimPrefix(err.Error(), "yaml: "))}
		}
		var raw any
		if err := node.Decode(&raw); err != nil {
			return nil, &FieldError{File: file, Line: node.Line, Err: err}
		}
		if raw == nil {
			continue // empty document
		}
		m, ok := normalizeYAML(raw).(map[string]any)
		if !ok {
			return nil, &FieldError{File: file, Line: node.Line, Message: fmt.Sprintf("document %d is not an object", doc)}
		}
		obj := Object(m)
		if obj.Kind() == "List" || strings.HasSuffix(obj.Kind(), "List") && obj["items"] != nil {
			items, _ := m["items"].([]any)
			for i, it := range items {
				im, ok := it.(map[string]any)
				if !ok {
					return nil, &FieldError{File: file, Line: node.Line, Field: fmt.Sprintf("items[%d]", i), Message: "is not an object"}
				}
				if err := checkObject(file, node.Line, Object(im)); err != nil {
					return nil, err
				}
				out = append(out, Object(im))
			}
			continue
		}
		if err := checkObject(file, node.Line, obj); err != nil {
			return nil, err
		}
		out = append(out, obj)
	}
}

func checkObject(file string, line int, o Object) error {
	for _, f := range []struct{ name, value string }{{"apiVersion", o.APIVersion()}, {"kind", o.Kind()}, {"metadata.name", o.Name()}} {
		if f.value == "" {
			return &FieldError{File: file, Line: line, Field: f.name, Message: "is required in every manifest"}
		}
	}
	return nil
}

// normalizeYAML turns YAML-decoded values into JSON-compatible ones (map[string]any keys,
// int64 and float64 numbers) so that hashing and marshalling are stable.
func normalizeYAML(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			t[k] = normalizeYAML(x)
		}
		return t
	case map[any]any:
		m := make(map[string]any, len(t))
		for k, x := range t {
			m[fmt.Sprint(k)] = normalizeYAML(x)
		}
		return m
	case []any:
		for i, x := range t {
			t[i] = normalizeYAML(x)
		}
		return t
	case int:
		return int64(t)
	}
	return v
}

// clusterScoped lists the built-in kinds that have no namespace, by group/kind.
var clusterScoped = map[string]bool{
	"/Namespace": true, "/Node": true, "/PersistentVolume": true, "/ComponentStatus": true,
	"rbac.authorization.k8s.io/ClusterRole": true, "rbac.authorization.k8s.io/ClusterRoleBinding": true,
	"apiextensions.k8s.io/CustomResourceDefinition": true, "storage.k8s.io/StorageClass": true,
	"storage.k8s.io/CSIDriver": true, "storage.k8s.io/CSINode": true, "storage.k8s.io/VolumeAttachment": true,
	"scheduling.k8s.io/PriorityClass": true, "node.k8s.io/RuntimeClass": true, "networking.k8s.io/IngressClass": true,
	"admissionregistration.k8s.io/ValidatingWebhookConfiguration": true, "admissionregistration.k8s.io/MutatingWebhookConfiguration": true,
	"admissionregistration.k8s.io/ValidatingAdmissionPolicy": true, "admissionregistration.k8s.io/ValidatingAdmissionPolicyBinding": true,
	"apiregistration.k8s.io/APIService": true, "certificates.k8s.io/CertificateSigningRequest": true,
	"flowcontrol.apiserver.k8s.io/FlowSchema": true, "flowcontrol.apiserver.k8s.io/PriorityLevelConfiguration": true,
}

// normalize places namespaced objects (R: defaultNamespace fills in, namespace forces), sorts
// everything by group, kind, namespace and name, and serialises a stable YAML stream. Kinds
// declared cluster-scoped by a CRD in the same set count as cluster-scoped.
func normalize(objs []Object, defaultNamespace, forceNamespace string) ([]Object, []byte, error) {
	scoped := map[string]bool{}
	for _, o := range objs {
		if o.Kind() == "CustomResourceDefinition" {
			spec, _ := o["spec"].(map[string]any)
			names, _ := spec["names"].(map[string]any)
			if scope, _ := spec["scope"].(string); scope == "Cluster" {
				group, _ := spec["group"].(string)
				kind, _ := names["kind"].(string)
				scoped[group+"/"+kind] = true
			}
		}
	}
	if defaultNamespace == "" {
		defaultNamespace = "default"
	}
	var unplaceable []string
	for _, o := range objs {
		key := o.Group() + "/" + o.Kind()
		if clusterScoped[key] || scoped[key] {
			if forceNamespace != "" {
				unplaceable = append(unplaceable, o.Kind()+" "+o.Name())
			}
			continue
		}
		switch {
		case forceNamespace != "":
			o.setNamespace(forceNamespace)
		case o.Namespace() == "":
			o.setNamespace(defaultNamespace)
		}
	}
	if len(unplaceable) > 0 {
		sort.Strings(unplaceable)
		return nil, nil, &FieldError{File: "fleet.yaml", Field: "namespace", Err: fmt.Errorf("forces every object into namespace %q, but cluster-scoped objects have none: %s",
			forceNamespace, strings.Join(unplaceable, ", "))}
	}
	sort.SliceStable(objs, func(i, j int) bool {
		a, b := objs[i], objs[j]
		for _, pair := range [][2]string{{a.Group(), b.Group()}, {a.Kind(), b.Kind()}, {a.Namespace(), b.Namespace()}, {a.Name(), b.Name()}} {
			if pair[0] != pair[1] {
				return pair[0] < pair[1]
			}
		}
		return false
	})
	var buf bytes.Buffer
	seen := map[string]bool{}
	for _, o := range objs {
		if seen[o.ID()] {
			return nil, nil, fmt.Errorf("%s %s/%s is rendered twice", o.Kind(), o.Namespace(), o.Name())
		}
		seen[o.ID()] = true
		data, err := k8syaml.Marshal(map[string]any(o))
		if err != nil {
			return nil, nil, fmt.Errorf("failed to serialise %s %s: %w", o.Kind(), o.Name(), err)
		}
		buf.WriteString("---\n")
		buf.Write(data)
		if buf.Len() > maxRendered {
			return nil, nil, fmt.Errorf("rendered manifests exceed the limit of %d MiB", maxRendered>>20)
		}
	}
	return objs, buf.Bytes(), nil
}

// hashID is a short, stable content hash with a prefix.
func hashID(prefix string, parts ...[]byte) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write(p)
		h.Write([]byte{0})
	}
	return prefix + hex.EncodeToString(h.Sum(nil))[:32]
}
