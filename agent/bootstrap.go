package agent

import (
	"context"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/flotilla-dev/flotilla/agent/kube"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// Keys of the Secret in which an agent keeps the hub credentials it was granted.
const (
	credentialsClusterNamespace = "cluster-namespace"
	// credentialsRemoved records that the hub removed the cluster (ErrRemoved): a restart does
	// not register again on its own.
	credentialsRemoved = "removed"
)

// BootstrapOptions say where, in the downstream cluster, the agent finds its bootstrap Secret
// (written by `flotilla agent install`) and keeps the credentials the hub grants.
type BootstrapOptions struct {
	// Namespace of both Secrets, e.g. flotilla-system.
	Namespace string
	// BootstrapSecret holds a registration token's values and the cluster's name.
	BootstrapSecret string
	// CredentialsSecret is where the granted credentials are kept; default "flotilla-agent-hub".
	CredentialsSecret string
	// Waiting is told why the hub holds a registration (see RegisterOptions.Waiting).
	Waiting func(reason, message string)
}

func (o *BootstrapOptions) credentialsSecret() string {
	if o.CredentialsSecret == "" {
		return "flotilla-agent-hub"
	}
	return o.CredentialsSecret
}

// Bootstrap returns the agent's hub credentials: the ones kept from an earlier registration,
// or, on first start (or after they expired), a new registration made with the bootstrap
// Secret, then kept. The cluster's kube-system namespace UID identifies it; a registration for
// a Cluster that has an agent already waits for an operator's approval. Credentials of a
// cluster the hub removed are not used, and no new registration is made: ErrRemoved.
func Bootstrap(ctx context.Context, local *kube.Local, opts BootstrapOptions) (*Registration, error) {
	secrets := local.Secrets(opts.Namespace)
	kept, err := secrets.Get(ctx, opts.credentialsSecret())
	switch {
	case err == nil && len(kept.Data[credentialsRemoved]) > 0:
		return nil, fmt.Errorf("%w (%s); delete secret %s/%s to register again", ErrRemoved, kept.Data[credentialsRemoved], opts.Namespace, opts.credentialsSecret())
	case err == nil && !expired(string(kept.Data[v1alpha1.RegistrationTokenKey]), time.Now()):
		removeBootstrap(ctx, secrets, opts)
		return registrationFrom(kept), nil
	case err != nil && !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("failed to read secret %s/%s: %w", opts.Namespace, opts.credentialsSecret(), err)
	}
	boot, err := secrets.Get(ctx, opts.BootstrapSecret)
	if err != nil {
		return nil, fmt.Errorf("no valid hub credentials and no bootstrap secret %s/%s (create it with `flotilla agent install`): %w", opts.Namespace, opts.BootstrapSecret, err)
	}
	d := boot.Data
	for _, k := range []string{v1alpha1.RegistrationTokenKey, v1alpha1.RegistrationServerKey, v1alpha1.RegistrationNamespaceKey, v1alpha1.RegistrationClusterNameKey, v1alpha1.RegistrationTokenNameKey} {
		if len(d[k]) == 0 {
			return nil, fmt.Errorf("bootstrap secret %s/%s: key %q is missing (print it again with `flotilla agent install`)", opts.Namespace, opts.BootstrapSecret, k)
		}
	}
	kubeSystem, err := local.Namespaces().Get(ctx, "kube-system")
	if err != nil {
		return nil, fmt.Errorf("failed to identify the cluster by its kube-system namespace: %w", err)
	}
	reg, err := Register(ctx, RegisterOptions{Server: string(d[v1alpha1.RegistrationServerKey]), CA: d[v1alpha1.RegistrationCAKey], Token: string(d[v1alpha1.RegistrationTokenKey]),
		Namespace: string(d[v1alpha1.RegistrationNamespaceKey]), TokenName: string(d[v1alpha1.RegistrationTokenNameKey]), ClientID: string(kubeSystem.UID),
		ClusterName: string(d[v1alpha1.RegistrationClusterNameKey]), Waiting: opts.Waiting})
	if err != nil {
		return nil, err
	}
	keep := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: opts.credentialsSecret(), Namespace: opts.Namespace}, Data: map[string][]byte{
		v1alpha1.RegistrationServerKey: []byte(reg.HubConfig.Host), v1alpha1.RegistrationCAKey: reg.HubConfig.CAData, v1alpha1.RegistrationTokenKey: []byte(reg.HubConfig.BearerToken),
		v1alpha1.RegistrationNamespaceKey: []byte(reg.Namespace), v1alpha1.RegistrationClusterNameKey: []byte(reg.ClusterName), credentialsClusterNamespace: []byte(reg.ClusterNamespace),
	}}
	if _, err := secrets.Update(ctx, keep); apierrors.IsNotFound(err) {
		_, err = secrets.Create(ctx, keep)
		if err != nil {
			return nil, fmt.Errorf("registered, but failed to keep the credentials in %s/%s: %w", opts.Namespace, opts.credentialsSecret(), err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("registered, but failed to keep the credentials in %s/%s: %w", opts.Namespace, opts.credentialsSecret(), err)
	}
	removeBootstrap(ctx, secrets, opts)
	return reg, nil
}

// removeBootstrap deletes the bootstrap Secret once the agent keeps credentials of its own: the
// registration token in it registers any cluster until it expires, and is of no use here any
// more. A Secret the agent may not delete is left, and said: it never keeps the agent from
// running.
func removeBootstrap(ctx context.Context, secrets secretsClient, opts BootstrapOptions) {
	if err := secrets.Delete(ctx, opts.BootstrapSecret, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		log.FromContext(ctx).Error(err, "registered, but the bootstrap secret, which holds a registration token, could not be removed: delete it", "secret", opts.Namespace+"/"+opts.BootstrapSecret)
	}
}

type secretsClient interface {
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

// Keep stores credentials the agent renewed or moved to in the credentials Secret: what
// RunOptions.OnCredentials calls.
func (o BootstrapOptions) Keep(local *kube.Local) func(context.Context, Credentials) error {
	return func(ctx context.Context, creds Credentials) error {
		return o.update(ctx, local, map[string][]byte{v1alpha1.RegistrationTokenKey: []byte(creds.Token), v1alpha1.RegistrationNamespaceKey: []byte(creds.Namespace)})
	}
}

// MarkRemoved records in the credentials Secret that the hub removed the cluster, and why.
func (o BootstrapOptions) MarkRemoved(ctx context.Context, local *kube.Local, why error) error {
	return o.update(ctx, local, map[string][]byte{credentialsRemoved: []byte(time.Now().UTC().Format(time.RFC3339) + ": " + why.Error())})
}

func (o BootstrapOptions) update(ctx context.Context, local *kube.Local, data map[string][]byte) error {
	secrets := local.Secrets(o.Namespace)
	s, err := secrets.Get(ctx, o.credentialsSecret())
	if err != nil {
		return fmt.Errorf("failed to read secret %s/%s: %w", o.Namespace, o.credentialsSecret(), err)
	}
	if s.Data == nil {
		s.Data = map[string][]byte{}
	}
	maps.Copy(s.Data, data)
	if _, err := secrets.Update(ctx, s); err != nil {
		return fmt.Errorf("failed to update secret %s/%s: %w", o.Namespace, o.credentialsSecret(), err)
	}
	return nil
}

func registrationFrom(s *corev1.Secret) *Registration {
	d := s.Data
	cfg := &rest.Config{Host: string(d[v1alpha1.RegistrationServerKey]), BearerToken: string(d[v1alpha1.RegistrationTokenKey]),
		TLSClientConfig: rest.TLSClientConfig{CAData: d[v1alpha1.RegistrationCAKey]}}
	return &Registration{HubConfig: cfg, Namespace: string(d[v1alpha1.RegistrationNamespaceKey]), ClusterName: string(d[v1alpha1.RegistrationClusterNameKey]),
		ClusterNamespace: string(d[credentialsClusterNamespace])}
}
