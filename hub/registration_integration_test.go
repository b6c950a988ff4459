package hub

import (
	"context"
	"crypto/rand"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/nacl/box"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/hub/access"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/clusters"
	"github.com/flotilla-dev/flotilla/hub/liveness"
	"github.com/flotilla-dev/flotilla/hub/operate"
)

// registrar drives the token and registration reconcilers against the real API server with a
// clock of the test's: no hub runs, so every step happens when the test says.
type registrar struct {
	t      *testing.T
	c      client.Client
	ns     string
	now    time.Time
	tokens *clusters.TokenReconciler
	regs   *clusters.RegistrationReconciler
	// access admits the Clusters registrations make, as the hub's cluster-access controller
	// does before a registration hands out credentials.
	access *access.AccessReconciler
}

func newRegistrar(t *testing.T, burst int) *registrar {
	c := apiClient(t)
	kube := kubernetes.NewForConfigOrDie(hubCluster.Config())
	r := &registrar{t: t, c: c, ns: namespace(t, c), now: time.Now()}
	r.tokens = &clusters.TokenReconciler{Client: c, Kube: kube, Endpoint: clusters.AgentEndpoint{Server: hubCluster.Config().Host, Ca: hubCluster.Config().CAData}}
	r.regs = &clusters.RegistrationReconciler{Client: c, Kube: kube, Now: func() time.Time { return r.now }, TokenTTL: time.Hour,
		Limits: clusters.TokenLimits{Every: time.Hour, Burst: burst}}
	r.access = &access.AccessReconciler{Client: c, Uncached: c, Heartbeats: liveness.New(c, 0, 0, nil)}
	return r
}

// issue creates a token without a ttl, has the hub issue it, and returns it as issued.
func (r *registrar) issue(name string) *v1alpha1.ClusterRegistrationToken {
	r.t.Helper()
	ctx := context.Background()
	if err := r.c.Create(ctx, &v1alpha1.ClusterRegistrationToken{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: r.ns}}); err != nil {
		r.t.Fatal(err)
	}
	r.reconcileToken(name)
	var tok v1alpha1.ClusterRegistrationToken
	if err := r.c.Get(ctx, types.NamespacedName{Namespace: r.ns, Name: name}, &tok); err != nil {
		r.t.Fatal(err)
	}
	return &tok
}

func (r *registrar) reconcileToken(name string) {
	r.t.Helper()
	if _, err := r.tokens.Controller().Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: r.ns, Name: name}}); err != nil {
		r.t.Fatalf("token %s: %v", name, err)
	}
}

// bearer is what a token's Secret hands an agent: a client of the hub with the token alone.
func (r *registrar) bearer(token string) client.Client {
	r.t.Helper()
	var tok v1alpha1.ClusterRegistrationToken
	if err := r.c.Get(context.Background(), types.NamespacedName{Namespace: r.ns, Name: token}, &tok); err != nil {
		r.t.Fatal(err)
	}
	var secret corev1.Secret
	if err := r.c.Get(context.Background(), types.NamespacedName{Namespace: r.ns, Name: tok.Status.SecretName}, &secret); err != nil {
		r.t.Fatal(err)
	}
	return r.clientWith(string(secret.Data[clusters.RegistrationToken]))
}

func (r *registrar) clientWith(token string) client.Client {
	r.t.Helper()
	scheme, _ := Scheme()
	cfg := rest.AnonymousClientConfig(hubCluster.Config())
	cfg.BearerToken = token
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		r.t.Fatal(err)
	}
	return c
}

// register creates a registration through c, as an agent does, and reconciles it once.
func (r *registrar) register(c client.Client, name, token, cluster, clientID string) (*v1alpha1.ClusterRegistration, *[32]byte, *[32]byte) {
	r.t.Helper()
	pub, priv, err := box.GenerateKey(rand.Reader)
	if err != nil {
		r.t.Fatal(err)
	}
	reg := &v1alpha1.ClusterRegistration{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: r.ns},
		Spec: v1alpha1.ClusterRegistrationSpec{ClientID: clientID, ClusterName: cluster, TokenName: token, PublicKey: pub[:]}}
	if err := c.Create(context.Background(), reg); err != nil {
		r.t.Fatalf("registration %s: %v", name, err)
	}
	return r.reconcile(name), pub, priv
}

