// Package notify passes what the hub's Events tell to where people work: the operator's
// NotificationProviders (a Slack-compatible or Microsoft Teams webhook, a JSON endpoint signed
// with HMAC, a CloudEvents receiver), as the Alerts of the same namespace choose. Every story
// the Events tell can be sent, and nothing else: the Recorder hands each Event it records
// (never its repetitions, never more than its per-object rate limit) to Tell.
//
// It never slows the hub: Tell drops an Event when the queue is full (counted), deliveries run
// on a few workers of their own, with retries and backoff, and each alert has a rate limit.
// Tenancy is by construction: an alert sees only events about objects of its own namespace,
// names its provider without a namespace, and a provider's secrets are read from its own
// namespace alone. It writes the status of Alerts and NotificationProviders, and only when
// what they say changes (a provider that gave up delivering, or recovered), never per message.
package notify

import (
	"context"
	"slices"
	"sync"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/events"
	"github.com/flotilla-dev/flotilla/hub/metrics"
)

// Limits and defaults of a Dispatcher.
const (
	// QueueSize bounds the events waiting to be matched, and the messages waiting for a worker.
	QueueSize = 1024
	// Workers deliver messages; a provider that is down holds at most one of them per message.
	Workers = 4
	// Attempts is how many times a message is tried before its provider is said to fail.
	Attempts = 4
	// DedupeWindow: the same event for the same alert is sent once in this window.
	DedupeWindow = 10 * time.Minute
	// DefaultRateLimit is an alert's messages per minute when it sets none.
	DefaultRateLimit = 30
)

// Subject is an object an event is about, or one it belongs to: a run's bundle, a bundle's
// GitRepo. An event source matches any of them.
type Subject struct {
	Kind, Name string
	Labels     map[string]string
}

// Directory is what a Dispatcher reads and writes of the fleet's namespaces. The hub's reads the
// informer caches, and Secrets from the API server.
type Directory interface {
	// Alerts are the alerts of a namespace.
	Alerts(ctx context.Context, ns string) ([]v1alpha1.Alert, error)
	// Lineage is what an event's object belongs to, beyond itself: its bundle and its GitRepo.
	Lineage(ctx context.Context, t events.Told) []Subject
	// Provider resolves a provider of namespace ns, with its secrets.
	Provider(ctx context.Context, ns, name string) (*Endpoint, error)
	// ReportProvider says whether deliveries to a provider succeed (err nil) or gave up.
	ReportProvider(ctx context.Context, ns, name string, err error)
	// ReportAlert says whether an alert can deliver (problem "") or why not.
	ReportAlert(ctx context.Context, ns, name, reason, problem string)
}

// Dispatcher matches the events it is told against the alerts of their namespace and delivers
// the messages. Start runs it.
type Dispatcher struct {
	dir Directory
	// DashboardURL, when set, is the base of the links messages carry.
	DashboardURL string
	// Backoff is the wait before the second attempt, doubled for each next; default 1s.
	Backoff time.Duration
	now     func() time.Time

	told chan events.Told
	jobs chan job

	mu       sync.Mutex
	sent     map[dedupeKey]time.Time
	limits   map[types.UID]*rate.Limiter
	compiled map[types.UID]compiledSummary
}

type dedupeKey struct {
	alert                    types.UID
	kind, name, reason, note string
}

// job is one message for one provider.
type job struct {
	alertNS, alertName string
	provider           string
	msg                Message
}

// NewDispatcher returns a Dispatcher reading dir; now is its clock (time.Now when nil).
func NewDispatcher(dir Directory, now func() time.Time) *Dispatcher {
	if now == nil {
		now = time.Now
	}
	return &Dispatcher{dir: dir, now: now, Backoff: time.Second, told: make(chan events.Told, QueueSize), jobs: make(chan job, QueueSize),
		sent: map[dedupeKey]time.Time{}, limits: map[types.UID]*rate.Limiter{}, compiled: map[types.UID]compiledSummary{}}
}

// Tell queues an event; it never blocks (a full queue drops it, counted).
func (d *Dispatcher) Tell(t events.Told) {
	select {
	case d.told <- t:
	default:
		metrics.Notifications.WithLabelValues("unresolved", "dropped").Inc()
	}
}

// NeedLeaderElection is false: a replica passes on the Events its own controllers recorded,
// and only the leader's record any.
func (d *Dispatcher) NeedLeaderElection() bool { return false }

// Start matches and delivers until ctx ends (a manager.Runnable).
func (d *Dispatcher) Start(ctx context.Context) error {
	var wg sync.WaitGroup
	for range Workers {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case j := <-d.jobs:
					d.deliver(ctx, j)
				}
			}
		})
	}
	sweep := time.NewTicker(time.Minute)
	defer sweep.Stop()
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			return nil
		case t := <-d.told:
			d.dispatch(ctx, t)
		case <-sweep.C:
			d.forget()
		}
	}
}

