package clusters

import (
	"context"
	"crypto/rand"
	"fmt"
	"maps"
	"sync"
	"time"

	"golang.org/x/crypto/nacl/box"
	"golang.org/x/time/rate"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/flotilla-dev/flotilla/hub/access"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/model"
	"github.com/flotilla-dev/flotilla/hub/reconciler"
)

// Registration keys of a token's Secret: what an agent needs to register.
const (
	RegistrationToken     = v1alpha1.RegistrationTokenKey
	RegistrationNamespace = v1alpha1.RegistrationNamespaceKey
	RegistrationCA        = v1alpha1.RegistrationCAKey
	RegistrationServer    = v1alpha1.RegistrationServerKey
)

// Registration is under the operator's control:
//   - a token's agents can only create ClusterRegistrations naming that token (an admission
//     policy, manifests/policies), so the hub knows which token each registration used;
//   - a deleted or expired token registers no cluster, and deleting one revokes its bearer
//     token at once (its ServiceAccount goes);
//   - a registered cluster's labels are its token's spec.clusterLabels and what the operator
//     sets, never the agent's;
//   - a registration that claims a Cluster with an identity already (another agent's, or the
//     same client id, which is no secret) waits for an operator's approval;
//   - each token grants at most RegistrationBurst registrations at once, then one per
//     RegistrationInterval.

// Registration limits per token, and the agent tokens' lifetime (agents renew them).
const (
	DefaultRegistrationInterval = 6 * time.Second
	DefaultRegistrationBurst    = 10
	DefaultAgentTokenTTL        = v1alpha1.DefaultAgentTokenTTL
	// DefaultRegistrationTokenTTL is the lifetime of a ClusterRegistrationToken that sets none:
	// a token handed around to install agents is a credential, and expires in days.
	DefaultRegistrationTokenTTL = 7 * 24 * time.Hour
)

// tokenFinalizer holds a deleted ClusterRegistrationToken until its bearer token is revoked.
const tokenFinalizer = "flotilla.dev/registration-token"

// minTokenSeconds is the shortest lifetime the API server issues a token for.
const minTokenSeconds = 600

// TokenReconciler turns a ClusterRegistrationToken into a Secret holding a bearer token that may
// only create and read ClusterRegistrations in the token's namespace.
type TokenReconciler struct {
	Client client.Client
	// Uncached reads a token past the cache before it is issued (nil: Client).
	Uncached client.Reader
	Kube     kubernetes.Interface
	Endpoint AgentEndpoint
	// TTL is the lifetime of tokens that set none.
	TTL time.Duration
}

func (r *TokenReconciler) Setup(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named("registration-token").For(&v1alpha1.ClusterRegistrationToken{}).Complete(r.Controller())
}

// Controller is the reconciler: the status skeleton around issue, with revoke when the token
// is deleted.
func (r *TokenReconciler) Controller() reconciler.Status[v1alpha1.ClusterRegistrationToken, *v1alpha1.ClusterRegistrationToken] {
	return reconciler.Status[v1alpha1.ClusterRegistrationToken, *v1alpha1.ClusterRegistrationToken]{Client: r.Client, Step: r.issue, Finalizer: tokenFinalizer, Finalize: r.revoke}
}

func registrationAccount(token string) string { return "registration-" + token }

// revoke removes what a deleted token held: the hub does not count on a garbage collector.
func (r *TokenReconciler) revoke(ctx context.Context, tok *v1alpha1.ClusterRegistrationToken) (reconciler.Outcome, error) {
	ns, sa := tok.Namespace, registrationAccount(tok.Name)
	objs := []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: ns}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: ns}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: ns}},
	}
	if tok.Status.SecretName != "" {
		objs = append(objs, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: tok.Status.SecretName, Namespace: ns}})
	}
	for _, o := range objs {
		if err := r.Client.Delete(ctx, o); client.IgnoreNotFound(err) != nil {
			return reconciler.Outcome{}, fmt.Errorf("failed to revoke registration token %s: %w", tok.Name, err)
		}
	}
	log.FromContext(ctx).Info("registration token deleted: its bearer token is revoked", "token", tok.Namespace+"/"+tok.Name)
	return reconciler.Outcome{Done: true}, nil
}