// reconcile runs a registration's pass and, while it is not granted, the cluster-access pass of
// the Cluster it names and its own again: the order the hub's controllers take.
func (r *registrar) reconcile(name string) *v1alpha1.ClusterRegistration {
	r.t.Helper()
	ctx := context.Background()
	pass := func() *v1alpha1.ClusterRegistration {
		if _, err := r.regs.Controller().Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: r.ns, Name: name}}); err != nil {
			r.t.Fatalf("reconcile registration %s: %v", name, err)
		}
		var reg v1alpha1.ClusterRegistration
		if err := r.c.Get(ctx, types.NamespacedName{Namespace: r.ns, Name: name}, &reg); err != nil {
			r.t.Fatal(err)
		}
		return &reg
	}
	reg := pass()
	cluster := types.NamespacedName{Namespace: r.ns, Name: reg.Spec.RequestedClusterName()}
	var cl v1alpha1.Cluster
	if reg.Status.Granted || r.c.Get(ctx, cluster, &cl) != nil || cl.Annotations[v1alpha1.RegistrationAnnotation] != string(reg.UID) {
		return reg // granted, or held before it made or claimed its Cluster
	}
	if _, err := r.access.Controller().Reconcile(ctx, ctrl.Request{NamespacedName: cluster}); err != nil {
		r.t.Fatalf("admit cluster %s: %v", cluster.Name, err)
	}
	return pass()
}

func heldFor(reg *v1alpha1.ClusterRegistration) string {
	if c := meta.FindStatusCondition(reg.Status.Conditions, v1alpha1.ReadyCondition); c != nil && c.Status == metav1.ConditionFalse {
		return c.Reason + ": " + c.Message
	}
	return ""
}

