package hub

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/e2e/gitserver"
	"github.com/flotilla-dev/flotilla/e2e/testpki"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/notify"
)

// hookReceiver is a loopback generic-hmac endpoint at a path of its own: it keeps the messages
// whose signature verifies under key, and counts those that do not. A request for another path
// is not its: the hubs of this package share one API server, where earlier tests' providers
// still name the loopback addresses of their receivers, and a port the system hands out again
// may receive what a later hub delivers for them.
type hookReceiver struct {
	*httptest.Server
	key      []byte
	path     string
	mu       sync.Mutex
	messages []notify.Message
	unsigned int
}

func newHookReceiver(t *testing.T, key string) *hookReceiver {
	h := &hookReceiver{key: []byte(key), path: "/hooks/" + rand.Text()}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != h.path {
			http.NotFound(w, r)
			return
		}
		body, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		defer h.mu.Unlock()
		var m notify.Message
		if r.Header.Get(notify.SignatureHeader) != notify.Sign(h.key, body) || json.Unmarshal(body, &m) != nil {
			h.unsigned++
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		h.messages = append(h.messages, m)
	}))
	t.Cleanup(h.Close)
	return h
}

// address is where providers reach the receiver.
func (h *hookReceiver) address() string { return h.URL + h.path }

func (h *hookReceiver) reasons() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, m := range h.messages {
		out = append(out, m.Kind+"/"+m.Name+" "+m.Reason)
	}
	return out
}

func (h *hookReceiver) received() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.messages) + h.unsigned
}

// notifier defines, in ns, a Secret with the receiver's address and key, a generic-hmac
// provider using it, and an alert of the GitRepo's events (its bundles' and runs' too).
func notifier(t *testing.T, c client.Client, ns, provider, alertName string, hook *hookReceiver, providerRef string) {
	t.Helper()
	ctx := context.Background()
	for _, o := range []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: provider + "-hook"}, Data: map[string][]byte{"address": []byte(hook.address()), "hmacKey": hook.key}},
		&v1alpha1.NotificationProvider{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: provider},
			Spec: v1alpha1.NotificationProviderSpec{Type: v1alpha1.ProviderGenericHMAC, SecretRef: &v1alpha1.LocalSecretReference{Name: provider + "-hook"}}},
		&v1alpha1.Alert{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: alertName}, Spec: v1alpha1.AlertSpec{
			ProviderRef: v1alpha1.LocalSecretReference{Name: providerRef}, EventSources: []v1alpha1.EventSource{{Kind: "GitRepo", Name: "shop"}}}},
	} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
}

// alertCondition is an alert's Ready condition, nil while it has none.
func alertCondition(c client.Client, ns, name string) *metav1.Condition {
	var a v1alpha1.Alert
	if c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &a) != nil {
		return nil
	}
	return meta.FindStatusCondition(a.Status.Conditions, v1alpha1.ReadyCondition)
}

