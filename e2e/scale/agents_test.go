package scale

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/agent"
	"github.com/flotilla-dev/flotilla/e2e/simagent"
	"github.com/flotilla-dev/flotilla/hub/access"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/events"
	"github.com/flotilla-dev/flotilla/hub/model"
)

// simWriters is how many status writes the simulated agents have in flight. Real agents are
// one writer each, but more than the hub's own concurrency only makes the API server thrash:
// with 32, 500 agents acknowledged further behind the hub's releases than with 8.
const simWriters = 8

// fleetWatch follows the fleet's BundleDeployments through the simulated agents' watches, for
// them (acknowledging each release) and for the measurement (counting what is staged, released
// and ready): watching again would double the decoding the benchmark process does beside the
// hub.
type fleetWatch struct {
	watches, failures atomic.Int64
	// eventsDropped counts the simulated agents' Events their recorders had no room for.
	eventsDropped atomic.Int64

	mu   sync.Mutex
	last map[string]*v1alpha1.BundleDeployment
	goal *revisionGoal
}

// revisionGoal is what waitAllReady waits for: every deployment on rev, ready.
type revisionGoal struct {
	rev                                              int64
	total                                            int
	start                                            time.Time
	staged, released, ready                          map[string]bool
	firstStaged, allStaged, firstRelease, allRelease time.Duration
	done                                             chan struct{}
}

func (g *revisionGoal) record(key string, bd *v1alpha1.BundleDeployment) {
	since := time.Since(g.start)
	if bd.Spec.Staged.Index == g.rev && !g.staged[key] {
		g.staged[key] = true
		if len(g.staged) == 1 {
			g.firstStaged = since
		}
		if len(g.staged) == g.total {
			g.allStaged = since
		}
	}
	if bd.Spec.Released != nil && bd.Spec.Released.Index == g.rev && !g.released[key] {
		g.released[key] = true
		if len(g.released) == 1 {
			g.firstRelease = since
		}
		if len(g.released) == g.total {
			g.allRelease = since
		}
	}
	if bd.Status.Ready && bd.Status.AppliedRevision == g.rev && bd.Spec.Staged.Index == g.rev {
		g.ready[key] = true
	} else {
		delete(g.ready, key)
	}
	if len(g.ready) == g.total {
		select {
		case <-g.done:
		default:
			close(g.done)
		}
	}
}

func (f *fleetWatch) observe(bd *v1alpha1.BundleDeployment) {
	key := bd.Namespace + "/" + bd.Name
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.last == nil {
		f.last = map[string]*v1alpha1.BundleDeployment{}
	}
	f.last[key] = bd
	if f.goal != nil {
		f.goal.record(key, bd)
	}
}

