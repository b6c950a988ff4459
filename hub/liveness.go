package hub

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// liveness decides whether a cluster's agent is online (R1.11). The agent writes the time of
// its heartbeat into its Cluster's status, but that value is the agent's claim, read on the
// agent's clock and compared with the hub's: a wall clock stepped back on either side, or an
// agent that writes a time in the future, would keep a stopped agent online for as long as the
// step. So the hub also times each heartbeat itself: when it sees the value change, it notes
// the moment on its own monotonic clock. A cluster is online while both say so: its last
// heartbeat is within the deadline by the hub's wall clock, and the hub saw a heartbeat within
// the deadline by its monotonic clock.
type liveness struct {
	// monotonic is time elapsed on the hub's monotonic clock (time.Since of a fixed start).
	monotonic func() time.Duration

	mu   sync.Mutex
	seen map[types.UID]heartbeatSeen
}

// heartbeatSeen is when the hub first saw a cluster's last two heartbeat values (prev is the
// one before value, for judging an update's old object).
type heartbeatSeen struct {
	value, prev time.Time
	at, prevAt  time.Duration
}

// watchLiveness returns a liveness that observes every Cluster the hub's cache delivers.
func watchLiveness(ctx context.Context, c cache.Cache) (*liveness, error) {
	l := newLiveness()
	inf, err := c.GetInformer(ctx, &v1alpha1.Cluster{})
	if err != nil {
		return nil, fmt.Errorf("failed to watch clusters' heartbeats: %w", err)
	}
	observe := func(o any) {
		if cl, ok := o.(*v1alpha1.Cluster); ok {
			l.observe(cl)
		}
	}
	_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    observe,
		UpdateFunc: func(_, o any) { observe(o) },
		DeleteFunc: func(o any) {
			if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			if cl, ok := o.(*v1alpha1.Cluster); ok {
				l.forget(cl.UID)
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("failed to watch clusters' heartbeats: %w", err)
	}
	return l, nil
}

func newLiveness() *liveness {
	start := time.Now()
	return &liveness{monotonic: func() time.Duration { return time.Since(start) }, seen: map[types.UID]heartbeatSeen{}}
}

// DefaultHeartbeatDeadline is how long after its agent's last heartbeat a cluster counts as
// offline unless its spec.heartbeatDeadline says otherwise.
const DefaultHeartbeatDeadline = 2 * time.Minute

func heartbeatDeadline(c *v1alpha1.Cluster) time.Duration {
	if c.Spec.HeartbeatDeadline != nil {
		return c.Spec.HeartbeatDeadline.Duration
	}
	return DefaultHeartbeatDeadline
}

// observe notes the hub seeing c's heartbeat value, if it is new. The hub calls it for every
// Cluster event its informer delivers, in order.
func (l *liveness) observe(c *v1alpha1.Cluster) {
	if c.Status.AgentLastSeen == nil {
		return
	}
	value := c.Status.AgentLastSeen.Time
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.seen[c.UID]
	switch {
	case !ok:
		l.seen[c.UID] = heartbeatSeen{value: value, at: l.monotonic()}
	case !s.value.Equal(value):
		l.seen[c.UID] = heartbeatSeen{value: value, at: l.monotonic(), prev: s.value, prevAt: s.at}
	}
}

// forget drops a deleted cluster.
func (l *liveness) forget(uid types.UID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.seen, uid)
}

// check says whether c's agent is online at now (the hub's wall clock) and, if so, how long
// until it is not. An agent that never reported is not online. c may be an object older than
// the hub's latest view (an update's old object): it is judged by its own heartbeat.
func (l *liveness) check(c *v1alpha1.Cluster, now time.Time) (online bool, left time.Duration) {
	last := c.Status.AgentLastSeen
	if last == nil {
		return false, 0
	}
	deadline := heartbeatDeadline(c)
	left = last.Add(deadline).Sub(now)
	l.mu.Lock()
	s, ok := l.seen[c.UID]
	l.mu.Unlock()
	switch {
	case ok && s.value.Equal(last.Time):
		left = min(left, s.at+deadline-l.monotonic())
	case ok && s.prev.Equal(last.Time):
		left = min(left, s.prevAt+deadline-l.monotonic())
	}
	return left >= 0, max(left, 0)
}
