package liveness

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/model"
)

// Liveness decides whether a cluster's agent is online (R1.11). An agent renews its Lease in
// its cluster's namespace (v1alpha1.AgentLeaseName); an agent from before Leases writes the
// time into its Cluster's status instead, and either keeps the cluster online.
//
// The renewal time is the agent's claim, read on the agent's clock and compared with the hub's:
// a wall clock stepped back on either side, or an agent that writes a time in the future,
// would keep a stopped agent online for as long as the step. So the hub also times each
// heartbeat itself: when it sees the value change, it notes the moment on its own monotonic
// clock. A heartbeat counts while both say so: it is within the deadline by the hub's wall
// clock, and the hub saw it within the deadline by its monotonic clock.
//
// Values are always read from the object judged (a Cluster, or the Lease in the cache), never
// only from what the hub noted: the informer's handlers see an update in no fixed order, and
// a controller woken by it must judge it as it is.
type Liveness struct {
	// monotonic is time elapsed on the hub's monotonic clock (time.Since of a fixed start).
	monotonic func() time.Duration
	// Leases reads the agents' Leases (the hub's cache).
	Leases client.Reader
	// leaseStore, when set, is the Lease informer's own store, which leasesOf reads instead of
	// Leases: a planning pass asks for the Lease of every cluster of its bundle, and the
	// client's Get finds the kind, the informer and the object by reflection each time (a
	// third of a 10,000-cluster pass).
	leaseStore toolscache.Store
	// interval and deadline apply to Clusters whose spec sets none.
	interval, deadline time.Duration

	mu   sync.Mutex
	seen map[heartbeatKey]heartbeatSeen
	// created holds when this hub created a Lease its cache does not show yet (by
	// namespace): the access reconciler runs several times as a cluster is admitted, and each
	// run would otherwise try to create the Lease again.
	created map[string]time.Time
}

// heartbeatKey names a stream of heartbeats: the Lease of a cluster namespace, or the status
// of a Cluster (by UID).
type heartbeatKey struct {
	lease bool
	name  string
}

// heartbeatSeen is when the hub first saw a stream's last two heartbeat values (prev is the
// one before value, for judging an update's old object).
type heartbeatSeen struct {
	value, prev time.Time
	at, prevAt  time.Duration
}

// Defaults of a Cluster's spec.heartbeatInterval and spec.heartbeatDeadline
// (Options.HeartbeatInterval, Options.HeartbeatDeadline). An idle fleet of N clusters costs the
// API server N / interval Lease renewals a second, each about 2.5 ms of its CPU on this
// project's machine (e2e/scale BenchmarkIdleFleet): 10,000 clusters renew 83 times a second, a
// tenth of two cores. A stopped agent counts as offline within the deadline, two missed
// renewals and some slack, and the hub notices a second later.
const (
	DefaultHeartbeatInterval = 2 * time.Minute
	DefaultHeartbeatDeadline = 5 * time.Minute
)

// WatchLiveness returns a liveness that observes every Cluster and agent Lease the hub's cache
// delivers.
func WatchLiveness(ctx context.Context, c cache.Cache, interval, deadline time.Duration) (*Liveness, error) {
	l := New(c, interval, deadline, nil)
	for _, o := range []client.Object{&v1alpha1.Cluster{}, &coordinationv1.Lease{}} {
		inf, err := c.GetInformer(ctx, o)
		if err != nil {
			return nil, fmt.Errorf("failed to watch agents' heartbeats: %w", err)
		}
		if store, ok := inf.(interface{ GetStore() toolscache.Store }); ok && isLease(o) {
			l.leaseStore = store.GetStore()
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    l.ObserveObject,
			UpdateFunc: func(_, o any) { l.ObserveObject(o) },
			DeleteFunc: func(o any) {
				if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
					o = d.Obj
				}
				if key, _, ok := heartbeatOf(o); ok {
					l.forget(key)
				}
			},
		}); err != nil {
			return nil, fmt.Errorf("failed to watch agents' heartbeats: %w", err)
		}
	}
	return l, nil
}

// New judges heartbeats against interval and deadline (the defaults when not set) on the
// monotonic clock given (time elapsed since a fixed start; nil is the hub's own), reading
// agents' Leases from leases.
func New(leases client.Reader, interval, deadline time.Duration, monotonic func() time.Duration) *Liveness {
	if monotonic == nil {
		start := time.Now()
		monotonic = func() time.Duration { return time.Since(start) }
	}
	return &Liveness{monotonic: monotonic, Leases: leases,
		interval: model.PositiveOr(interval, DefaultHeartbeatInterval), deadline: model.PositiveOr(deadline, DefaultHeartbeatDeadline),
		seen: map[heartbeatKey]heartbeatSeen{}, created: map[string]time.Time{}}
}

