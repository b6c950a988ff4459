package faults

import (
	"context"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/e2e/simagent"
	"github.com/flotilla-dev/flotilla/hub/access"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// simAgents act as the fleet's agents: each renews its cluster's Lease every second and watches
// its cluster's BundleDeployments, reporting each release applied and ready after a delay drawn
// from the run's random source (an apply and a rollout take time). An agent cut off does
// neither until it is restored; then it lists again and reports what it missed.
type simAgents struct {
	c        client.WithWatch
	ns       string
	rand     *faultRand
	maxDelay time.Duration

	mu sync.Mutex
	// cut holds, for each agent cut off, a channel closed when it is restored; stopWatch ends
	// each agent's current watch.
	cut       map[string]chan struct{}
	stopWatch map[string]context.CancelFunc
	// reported is the release each deployment's agent reported or is reporting.
	reported map[string]string
}

// startAgents starts an agent for each cluster of the fleet namespace ns, until the test ends.
func startAgents(t *testing.T, c client.WithWatch, ns string, clusters []string, rand *faultRand, maxDelay time.Duration) *simAgents {
	a := &simAgents{c: c, ns: ns, rand: rand, maxDelay: maxDelay, cut: map[string]chan struct{}{}, stopWatch: map[string]context.CancelFunc{}, reported: map[string]string{}}
	ctx, cancel := context.WithCancel(context.Background())
	var running sync.WaitGroup
	for _, cluster := range clusters {
		running.Add(2)
		go func() { defer running.Done(); a.renew(ctx, cluster) }()
		go func() { defer running.Done(); a.follow(ctx, cluster) }()
	}
	t.Cleanup(func() { cancel(); running.Wait() })
	return a
}

// cutOff cuts the cluster's agent off: it renews nothing and reports nothing.
func (a *simAgents) cutOff(cluster string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cut[cluster] == nil {
		a.cut[cluster] = make(chan struct{})
	}
	if stop := a.stopWatch[cluster]; stop != nil {
		stop()
	}
}

// restore lets a cut-off agent go on.
func (a *simAgents) restore(cluster string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if ch := a.cut[cluster]; ch != nil {
		close(ch)
		delete(a.cut, cluster)
	}
}

// connected waits while the cluster's agent is cut off; false once ctx ends.
func (a *simAgents) connected(ctx context.Context, cluster string) bool {
	a.mu.Lock()
	ch := a.cut[cluster]
	a.mu.Unlock()
	if ch == nil {
		return ctx.Err() == nil
	}
	select {
	case <-ch:
		return true
	case <-ctx.Done():
		return false
	}
}

func (a *simAgents) isCut(cluster string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cut[cluster] != nil
}

// renew renews the agent's Lease every second, as the agent does: an update of the Lease as
// last renewed, read again only when the update fails.
func (a *simAgents) renew(ctx context.Context, cluster string) {
	key := types.NamespacedName{Namespace: access.ClusterNamespace(a.ns, cluster), Name: v1alpha1.AgentLeaseName}
	var lease *coordinationv1.Lease
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for a.connected(ctx, cluster) {
		if lease == nil {
			lease = &coordinationv1.Lease{}
			if err := a.c.Get(ctx, key, lease); err != nil {
				lease = nil
			}
		}
		if lease != nil {
			lease.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
			if err := a.c.Update(ctx, lease); err != nil {
				lease = nil
			}
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
}

// follow lists and watches the cluster's deployments, reporting each release; a watch that ends
// (the API server restarted, the agent cut off) is followed by a list and a new watch.
func (a *simAgents) follow(ctx context.Context, cluster string) {
	inCluster := client.InNamespace(access.ClusterNamespace(a.ns, cluster))
	for a.connected(ctx, cluster) {
		watchCtx, stop := context.WithCancel(ctx)
		a.mu.Lock()
		a.stopWatch[cluster] = stop
		a.mu.Unlock()
		var bds v1alpha1.BundleDeploymentList
		if err := a.c.List(watchCtx, &bds, inCluster); err != nil {
			stop()
			pause(ctx, 200*time.Millisecond)
			continue
		}
		for i := range bds.Items {
			a.report(ctx, cluster, &bds.Items[i])
		}
		w, err := a.c.Watch(watchCtx, &v1alpha1.BundleDeploymentList{}, inCluster, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: bds.ResourceVersion}})
		if err != nil {
			stop()
			pause(ctx, 200*time.Millisecond)
			continue
		}
		for ev := range w.ResultChan() {
			if bd, ok := ev.Object.(*v1alpha1.BundleDeployment); ok && ev.Type != watch.Deleted {
				a.report(ctx, cluster, bd)
			}
		}
		w.Stop()
		stop()
	}
}

// report reports bd's release applied and ready, after the agent's delay, unless it was
// reported already; a cut-off agent reports nothing (it lists again once restored).
func (a *simAgents) report(ctx context.Context, cluster string, bd *v1alpha1.BundleDeployment) {
	rel := bd.Spec.Released
	if rel == nil || rel.DeploymentID == bd.Status.AppliedDeploymentID {
		return
	}
	key := bd.Namespace + "/" + bd.Name
	a.mu.Lock()
	if a.reported[key] == rel.DeploymentID || a.cut[cluster] != nil {
		a.mu.Unlock()
		return
	}
	a.reported[key] = rel.DeploymentID
	a.mu.Unlock()
	delay := time.Duration(a.rand.intN(int(a.maxDelay/time.Millisecond)+1)) * time.Millisecond
	go func() {
		bd := bd.DeepCopy()
		simagent.Report(bd)
		pause(ctx, delay) // the apply and the rollout of the workloads
		for attempt := 0; ctx.Err() == nil; attempt++ {
			if a.isCut(cluster) {
				a.mu.Lock()
				if a.reported[key] == rel.DeploymentID {
					delete(a.reported, key) // reported once restored
				}
				a.mu.Unlock()
				return
			}
			err := a.c.Status().Patch(ctx, bd, simagent.StatusPatch(bd))
			if err == nil || apierrors.IsNotFound(err) {
				return
			}
			pause(ctx, time.Duration(min(attempt+1, 10))*100*time.Millisecond)
		}
	}()
}

// pause waits d or until ctx ends: the time a simulated step takes, not a synchronisation.
func pause(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