// Registration is the operator's: a token's bearer registers only under its own token, gets the
// token's labels and nothing it asks for, cannot take over a registered cluster by replaying
// its client id without an approval (which then revokes the former agent), is rate-limited,
// and stops with the token's expiry or deletion.
func TestRegistrationIsUnderTheOperatorsControl(t *testing.T) {
	r := newRegistrar(t, 2)
	ctx := context.Background()
	ttl := &metav1.Duration{Duration: time.Hour}
	for _, tok := range []*v1alpha1.ClusterRegistrationToken{
		{ObjectMeta: metav1.ObjectMeta{Name: "edge", Namespace: r.ns}, Spec: v1alpha1.ClusterRegistrationTokenSpec{TTL: ttl, ClusterLabels: map[string]string{"env": "staging"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "forever", Namespace: r.ns}},
	} {
		if err := r.c.Create(ctx, tok); err != nil {
			t.Fatal(err)
		}
		r.reconcileToken(tok.Name)
	}
	var edge, forever v1alpha1.ClusterRegistrationToken
	_ = r.c.Get(ctx, types.NamespacedName{Namespace: r.ns, Name: "edge"}, &edge)
	_ = r.c.Get(ctx, types.NamespacedName{Namespace: r.ns, Name: "forever"}, &forever)
	if edge.Status.Expires == nil || !edge.Status.Expires.Time.Equal(edge.CreationTimestamp.Add(time.Hour)) {
		t.Errorf("token with ttl 1h: expires %v, created %v", edge.Status.Expires, edge.CreationTimestamp)
	}
	if forever.Status.Expires == nil || !forever.Status.Expires.Time.Equal(forever.CreationTimestamp.Add(clusters.DefaultRegistrationTokenTTL)) {
		t.Errorf("token without ttl expires at %v, want the default %s after its creation %v", forever.Status.Expires, clusters.DefaultRegistrationTokenTTL, forever.CreationTimestamp)
	}
	agentA := r.bearer("edge")

	// A token's bearer names its own token, or the API server refuses the registration.
	pub, _, _ := box.GenerateKey(rand.Reader)
	forged := &v1alpha1.ClusterRegistration{ObjectMeta: metav1.ObjectMeta{Name: "forged", Namespace: r.ns},
		Spec: v1alpha1.ClusterRegistrationSpec{ClientID: "x", TokenName: "forever", PublicKey: pub[:]}}
	// The API server enforces a policy a moment after the policy is created (this package's
	// control plane may have just started): dry runs, which create nothing, are tried until
	// one is refused, then the forgery itself.
	waitUntil(t, "the API server refuses a dry run of the forged registration", func() bool {
		err := agentA.Create(ctx, forged.DeepCopy(), client.DryRunAll)
		return apierrors.IsForbidden(err) || apierrors.IsInvalid(err)
	})
	if err := agentA.Create(ctx, forged); !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
		t.Errorf("a registration naming another token: want it refused, got %v", err)
	}

	// First registration: the Cluster gets the token's labels and an owned namespace.
	reg, _, priv := r.register(agentA, "site-a-1", "edge", "site-a", "id-a")
	if !reg.Status.Granted {
		t.Fatalf("site-a not granted: %s", heldFor(reg))
	}
	var site v1alpha1.Cluster
	if err := r.c.Get(ctx, types.NamespacedName{Namespace: r.ns, Name: "site-a"}, &site); err != nil {
		t.Fatal(err)
	}
	if len(site.Labels) != 1 || site.Labels["env"] != "staging" || site.Status.Namespace != access.ClusterNamespace(r.ns, "site-a") {
		t.Errorf("site-a: labels %v namespace %q, want the token's labels and %s", site.Labels, site.Status.Namespace, access.ClusterNamespace(r.ns, "site-a"))
	}
	// Created with the access finalizer: a registered cluster costs no write to add it.
	if !slices.Contains(site.Finalizers, access.ClusterFinalizer) {
		t.Errorf("site-a: finalizers %v, want %s from its creation (no access controller runs here)", site.Finalizers, access.ClusterFinalizer)
	}
	victimPub := reg.Spec.PublicKey
	victimToken, ok := box.OpenAnonymous(nil, reg.Status.Credentials, (*[32]byte)(victimPub), priv)
	if !ok {
		t.Fatal("the granted credentials do not open with the agent's key")
	}
	victim := r.clientWith(string(victimToken))
	readsOwnCluster := func(c client.Client) error {
		var cl v1alpha1.Cluster
		return c.Get(ctx, types.NamespacedName{Namespace: r.ns, Name: "site-a"}, &cl)
	}
	waitUntil(t, "the agent of site-a reads its Cluster", func() bool { return readsOwnCluster(victim) == nil })

	// Replaying the client id (no secret) or another id for a registered cluster: held for
	// approval, no credentials, the cluster's identity and its agent's access unchanged.
	for i, id := range []string{"id-a", "id-evil"} {
		held, _, _ := r.register(agentA, "site-a-replay-"+string(rune('1'+i)), "edge", "site-a", id)
		if held.Status.Granted || len(held.Status.Credentials) > 0 || !strings.HasPrefix(heldFor(held), v1alpha1.AwaitingApprovalReason) {
			t.Errorf("replay with client id %s: granted=%v credentials=%d condition %q", id, held.Status.Granted, len(held.Status.Credentials), heldFor(held))
		}
	}
	if err := r.c.Get(ctx, types.NamespacedName{Namespace: r.ns, Name: "site-a"}, &site); err != nil || site.Annotations[v1alpha1.ClientIDAnnotation] != "id-a" {
		t.Errorf("site-a's identity changed: %v %v", site.Annotations, err)
	}
	if err := readsOwnCluster(victim); err != nil {
		t.Errorf("the registered agent lost access to a replay: %v", err)
	}

	// Rate limit: the token's burst is 2; the second new cluster is granted, the third waits
	// and nothing of it is created.
	if reg, _, _ := r.register(agentA, "site-b-1", "edge", "site-b", "id-b"); !reg.Status.Granted {
		t.Errorf("site-b: %s", heldFor(reg))
	}
	reg, _, _ = r.register(agentA, "site-c-1", "edge", "site-c", "id-c")
	if reg.Status.Granted || !strings.HasPrefix(heldFor(reg), v1alpha1.RateLimitedReason) {
		t.Errorf("site-c past the rate limit: granted=%v %q", reg.Status.Granted, heldFor(reg))
	}
	if err := r.c.Get(ctx, types.NamespacedName{Namespace: r.ns, Name: "site-c"}, &v1alpha1.Cluster{}); !apierrors.IsNotFound(err) {
		t.Errorf("a rate-limited registration created its Cluster: %v", err)
	}

	// The operator approves the second replay: it takes site-a over and the former agent's
	// token stops working.
	r.regs.Limits = clusters.TokenLimits{Every: time.Hour, Burst: 10}
	if _, err := operate.ApproveRegistration(ctx, r.c, r.ns, "site-a-replay-2"); err != nil {
		t.Fatal(err)
	}
	if reg := r.reconcile("site-a-replay-2"); !reg.Status.Granted {
		t.Fatalf("approved registration not granted: %s", heldFor(reg))
	}
	if _, err := operate.ApproveRegistration(ctx, r.c, r.ns, "site-b-1"); err == nil {
		t.Error("approved a registration that does not wait for approval")
	}
	waitUntil(t, "the replaced agent's token is refused", func() bool { return apierrors.IsUnauthorized(readsOwnCluster(victim)) })
	if err := r.c.Get(ctx, types.NamespacedName{Namespace: r.ns, Name: "site-a"}, &site); err != nil || site.Annotations[v1alpha1.ClientIDAnnotation] != "id-evil" {
		t.Errorf("after approval site-a's identity is %v (%v), want id-evil", site.Annotations, err)
	}

	// Past its TTL the token registers nothing.
	r.now = edge.Status.Expires.Add(time.Second)
	reg, _, _ = r.register(agentA, "site-d-1", "edge", "site-d", "id-d")
	if reg.Status.Granted || !strings.Contains(heldFor(reg), "expired") {
		t.Errorf("registration past the token's TTL: granted=%v %q", reg.Status.Granted, heldFor(reg))
	}
	r.now = time.Now()

	// Deleting a token revokes its bearer token and registers nothing more with it.
	if err := r.c.Delete(ctx, &edge); err != nil {
		t.Fatal(err)
	}
	r.reconcileToken("edge")
	if err := r.c.Get(ctx, types.NamespacedName{Namespace: r.ns, Name: "edge"}, &edge); !apierrors.IsNotFound(err) {
		t.Errorf("the deleted token stays: %v", err)
	}
	waitUntil(t, "the deleted token's bearer is refused", func() bool {
		err := agentA.Create(ctx, &v1alpha1.ClusterRegistration{ObjectMeta: metav1.ObjectMeta{Name: "after-delete", Namespace: r.ns},
			Spec: v1alpha1.ClusterRegistrationSpec{ClientID: "z", TokenName: "edge", PublicKey: pub[:]}})
		return apierrors.IsUnauthorized(err)
	})
	if reg := r.reconcile("site-c-1"); reg.Status.Granted || !strings.Contains(heldFor(reg), "registration token edge does not exist") {
		t.Errorf("a registration of a deleted token: granted=%v %q", reg.Status.Granted, heldFor(reg))
	}
}

