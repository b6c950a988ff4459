package fleetimport

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// Decode reads objects as `kubectl get -o yaml` (or -o json) writes them: one or more documents,
// each an object or a List of them. name is the file, for errors.
func Decode(name string, data []byte) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for doc := 1; ; doc++ {
		var m map[string]any
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			return objs, nil
		} else if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", name, doc, err)
		}
		if len(m) == 0 {
			continue // an empty document, between two ---
		}
		u := &unstructured.Unstructured{Object: m}
		if !u.IsList() {
			if u.GetKind() == "" || u.GetAPIVersion() == "" {
				return nil, fmt.Errorf("%s: document %d: no apiVersion and kind: not an object", name, doc)
			}
			objs = append(objs, u)
			continue
		}
		list, err := u.ToList()
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", name, doc, err)
		}
		for i := range list.Items {
			objs = append(objs, &list.Items[i])
		}
	}
}
