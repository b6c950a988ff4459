package lifecycle

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/model"
)

// ContentCollector deletes the Content of a fleet namespace that nothing references any more:
// every content is kept that a revision in a Bundle's history records (the revision's targets
// record and the content it deploys to each cluster, so a rollback target stays), or that a
// BundleDeployment stages or runs. Content is shared by id across bundles and revisions; the
// reference set counts them all. Content younger than the grace period is kept too: a commit
// writes its content before the Bundle that references it.
type ContentCollector struct {
	Client    client.Client
	Revisions *model.RevisionStore
	Now       func() time.Time
	Grace     time.Duration
	Delay     time.Duration // changes of a namespace are gathered this long into one pass
}

// DefaultContentGrace is how old unreferenced Content must be before it is deleted.
const DefaultContentGrace = 10 * time.Minute

func (r *ContentCollector) Setup(mgr ctrl.Manager) error {
	// One pass per namespace, gathered over delay: a commit changes every bundle at once.
	namespaceOf := func(_ context.Context, o client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace()}}}
	}
	bundleNamespaceOf := func(_ context.Context, o client.Object) []reconcile.Request {
		if ns := o.GetLabels()[model.LabelBundleNamespace]; ns != "" {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: ns}}}
		}
		return nil
	}
	historyChanged := func(old, new client.Object) bool {
		o, ok1 := old.(*v1alpha1.Bundle)
		n, ok2 := new.(*v1alpha1.Bundle)
		return !ok1 || !ok2 || !equality.Semantic.DeepEqual(o.Spec.Revisions, n.Spec.Revisions)
	}
	return ctrl.NewControllerManagedBy(mgr).Named("content-gc").
		Watches(&v1alpha1.Bundle{}, model.Coalesced(r.Delay, namespaceOf, historyChanged)).
		Watches(&v1alpha1.BundleDeployment{}, model.Coalesced(r.Delay, bundleNamespaceOf, model.ContentRefsChanged)).
		Complete(r)
}

func (r *ContentCollector) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	ns := req.Namespace
	live, err := r.referenced(ctx, ns)
	if err != nil {
		return ctrl.Result{}, err
	}
	var contents v1alpha1.ContentList
	if err := r.Client.List(ctx, &contents, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
		return ctrl.Result{}, fmt.Errorf("failed to list content: %w", err)
	}
	now := r.Now()
	var youngest time.Duration // how long until the youngest unreferenced content may go
	deleted := 0
	for i := range contents.Items {
		c := &contents.Items[i]
		if live[c.ContentID] {
			continue
		}
		if age := now.Sub(c.CreationTimestamp.Time); age < r.Grace {
			youngest = max(youngest, r.Grace-age)
			continue
		}
		gone := &v1alpha1.Content{}
		gone.Name, gone.Namespace = c.Name, c.Namespace
		if err := r.Client.Delete(ctx, gone, client.Preconditions{UID: &c.UID}); client.IgnoreNotFound(err) != nil {
			return ctrl.Result{}, fmt.Errorf("failed to delete content %s: %w", c.Name, err)
		}
		deleted++
	}
	if deleted > 0 {
		log.FromContext(ctx).Info("deleted content no revision history and no deployment references", "namespace", ns, "objects", deleted, "grace", r.Grace)
	}
	if youngest > 0 {
		return ctrl.Result{RequeueAfter: youngest + time.Second}, nil
	}
	return ctrl.Result{}, nil
}

// referenced is the set of content ids of ns that a Bundle's history or a BundleDeployment
// refers to.
// Objects are read from the cache uncopied: nothing here changes them.
func (r *ContentCollector) referenced(ctx context.Context, ns string) (map[string]bool, error) {
	live := map[string]bool{}
	var bundles v1alpha1.BundleList
	if err := r.Client.List(ctx, &bundles, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("failed to list bundles: %w", err)
	}
	for i := range bundles.Items {
		bun := &bundles.Items[i]
		for _, rev := range bun.Spec.Revisions {
			if rev.TargetsID == "" {
				continue // recorded before targets were: its content is referenced by deployments only
			}
			live[rev.TargetsID] = true
			targets, err := r.Revisions.Peek(ctx, bun, rev.Index)
			if err != nil {
				// What the revision deploys is unknown: delete nothing rather than guess.
				return nil, fmt.Errorf("failed to read revision %d of bundle %s: %w", rev.Index, bun.Name, err)
			}
			for _, t := range targets {
				live[t.Ref.ContentID] = true
			}
		}
	}
	var bds v1alpha1.BundleDeploymentList
	if err := r.Client.List(ctx, &bds, client.MatchingLabels{model.LabelBundleNamespace: ns}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("failed to list deployments: %w", err)
	}
	for i := range bds.Items {
		for _, ref := range model.ContentRefsOf(&bds.Items[i]) {
			live[ref.ID] = true
		}
	}
	return live, nil
}