// issue gives a token its bearer token, once: a Secret holding a token that may only create
// and read ClusterRegistrations in the token's namespace.
func (r *TokenReconciler) issue(ctx context.Context, tok, _ *v1alpha1.ClusterRegistrationToken) (reconciler.Outcome, error) {
	if tok.Status.SecretName != "" {
		return reconciler.Outcome{}, nil // issued; a token is not re-issued
	}
	// A pass on a cache that does not show the issue yet (the finalizer's write wakes one right
	// after it) would issue a second bearer token and Secret and leave the first behind, out of
	// the revocation's reach: the token is read past the cache first.
	var live client.Reader = r.Client
	if r.Uncached != nil {
		live = r.Uncached
	}
	var current v1alpha1.ClusterRegistrationToken
	if err := live.Get(ctx, client.ObjectKeyFromObject(tok), &current); err != nil {
		return reconciler.Outcome{}, fmt.Errorf("failed to read registration token %s: %w", tok.Name, err)
	}
	if current.Status.SecretName != "" {
		return reconciler.Outcome{}, nil // issued; the cache shows it in a moment
	}
	ns, sa := tok.Namespace, registrationAccount(tok.Name)
	if err := access.EnsureRole(ctx, r.Client, access.RoleSpec{Ns: ns, Name: sa, Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"clusterregistrations"}, Verbs: []string{"create", "get"}},
	}}); err != nil {
		return reconciler.Outcome{}, err
	}
	// The API server's token lives at least 10 minutes; the hub refuses registrations past
	// the TTL itself.
	ttl := model.PositiveOr(r.TTL, DefaultRegistrationTokenTTL)
	if tok.Spec.TTL != nil {
		ttl = tok.Spec.TTL.Duration
	}
	seconds := max(int64(ttl.Seconds()), minTokenSeconds)
	expires := &metav1.Time{Time: tok.CreationTimestamp.Add(ttl)}
	tr, err := r.Kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &seconds}}, metav1.CreateOptions{})
	if err != nil {
		return reconciler.Outcome{}, fmt.Errorf("failed to issue registration token: %w", err)
	}
	// An in-cluster address is no address for agents elsewhere: the Secret then holds none, and
	// the token says why (agent install refuses it without --api-server-url).
	server := r.Endpoint.Server
	cond := metav1.Condition{Type: v1alpha1.ReadyCondition, Status: metav1.ConditionTrue, Reason: v1alpha1.SucceededReason,
		Message: "agents register with the hub at " + server, ObservedGeneration: tok.Generation}
	if r.Endpoint.InCluster {
		server = ""
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, v1alpha1.InClusterAddressReason, r.Endpoint.inClusterMessage()
	}
	// A name of the API server's choosing: a Secret someone created beforehand under a name
	// the hub would use is never taken for the token's (it could give agents another hub).
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{GenerateName: tok.Name + "-registration-", Namespace: ns,
		Labels: map[string]string{v1alpha1.RegistrationTokenAnnotation: tok.Name}},
		Data: map[string][]byte{RegistrationToken: []byte(tr.Status.Token), RegistrationNamespace: []byte(ns), RegistrationCA: r.Endpoint.Ca, RegistrationServer: []byte(server),
			v1alpha1.RegistrationTokenNameKey: []byte(tok.Name)}}
	if err := r.Client.Create(ctx, secret); err != nil {
		return reconciler.Outcome{}, fmt.Errorf("failed to store registration token %s: %w", tok.Name, err)
	}
	tok.Status.SecretName, tok.Status.Expires = secret.Name, expires
	meta.SetStatusCondition(&tok.Status.Conditions, cond)
	return reconciler.Outcome{}, nil
}

