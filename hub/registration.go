package hub

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"golang.org/x/crypto/nacl/box"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// Registration keys of a token's Secret: what an agent needs to register.
const (
	RegistrationToken     = v1alpha1.RegistrationTokenKey
	RegistrationNamespace = v1alpha1.RegistrationNamespaceKey
	RegistrationCA        = v1alpha1.RegistrationCAKey
	RegistrationServer    = v1alpha1.RegistrationServerKey
)

// tokenReconciler turns a ClusterRegistrationToken into a Secret holding a bearer token that may
// only create and read ClusterRegistrations in the token's namespace.
type tokenReconciler struct {
	client client.Client
	kube   kubernetes.Interface
	server string
	ca     []byte
	now    func() time.Time
}

func (r *tokenReconciler) setup(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named("registration-token").For(&v1alpha1.ClusterRegistrationToken{}).Complete(r)
}

func (r *tokenReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var tok v1alpha1.ClusterRegistrationToken
	if err := r.client.Get(ctx, req.NamespacedName, &tok); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if tok.Status.SecretName != "" {
		return ctrl.Result{}, nil // issued; a token is not re-issued
	}
	sa := "registration-" + tok.Name
	ns := tok.Namespace
	if err := r.client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: ns}}); client.IgnoreAlreadyExists(err) != nil {
		return ctrl.Result{}, err
	}
	if err := ensureRole(ctx, r.client, ns, sa, []rbacv1.PolicyRule{
		{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"clusterregistrations"}, Verbs: []string{"create", "get"}},
	}, []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}}); err != nil {
		return ctrl.Result{}, err
	}
	ttl := int64((30 * 24 * time.Hour).Seconds())
	if tok.Spec.TTL != nil {
		ttl = int64(tok.Spec.TTL.Seconds())
	}
	tr, err := r.kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &ttl}}, metav1.CreateOptions{})
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("failed to issue registration token: %w", err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: tok.Name + "-registration", Namespace: ns},
		Data: map[string][]byte{RegistrationToken: []byte(tr.Status.Token), RegistrationNamespace: []byte(ns), RegistrationCA: r.ca, RegistrationServer: []byte(r.server)}}
	if err := r.client.Create(ctx, secret); client.IgnoreAlreadyExists(err) != nil {
		return ctrl.Result{}, err
	}
	orig := tok.DeepCopy()
	expires := metav1.NewTime(tr.Status.ExpirationTimestamp.Time)
	tok.Status.SecretName, tok.Status.Expires = secret.Name, &expires
	return ctrl.Result{}, r.client.Status().Patch(ctx, &tok, client.MergeFrom(orig))
}

// registrationReconciler grants a ClusterRegistration: the Cluster, its namespace, the agent's
// identity, and the agent's token sealed to the agent's public key.
type registrationReconciler struct {
	client client.Client
	kube   kubernetes.Interface
}

func (r *registrationReconciler) setup(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named("cluster-registration").For(&v1alpha1.ClusterRegistration{}).Complete(r)
}