// A rollout of 500 clusters tells its story in a handful of messages, not one per cluster: the
// partitions released and the outcome, each signed with the provider's key. Another tenant's
// provider is out of reach: an alert naming a provider that exists only in another namespace,
// or a provider naming a Secret of another namespace, delivers nothing there, and the alert
// says why.
func TestNotificationsTellARolloutOf500ClustersInAFewMessagesAndOnlyToTheirOwnNamespace(t *testing.T) {
	const fleet = `defaultNamespace: web
rolloutStrategy:
  maxUnavailable: 100%
  partitions:
  - {name: canary, maxUnavailable: 0, clusterSelector: {matchLabels: {ring: canary}}}
  - {name: rest, clusterSelector: {matchLabels: {ring: main}}}
`
	clusters := map[string]map[string]string{"canary-0": {"ring": "canary"}}
	for i := range 499 {
		clusters[fmt.Sprintf("main-%03d", i)] = map[string]string{"ring": "main"}
	}
	f := newSimFleet(t, Options{DashboardURL: "https://dash.example"}, fleet, clusters)
	ctx := context.Background()

	// The other tenant: its own provider, Secret and receiver.
	other := namespace(t, f.c)
	theirs := newHookReceiver(t, "their-key")
	notifier(t, f.c, other, "team-b", "theirs", theirs, "team-b")
	// This tenant's alerts: one of its own, one naming the other's provider, one whose
	// provider names the other's Secret.
	ours := newHookReceiver(t, "our-key")
	notifier(t, f.c, f.ns, "team", "rollouts", ours, "team")
	cross := &v1alpha1.Alert{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "cross"}, Spec: v1alpha1.AlertSpec{
		ProviderRef: v1alpha1.LocalSecretReference{Name: "team-b"}, EventSources: []v1alpha1.EventSource{{Kind: "GitRepo", Name: "shop"}}}}
	borrowing := &v1alpha1.NotificationProvider{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "borrowing"},
		Spec: v1alpha1.NotificationProviderSpec{Type: v1alpha1.ProviderGenericHMAC, SecretRef: &v1alpha1.LocalSecretReference{Name: "team-b-hook"}}}
	borrow := &v1alpha1.Alert{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "borrow"}, Spec: v1alpha1.AlertSpec{
		ProviderRef: v1alpha1.LocalSecretReference{Name: "borrowing"}, EventSources: []v1alpha1.EventSource{{Kind: "GitRepo", Name: "shop"}}}}
	for _, o := range []client.Object{cross, borrowing, borrow} {
		if err := f.c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}

	f.releasedExactly(1, "partitions NotReady (canary)", "canary-0")
	f.ready("canary-0")
	f.until("all 500 clusters are released revision 1", func() bool { return len(f.released(1)) == 500 })
	var main []string
	for name := range clusters {
		if name != "canary-0" {
			main = append(main, name)
		}
	}
	f.ready(main...)
	f.until("revision 1 completes", func() bool {
		o := f.getBundle().Status.Outcome
		return o != nil && o.Revision == 1 && o.Outcome == v1alpha1.OutcomeCompleted
	})
	waitUntil(t, "the completion is delivered", func() bool { return slices.Contains(ours.reasons(), "Bundle/shop-web RolloutCompleted") },
		func() string { return fmt.Sprint(ours.reasons()) })

	got := ours.reasons()
	t.Logf("%d messages: %q", len(got), got)
	if len(got) > 12 || !slices.Contains(got, "Bundle/shop-web PartitionReleased") {
		t.Errorf("%d messages for a rollout of 500 clusters, want the partitions and the outcome only: %q", len(got), got)
	}
	for _, r := range got {
		if strings.HasPrefix(r, "Cluster/") || strings.Contains(r, "main-") {
			t.Errorf("a message about one cluster: %q", r)
		}
	}
	ours.mu.Lock()
	link, unsigned := ours.messages[len(ours.messages)-1].Link, ours.unsigned
	ours.mu.Unlock()
	if link != "https://dash.example/#/"+f.ns+"/bundle/shop-web" || unsigned != 0 {
		t.Errorf("link %q, %d unsigned: want the bundle's dashboard page, every message signed", link, unsigned)
	}

	for name, says := range map[string]string{"cross": `NotificationProvider "team-b" not found in namespace ` + f.ns, "borrow": "failed to read secret team-b-hook"} {
		waitUntil(t, "alert "+name+" says why it cannot deliver", func() bool {
			c := alertCondition(f.c, f.ns, name)
			return c != nil && c.Status == metav1.ConditionFalse && strings.Contains(c.Message, says)
		}, func() string { return fmt.Sprintf("%+v", alertCondition(f.c, f.ns, name)) })
	}
	if n := theirs.received(); n != 0 {
		t.Errorf("the other tenant's receiver got %d requests from this tenant's alerts", n)
	}
}