// RegistrationReconciler grants a ClusterRegistration: the Cluster, its namespace, the agent's
// identity, and the agent's token sealed to the agent's public key.
type RegistrationReconciler struct {
	Client   client.Client
	Kube     kubernetes.Interface
	Now      func() time.Time
	TokenTTL time.Duration
	Limits   TokenLimits

	// admitted is when a registration of each fleet namespace last found its Cluster admitted
	// (see admissionPatience).
	admitted progressClocks
}

// progressClocks is when something last moved on, per namespace: one tenant's registrations
// say nothing about another's. Safe for concurrent use.
type progressClocks struct {
	mu sync.Mutex
	at map[string]time.Time
}

func (p *progressClocks) mark(ns string, t time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.at == nil {
		p.at = map[string]time.Time{}
	}
	if t.After(p.at[ns]) {
		p.at[ns] = t
	}
}

// since is the later of t and the namespace's last progress.
func (p *progressClocks) since(ns string, t time.Time) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	if at := p.at[ns]; at.After(t) {
		return at
	}
	return t
}

// TokenLimits rate-limits the registrations each token grants, by token UID.
type TokenLimits struct {
	Every time.Duration
	Burst int

	mu       sync.Mutex
	limiters map[types.UID]*rate.Limiter
}

// wait reserves a grant for the token and returns zero, or how long until one is free.
func (l *TokenLimits) wait(tok types.UID, now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.limiters == nil {
		l.limiters = map[types.UID]*rate.Limiter{}
	}
	lim := l.limiters[tok]
	if lim == nil {
		lim = rate.NewLimiter(rate.Every(l.Every), l.Burst)
		l.limiters[tok] = lim
	}
	res := lim.ReserveN(now, 1)
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		return d
	}
	return 0
}

func (r *RegistrationReconciler) Setup(mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &v1alpha1.ClusterRegistration{}, registrationsByUID, func(o client.Object) []string {
		return []string{string(o.GetUID())}
	}); err != nil {
		return fmt.Errorf("failed to index registrations: %w", err)
	}
	// A Cluster wakes the registrations waiting on it: the one that made or claimed it (admitted
	// or refused by the cluster-access controller), and one an operator approved on it.
	byCluster := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		return r.waitingOn(ctx, o)
	})
	// The agent's Lease is the last thing the cluster-access controller creates for a new
	// cluster: its identity and Roles are in place, and the registration can hand out the
	// agent's credentials.
	byLease := handler.Funcs{CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		if e.Object.GetName() != v1alpha1.AgentLeaseName {
			return
		}
		if cl, ok := model.ClusterInNamespace(ctx, r.Client, e.Object.GetNamespace()); ok {
			for _, req := range r.waitingOn(ctx, cl) {
				q.Add(req)
			}
		}
	}}
	return ctrl.NewControllerManagedBy(mgr).Named("cluster-registration").For(&v1alpha1.ClusterRegistration{}).
		Watches(&v1alpha1.Cluster{}, byCluster).Watches(&coordinationv1.Lease{}, byLease).Complete(r.Controller())
}

// registrationsByUID indexes ClusterRegistrations by UID, as Clusters name them.
const registrationsByUID = "metadata.uid"

// waitingOn lists the registrations not granted yet that a Cluster names: the one that made
// or claimed it, and the one an operator approved on it.
func (r *RegistrationReconciler) waitingOn(ctx context.Context, cl client.Object) []reconcile.Request {
	var out []reconcile.Request
	for _, uid := range []string{cl.GetAnnotations()[v1alpha1.RegistrationAnnotation], cl.GetAnnotations()[v1alpha1.ApprovedRegistrationAnnotation]} {
		if uid == "" {
			continue
		}
		var regs v1alpha1.ClusterRegistrationList
		if err := r.Client.List(ctx, &regs, client.InNamespace(cl.GetNamespace()), client.MatchingFields{registrationsByUID: uid}); err != nil {
			continue
		}
		for _, reg := range regs.Items {
			if !reg.Status.Granted {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&reg)})
			}
		}
	}
	return out
}

