package notify

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/flotilla-dev/flotilla/bundle/scrub"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/endpoint"
	"github.com/flotilla-dev/flotilla/hub/events"
	"github.com/flotilla-dev/flotilla/hub/model"
)

// resolvedFor is how long a provider's secrets are reused before they are read again.
const resolvedFor = 30 * time.Second

// Cluster is the hub's Directory: alerts, providers, runs, bundles, GitRepos and HelmOps from the
// informer cache (Cached), Secrets from the API server (Uncached: the hub caches no Secret).
type Cluster struct {
	Cached, Uncached client.Reader
	// Status writes the status of alerts and providers.
	Status client.Client
	// Addresses is the hub's allow-list of where providers may be reached (with the
	// namespace's FleetRestrictions').
	Addresses endpoint.AddressList

	mu        sync.Mutex
	endpoints map[client.ObjectKey]resolved
}

type resolved struct {
	ep      *Endpoint
	version string
	at      time.Time
}

// Alerts lists the alerts of a namespace from the cache.
func (c *Cluster) Alerts(ctx context.Context, ns string) ([]v1alpha1.Alert, error) {
	var list v1alpha1.AlertList
	if err := c.Cached.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return nil, fmt.Errorf("failed to list alerts: %w", err)
	}
	return list.Items, nil
}

// Lineage is a run's bundle and a bundle's GitRepo or HelmOp, as the cache has them.
func (c *Cluster) Lineage(ctx context.Context, t events.Told) []Subject {
	var out []Subject
	bundle := ""
	switch t.Kind {
	case "StagedUpdateRun":
		var run v1alpha1.StagedUpdateRun
		if c.Cached.Get(ctx, client.ObjectKey{Namespace: t.Namespace, Name: t.Name}, &run) == nil {
			bundle = run.Spec.Bundle
		}
	case "Bundle":
		bundle = t.Name
	}
	if bundle == "" {
		return nil
	}
	var bun v1alpha1.Bundle
	if c.Cached.Get(ctx, client.ObjectKey{Namespace: t.Namespace, Name: bundle}, &bun) != nil {
		return nil
	}
	if t.Kind != "Bundle" {
		out = append(out, Subject{Kind: "Bundle", Name: bun.Name, Labels: bun.Labels})
	}
	if repo := bun.Labels[model.LabelGitRepo]; repo != "" {
		var gr v1alpha1.GitRepo
		if c.Cached.Get(ctx, client.ObjectKey{Namespace: t.Namespace, Name: repo}, &gr) == nil {
			out = append(out, Subject{Kind: "GitRepo", Name: gr.Name, Labels: gr.Labels})
		}
	}
	if name := bun.Labels[model.LabelHelmOp]; name != "" {
		var op v1alpha1.HelmOp
		if c.Cached.Get(ctx, client.ObjectKey{Namespace: t.Namespace, Name: name}, &op) == nil {
			out = append(out, Subject{Kind: "HelmOp", Name: op.Name, Labels: op.Labels})
		}
	}
	return out
}

// Provider resolves a provider of namespace ns: its address (the Secret's address key over
// spec.address), its token or HMAC key, and a client that trusts its CA, connects directly
// (no proxy) and follows no redirect.
func (c *Cluster) Provider(ctx context.Context, ns, name string) (*Endpoint, error) {
	key := client.ObjectKey{Namespace: ns, Name: name}
	var p v1alpha1.NotificationProvider
	if err := c.Cached.Get(ctx, key, &p); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("NotificationProvider %q not found in namespace %s: an alert names a provider of its own namespace", name, ns)
		}
		return nil, fmt.Errorf("failed to read NotificationProvider %s: %w", name, err)
	}
	c.mu.Lock()
	r, ok := c.endpoints[key]
	c.mu.Unlock()
	if ok && r.version == p.ResourceVersion && time.Since(r.at) < resolvedFor {
		return r.ep, nil
	}
	ep, err := c.resolve(ctx, &p)
	if err != nil {
		return nil, fmt.Errorf("NotificationProvider %s: %w", name, err)
	}
	c.mu.Lock()
	if c.endpoints == nil {
		c.endpoints = map[client.ObjectKey]resolved{}
	}
	c.endpoints[key] = resolved{ep: ep, version: p.ResourceVersion, at: time.Now()}
	c.mu.Unlock()
	return ep, nil
}