func isLease(o client.Object) bool {
	_, ok := o.(*coordinationv1.Lease)
	return ok
}

// heartbeatOf is the stream and last value of a Cluster's status or an agent's Lease.
func heartbeatOf(o any) (heartbeatKey, *time.Time, bool) {
	switch o := o.(type) {
	case *v1alpha1.Cluster:
		return heartbeatKey{name: string(o.UID)}, timeOf(o.Status.AgentLastSeen), true
	case *coordinationv1.Lease:
		if o.Name != v1alpha1.AgentLeaseName {
			return heartbeatKey{}, nil, false
		}
		var renewed *time.Time
		if o.Spec.RenewTime != nil {
			renewed = &o.Spec.RenewTime.Time
		}
		return heartbeatKey{lease: true, name: o.Namespace}, renewed, true
	}
	return heartbeatKey{}, nil, false
}

func timeOf(t *metav1.Time) *time.Time {
	if t == nil {
		return nil
	}
	return &t.Time
}

func (l *Liveness) heartbeatDeadline(c *v1alpha1.Cluster) time.Duration {
	if c.Spec.HeartbeatDeadline != nil {
		return c.Spec.HeartbeatDeadline.Duration
	}
	return l.deadline
}

func (l *Liveness) heartbeatInterval(c *v1alpha1.Cluster) time.Duration {
	if c.Spec.HeartbeatInterval != nil {
		return c.Spec.HeartbeatInterval.Duration
	}
	return l.interval
}

// ObserveObject notes the hub seeing a Cluster's or Lease's heartbeat value, if it is new. The
// hub calls it for every event its informers deliver, in order.
func (l *Liveness) ObserveObject(o any) {
	key, value, ok := heartbeatOf(o)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if key.lease {
		delete(l.created, key.name) // the cache shows it now
	}
	if value == nil {
		return
	}
	s, ok := l.seen[key]
	switch {
	case !ok:
		l.seen[key] = heartbeatSeen{value: *value, at: l.monotonic()}
	case !s.value.Equal(*value):
		l.seen[key] = heartbeatSeen{value: *value, at: l.monotonic(), prev: s.value, prevAt: s.at}
	}
}

// forget drops a deleted Cluster's or Lease's stream.
func (l *Liveness) forget(key heartbeatKey) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.seen, key)
}

// judge says whether the heartbeat value of a stream is within deadline at now (the hub's wall
// clock) and, if so, how long until it is not. value may be older than the hub's latest view
// of the stream (an update's old object): it is judged on its own.
func (l *Liveness) judge(key heartbeatKey, value *time.Time, deadline time.Duration, now time.Time) (online bool, left time.Duration) {
	if value == nil {
		return false, 0
	}
	s := heartbeatStream{key: key, value: *value}
	return l.judgeStream(&s, deadline, now)
}

// heartbeatStream is one heartbeat value read from an object, and when the hub first saw it
// on its monotonic clock, once known.
type heartbeatStream struct {
	key   heartbeatKey
	value time.Time
	noted bool
	at    time.Duration
}

// judgeStream is judge for a value read earlier. When the hub saw the value is looked up until
// found, then kept: a handler noting it may run after the stream was read (in no fixed order
// with a controller's), and a value the hub saw is judged by both clocks from then on.
func (l *Liveness) judgeStream(s *heartbeatStream, deadline time.Duration, now time.Time) (online bool, left time.Duration) {
	left = s.value.Add(deadline).Sub(now)
	if !s.noted {
		l.mu.Lock()
		seen, ok := l.seen[s.key]
		l.mu.Unlock()
		switch {
		case ok && seen.value.Equal(s.value):
			s.noted, s.at = true, seen.at
		case ok && seen.prev.Equal(s.value):
			s.noted, s.at = true, seen.prevAt
		}
	}
	if s.noted {
		left = min(left, s.at+deadline-l.monotonic())
	}
	return left >= 0, max(left, 0)
}

// Heartbeat is what a cluster's heartbeats said when they were read (its status and its agent
// Leases), to be judged at any later time (Judge) until one of them changes: a planning pass
// reads a cluster's again only when an event says it changed, and judges every cluster's at
// each pass.
type Heartbeat struct {
	deadline time.Duration
	streams  [3]heartbeatStream
	n        int
	lastSeen time.Time
	reported bool
}