// waitAllReady waits until every deployment of the fleet runs revision rev, ready, logs when
// the first and the last were staged, released and ready, and returns when the first was
// released (counted from start).
func (f *fleetWatch) waitAllReady(b *testing.B, total int, rev int64, start time.Time) (firstRelease time.Duration) {
	g := &revisionGoal{rev: rev, total: total, start: start, staged: map[string]bool{}, released: map[string]bool{}, ready: map[string]bool{}, done: make(chan struct{})}
	f.mu.Lock()
	f.goal = g
	for key, bd := range f.last {
		g.record(key, bd)
	}
	f.mu.Unlock()
	// A fleet that makes no progress for two minutes is stuck: say where.
	lastReady, lastProgress := -1, time.Now()
	for done := false; !done; {
		select {
		case <-g.done:
			done = true
		case <-time.After(time.Second):
			f.mu.Lock()
			if n := len(g.ready); n != lastReady {
				lastReady, lastProgress = n, time.Now()
			}
			if time.Since(lastProgress) > 2*time.Minute {
				defer f.mu.Unlock()
				b.Fatalf("not all %d deployments ready on revision %d, and no progress for 2 minutes: %s", total, rev, f.describeStuck(g))
			}
			f.mu.Unlock()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if os.Getenv("SCALE_WRITES") != "" {
		b.Logf("revision %d: first staged %v, all staged %v, first released %v, all released %v, all ready %v", rev, g.firstStaged, g.allStaged, g.firstRelease, g.allRelease, time.Since(start))
	}
	return g.firstRelease
}

// describeStuck counts the fleet's deployments by how far they got towards g and shows a few
// that are not ready. f.mu is held.
func (f *fleetWatch) describeStuck(g *revisionGoal) string {
	var examples []string
	counts := map[string]int{}
	for key, bd := range f.last {
		if g.ready[key] {
			continue
		}
		rel, applied := int64(0), bd.Status.AppliedRevision
		if bd.Spec.Released != nil {
			rel = bd.Spec.Released.Index
		}
		state := fmt.Sprintf("staged %d released %d applied %d ready %v", bd.Spec.Staged.Index, rel, applied, bd.Status.Ready)
		counts[state]++
		if len(examples) < 5 {
			examples = append(examples, key+": "+state)
		}
	}
	return fmt.Sprintf("%d deployments seen (%d expected), not ready by state %v, e.g. %v", len(f.last), g.total, counts, examples)
}

// simulateAgents acts as the fleet's agents: each watches its cluster's BundleDeployments,
// and eight writers report each release applied and ready with one status write. A failed
// write is retried, and a watch that ends is followed by a list and a new watch, so no release
// is left unanswered.
func (f *fleetWatch) simulateAgents(ctx context.Context, b *testing.B, c client.Client, ns string, clusters int) {
	wc, err := client.NewWithWatch(fastConfig(), client.Options{Scheme: c.Scheme()})
	if err != nil {
		b.Error(err)
		return
	}
	work := make(chan *v1alpha1.BundleDeployment, 10000)
	// queued holds the release each deployment waits to acknowledge: a relist after a watch
	// ended must not acknowledge it twice.
	var queuedMu sync.Mutex
	queued := map[string]string{}
	ack := func(bd *v1alpha1.BundleDeployment) {
		if bd.Spec.Released == nil || bd.Spec.Released.DeploymentID == bd.Status.AppliedDeploymentID {
			return
		}
		key := bd.Namespace + "/" + bd.Name
		queuedMu.Lock()
		fresh := queued[key] != bd.Spec.Released.DeploymentID
		queued[key] = bd.Spec.Released.DeploymentID
		queuedMu.Unlock()
		if fresh {
			work <- bd
		}
	}
	var wg sync.WaitGroup
	for range simWriters {
		recorder := f.agentEvents(ctx, c)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for orig := range work {
				bd := orig.DeepCopy() // orig is also the measurement's
				simagent.Report(bd)
				for attempt := 0; ctx.Err() == nil; attempt++ {
					err := c.Status().Patch(ctx, bd, simagent.StatusPatch(bd))
					if err == nil || apierrors.IsNotFound(err) {
						break
					}
					if f.failures.Add(1) <= 3 && os.Getenv("SCALE_WRITES") != "" {
						b.Logf("simulated agent: status write failed (retrying): %v", err)
					}
					time.Sleep(time.Duration(min(attempt+1, 10)) * 100 * time.Millisecond)
				}
				// What a real agent tells of a release that it applied and found ready at once.
				recorder.Normal(bd, v1alpha1.EventRevisionApplied, "revision %d applied: %d objects, %d pruned", bd.Status.AppliedRevision, 1, 0)
				recorder.Normal(bd, v1alpha1.EventRevisionReady, "revision %d ready", bd.Status.AppliedRevision)
				queuedMu.Lock()
				if key := bd.Namespace + "/" + bd.Name; queued[key] == bd.Spec.Released.DeploymentID {
					delete(queued, key)
				}
				queuedMu.Unlock()
			}
		}()
	}
	defer func() { close(work); wg.Wait() }()
	// Each simulated agent watches its own cluster's namespace, as a real one does.
	var agents sync.WaitGroup
	for i := range clusters {
		agents.Add(1)
		go func() {
			defer agents.Done()
			inCluster := client.InNamespace(access.ClusterNamespace(ns, clusterName(i)))
			for ctx.Err() == nil {
				var bds v1alpha1.BundleDeploymentList
				if err := wc.List(ctx, &bds, inCluster); err != nil {
					continue
				}
				for i := range bds.Items {
					bd := &bds.Items[i]
					f.observe(bd)
					ack(bd)
				}
				w, err := wc.Watch(ctx, &v1alpha1.BundleDeploymentList{}, inCluster, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: bds.ResourceVersion}})
				if err != nil {
					continue
				}
				f.watches.Add(1)
				for ev := range w.ResultChan() {
					if bd, isBD := ev.Object.(*v1alpha1.BundleDeployment); isBD && ev.Type != watch.Deleted {
						f.observe(bd)
						ack(bd)
					}
				}
				w.Stop()
			}
		}()
	}
	agents.Wait()
}

// agentEvents is a recorder of the Events a real agent records on the deployments it applies
// (RevisionApplied, RevisionReady), asynchronous and aggregated as the agent's, when
// SCALE_AGENT_EVENTS is set: they cost the API server writes per cluster and revision, which
// the benchmark leaves out otherwise. Without it, nil: a nil recorder records nothing.
func (f *fleetWatch) agentEvents(ctx context.Context, c client.Client) *events.Recorder {
	if os.Getenv("SCALE_AGENT_EVENTS") == "" {
		return nil
	}
	r := events.New(model.EventSink(c), c.Scheme(), agent.EventsController)
	r.OnDrop(func() { f.eventsDropped.Add(1) })
	go func() { _ = r.Start(ctx) }()
	return r
}
