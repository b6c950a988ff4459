package bundle

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// mapResolver serves valuesFrom references from memory, as the hub serves them from ConfigMaps
// and Secrets.
type mapResolver map[string]map[string]any

func (m mapResolver) Values(_ context.Context, ref ValuesFrom, namespace string) (map[string]any, error) {
	kind, r := "configmap", ref.ConfigMapKeyRef
	if ref.SecretKeyRef != nil {
		kind, r = "secret", ref.SecretKeyRef
	}
	ns := r.Namespace
	if ns == "" {
		ns = namespace
	}
	v, ok := m[kind+"/"+ns+"/"+r.Name]
	if !ok {
		return nil, fmt.Errorf("%s %s/%s not found", kind, ns, r.Name)
	}
	return v, nil
}

func TestHelmValuesOrder(t *testing.T) {
	root := writeRepo(t, map[string]string{
		"fleet.yaml": `helm:
  chart: .
  valuesFiles: [base.yaml]
  valuesFrom:
  - configMapKeyRef: {name: shared}
  - secretKeyRef: {name: creds, namespace: vault}
  values:
    inline: "${ .ClusterName }-${ .ClusterValues.tier }"
`,
		"base.yaml":         "fromFile: file\nshared: file\ninline: file\n",
		"Chart.yaml":        "apiVersion: v2\nname: c\nversion: 1.0.0\n",
		"templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: v}\ndata:\n{{- range $k, $v := .Values }}{{ if kindIs \"string\" $v }}\n  {{ $k }}: {{ $v | quote }}{{ end }}{{ end }}\n",
	})
	resolver := mapResolver{
		"configmap/cluster-ns/shared": {"shared": "configmap", "password": "configmap"},
		"secret/vault/creds":          {"password": "secret"},
	}
	res, err := renderOnly(t, root, RendererOptions{Values: resolver}, Target{ClusterName: "c7", Namespace: "cluster-ns", TemplateValues: map[string]string{"tier": "gold"}})
	if err != nil {
		t.Fatal(err)
	}
	m := string(res.Manifest)
	for _, want := range []string{`fromFile: file`, `shared: configmap`, `password: secret`, `inline: c7-gold`} {
		if !strings.Contains(m, want) {
			t.Errorf("manifest lacks %q:\n%s", want, m)
		}
	}
	// A template naming a label the cluster does not have is an error, not an empty value.
	root2 := writeRepo(t, map[string]string{"fleet.yaml": "helm:\n  chart: .\n  values: {x: \"${ .ClusterLabels.nope }\"}\n", "Chart.yaml": "apiVersion: v2\nname: c\nversion: 1.0.0\n"})
	if _, err := renderOnly(t, root2, RendererOptions{}, Target{Labels: map[string]string{}}); err == nil || !strings.Contains(err.Error(), "fleet.yaml: helm.values: template") {
		t.Errorf("error = %v", err)
	}
}