// Heartbeat reads c's heartbeats: its status's and its Leases' (in its namespace and the one
// it moves from), from the cache.
func (l *Liveness) Heartbeat(c *v1alpha1.Cluster) Heartbeat {
	found := l.leasesOf(c)
	leases := found.all()
	h := Heartbeat{deadline: l.heartbeatDeadline(c)}
	add := func(o any) {
		if key, value, ok := heartbeatOf(o); ok && value != nil {
			h.streams[h.n], h.n = heartbeatStream{key: key, value: *value}, h.n+1
		}
	}
	add(c)
	for _, lease := range leases {
		add(lease)
	}
	h.lastSeen, h.reported = lastSeenOf(c, leases)
	return h
}

// Judge says whether the agent whose heartbeats h holds is online at now (the hub's wall
// clock) and, if so, how long until it is not (any of its heartbeats within the deadline, the
// longest counting), when it was last seen and whether it ever reported.
func (l *Liveness) Judge(h *Heartbeat, now time.Time) (online bool, left time.Duration, lastSeen time.Time, reported bool) {
	for i := range h.streams[:h.n] {
		if ok, streamLeft := l.judgeStream(&h.streams[i], h.deadline, now); ok {
			online, left = true, max(left, streamLeft)
		}
	}
	return online, left, h.lastSeen, h.reported
}

// Check says whether c's agent is online at now (the hub's wall clock) and, if so, how long
// until it is not: by its Lease (in the cluster's namespace, or the one it moves from) or by
// the heartbeat in c's status. An agent that never reported is not online. c may be an object
// older than the hub's latest view (an update's old object): its status is judged on its own.
func (l *Liveness) Check(c *v1alpha1.Cluster, now time.Time) (online bool, left time.Duration) {
	online, left, _, _ = l.Look(c, now)
	return online, left
}

// Look is Check and LastSeen from one read of c's Leases: the cluster-status controller asks
// it of each cluster.
func (l *Liveness) Look(c *v1alpha1.Cluster, now time.Time) (online bool, left time.Duration, lastSeen time.Time, reported bool) {
	h := l.Heartbeat(c)
	return l.Judge(&h, now)
}

// Offline reports whether c's agent missed its deadline (R1.11). One that never reported is
// not offline: it is pending.
func (l *Liveness) Offline(c *v1alpha1.Cluster, now time.Time) bool {
	online, _, _, reported := l.Look(c, now)
	return !online && reported
}

// LastSeen is the latest heartbeat c's agent claimed, and whether it ever reported.
func (l *Liveness) LastSeen(c *v1alpha1.Cluster) (time.Time, bool) {
	leases := l.leasesOf(c)
	return lastSeenOf(c, leases.all())
}

func lastSeenOf(c *v1alpha1.Cluster, leases []*coordinationv1.Lease) (time.Time, bool) {
	var last time.Time
	if c.Status.AgentLastSeen != nil {
		last = c.Status.AgentLastSeen.Time
	}
	for _, lease := range leases {
		if r := lease.Spec.RenewTime; r != nil && r.After(last) {
			last = r.Time
		}
	}
	return last, !last.IsZero()
}

// agentLeases are a cluster's agent Leases: of its namespace and of the one it moves from.
type agentLeases struct {
	found [2]*coordinationv1.Lease
	n     int
}

func (a *agentLeases) all() []*coordinationv1.Lease { return a.found[:a.n] }

// leasesOf reads the agent Leases of c's namespaces from the cache, not copied: a planning
// pass asks for every cluster's, and callers only read them. They come back in an array, not
// a slice of their own: a pass over 10,000 clusters allocated 10,000 of those.
func (l *Liveness) leasesOf(c *v1alpha1.Cluster) agentLeases {
	var out agentLeases
	for _, ns := range [2]string{c.Status.Namespace, c.Status.PreviousNamespace} {
		if ns == "" || l.Leases == nil {
			continue
		}
		if l.leaseStore != nil {
			if o, found, err := l.leaseStore.GetByKey(ns + "/" + v1alpha1.AgentLeaseName); err == nil && found {
				if lease, ok := o.(*coordinationv1.Lease); ok {
					out.found[out.n], out.n = lease, out.n+1
				}
			}
			continue
		}
		var lease coordinationv1.Lease
		if err := l.Leases.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: v1alpha1.AgentLeaseName}, &lease, client.UnsafeDisableDeepCopy); err == nil {
			out.found[out.n], out.n = &lease, out.n+1
		}
	}
	return out
}