// A hub whose own API address is the in-cluster one gives its tokens no address (no agent on
// another cluster could reach it) and says so on the token, instead of a Secret whose agents
// fail to connect.
func TestTokenOfAHubWithAnInClusterAddressSaysWhyItHasNone(t *testing.T) {
	r := newRegistrar(t, 1)
	r.tokens.Endpoint = clusters.AgentEndpoint{Server: "https://10.96.0.1:443", Ca: hubCluster.Config().CAData, InCluster: true}
	ctx := context.Background()
	tok := r.issue("edge")
	ready := meta.FindStatusCondition(tok.Status.Conditions, v1alpha1.ReadyCondition)
	if ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != v1alpha1.InClusterAddressReason ||
		!strings.Contains(ready.Message, "https://10.96.0.1:443") || !strings.Contains(ready.Message, "--agent-api-server-url") {
		t.Errorf("the token's Ready condition: %+v", ready)
	}
	var secret corev1.Secret
	if err := r.c.Get(ctx, types.NamespacedName{Namespace: r.ns, Name: tok.Status.SecretName}, &secret); err != nil {
		t.Fatal(err)
	}
	if server := secret.Data[clusters.RegistrationServer]; len(server) != 0 {
		t.Errorf("the Secret gives agents the in-cluster address %q", server)
	}
}