// A provider served over TLS by a CA of its own is reached through the CA its caSecretRef
// names, and only so: the same receiver behind a provider that trusts the system roots, or
// another CA, gets no request (the handshake fails), and each such provider says why on its
// status.
func TestNotificationsReachATLSProviderOnlyThroughItsOwnCA(t *testing.T) {
	f := newSimFleet(t, Options{}, "defaultNamespace: web\n", map[string]map[string]string{"c1": {"env": "dev"}})
	ctx := context.Background()
	hooksCA, otherCA := testpki.NewCA(t, "hooks-ca"), testpki.NewCA(t, "other-ca")
	tlsReceiver := func(key string) *hookReceiver {
		h := newHookReceiver(t, key)
		h.Close() // the plain listener; served again over TLS below
		h.Server = httptest.NewUnstartedServer(h.Config.Handler)
		h.TLS = &tls.Config{Certificates: []tls.Certificate{hooksCA.Server(t, "127.0.0.1")}}
		h.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes are the point
		h.StartTLS()
		t.Cleanup(h.Close)
		return h
	}
	trusted, systemRoots, wrongCA := tlsReceiver("k1"), tlsReceiver("k2"), tlsReceiver("k3")
	objs := []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "hooks-ca"}, Data: map[string][]byte{"ca.crt": hooksCA.PEM()}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "other-ca"}, Data: map[string][]byte{"ca.crt": otherCA.PEM()}},
	}
	for name, p := range map[string]struct {
		hook *hookReceiver
		ca   string
	}{"trusted": {trusted, "hooks-ca"}, "system-roots": {systemRoots, ""}, "wrong-ca": {wrongCA, "other-ca"}} {
		spec := v1alpha1.NotificationProviderSpec{Type: v1alpha1.ProviderGenericHMAC, SecretRef: &v1alpha1.LocalSecretReference{Name: name + "-hook"}}
		if p.ca != "" {
			spec.CASecretRef = &v1alpha1.LocalSecretReference{Name: p.ca}
		}
		objs = append(objs,
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name + "-hook"}, Data: map[string][]byte{"address": []byte(p.hook.address()), "hmacKey": p.hook.key}},
			&v1alpha1.NotificationProvider{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name}, Spec: spec},
			&v1alpha1.Alert{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name}, Spec: v1alpha1.AlertSpec{
				ProviderRef: v1alpha1.LocalSecretReference{Name: name}, EventSources: []v1alpha1.EventSource{{Kind: "GitRepo", Name: "shop"}}}})
	}
	for _, o := range objs {
		if err := f.c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	f.until("c1 is released revision 1", func() bool { return len(f.released(1)) == 1 })
	f.ready("c1")
	waitUntil(t, "the completion reaches the provider that trusts its CA", func() bool { return slices.Contains(trusted.reasons(), "Bundle/shop-web RolloutCompleted") },
		func() string { return fmt.Sprint(trusted.reasons()) })
	for _, name := range []string{"system-roots", "wrong-ca"} {
		waitUntil(t, name+" says it cannot deliver", func() bool {
			var p v1alpha1.NotificationProvider
			if f.c.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: name}, &p) != nil {
				return false
			}
			c := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ReadyCondition)
			return c != nil && c.Status == metav1.ConditionFalse && c.Reason == "DeliveryFailed" && strings.Contains(c.Message, "certificate")
		})
	}
	if n, m := systemRoots.received(), wrongCA.received(); n != 0 || m != 0 {
		t.Errorf("requests through an untrusted handshake: %d and %d", n, m)
	}
}

