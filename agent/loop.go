package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/flotilla-dev/flotilla/agent/kube"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// conflictRetry is how soon a pass whose status write lost an optimistic-lock race runs again.
const conflictRetry = 50 * time.Millisecond

// errLateCopy: a pass's status write lost an optimistic-lock race; the deployment changed since
// the cache showed it.
var errLateCopy = errors.New("the deployment changed while it was reconciled")

// deploymentLoop runs the deployer's passes over the cluster's BundleDeployments as the hub's
// controllers run theirs (hub/reconciler), on client-go's informer and work queue: a pass
// reads a deployment from the informer's cache, lets the deployer set the status of a copy,
// and writes the status only when it changed, conditional on the deployment as read. A pass on
// a copy the cache shows late fails with a conflict and runs again on the fresh one, rather
// than write over what it cannot see (such as the readyAt of the revision before beside a new
// revision, which the hub would take for a regression, R5.1). One pass at a time: the agent's
// applies and its cluster's API server go at the pace of one deployment.
type deploymentLoop struct {
	deployments kube.Resource[v1alpha1.BundleDeployment, *v1alpha1.BundleDeployment]
	informer    cache.SharedIndexInformer
	// store is what a pass reads: the informer's.
	store cache.Store
	queue workqueue.TypedRateLimitingInterface[types.NamespacedName]
	d     *deployer
}

func newDeploymentLoop(deployments kube.Resource[v1alpha1.BundleDeployment, *v1alpha1.BundleDeployment], d *deployer) *deploymentLoop {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			var list v1alpha1.BundleDeploymentList
			return &list, deployments.List(ctx, opts, &list)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return deployments.Watch(ctx, opts)
		},
	}
	informer := cache.NewSharedIndexInformerWithOptions(lw, &v1alpha1.BundleDeployment{}, cache.SharedIndexInformerOptions{})
	// The agent reads no managed fields: the cache keeps none.
	_ = informer.SetTransform(func(obj any) (any, error) {
		if o, ok := obj.(metav1.Object); ok {
			o.SetManagedFields(nil)
		}
		return obj, nil
	})
	return &deploymentLoop{deployments: deployments, informer: informer, store: informer.GetStore(), d: d,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[types.NamespacedName](),
			workqueue.TypedRateLimitingQueueConfig[types.NamespacedName]{Name: "bundledeployment"})}
}

// run watches the deployments and runs passes until ctx ends.
func (l *deploymentLoop) run(ctx context.Context) error {
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			ns, name, _ := cache.SplitMetaNamespaceKey(key)
			l.queue.Add(types.NamespacedName{Namespace: ns, Name: name})
		}
	}
	if _, err := l.informer.AddEventHandlerWithOptions(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	}, cache.HandlerOptions{}); err != nil {
		return err
	}
	var informing sync.WaitGroup
	informing.Go(func() { l.informer.RunWithContext(ctx) })
	defer informing.Wait()
	defer l.queue.ShutDown()
	if !cache.WaitForCacheSync(ctx.Done(), l.informer.HasSynced) {
		return nil // ctx ended first
	}
	go func() {
		<-ctx.Done()
		l.queue.ShutDown()
	}()
	for l.next(ctx) {
	}
	return nil
}

// next runs the pass of the next deployment due; false once the queue is shut down.
func (l *deploymentLoop) next(ctx context.Context) bool {
	key, shutdown := l.queue.Get()
	if shutdown {
		return false
	}
	defer l.queue.Done(key)
	logger := log.FromContext(ctx).WithValues("deployment", key.String())
	after, err := l.pass(log.IntoContext(ctx, logger), key)
	switch {
	case errors.Is(err, errLateCopy):
		logger.V(1).Info("reconciling it again", "error", err.Error())
		l.queue.Forget(key)
		l.queue.AddAfter(key, conflictRetry)
	case err != nil:
		logger.Error(err, "pass failed; retrying")
		l.queue.AddRateLimited(key)
	default:
		l.queue.Forget(key)
		if after > 0 {
			l.queue.AddAfter(key, after)
		}
	}
	return true
}

// pass brings one deployment's status up to date; it returns when to look again.
func (l *deploymentLoop) pass(ctx context.Context, key types.NamespacedName) (time.Duration, error) {
	obj, exists, err := l.store.GetByKey(key.Namespace + "/" + key.Name)
	if err != nil {
		return 0, err
	}
	if !exists {
		return 0, l.d.gone(ctx, key)
	}
	orig := obj.(*v1alpha1.BundleDeployment)
	bd := orig.DeepCopy()
	after, stepErr := l.d.step(ctx, bd)
	if equality.Semantic.DeepEqual(orig.Status, bd.Status) {
		return after, stepErr
	}
	patch, err := kube.StatusPatch(orig.Status, bd.Status, orig.ResourceVersion)
	if err == nil {
		_, err = l.deployments.Patch(ctx, bd.Name, types.MergePatchType, patch, "status")
	}
	if err != nil && !apierrors.IsNotFound(err) {
		if stepErr == nil && apierrors.IsConflict(err) {
			return 0, fmt.Errorf("%w: %w", errLateCopy, err) // derived again, not a failure
		}
		return 0, errors.Join(stepErr, fmt.Errorf("failed to update the status of deployment %s: %w", key, err))
	}
	return after, stepErr
}