// leaseBackOnline says whether a Lease update brings its cluster's agent back online: the old
// renewal was past the deadline, the new one is within it. A first renewal counts as coming
// back. c is the Lease's cluster.
func (l *Liveness) leaseBackOnline(c *v1alpha1.Cluster, old, updated *coordinationv1.Lease, now time.Time) bool {
	deadline := l.heartbeatDeadline(c)
	var was bool
	if old != nil {
		key, value, _ := heartbeatOf(old)
		was, _ = l.judge(key, value, deadline, now)
	}
	key, value, _ := heartbeatOf(updated)
	is, _ := l.judge(key, value, deadline, now)
	return !was && is
}

// EnsureLease creates the agent Lease of c's namespace, or corrects the interval and deadline
// the hub asks of the agent. Nothing is written while they hold; the agent's renewals are left
// alone.
func (l *Liveness) EnsureLease(ctx context.Context, c client.Client, cl *v1alpha1.Cluster) error {
	ns := cl.Status.Namespace
	if ns == "" {
		return nil
	}
	interval := l.heartbeatInterval(cl).String()
	deadline := int32(l.heartbeatDeadline(cl) / time.Second)
	var lease coordinationv1.Lease
	err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: v1alpha1.AgentLeaseName}, &lease)
	switch {
	case apierrors.IsNotFound(err) && l.createdRecently(ns):
		return nil // the cache has not caught up with the create; a later pass checks it
	case apierrors.IsNotFound(err):
		lease = coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.AgentLeaseName, Namespace: ns,
				Labels:      map[string]string{v1alpha1.AgentLeaseLabel: "true", model.LabelAgentOf: model.AgentOf(cl)},
				Annotations: map[string]string{v1alpha1.HeartbeatIntervalAnnotation: interval}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &cl.Name, LeaseDurationSeconds: &deadline},
		}
		if err := c.Create(ctx, &lease); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("failed to create the agent lease of cluster %s: %w", cl.Name, err)
		}
		l.mu.Lock()
		l.created[ns] = time.Now()
		l.mu.Unlock()
		return nil
	case err != nil:
		return fmt.Errorf("failed to read the agent lease of cluster %s: %w", cl.Name, err)
	}
	if lease.Annotations[v1alpha1.HeartbeatIntervalAnnotation] == interval && lease.Spec.LeaseDurationSeconds != nil && *lease.Spec.LeaseDurationSeconds == deadline {
		return nil
	}
	patched := lease.DeepCopy()
	if patched.Annotations == nil {
		patched.Annotations = map[string]string{}
	}
	patched.Annotations[v1alpha1.HeartbeatIntervalAnnotation] = interval
	patched.Spec.LeaseDurationSeconds = &deadline
	if err := c.Patch(ctx, patched, client.MergeFrom(&lease)); err != nil {
		return fmt.Errorf("failed to set the heartbeat interval of cluster %s: %w", cl.Name, err)
	}
	return nil
}

// createdRecently reports whether this hub created the Lease of ns within the last minute
// and its cache does not show it yet.
func (l *Liveness) createdRecently(ns string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	at, ok := l.created[ns]
	return ok && time.Since(at) < time.Minute
}

// OnAgentBack wakes a controller when a cluster's agent comes back online by its Lease (see
// leaseBackOnline): requests maps the cluster to what to reconcile. Routine renewals wake
// nothing; going offline is noticed by a requeue at the deadline.
func (l *Liveness) OnAgentBack(c client.Reader, now func() time.Time, requests func(context.Context, *v1alpha1.Cluster) []reconcile.Request) handler.Funcs {
	wake := func(ctx context.Context, old, updated client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		lease, ok := updated.(*coordinationv1.Lease)
		if !ok || lease.Name != v1alpha1.AgentLeaseName {
			return
		}
		prev, _ := old.(*coordinationv1.Lease)
		cl, ok := model.ClusterInNamespace(ctx, c, lease.Namespace)
		if !ok || !l.leaseBackOnline(cl, prev, lease, now()) {
			return
		}
		for _, req := range requests(ctx, cl) {
			q.Add(req)
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			wake(ctx, nil, e.Object, q)
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			wake(ctx, e.ObjectOld, e.ObjectNew, q)
		},
	}
}