// A Cluster an operator created before its agent registered (`flotilla agent install --label`)
// is claimed only with the token it was made for; another token's registration waits for an
// approval and gets nothing, and the Cluster keeps its identity.
func TestAPreCreatedClusterIsClaimedOnlyWithItsToken(t *testing.T) {
	r := newRegistrar(t, 10)
	ctx := context.Background()
	r.issue("prod-tokens")
	r.issue("lab-tokens")
	for name, token := range map[string]string{"prod-db": "prod-tokens", "unnamed": ""} {
		cl := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: r.ns, Labels: map[string]string{"tier": "db"}}}
		if token != "" {
			cl.Annotations = map[string]string{v1alpha1.RegistrationTokenAnnotation: token}
		}
		if err := r.c.Create(ctx, cl); err != nil {
			t.Fatal(err)
		}
	}
	lab := r.bearer("lab-tokens")
	for _, cluster := range []string{"prod-db", "unnamed"} {
		held, _, _ := r.register(lab, "lab-claims-"+cluster, "lab-tokens", cluster, "id-lab-"+cluster)
		if held.Status.Granted || len(held.Status.Credentials) > 0 || !strings.HasPrefix(heldFor(held), v1alpha1.AwaitingApprovalReason) || !strings.Contains(heldFor(held), "not lab-tokens") {
			t.Errorf("another token's registration for %s: granted=%v credentials=%d %q", cluster, held.Status.Granted, len(held.Status.Credentials), heldFor(held))
		}
		var cl v1alpha1.Cluster
		if err := r.c.Get(ctx, types.NamespacedName{Namespace: r.ns, Name: cluster}, &cl); err != nil || cl.Annotations[v1alpha1.ClientIDAnnotation] != "" || cl.Status.Namespace != "" {
			t.Errorf("%s changed hands: %v %+v %v", cluster, cl.Annotations, cl.Status, err)
		}
	}
	if reg, _, _ := r.register(r.bearer("prod-tokens"), "prod-claims", "prod-tokens", "prod-db", "id-prod"); !reg.Status.Granted {
		t.Errorf("the token the cluster was made for: %s", heldFor(reg))
	}
}

// A registration whose Cluster is not admitted says nothing while that is a moment's wait (no
// status write: a storm of registrations pays none) or while other registrations' Clusters of
// its namespace are being admitted (it is queued behind them), says so once admission there
// stood still for long, and is granted as soon as its Cluster is admitted.
func TestARegistrationSaysWhenItsClusterIsNotAdmittedForLong(t *testing.T) {
	r := newRegistrar(t, 10)
	ctx := context.Background()
	r.issue("edge-tokens")
	reg := &v1alpha1.ClusterRegistration{ObjectMeta: metav1.ObjectMeta{Name: "edge-1", Namespace: r.ns},
		Spec: v1alpha1.ClusterRegistrationSpec{ClientID: "id-edge-1", ClusterName: "edge-1", TokenName: "edge-tokens", PublicKey: make([]byte, 32)}}
	if err := r.bearer("edge-tokens").Create(ctx, reg); err != nil {
		t.Fatal(err)
	}
	key := types.NamespacedName{Namespace: r.ns, Name: reg.Name}
	pass := func() (*v1alpha1.ClusterRegistration, ctrl.Result) {
		t.Helper()
		res, err := r.regs.Controller().Reconcile(ctx, ctrl.Request{NamespacedName: key})
		if err != nil {
			t.Fatal(err)
		}
		var got v1alpha1.ClusterRegistration
		if err := r.c.Get(ctx, key, &got); err != nil {
			t.Fatal(err)
		}
		return &got, res
	}
	r.now = reg.CreationTimestamp.Time
	got, res := pass()
	if got.Status.Granted || len(got.Status.Conditions) != 0 || res.RequeueAfter <= 0 {
		t.Errorf("at once: granted=%v conditions %+v, a look again in %v", got.Status.Granted, got.Status.Conditions, res.RequeueAfter)
	}
	written := got.ResourceVersion
	if got, _ = pass(); got.ResourceVersion != written {
		t.Errorf("a second pass while the Cluster is being admitted wrote the registration")
	}
	// Another registration's Cluster is admitted and granted 90 s on: admission moves.
	created := reg.CreationTimestamp.Time
	r.now = created.Add(90 * time.Second)
	if other, _, _ := r.register(r.bearer("edge-tokens"), "edge-2", "edge-tokens", "edge-2", "id-edge-2"); !other.Status.Granted {
		t.Fatalf("edge-2: %s", heldFor(other))
	}
	r.now = created.Add(3 * time.Minute)
	if got, res = pass(); got.ResourceVersion != written || res.RequeueAfter != 30*time.Second {
		t.Errorf("three minutes on, another cluster admitted 90 s before: written %v (%q), a look again in %v (want 30s)", got.ResourceVersion != written, heldFor(got), res.RequeueAfter)
	}
	// A registration of another fleet namespace admitted meanwhile says nothing about this one's.
	other := newRegistrar(t, 10)
	other.regs = r.regs
	other.issue("other-tokens")
	r.now = created.Add(3*time.Minute + 15*time.Second)
	if o, _, _ := other.register(other.bearer("other-tokens"), "other-1", "other-tokens", "other-1", "id-other-1"); !o.Status.Granted {
		t.Fatalf("other-1: %s", heldFor(o))
	}
	r.now = created.Add(3*time.Minute + 30*time.Second)
	if got, _ = pass(); got.Status.Granted || !strings.HasPrefix(heldFor(got), v1alpha1.WaitingForAdmissionReason) || !strings.Contains(heldFor(got), "cluster edge-1 is not admitted yet") {
		t.Errorf("two minutes without an admission in its namespace (one in another 15 s before): granted=%v, %q", got.Status.Granted, heldFor(got))
	}
	if _, err := r.access.Controller().Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: r.ns, Name: "edge-1"}}); err != nil {
		t.Fatal(err)
	}
	if got, _ = pass(); !got.Status.Granted || heldFor(got) != "" {
		t.Errorf("admitted: granted=%v, %q", got.Status.Granted, heldFor(got))
	}
}