// dispatch queues a message for every alert of the event's namespace that selects it.
func (d *Dispatcher) dispatch(ctx context.Context, t events.Told) {
	alerts, err := d.dir.Alerts(ctx, t.Namespace)
	if err != nil {
		log.FromContext(ctx).Info("notifications: alerts not read", "namespace", t.Namespace, "error", err.Error())
		return
	}
	var lineage []Subject
	for i := range alerts {
		a := &alerts[i]
		if !selects(a, t) {
			continue
		}
		if lineage == nil {
			lineage = append([]Subject{{Kind: t.Kind, Name: t.Name, Labels: t.Labels}}, d.dir.Lineage(ctx, t)...)
		}
		if !slices.ContainsFunc(a.Spec.EventSources, func(s v1alpha1.EventSource) bool { return sourceMatches(s, lineage) }) {
			continue
		}
		summary, err := d.summary(a)
		if err != nil {
			d.dir.ReportAlert(ctx, a.Namespace, a.Name, "InvalidSummary", "spec.summary: "+err.Error())
			continue
		}
		if fresh, allowed := d.admit(a, t); !fresh {
			continue // sent already within DedupeWindow
		} else if !allowed {
			// Said, so that an operator who misses a message finds why.
			log.FromContext(ctx).Info("notification dropped: the alert's rate limit", "alert", a.Namespace+"/"+a.Name, "reason", t.Reason, "object", t.Kind+"/"+t.Name)
			metrics.Notifications.WithLabelValues("unresolved", "rate_limited").Inc()
			continue
		}
		msg := newMessage(t, d.DashboardURL)
		if msg.Summary, err = summary.render(t); err != nil {
			d.dir.ReportAlert(ctx, a.Namespace, a.Name, "InvalidSummary", "spec.summary: "+err.Error())
			continue
		}
		select {
		case d.jobs <- job{alertNS: a.Namespace, alertName: a.Name, provider: a.Spec.ProviderRef.Name, msg: msg}:
		default:
			metrics.Notifications.WithLabelValues("unresolved", "dropped").Inc()
		}
	}
}

// selects applies an alert's own filters: suspension, severity and reasons.
func selects(a *v1alpha1.Alert, t events.Told) bool {
	switch {
	case a.Spec.Suspend:
		return false
	case a.Spec.EventSeverity == v1alpha1.SeverityError && t.Type != corev1.EventTypeWarning:
		return false
	case len(a.Spec.InclusionList) > 0 && !slices.Contains(a.Spec.InclusionList, v1alpha1.EventReason(t.Reason)):
		return false
	}
	return !slices.Contains(a.Spec.ExclusionList, v1alpha1.EventReason(t.Reason))
}

// sourceMatches: the source names the kind of a subject, its name (or "*"), and labels it has.
func sourceMatches(s v1alpha1.EventSource, lineage []Subject) bool {
	for _, sub := range lineage {
		if sub.Kind != s.Kind || (s.Name != "" && s.Name != "*" && s.Name != sub.Name) {
			continue
		}
		matches := true
		for k, v := range s.MatchLabels {
			if got, ok := sub.Labels[k]; !ok || got != v {
				matches = false
			}
		}
		if matches {
			return true
		}
	}
	return false
}

// admit deduplicates the event for the alert (fresh: not sent within DedupeWindow) and applies
// its rate limit (allowed).
func (d *Dispatcher) admit(a *v1alpha1.Alert, t events.Told) (fresh, allowed bool) {
	now := d.now()
	key := dedupeKey{alert: a.UID, kind: t.Kind, name: t.Name, reason: t.Reason, note: t.Note}
	d.mu.Lock()
	defer d.mu.Unlock()
	if at, ok := d.sent[key]; ok && now.Sub(at) < DedupeWindow {
		return false, false
	}
	perMinute := int(a.Spec.RateLimit)
	if perMinute <= 0 {
		perMinute = DefaultRateLimit
	}
	lim := d.limits[a.UID]
	if lim == nil || lim.Burst() != perMinute {
		lim = rate.NewLimiter(rate.Every(time.Minute/time.Duration(perMinute)), perMinute)
		d.limits[a.UID] = lim
	}
	if !lim.AllowN(now, 1) {
		return true, false
	}
	d.sent[key] = now
	return true, true
}

// forget drops what the dedupe window no longer needs.
func (d *Dispatcher) forget() {
	now := d.now()
	d.mu.Lock()
	defer d.mu.Unlock()
	for k, at := range d.sent {
		if now.Sub(at) >= DedupeWindow {
			delete(d.sent, k)
		}
	}
}