func (r *registrationReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var reg v1alpha1.ClusterRegistration
	if err := r.client.Get(ctx, req.NamespacedName, &reg); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if reg.Status.Granted {
		return ctrl.Result{}, nil
	}
	if len(reg.Spec.PublicKey) != 32 {
		return ctrl.Result{}, r.refuse(ctx, &reg, "spec.publicKey must be a 32-byte X25519 key")
	}
	name := reg.Spec.ClusterName
	if name == "" {
		sum := sha256.Sum256([]byte(reg.Spec.ClientID))
		name = "cluster-" + hex.EncodeToString(sum[:])[:10]
	}
	var existing v1alpha1.Cluster
	err := r.client.Get(ctx, types.NamespacedName{Namespace: reg.Namespace, Name: name}, &existing)
	switch {
	case err == nil && existing.Annotations["flotilla.dev/client-id"] != reg.Spec.ClientID:
		return ctrl.Result{}, r.refuse(ctx, &reg, fmt.Sprintf("cluster name %q is taken by another cluster", name))
	case apierrors.IsNotFound(err):
		existing = v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: reg.Namespace, Labels: reg.Spec.ClusterLabels,
			Annotations: map[string]string{"flotilla.dev/client-id": reg.Spec.ClientID}}}
		if err := r.client.Create(ctx, &existing); err != nil {
			return ctrl.Result{}, fmt.Errorf("failed to create cluster %s: %w", name, err)
		}
	case err != nil:
		return ctrl.Result{}, err
	}
	if err := AdmitCluster(ctx, r.client, &existing); err != nil {
		return ctrl.Result{}, err
	}
	clusterNS := existing.Status.Namespace
	if err := r.client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: AgentServiceAccount, Namespace: clusterNS}}); client.IgnoreAlreadyExists(err) != nil {
		return ctrl.Result{}, err
	}
	ttl := int64((365 * 24 * time.Hour).Seconds())
	tr, err := r.kube.CoreV1().ServiceAccounts(clusterNS).CreateToken(ctx, AgentServiceAccount, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &ttl}}, metav1.CreateOptions{})
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("failed to issue the agent's token: %w", err)
	}
	var pub [32]byte
	copy(pub[:], reg.Spec.PublicKey)
	sealed, err := box.SealAnonymous(nil, []byte(tr.Status.Token), &pub, rand.Reader)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("failed to seal credentials: %w", err)
	}
	orig := reg.DeepCopy()
	reg.Status = v1alpha1.ClusterRegistrationStatus{ClusterName: name, Granted: true, Namespace: clusterNS, ClusterNamespace: reg.Namespace, Credentials: sealed,
		Conditions: reg.Status.Conditions}
	setReady(&reg.Status.Conditions, true, v1alpha1.SucceededReason, "registered as cluster "+name, reg.Generation)
	return ctrl.Result{}, r.client.Status().Patch(ctx, &reg, client.MergeFrom(orig))
}

// ClusterNamespace is where the BundleDeployments of a cluster registered in a fleet namespace
// live.
func ClusterNamespace(fleetNamespace, cluster string) string {
	return strings.TrimRight(truncate("cluster-"+fleetNamespace+"-"+cluster, 63), "-")
}

// AdmitCluster gives a Cluster its BundleDeployment namespace and records it in the Cluster's
// status: the part of registration that involves no agent. Clusters created directly, by an
// operator or the quickstart, are admitted with it too.
func AdmitCluster(ctx context.Context, c client.Client, cl *v1alpha1.Cluster) error {
	ns := ClusterNamespace(cl.Namespace, cl.Name)
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); client.IgnoreAlreadyExists(err) != nil {
		return fmt.Errorf("failed to create namespace %s for cluster %s: %w", ns, cl.Name, err)
	}
	if cl.Status.Namespace == ns {
		return nil
	}
	orig := cl.DeepCopy()
	cl.Status.Namespace = ns
	if err := c.Status().Patch(ctx, cl, client.MergeFrom(orig)); err != nil {
		return fmt.Errorf("failed to record namespace of cluster %s: %w", cl.Name, err)
	}
	return nil
}

func (r *registrationReconciler) refuse(ctx context.Context, reg *v1alpha1.ClusterRegistration, msg string) error {
	orig := reg.DeepCopy()
	setReady(&reg.Status.Conditions, false, "Refused", msg, reg.Generation)
	if equality.Semantic.DeepEqual(orig.Status, reg.Status) {
		return nil
	}
	return r.client.Status().Patch(ctx, reg, client.MergeFrom(orig))
}

func setReady(conds *[]metav1.Condition, ok bool, reason, msg string, gen int64) {
	status := metav1.ConditionFalse
	if ok {
		status = metav1.ConditionTrue
	}
	setCondition(conds, metav1.Condition{Type: v1alpha1.ReadyCondition, Status: status, Reason: reason, Message: msg, ObservedGeneration: gen})
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