func (c *Cluster) resolve(ctx context.Context, p *v1alpha1.NotificationProvider) (*Endpoint, error) {
	ep := &Endpoint{Type: p.Spec.Type, URL: p.Spec.Address, Suspend: p.Spec.Suspend, Timeout: DefaultTimeout, Secrets: &scrub.Secrets{}}
	if t := p.Spec.Timeout; t != nil && t.Duration > 0 {
		ep.Timeout = t.Duration
	}
	if ref := p.Spec.SecretRef; ref != nil {
		// One read of the Secret, of the provider's own namespace, for all its keys.
		var secret corev1.Secret
		if err := c.Uncached.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: ref.Name}, &secret); err != nil {
			return nil, fmt.Errorf("failed to read secret %s: %w", ref.Name, err)
		}
		if a := strings.TrimSpace(string(secret.Data["address"])); a != "" {
			ep.URL = a
			ep.Secrets.Add(addressSecrets(a)...)
		}
		ep.Token, ep.HMACKey = strings.TrimSpace(string(secret.Data["token"])), secret.Data["hmacKey"]
		ep.Secrets.Add(ep.Token, string(ep.HMACKey))
	}
	if ep.URL == "" && ep.Type.Forge() {
		ep.URL = forgeBase[ep.Type]
	}
	if ep.Type == v1alpha1.ProviderGenericHMAC && len(ep.HMACKey) == 0 {
		return nil, fmt.Errorf("generic-hmac needs the hmacKey of secret %s", secretName(p))
	}
	if err := endpoint.CheckURL(ep.URL); err != nil {
		// The address may be the Secret's: the error says what is wrong with it, not what it is.
		return nil, ep.Secrets.Error(fmt.Errorf("address: %w", err))
	}
	policy, err := endpoint.PolicyFor(ctx, c.Cached, p.Namespace, c.Addresses)
	if err != nil {
		return nil, err
	}
	if err := policy.CheckAddress(ep.URL); err != nil {
		return nil, ep.Secrets.Error(fmt.Errorf("address: %w", err))
	}
	hc, err := endpoint.NewClient(ctx, c.Uncached, p.Namespace, endpoint.Options{CA: p.Spec.CASecretRef, Allowed: policy})
	if err != nil {
		return nil, err
	}
	ep.Client = hc
	return ep, nil
}

// addressSecrets are the parts of an address kept in a Secret that are secret: the whole, and
// what follows the host (a webhook URL's path and query carry its credential), each as it is
// and as Go's URL errors print it.
func addressSecrets(address string) []string {
	out := []string{address}
	if u, err := url.Parse(address); err == nil {
		out = append(out, u.String(), u.EscapedPath(), u.Path, u.RawQuery)
		if pass, ok := u.User.Password(); ok {
			out = append(out, pass)
		}
	}
	return out
}

func secretName(p *v1alpha1.NotificationProvider) string {
	if p.Spec.SecretRef == nil {
		return "(none: set secretRef)"
	}
	return p.Spec.SecretRef.Name
}

// ReportProvider sets the provider's Ready condition when it changes: False with the error once
// a delivery gave up, True once one succeeded.
func (c *Cluster) ReportProvider(ctx context.Context, ns, name string, failure error) {
	cond := metav1.Condition{Type: v1alpha1.ReadyCondition, Status: metav1.ConditionTrue, Reason: "Delivered", Message: "the last message was delivered"}
	if failure != nil {
		cond = metav1.Condition{Type: v1alpha1.ReadyCondition, Status: metav1.ConditionFalse, Reason: "DeliveryFailed", Message: truncate(failure.Error(), 1024)}
	}
	var p v1alpha1.NotificationProvider
	if c.Cached.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &p) != nil {
		return
	}
	orig := p.DeepCopy()
	if setCondition(&p.Status.Conditions, cond, p.Generation) {
		c.written(ctx, ns, name, c.Status.Status().Patch(ctx, &p, client.MergeFrom(orig)))
	}
}

// ReportAlert sets the alert's Ready condition when it changes.
func (c *Cluster) ReportAlert(ctx context.Context, ns, name, reason, problem string) {
	cond := metav1.Condition{Type: v1alpha1.ReadyCondition, Status: metav1.ConditionTrue, Reason: "Ready", Message: "the alert delivers to its provider"}
	if problem != "" {
		cond = metav1.Condition{Type: v1alpha1.ReadyCondition, Status: metav1.ConditionFalse, Reason: reason, Message: truncate(problem, 1024)}
	}
	var a v1alpha1.Alert
	if c.Cached.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &a) != nil {
		return
	}
	orig := a.DeepCopy()
	if setCondition(&a.Status.Conditions, cond, a.Generation) {
		c.written(ctx, ns, name, c.Status.Status().Patch(ctx, &a, client.MergeFrom(orig)))
	}
}

// setCondition sets cond and reports whether that changed what the condition says: its
// status or reason, or the generation it observed. A provider failing message after message
// is written once.
func setCondition(conds *[]metav1.Condition, cond metav1.Condition, gen int64) bool {
	if was := meta.FindStatusCondition(*conds, cond.Type); was != nil && was.Status == cond.Status && was.Reason == cond.Reason && was.ObservedGeneration == gen {
		return false
	}
	cond.ObservedGeneration = gen
	meta.SetStatusCondition(conds, cond)
	return true
}

func (c *Cluster) written(ctx context.Context, ns, name string, err error) {
	if err != nil {
		log.FromContext(ctx).Info("notifications: status not written", "object", ns+"/"+name, "error", err.Error())
	}
}
