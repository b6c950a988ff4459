package hub

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/bundle"
)

// valuesResolver reads fleet.yaml's helm.valuesFrom from ConfigMaps and Secrets on the hub, in
// the GitRepo's namespace unless the reference names another; the key defaults to values.yaml.
type valuesResolver struct {
	client    client.Reader
	namespace string
}

func (v *valuesResolver) Values(ctx context.Context, ref bundle.ValuesFrom, _ string) (map[string]any, error) {
	var data []byte
	switch {
	case ref.ConfigMapKeyRef != nil:
		r := ref.ConfigMapKeyRef
		var cm corev1.ConfigMap
		if err := v.client.Get(ctx, types.NamespacedName{Namespace: orDefault(r.Namespace, v.namespace), Name: r.Name}, &cm); err != nil {
			return nil, fmt.Errorf("configmap %s: %w", r.Name, err)
		}
		data = []byte(cm.Data[orDefault(r.Key, "values.yaml")])
	case ref.SecretKeyRef != nil:
		r := ref.SecretKeyRef
		var s corev1.Secret
		if err := v.client.Get(ctx, types.NamespacedName{Namespace: orDefault(r.Namespace, v.namespace), Name: r.Name}, &s); err != nil {
			return nil, fmt.Errorf("secret %s: %w", r.Name, err)
		}
		data = s.Data[orDefault(r.Key, "values.yaml")]
	}
	var vals map[string]any
	if err := yaml.Unmarshal(data, &vals); err != nil {
		return nil, fmt.Errorf("values are not YAML: %w", err)
	}
	return vals, nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