// Controller is the reconciler: the status skeleton around grant.
func (r *RegistrationReconciler) Controller() reconciler.Status[v1alpha1.ClusterRegistration, *v1alpha1.ClusterRegistration] {
	return reconciler.Status[v1alpha1.ClusterRegistration, *v1alpha1.ClusterRegistration]{Client: r.Client, Step: r.grant}
}

// grant grants a registration, or says in its status why it does not (yet).
func (r *RegistrationReconciler) grant(ctx context.Context, reg, _ *v1alpha1.ClusterRegistration) (reconciler.Outcome, error) {
	if reg.Status.Granted {
		return reconciler.Outcome{}, nil
	}
	if len(reg.Spec.PublicKey) != 32 {
		return r.Hold(ctx, reg, v1alpha1.RegistrationRefusedReason, "spec.publicKey must be a 32-byte X25519 key")
	}
	tok, why, err := r.token(ctx, reg)
	if err != nil {
		return reconciler.Outcome{}, err
	}
	if why != "" {
		return r.Hold(ctx, reg, v1alpha1.RegistrationRefusedReason, why)
	}
	name := reg.Spec.RequestedClusterName()
	var cl v1alpha1.Cluster
	err = r.Client.Get(ctx, types.NamespacedName{Namespace: reg.Namespace, Name: name}, &cl)
	exists := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		return reconciler.Outcome{}, err
	}
	// A Cluster this registration made or claimed already (an earlier attempt that failed
	// later on) is its own; any other with an agent's identity needs an approval.
	approved := exists && cl.Annotations[v1alpha1.ApprovedRegistrationAnnotation] == string(reg.UID)
	takeover := exists && cl.Annotations[v1alpha1.ClientIDAnnotation] != "" && cl.Annotations[v1alpha1.RegistrationAnnotation] != string(reg.UID)
	if takeover && !approved {
		return r.Hold(ctx, reg, v1alpha1.AwaitingApprovalReason, fmt.Sprintf(
			"cluster %s is registered already: this registration takes it over once an operator approves it (flotilla cluster approve %s -n %s)", name, reg.Name, reg.Namespace))
	}
	// A Cluster an operator created before any agent registered is claimed only with the
	// token it was made for: any other token's bearer would otherwise get its deployments.
	if exists && !takeover && cl.Annotations[v1alpha1.RegistrationAnnotation] != string(reg.UID) && cl.Annotations[v1alpha1.RegistrationTokenAnnotation] != tok.Name && !approved {
		made := "no registration token"
		if t := cl.Annotations[v1alpha1.RegistrationTokenAnnotation]; t != "" {
			made = "token " + t
		}
		return r.Hold(ctx, reg, v1alpha1.AwaitingApprovalReason, fmt.Sprintf(
			"cluster %s was created for %s, not %s: this registration claims it once an operator approves it (flotilla cluster approve %s -n %s)", name, made, tok.Name, reg.Name, reg.Namespace))
	}
	// A registration is counted once, when it makes or claims its Cluster, not again at the
	// pass that hands out credentials once the Cluster is admitted.
	ours := exists && cl.Annotations[v1alpha1.RegistrationAnnotation] == string(reg.UID)
	if !ours {
		if wait := r.Limits.wait(tok.UID, r.Now()); wait > 0 {
			out, err := r.Hold(ctx, reg, v1alpha1.RateLimitedReason,
				fmt.Sprintf("token %s registered too many clusters lately; this one is granted in %s", tok.Name, wait.Round(time.Second)))
			out.After = wait
			return out, err
		}
	}

	if !exists {
		cl = v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: reg.Namespace, Labels: maps.Clone(tok.Spec.ClusterLabels),
			Annotations: map[string]string{v1alpha1.ClientIDAnnotation: reg.Spec.ClientID, v1alpha1.RegistrationAnnotation: string(reg.UID)},
			Finalizers:  []string{access.ClusterFinalizer}}}
		if err := r.Client.Create(ctx, &cl); err != nil {
			return reconciler.Outcome{}, fmt.Errorf("failed to create cluster %s: %w", name, err)
		}
	} else if cl.Annotations[v1alpha1.RegistrationAnnotation] != string(reg.UID) {
		if err := r.claim(ctx, &cl, reg, tok); err != nil {
			return reconciler.Outcome{}, err
		}
	}
	// The cluster-access controller admits the Cluster and gives its agent an identity, Roles
	// and a Lease, as it does for every Cluster; doing it here too would write each of them
	// twice. Its Lease, created last, wakes this registration (Setup).
	if admitted := meta.FindStatusCondition(cl.Status.Conditions, v1alpha1.AdmittedCondition); admitted != nil && admitted.Status == metav1.ConditionFalse {
		return r.Hold(ctx, reg, v1alpha1.RegistrationRefusedReason, admitted.Message)
	}
	clusterNS := cl.Status.Namespace
	if clusterNS == "" || !r.leaseExists(ctx, clusterNS) {
		// Normally a moment: no status write for it. One that lasts while admission stands
		// still is said, once.
		if waited := r.Now().Sub(r.admitted.since(reg.Namespace, reg.CreationTimestamp.Time)); waited < admissionPatience {
			return reconciler.Outcome{After: admissionPatience - waited}, nil
		}
		return r.Hold(ctx, reg, v1alpha1.WaitingForAdmissionReason, fmt.Sprintf(
			"cluster %s is not admitted yet: the hub's cluster-access controller gives it a namespace, an identity and a Lease; its credentials follow", name))
	}
	if takeover {
		// The cluster's former agent loses its access: its tokens die with its identity, and
		// the new agent's identity is a new account of the same name.
		if err := r.Client.Delete(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: access.AgentServiceAccount, Namespace: clusterNS}}); client.IgnoreNotFound(err) != nil {
			return reconciler.Outcome{}, fmt.Errorf("failed to revoke the former agent of cluster %s: %w", name, err)
		}
		log.FromContext(ctx).Info("approved registration takes the cluster over; its former agent is revoked", "cluster", reg.Namespace+"/"+name, "registration", reg.Name, "clientID", reg.Spec.ClientID)
		if err := r.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: access.AgentServiceAccount, Namespace: clusterNS}}); client.IgnoreAlreadyExists(err) != nil {
			return reconciler.Outcome{}, err
		}
	}
	r.admitted.mark(reg.Namespace, r.Now())
	seconds := int64(r.TokenTTL.Seconds())
	tr, err := r.Kube.CoreV1().ServiceAccounts(clusterNS).CreateToken(ctx, access.AgentServiceAccount, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &seconds}}, metav1.CreateOptions{})
	if err != nil {
		return reconciler.Outcome{}, fmt.Errorf("failed to issue the agent's token: %w", err)
	}
	var pub [32]byte
	copy(pub[:], reg.Spec.PublicKey)
	sealed, err := box.SealAnonymous(nil, []byte(tr.Status.Token), &pub, rand.Reader)
	if err != nil {
		return reconciler.Outcome{}, fmt.Errorf("failed to seal credentials: %w", err)
	}
	log.FromContext(ctx).Info("cluster registered", "cluster", reg.Namespace+"/"+name, "registration", reg.Name, "token", tok.Name)
	reg.Status = v1alpha1.ClusterRegistrationStatus{ClusterName: name, Granted: true, Namespace: clusterNS, ClusterNamespace: reg.Namespace, Credentials: sealed,
		Conditions: reg.Status.Conditions}
	setReady(&reg.Status.Conditions, true, v1alpha1.SucceededReason, "registered as cluster "+name, reg.Generation)
	return reconciler.Outcome{}, nil
}