// A Secret created beforehand under the name a token's Secret had is never taken for it: the
// hub names the token's Secret itself, and the Secret it names holds the hub's address.
func TestAPlantedRegistrationSecretIsNotAdopted(t *testing.T) {
	r := newRegistrar(t, 1)
	ctx := context.Background()
	planted := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "edge-registration", Namespace: r.ns},
		StringData: map[string]string{clusters.RegistrationServer: "https://hub.attacker.invalid", clusters.RegistrationToken: "planted"}}
	if err := r.c.Create(ctx, planted); err != nil {
		t.Fatal(err)
	}
	tok := r.issue("edge")
	var secret corev1.Secret
	if tok.Status.SecretName == planted.Name {
		t.Fatalf("the planted secret was adopted")
	}
	if err := r.c.Get(ctx, types.NamespacedName{Namespace: r.ns, Name: tok.Status.SecretName}, &secret); err != nil {
		t.Fatal(err)
	}
	if got := string(secret.Data[clusters.RegistrationServer]); got != hubCluster.Config().Host || string(secret.Data[clusters.RegistrationToken]) == "planted" {
		t.Errorf("the token's secret gives agents %q and token %q", got, secret.Data[clusters.RegistrationToken])
	}
}

// staleTokens reads registration tokens as a cache that has not seen their issue yet: metadata
// current, status empty.
type staleTokens struct{ client.Client }

func (c staleTokens) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if err := c.Client.Get(ctx, key, obj, opts...); err != nil {
		return err
	}
	if tok, ok := obj.(*v1alpha1.ClusterRegistrationToken); ok {
		tok.Status = v1alpha1.ClusterRegistrationTokenStatus{}
	}
	return nil
}

// A token's pass on a cache a moment behind its issue (its finalizer's write wakes one at
// once) issues no second bearer token: a second Secret would stay behind when the token is
// deleted, out of the revocation's reach.
func TestATokenIsIssuedOnceWhateverTheCacheShows(t *testing.T) {
	r := newRegistrar(t, 1)
	ctx := context.Background()
	tok := r.issue("edge")
	stale := *r.tokens
	stale.Client, stale.Uncached = staleTokens{r.c}, r.c
	if _, err := stale.Controller().Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(tok)}); err != nil {
		t.Fatal(err)
	}
	var secrets corev1.SecretList
	if err := r.c.List(ctx, &secrets, client.InNamespace(r.ns), client.MatchingLabels{v1alpha1.RegistrationTokenAnnotation: tok.Name}); err != nil {
		t.Fatal(err)
	}
	var after v1alpha1.ClusterRegistrationToken
	if err := r.c.Get(ctx, client.ObjectKeyFromObject(tok), &after); err != nil {
		t.Fatal(err)
	}
	if len(secrets.Items) != 1 || after.Status.SecretName != tok.Status.SecretName {
		names := []string{}
		for _, s := range secrets.Items {
			names = append(names, s.Name)
		}
		t.Errorf("token issued %d times (Secrets %v); its status names %q, first issued as %q", len(secrets.Items), names, after.Status.SecretName, tok.Status.SecretName)
	}
}
