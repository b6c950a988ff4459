package sources

import (
	"context"
	"errors"
	"fmt"
	"regexp"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/bundle"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// valuesResolver reads fleet.yaml's helm.valuesFrom from ConfigMaps and Secrets on the hub, in
// the GitRepo's namespace (Secrets only those labelled v1alpha1.ValuesFromLabel); the key
// defaults to values.yaml. A reference to another namespace is
// refused unless the operator allows cross-namespace references: a repository's authors must
// not reach the Secrets of another tenant, or of the hub itself, by naming them.
type valuesResolver struct {
	client    client.Reader
	namespace string
	// crossNamespace allows references to other namespaces (Options.AllowCrossNamespaceRefs).
	crossNamespace bool
}

func (v *valuesResolver) Values(ctx context.Context, ref bundle.ValuesFrom, _ string) (map[string]any, error) {
	var data []byte
	var err error
	switch {
	case ref.ConfigMapKeyRef != nil:
		var cm corev1.ConfigMap
		err = v.read(ctx, "configMapKeyRef", "configmap", ref.ConfigMapKeyRef, &cm)
		data = []byte(cm.Data[orDefault(ref.ConfigMapKeyRef.Key, "values.yaml")])
	case ref.SecretKeyRef != nil:
		var s corev1.Secret
		err = v.read(ctx, "secretKeyRef", "secret", ref.SecretKeyRef, &s)
		if err == nil && s.Labels[v1alpha1.ValuesFromLabel] != "true" {
			// The namespace's other Secrets (git and chart credentials, decryption keys,
			// webhook and provider secrets) are the operator's, not the repository's.
			return nil, fmt.Errorf("secretKeyRef: secret %s is not marked for values: the operator labels the Secrets repositories may read %s=true",
				ref.SecretKeyRef.Name, v1alpha1.ValuesFromLabel)
		}
		data = s.Data[orDefault(ref.SecretKeyRef.Key, "values.yaml")]
	}
	if err != nil {
		return nil, err
	}
	var vals map[string]any
	if err := yaml.Unmarshal(data, &vals); err != nil {
		if ref.SecretKeyRef != nil {
			// The parser quotes what it could not read: of a Secret, only where it is is said.
			return nil, fmt.Errorf("secretKeyRef: secret %s, key %s: the values are not a YAML map (the parser's message is withheld: it quotes the Secret)",
				ref.SecretKeyRef.Name, orDefault(ref.SecretKeyRef.Key, "values.yaml"))
		}
		return nil, fmt.Errorf("values are not YAML: %w", err)
	}
	return vals, nil
}

// read reads the object a reference (fleet.yaml's field) names into obj.
func (v *valuesResolver) read(ctx context.Context, field, kind string, ref *bundle.KeyRef, obj client.Object) error {
	ns, err := v.resolveNamespace(field, ref.Namespace)
	if err != nil {
		return err
	}
	if err := v.client.Get(ctx, types.NamespacedName{Namespace: ns, Name: ref.Name}, obj); err != nil {
		return fmt.Errorf("%s: %s %s: %w", field, kind, ref.Name, err)
	}
	return nil
}

// resolveNamespace is where a reference whose namespace field is ns is read.
func (v *valuesResolver) resolveNamespace(field, ns string) (string, error) {
	if ns == "" || ns == v.namespace || v.crossNamespace {
		return orDefault(ns, v.namespace), nil
	}
	return "", fmt.Errorf("%s.namespace: %q is not the GitRepo's namespace %q: references resolve only there (the hub's --allow-cross-namespace-refs lifts this)", field, ns, v.namespace)
}

// ChartAccessOf is how a GitRepo's bundles reach chart servers: the credentials of its
// helmSecretRef (a Secret in its own namespace with username and password), sent only to the
// servers helmRepoURLRegex matches, and its CA bundle.
func ChartAccessOf(ctx context.Context, c client.Reader, repo *v1alpha1.GitRepo) (bundle.ChartAccess, error) {
	access := bundle.ChartAccess{CABundle: repo.Spec.CABundle}
	switch spec := &repo.Spec; {
	case spec.HelmRepoURL != "":
		scope, err := bundle.ForServer(spec.HelmRepoURL)
		if err != nil {
			return access, fmt.Errorf("spec.helmRepoURL: %w", err)
		}
		access.CredentialsFor = scope
	case spec.HelmRepoURLRegex != "":
		re, err := regexp.Compile(spec.HelmRepoURLRegex)
		if err != nil {
			return access, fmt.Errorf("spec.helmRepoURLRegex: %w", err)
		}
		access.CredentialsFor = bundle.ForURLsMatching(re)
	case spec.HelmSecretRef != nil:
		// The chart servers are named by the repository's author: credentials are sent to
		// none the operator did not name.
		return access, errors.New("spec.helmSecretRef: name the chart server its credentials are for in spec.helmRepoURL (or match it with spec.helmRepoURLRegex); they are sent to no server a repository names")
	}
	if ref := repo.Spec.HelmSecretRef; ref != nil {
		var s corev1.Secret
		if err := c.Get(ctx, types.NamespacedName{Namespace: repo.Namespace, Name: ref.Name}, &s); err != nil {
			return access, fmt.Errorf("spec.helmSecretRef: secret %s: %w", ref.Name, err)
		}
		access.Username, access.Password = string(s.Data[corev1.BasicAuthUsernameKey]), string(s.Data[corev1.BasicAuthPasswordKey])
	}
	return access, nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