// A Slack webhook URL kept in a Secret, as the CRD advises, is a credential: when its delivery
// cannot connect (Go's transport error quotes the whole URL), the provider's Ready condition
// and the hub's log say that it failed and why, without the URL's path.
func TestAWebhookURLFromASecretStaysOutOfStatusAndLog(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close() // nothing listens there: the delivery cannot connect
	const credential = "T0FLEET/B0HOOK/webhook-credential-5e8f21"
	address := "http://" + closed + "/services/" + credential
	up := gitserver.New(t)
	up.Commit("main", map[string]string{"web/fleet.yaml": "defaultNamespace: web\n", "web/cm.yaml": configMap("1")})
	srv := up.ServeHTTP("", "")
	c, _ := startHub(t, Options{})
	ns := namespace(t, c)
	ctx := context.Background()
	for _, o := range []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "slack-url"}, Data: map[string][]byte{"address": []byte(address)}},
		&v1alpha1.NotificationProvider{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "slack"},
			Spec: v1alpha1.NotificationProviderSpec{Type: v1alpha1.ProviderSlack, SecretRef: &v1alpha1.LocalSecretReference{Name: "slack-url"}}},
		&v1alpha1.Alert{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "all"}, Spec: v1alpha1.AlertSpec{
			ProviderRef: v1alpha1.LocalSecretReference{Name: "slack"}, EventSources: []v1alpha1.EventSource{{Kind: "GitRepo", Name: "shop"}}}},
		&v1alpha1.GitRepo{ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: ns}, Spec: v1alpha1.GitRepoSpec{Repo: srv.URL + "/repo.git"}},
	} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	var provider v1alpha1.NotificationProvider
	waitUntil(t, "the provider says its delivery failed", func() bool {
		if c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "slack"}, &provider) != nil {
			return false
		}
		cond := meta.FindStatusCondition(provider.Status.Conditions, v1alpha1.ReadyCondition)
		return cond != nil && cond.Reason == "DeliveryFailed"
	}, func() string { return fmt.Sprintf("%+v", provider.Status) })
	msg := meta.FindStatusCondition(provider.Status.Conditions, v1alpha1.ReadyCondition).Message
	if !strings.Contains(msg, "provider unreachable") || !strings.Contains(msg, "connection refused") {
		t.Errorf("Ready says %q; want why the delivery failed", msg)
	}
	for what, text := range map[string]string{"the provider's Ready condition": msg, "the hub's log": hubLogs.String()} {
		for _, part := range []string{credential, "webhook-credential-5e8f21", url.PathEscape("/services/" + credential)} {
			if strings.Contains(text, part) {
				t.Errorf("%s holds %q: %s", what, part, text[max(0, strings.Index(text, part)-200):strings.Index(text, part)+len(part)])
			}
		}
	}
}

// A NotificationProvider reaches only where the operator's lists admit: with the hub's list
// 0.0.0.0/0 (every address but loopback, link-local and metadata, which an entry must name), a
// provider on loopback is refused and its hook receives nothing; a FleetRestriction that lists
// only 10.0.0.0/8 refuses it within a hub list that names loopback; the provider's and the
// alert's Ready conditions say which list refused.
func TestProvidersReachOnlyTheAddressesTheOperatorAllows(t *testing.T) {
	up := gitserver.New(t)
	up.Commit("main", map[string]string{"web/fleet.yaml": "defaultNamespace: web\n", "web/cm.yaml": configMap("1")})
	srv := up.ServeHTTP("", "")
	for _, tc := range []struct {
		name        string
		hub         []string
		restriction []string
		refusedBy   string
	}{
		{"the hub's list does not name loopback", []string{"0.0.0.0/0", "::/0"}, nil, "--allowed-provider-addresses"},
		{"a FleetRestriction narrows the hub's list", []string{"127.0.0.1"}, []string{"10.0.0.0/8"}, "FleetRestriction team-a spec.allowedProviderAddresses"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hook := newHookReceiver(t, "hook-key")
			c, _ := startHub(t, Options{AllowedProviderAddresses: tc.hub})
			ns := namespace(t, c)
			ctx := context.Background()
			if tc.restriction != nil {
				r := &v1alpha1.FleetRestriction{ObjectMeta: metav1.ObjectMeta{Name: "team-a", Namespace: ns}, Spec: v1alpha1.FleetRestrictionSpec{AllowedProviderAddresses: tc.restriction}}
				if err := c.Create(ctx, r); err != nil {
					t.Fatal(err)
				}
			}
			notifier(t, c, ns, "hook", "all", hook, "hook")
			if err := c.Create(ctx, &v1alpha1.GitRepo{ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: ns}, Spec: v1alpha1.GitRepoSpec{Repo: srv.URL + "/repo.git"}}); err != nil {
				t.Fatal(err)
			}
			var cond *metav1.Condition
			waitUntil(t, "the alert says its provider is refused", func() bool {
				cond = alertCondition(c, ns, "all")
				return cond != nil && cond.Status == metav1.ConditionFalse && strings.Contains(cond.Message, "not among the addresses the operator allows")
			}, func() string { return fmt.Sprintf("%+v", cond) })
			if !strings.Contains(cond.Message, tc.refusedBy) {
				t.Errorf("the alert says %q; want the list that refused named (%s)", cond.Message, tc.refusedBy)
			}
			if n := hook.received(); n != 0 {
				t.Errorf("the hook received %d requests", n)
			}
		})
	}
}
