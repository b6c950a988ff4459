package agent

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// Keys of the Secret in which an agent keeps the hub credentials it was granted.
const (
	credentialsClusterNamespace = "cluster-namespace"
)

// BootstrapOptions say where, in the downstream cluster, the agent finds its bootstrap Secret
// (written by `flotilla agent install`) and keeps the credentials the hub grants.
type BootstrapOptions struct {
	// Namespace of both Secrets, e.g. flotilla-system.
	Namespace string
	// BootstrapSecret holds a registration token's values and the cluster's name and labels.
	BootstrapSecret string
	// CredentialsSecret is where the granted credentials are kept; default "flotilla-agent-hub".
	CredentialsSecret string
}

// Bootstrap returns the agent's hub credentials: the ones kept from an earlier registration,
// or, on first start, a new registration made with the bootstrap Secret, then kept. The
// cluster's kube-system namespace UID identifies it, so registering again (credentials lost)
// gets the same Cluster back.
func Bootstrap(ctx context.Context, local kubernetes.Interface, opts BootstrapOptions) (*Registration, error) {
	if opts.CredentialsSecret == "" {
		opts.CredentialsSecret = "flotilla-agent-hub"
	}
	secrets := local.CoreV1().Secrets(opts.Namespace)
	kept, err := secrets.Get(ctx, opts.CredentialsSecret, metav1.GetOptions{})
	switch {
	case err == nil:
		return registrationFrom(kept), nil
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("failed to read secret %s/%s: %w", opts.Namespace, opts.CredentialsSecret, err)
	}
	boot, err := secrets.Get(ctx, opts.BootstrapSecret, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("no hub credentials yet and no bootstrap secret %s/%s (create it with `flotilla agent install`): %w", opts.Namespace, opts.BootstrapSecret, err)
	}
	d := boot.Data
	for _, k := range []string{v1alpha1.RegistrationTokenKey, v1alpha1.RegistrationServerKey, v1alpha1.RegistrationNamespaceKey, v1alpha1.RegistrationClusterNameKey} {
		if len(d[k]) == 0 {
			return nil, fmt.Errorf("bootstrap secret %s/%s: key %q is missing", opts.Namespace, opts.BootstrapSecret, k)
		}
	}
	var labels map[string]string
	if raw := d[v1alpha1.RegistrationClusterLabelsKey]; len(raw) > 0 {
		if err := json.Unmarshal(raw, &labels); err != nil {
			return nil, fmt.Errorf("bootstrap secret %s/%s: key %q: %w", opts.Namespace, opts.BootstrapSecret, v1alpha1.RegistrationClusterLabelsKey, err)
		}
	}
	kubeSystem, err := local.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("failed to identify the cluster by its kube-system namespace: %w", err)
	}
	reg, err := Register(ctx, RegisterOptions{Server: string(d[v1alpha1.RegistrationServerKey]), CA: d[v1alpha1.RegistrationCAKey], Token: string(d[v1alpha1.RegistrationTokenKey]),
		Namespace: string(d[v1alpha1.RegistrationNamespaceKey]), ClientID: string(kubeSystem.UID), ClusterName: string(d[v1alpha1.RegistrationClusterNameKey]), ClusterLabels: labels})
	if err != nil {
		return nil, err
	}
	keep := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: opts.CredentialsSecret, Namespace: opts.Namespace}, Data: map[string][]byte{
		v1alpha1.RegistrationServerKey: []byte(reg.HubConfig.Host), v1alpha1.RegistrationCAKey: reg.HubConfig.CAData, v1alpha1.RegistrationTokenKey: []byte(reg.HubConfig.BearerToken),
		v1alpha1.RegistrationNamespaceKey: []byte(reg.Namespace), v1alpha1.RegistrationClusterNameKey: []byte(reg.ClusterName), credentialsClusterNamespace: []byte(reg.ClusterNamespace),
	}}
	if _, err := secrets.Create(ctx, keep, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("registered, but failed to keep the credentials in %s/%s: %w", opts.Namespace, opts.CredentialsSecret, err)
	}
	return reg, nil
}

func registrationFrom(s *corev1.Secret) *Registration {
	d := s.Data
	cfg := &rest.Config{Host: string(d[v1alpha1.RegistrationServerKey]), BearerToken: string(d[v1alpha1.RegistrationTokenKey]),
		TLSClientConfig: rest.TLSClientConfig{CAData: d[v1alpha1.RegistrationCAKey]}}
	return &Registration{HubConfig: cfg, Namespace: string(d[v1alpha1.RegistrationNamespaceKey]), ClusterName: string(d[v1alpha1.RegistrationClusterNameKey]),
		ClusterNamespace: string(d[credentialsClusterNamespace])}
}
