package controlplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// Decode reads every object of a multi-document YAML or JSON stream, skipping empty documents.
func Decode(stream []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(stream), 4096)
	var objs []*unstructured.Unstructured
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
			return objs, nil
		} else if err != nil {
			return objs, fmt.Errorf("failed to decode object %d: %w", len(objs)+1, err)
		}
		if len(obj.Object) > 0 {
			objs = append(objs, obj)
		}
	}
}

// Apply server-side applies every object of a multi-document YAML stream, in order, as
// `kubectl apply --server-side` would. It returns the objects applied.
func Apply(ctx context.Context, cfg *rest.Config, stream []byte) ([]*unstructured.Unstructured, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	objs, err := Decode(stream)
	if err != nil {
		return nil, err
	}
	var applied []*unstructured.Unstructured
	for _, obj := range objs {
		gvk := obj.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			mapper.Reset() // a CRD applied earlier in the stream
			if m, err = mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
				return applied, fmt.Errorf("%s %s: %w", gvk.Kind, obj.GetName(), err)
			}
		}
		var res dynamic.ResourceInterface = client.Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			res = client.Resource(m.Resource).Namespace(obj.GetNamespace())
		}
		data, err := obj.MarshalJSON()
		if err != nil {
			return applied, err
		}
		force := true
		out, err := res.Patch(ctx, obj.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: "flotilla-controlplane", Force: &force})
		if err != nil {
			return applied, fmt.Errorf("failed to apply %s %s: %w", gvk.Kind, obj.GetName(), err)
		}
		applied = append(applied, out)
	}
	return applied, nil
}
