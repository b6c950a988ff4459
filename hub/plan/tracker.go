package plan

import (
	"context"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/liveness"
	"github.com/flotilla-dev/flotilla/hub/model"
)

// Tracker keeps what the planning passes of each bundle read of its clusters from one pass to
// the next, so that a pass reads again only the clusters an event changed. A rollout over N
// clusters makes N / maxNew passes (R1.8); reading the whole fleet at each made a revision's
// planning grow with N². What is judged at the pass's time (heartbeats against their deadlines,
// dependencies) is still judged for every cluster at every pass.
//
// The events come through Noting, wrapped around the handlers that wake the passes: each event
// is noted before the pass it wakes can run, so a pass never plans on a cluster older than the
// event that woke it. A pass another event woke sees the changes noted so far, as a pass
// reading the cache sees the updates delivered so far.
type Tracker struct {
	live  *liveness.Liveness
	fleet *model.FleetIndex

	mu      sync.Mutex
	bundles map[types.NamespacedName]*trackedBundle
}

// trackedBundle is a bundle's view and what changed since its last pass.
type trackedBundle struct {
	// view is its passes' own (a bundle is planned by one pass at a time): marks guards only
	// the changes noted.
	view *fleetView

	marks           sync.Mutex
	changed         map[string]bool // clusters, by name
	agentNamespaces map[string]bool // Leases changed, by namespace
}

// NewTracker tracks the bundles planned through c's FleetIndex. Without one (a cache whose
// informers are not client-go's) every pass reads the whole fleet.
func NewTracker(c client.Reader, live *liveness.Liveness) *Tracker {
	return &Tracker{live: live, fleet: model.FleetIndexOf(c), bundles: map[types.NamespacedName]*trackedBundle{}}
}

// Gather is GatherPlan reading only what changed since the bundle's last pass. A rollback to a
// pinned revision reads the whole fleet: its pass changes the state it is handed.
func (t *Tracker) Gather(ctx context.Context, c client.Reader, now time.Time, bun *v1alpha1.Bundle, also map[string]model.RevisionTarget) (*PlanState, error) {
	if t.fleet == nil || bun.Spec.TargetRevision != nil {
		t.Forget(client.ObjectKeyFromObject(bun))
		return GatherPlan(ctx, c, t.live, now, bun, also)
	}
	tb := t.bundle(client.ObjectKeyFromObject(bun))
	// What changed is taken before anything is read: a change noted meanwhile is read again by
	// the next pass.
	tb.marks.Lock()
	changed, agentNamespaces := tb.changed, tb.agentNamespaces
	tb.changed, tb.agentNamespaces = map[string]bool{}, map[string]bool{}
	tb.marks.Unlock()

	groupsOf, groups, err := model.VersionedClusterGroups(ctx, c, bun.Namespace)
	if err != nil {
		return nil, err
	}
	if v := tb.view; v == nil || v.basis != basisOf(bun, also, groups) {
		if tb.view, err = readView(ctx, c, t.live, bun, also, groupsOf, groups); err != nil {
			return nil, err
		}
		changed, agentNamespaces = nil, nil // read whole
	}
	v := tb.view
	v.groupsOf = groupsOf
	for ns := range agentNamespaces {
		if name, ok := v.clusterOfAgentNamespace(ns); ok {
			changed[name] = true
		}
	}
	joinedOrLeft := false
	for name := range changed {
		m, was := v.members[name] // kept in place: the order points to it
		v.drop(name)
		is := false
		if cl := t.fleet.Cluster(bun.Namespace, name); cl != nil {
			is = v.put(t.live, bun, also, cl, t.fleet.DeploymentOn(bun, cl), m) != nil
		}
		joinedOrLeft = joinedOrLeft || was != is
	}
	if joinedOrLeft {
		v.order = v.order[:0]
		for _, m := range v.members {
			v.order = append(v.order, m)
		}
		v.sortOrder()
	}
	return v.state(ctx, c, t.live, now, bun)
}

// Forget stops tracking a bundle (removed, or no longer planned by the tracker's passes).
func (t *Tracker) Forget(key types.NamespacedName) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.bundles, key)
}

func (t *Tracker) bundle(key types.NamespacedName) *trackedBundle {
	t.mu.Lock()
	defer t.mu.Unlock()
	tb, ok := t.bundles[key]
	if !ok {
		tb = &trackedBundle{changed: map[string]bool{}, agentNamespaces: map[string]bool{}}
		t.bundles[key] = tb
	}
	return tb
}

// note marks what an object's event changes in the tracked bundles: a deployment its bundle's
// cluster, a Cluster that cluster in every bundle of its namespace, an agent Lease its
// namespace's cluster in every bundle.
func (t *Tracker) note(o client.Object) {
	t.mu.Lock()
	defer t.mu.Unlock()
	mark := func(tb *trackedBundle, set func(*trackedBundle)) {
		tb.marks.Lock()
		set(tb)
		tb.marks.Unlock()
	}
	switch o := o.(type) {
	case *v1alpha1.BundleDeployment:
		key := types.NamespacedName{Namespace: o.Labels[model.LabelBundleNamespace], Name: o.Labels[model.LabelBundle]}
		if tb, ok := t.bundles[key]; ok {
			mark(tb, func(tb *trackedBundle) { tb.changed[o.Labels[model.LabelCluster]] = true })
		}
	case *v1alpha1.Cluster:
		for key, tb := range t.bundles {
			if key.Namespace == o.Namespace {
				mark(tb, func(tb *trackedBundle) { tb.changed[o.Name] = true })
			}
		}
	case *coordinationv1.Lease:
		if o.Name != v1alpha1.AgentLeaseName {
			return
		}
		for _, tb := range t.bundles {
			mark(tb, func(tb *trackedBundle) { tb.agentNamespaces[o.Namespace] = true })
		}
	}
}

// Noting is h with every event noted first, whether or not the predicates pass it on to h:
// a change that wakes no pass (a routine heartbeat, a deployment's status the plan ignores)
// is still read by the next pass.
func (t *Tracker) Noting(h handler.EventHandler, only ...predicate.Predicate) handler.EventHandler {
	return noting{tracker: t, next: h, only: predicate.And(only...)}
}

type noting struct {
	tracker *Tracker
	next    handler.EventHandler
	only    predicate.Predicate
}

type requests = workqueue.TypedRateLimitingInterface[reconcile.Request]

func (n noting) Create(ctx context.Context, e event.CreateEvent, q requests) {
	if n.tracker.note(e.Object); n.only.Create(e) {
		n.next.Create(ctx, e, q)
	}
}

func (n noting) Update(ctx context.Context, e event.UpdateEvent, q requests) {
	n.tracker.note(e.ObjectOld) // a deployment relabelled leaves its old cluster too
	if n.tracker.note(e.ObjectNew); n.only.Update(e) {
		n.next.Update(ctx, e, q)
	}
}

func (n noting) Delete(ctx context.Context, e event.DeleteEvent, q requests) {
	if n.tracker.note(e.Object); n.only.Delete(e) {
		n.next.Delete(ctx, e, q)
	}
}

func (n noting) Generic(ctx context.Context, e event.GenericEvent, q requests) {
	if n.tracker.note(e.Object); n.only.Generic(e) {
		n.next.Generic(ctx, e, q)
	}
}