// admissionPatience is how long a registration waits for its Cluster's admission before its
// status says so, counted from when it was made or, if later, from when the hub last found a
// registration's Cluster of the same namespace admitted: a registration far back in a storm's
// queue is not stuck while the clusters ahead of it are admitted (1,000 at once are admitted
// within a minute on a 2-core hub, 10,000 in six to nine; a status write for each that waited
// longer than this cost 8,161 writes there), and one whose admission stopped says so however
// long the queue.
const admissionPatience = 2 * time.Minute

// leaseExists reports whether the cache shows the agent Lease of a cluster namespace.
func (r *RegistrationReconciler) leaseExists(ctx context.Context, clusterNS string) bool {
	var lease coordinationv1.Lease
	return r.Client.Get(ctx, types.NamespacedName{Namespace: clusterNS, Name: v1alpha1.AgentLeaseName}, &lease, client.UnsafeDisableDeepCopy) == nil
}

// token returns the registration's token, or why it registers nothing.
func (r *RegistrationReconciler) token(ctx context.Context, reg *v1alpha1.ClusterRegistration) (*v1alpha1.ClusterRegistrationToken, string, error) {
	if reg.Spec.TokenName == "" {
		return nil, "spec.tokenName is required: the registration token it was made with", nil
	}
	var tok v1alpha1.ClusterRegistrationToken
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: reg.Namespace, Name: reg.Spec.TokenName}, &tok)
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Sprintf("registration token %s does not exist", reg.Spec.TokenName), nil
	case err != nil:
		return nil, "", err
	case !tok.DeletionTimestamp.IsZero():
		return nil, fmt.Sprintf("registration token %s is being deleted", tok.Name), nil
	case tok.Status.Expires != nil && !r.Now().Before(tok.Status.Expires.Time):
		return nil, fmt.Sprintf("registration token %s expired at %s", tok.Name, tok.Status.Expires.UTC().Format(time.RFC3339)), nil
	}
	return &tok, "", nil
}

