package model

import (
	"context"
	"reflect"
	"sync"
	"time"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/bdstate"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Coalesced enqueues what m maps an event to, delay later. Events for the same key within the
// delay collapse into one reconcile: roll-up status that many objects feed (a GitRepo of many
// bundles, a Cluster of many deployments) is written once per delay, not once per change.
// Updates pass only when changed(old, new) says so.
func Coalesced(delay time.Duration, m handler.MapFunc, changed func(old, new client.Object) bool) handler.EventHandler {
	add := func(ctx context.Context, o client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		for _, req := range m(ctx, o) {
			q.AddAfter(req, delay)
		}
	}
	return handler.TypedFuncs[client.Object, reconcile.Request]{
		CreateFunc: func(ctx context.Context, e event.TypedCreateEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, e.Object, q)
		},
		UpdateFunc: func(ctx context.Context, e event.TypedUpdateEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if changed == nil || changed(e.ObjectOld, e.ObjectNew) {
				add(ctx, e.ObjectNew, q)
			}
		},
		DeleteFunc: func(ctx context.Context, e event.TypedDeleteEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, e.Object, q)
		},
	}
}

// AllInNamespace maps an event to every object listed by newList in the event's namespace, for
// controllers whose objects all depend on the one that changed (a Cluster for every Bundle).
func AllInNamespace(c client.Reader, newList func() client.ObjectList) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		list := newList()
		if err := c.List(ctx, list, client.InNamespace(o.GetNamespace()), client.UnsafeDisableDeepCopy); err != nil {
			return nil
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			return nil
		}
		out := make([]reconcile.Request, 0, len(items))
		for _, item := range items {
			if obj, ok := item.(client.Object); ok {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(obj)})
			}
		}
		return out
	}
}

// ProgressThrottle spaces out status writes that only report progress (counts moving along):
// each object's are written at most once per interval, and all objects' together at most
// perSecond, so that a rollout across hundreds of bundles or clusters costs the API server the
// same status load as one across a few (each object's progress is then written less often).
// Changes a reader acts on (readiness reached or lost, a pause and its reason) are written at
// once and use none of the budget.
type ProgressThrottle struct {
	Every     time.Duration
	PerSecond float64 // zero: no hub-wide budget

	mu      sync.Mutex
	written map[types.UID]time.Time
	// slot is when an object's held-back progress may be written: its share of the budget,
	// reserved when it first had to wait for it. next is the budget's first free slot.
	slot map[types.UID]time.Time
	next time.Time
}

// Hold says how long a progress-only write for uid must wait; zero means write now. A write
// that goes ahead is recorded.
func (p *ProgressThrottle) Hold(uid types.UID, significant bool, now time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if last, ok := p.written[uid]; ok && !significant {
		if since := now.Sub(last); since < p.Every {
			return p.Every - since
		}
		if p.PerSecond > 0 {
			at, reserved := p.slot[uid]
			if !reserved {
				at = now
				if p.next.After(now) {
					at = p.next
				}
				p.next = at.Add(time.Duration(float64(time.Second) / p.PerSecond))
				p.slot[uid] = at
			}
			if at.After(now) {
				return at.Sub(now)
			}
		}
	}
	if p.written == nil {
		p.written, p.slot = map[types.UID]time.Time{}, map[types.UID]time.Time{}
	}
	p.written[uid] = now
	delete(p.slot, uid)
	return 0
}

// ClusterMembershipChanged passes cluster events that change what is rendered where: creation,
// deletion, labels, spec, and the namespace registration assigns. Heartbeats do not pass.
type ClusterMembershipChanged struct{ predicate.Funcs }

func (ClusterMembershipChanged) Update(e event.UpdateEvent) bool {
	return ClusterUpdated(e, func(o, n *v1alpha1.Cluster) bool {
		return o.Generation != n.Generation || !equality.Semantic.DeepEqual(o.Labels, n.Labels) || o.Status.Namespace != n.Status.Namespace
	})
}

// ClusterUpdated applies changed to the update of a Cluster; an update of anything else passes.
func ClusterUpdated(e event.UpdateEvent, changed func(old, new *v1alpha1.Cluster) bool) bool {
	o, ok1 := e.ObjectOld.(*v1alpha1.Cluster)
	n, ok2 := e.ObjectNew.(*v1alpha1.Cluster)
	return !ok1 || !ok2 || changed(o, n)
}

// GitRepoOfBundle maps a Bundle to its GitRepo, from the label the bundler sets.
func GitRepoOfBundle(ctx context.Context, o client.Object) []reconcile.Request {
	return SourceOfBundle(LabelGitRepo)(ctx, o)
}

// SourceOfBundle maps a Bundle to the source that the label names (LabelGitRepo, LabelHelmOp).
func SourceOfBundle(label string) func(context.Context, client.Object) []reconcile.Request {
	return func(_ context.Context, o client.Object) []reconcile.Request {
		if name := o.GetLabels()[label]; name != "" {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
		}
		return nil
	}
}

// BundleOfDeployment maps a BundleDeployment to its Bundle, from the labels the bundler sets.
func BundleOfDeployment(_ context.Context, o client.Object) []reconcile.Request {
	l := o.GetLabels()
	if l[LabelBundle] == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: l[LabelBundleNamespace], Name: l[LabelBundle]}}}
}

// DeploymentPlanChanged passes deployment updates that change what the planner sees: reports
// of which resources are not ready yet, or drift details, do not.
func DeploymentPlanChanged(old, new client.Object) bool {
	o, ok1 := old.(*v1alpha1.BundleDeployment)
	n, ok2 := new.(*v1alpha1.BundleDeployment)
	return !ok1 || !ok2 || !reflect.DeepEqual(bdstate.Deployment(o), bdstate.Deployment(n)) || o.Labels[LabelCluster] != n.Labels[LabelCluster]
}

// Deleting passes the update that marks an object for deletion.
type Deleting struct{ predicate.Funcs }

func (Deleting) Update(e event.UpdateEvent) bool {
	return e.ObjectNew.GetDeletionTimestamp() != nil && e.ObjectOld.GetDeletionTimestamp() == nil
}