// claim makes an existing Cluster the registration's: an operator's Cluster that no agent
// registered for yet, or, approved, one whose agent the registration replaces. The token's
// labels are added; the operator's stay.
func (r *RegistrationReconciler) claim(ctx context.Context, cl *v1alpha1.Cluster, reg *v1alpha1.ClusterRegistration, tok *v1alpha1.ClusterRegistrationToken) error {
	orig := cl.DeepCopy()
	if cl.Labels == nil {
		cl.Labels = map[string]string{}
	}
	for k, v := range tok.Spec.ClusterLabels {
		if _, set := cl.Labels[k]; !set {
			cl.Labels[k] = v
		}
	}
	if cl.Annotations == nil {
		cl.Annotations = map[string]string{}
	}
	cl.Annotations[v1alpha1.ClientIDAnnotation] = reg.Spec.ClientID
	cl.Annotations[v1alpha1.RegistrationAnnotation] = string(reg.UID)
	delete(cl.Annotations, v1alpha1.ApprovedRegistrationAnnotation)
	if err := r.Client.Patch(ctx, cl, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("failed to claim cluster %s: %w", cl.Name, err)
	}
	return nil
}

// Hold records why a registration is not granted (yet), logging it when that changed.
func (r *RegistrationReconciler) Hold(ctx context.Context, reg *v1alpha1.ClusterRegistration, reason, msg string) (reconciler.Outcome, error) {
	before := meta.FindStatusCondition(reg.Status.Conditions, v1alpha1.ReadyCondition)
	if before == nil || before.Reason != reason || before.Message != msg {
		log.FromContext(ctx).Info("registration not granted", "registration", reg.Namespace+"/"+reg.Name, "reason", reason, "message", msg)
	}
	setReady(&reg.Status.Conditions, false, reason, msg, reg.Generation)
	return reconciler.Outcome{}, nil
}
func setReady(conds *[]metav1.Condition, ok bool, reason, msg string, gen int64) {
	status := metav1.ConditionFalse
	if ok {
		status = metav1.ConditionTrue
	}
	model.SetCondition(conds, metav1.Condition{Type: v1alpha1.ReadyCondition, Status: status, Reason: reason, Message: msg, ObservedGeneration: gen})
}
