package scale

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/hub"
	"github.com/flotilla-dev/flotilla/hub/access"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/liveness"
)

// The idle fleet: agents that only heartbeat, with an interval short enough for a benchmark.
const (
	idleClusters = 2000
	idleInterval = 10 * time.Second
	idleDeadline = 30 * time.Second
	// idleStopped agents stop to measure how soon the hub calls their clusters offline.
	idleStopped = 20
)

// BenchmarkIdleFleet runs 2,000 simulated agents that only heartbeat, every 10 s, against the
// real hub, and reports for three intervals: the heartbeat writes a second, the hub's own
// writes a second (none: an idle fleet costs it nothing), and the API server's CPU per
// heartbeat, for Lease renewals (today's agents) and, for comparison, for heartbeats written
// into the Clusters' status (agents from before Leases). Then 20 agents stop, and it reports
// how long after each one's last renewal the hub marked its cluster Offline, less the 30 s
// deadline. Other sizes: N clusters renewing every I cost N / I writes a second and
// N / I × (CPU per heartbeat) of the API server; a stopped agent is Offline within its
// deadline plus the delay reported here.
func BenchmarkIdleFleet(b *testing.B) {
	for b.Loop() {
		runIdleFleet(b)
	}
}

func runIdleFleet(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := benchClient(b)
	ns := benchNamespace(b, c, "idle-")
	register(b, c, ns.Name, idleClusters)
	counter, stopHub := startHub(ctx, b, hub.Options{HeartbeatInterval: idleInterval, HeartbeatDeadline: idleDeadline})
	defer removeScenario(b, c, ns.Name, idleClusters)
	defer stopHub()
	// The hub admits the clusters and creates their Leases: 2,000 Roles, bindings, accounts
	// and Leases at least.
	settle(b, counter, int64(4*idleClusters))

	agents := &idleAgents{c: c, ns: ns.Name, lastRenewal: make([]atomic.Int64, idleClusters), leases: make([]*coordinationv1.Lease, idleClusters)}
	leases := agents.measure(ctx, b, counter, agents.renewLease)
	legacy := agents.measure(ctx, b, counter, agents.writeStatus)

	// Offline detection: the first idleStopped agents stop renewing their Leases; the others
	// go on.
	leaseCtx, stopLeases := context.WithCancel(ctx)
	defer stopLeases()
	stoppedCtx, stopSome := context.WithCancel(leaseCtx)
	defer stopSome()
	var running sync.WaitGroup
	for i := range idleClusters {
		agentCtx := leaseCtx
		if i < idleStopped {
			agentCtx = stoppedCtx
		}
		running.Add(1)
		go func() { defer running.Done(); agents.run(agentCtx, i, agents.renewLease) }()
	}
	defer running.Wait()
	defer stopLeases()
	agents.waitAllRenewed(b, time.Now())
	stopSome()
	delays := agents.waitOffline(b, ctx)
	var sum time.Duration
	worst := delays[0]
	for _, d := range delays {
		sum += d
		worst = max(worst, d)
	}
	b.ReportMetric(leases.writesPerSecond, "lease-writes/s")
	b.ReportMetric(leases.hubWritesPerSecond, "hub-writes/s")
	b.ReportMetric(leases.apiCPUPerBeat*1000, "apiserver-cpu-ms/lease-renewal")
	b.ReportMetric(legacy.apiCPUPerBeat*1000, "apiserver-cpu-ms/status-heartbeat")
	b.ReportMetric(leases.processCPUPerBeat*1000, "hub+sim-cpu-ms/lease-renewal")
	b.ReportMetric(legacy.processCPUPerBeat*1000, "hub+sim-cpu-ms/status-heartbeat")
	b.ReportMetric((sum / time.Duration(len(delays))).Seconds(), "offline-after-deadline-mean-s")
	b.ReportMetric(worst.Seconds(), "offline-after-deadline-max-s")
	perSecond := 10000 / liveness.DefaultHeartbeatInterval.Seconds()
	b.Logf("10,000 clusters at the default %s interval: %.0f renewals/s, %.2f API server cores; the hub's writes by kind: %v",
		liveness.DefaultHeartbeatInterval, perSecond, perSecond*leases.apiCPUPerBeat, counter.byKind)
}

// idleAgents simulates agents that only heartbeat, as the real agent does.
type idleAgents struct {
	c           client.Client
	ns          string
	beats       atomic.Int64
	lastRenewal []atomic.Int64 // unix nanoseconds of each agent's last renewal
	// leases are each agent's Lease as last renewed (each agent's goroutine its own).
	leases []*coordinationv1.Lease
}

// idlePhase is what one way of heartbeating cost over the measured window.
type idlePhase struct {
	writesPerSecond, hubWritesPerSecond float64
	apiCPUPerBeat, processCPUPerBeat    float64 // seconds
}

// measure runs every agent with beat for one interval to reach a steady state, then three
// intervals measured.
func (a *idleAgents) measure(ctx context.Context, b *testing.B, counter *writeCounter, beat func(context.Context, int) error) idlePhase {
	phaseCtx, stop := context.WithCancel(ctx)
	var running sync.WaitGroup
	for i := range idleClusters {
		running.Add(1)
		go func() { defer running.Done(); a.run(phaseCtx, i, beat) }()
	}
	defer running.Wait()
	defer stop()
	a.waitAllRenewed(b, time.Now())
	settle(b, counter, counter.writes.Load()) // the hub has written the clusters' new states
	beats0, hub0, api0, proc0 := a.beats.Load(), counter.writes.Load(), apiServerCPU(b), processCPU()
	start := time.Now()
	select {
	case <-ctx.Done():
		b.Fatal("stopped while measuring")
	case <-time.After(3 * idleInterval): // the window measured, not a synchronisation
	}
	elapsed := time.Since(start).Seconds()
	beats := float64(a.beats.Load() - beats0)
	return idlePhase{
		writesPerSecond:    beats / elapsed,
		hubWritesPerSecond: float64(counter.writes.Load()-hub0) / elapsed,
		apiCPUPerBeat:      (apiServerCPU(b) - api0) / beats,
		processCPUPerBeat:  (processCPU() - proc0) / beats,
	}
}

// run heartbeats as agent i every idleInterval, its first beat spread over the interval as
// agents started at different times would be, until ctx ends.
func (a *idleAgents) run(ctx context.Context, i int, beat func(context.Context, int) error) {
	offset := time.Duration(i) * idleInterval / idleClusters
	next := time.NewTimer(offset)
	defer next.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-next.C:
		}
		// The renewal counts from when the agent made it (the time it writes), not from when the
		// API server answered: on a loaded machine that can be a second later.
		at := time.Now()
		if beat(ctx, i) == nil {
			a.beats.Add(1)
			a.lastRenewal[i].Store(at.UnixNano())
		}
		next.Reset(idleInterval)
	}
}

// renewLease renews agent i's Lease as the agent does: an update of the Lease as last
// renewed, read again only when the update fails.
func (a *idleAgents) renewLease(ctx context.Context, i int) error {
	lease := a.leases[i]
	if lease == nil {
		lease = &coordinationv1.Lease{}
		key := types.NamespacedName{Namespace: access.ClusterNamespace(a.ns, clusterName(i)), Name: v1alpha1.AgentLeaseName}
		if err := a.c.Get(ctx, key, lease); err != nil {
			return err
		}
	}
	lease.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
	if err := a.c.Update(ctx, lease); err != nil {
		a.leases[i] = nil
		return err
	}
	a.leases[i] = lease
	return nil
}

// writeStatus heartbeats as agent i did before Leases: it read its Cluster (for a move or a
// removal) and wrote the time into its status.
func (a *idleAgents) writeStatus(ctx context.Context, i int) error {
	cl := &v1alpha1.Cluster{}
	if err := a.c.Get(ctx, types.NamespacedName{Namespace: a.ns, Name: clusterName(i)}, cl); err != nil {
		return err
	}
	patch := fmt.Sprintf(`{"status":{"agentLastSeen":%q}}`, time.Now().UTC().Format(time.RFC3339))
	return a.c.Status().Patch(ctx, cl, client.RawPatch(types.MergePatchType, []byte(patch)))
}

// waitAllRenewed waits until every running agent heartbeat after since.
func (a *idleAgents) waitAllRenewed(b *testing.B, since time.Time) {
	deadline := time.Now().Add(3 * idleInterval)
	for i := range idleClusters {
		for a.lastRenewal[i].Load() < since.UnixNano() {
			if time.Now().After(deadline) {
				b.Fatalf("agent %d did not heartbeat within %s", i, 3*idleInterval)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// waitOffline waits until the hub calls the stopped agents' clusters Offline and returns how
// long after each one's deadline (last renewal + idleDeadline) that was.
func (a *idleAgents) waitOffline(b *testing.B, ctx context.Context) []time.Duration {
	var delays []time.Duration
	seen := map[int]bool{}
	deadline := time.Now().Add(idleDeadline + time.Minute)
	for len(seen) < idleStopped {
		if time.Now().After(deadline) {
			b.Fatalf("the hub called %d of %d stopped agents' clusters Offline within a minute past the deadline; the others: %s", len(seen), idleStopped, a.describe(ctx, seen))
		}
		for i := range idleStopped {
			if seen[i] {
				continue
			}
			var cl v1alpha1.Cluster
			if err := a.c.Get(ctx, types.NamespacedName{Namespace: a.ns, Name: clusterName(i)}, &cl); err != nil {
				b.Fatal(err)
			}
			if cond := meta.FindStatusCondition(cl.Status.Conditions, v1alpha1.ReadyCondition); cond != nil && cond.Reason == v1alpha1.OfflineReason {
				seen[i] = true
				last := time.Unix(0, a.lastRenewal[i].Load())
				delays = append(delays, time.Since(last)-idleDeadline)
			}
		}
		time.Sleep(100 * time.Millisecond) // the observer's own polling, not the hub's
	}
	return delays
}

// describe shows the stopped agents' clusters not in seen as the API server has them: their
// Ready condition, and their last renewal as the agent made it and as the Lease holds it.
func (a *idleAgents) describe(ctx context.Context, seen map[int]bool) string {
	var out []string
	for i := range idleStopped {
		if seen[i] {
			continue
		}
		var cl v1alpha1.Cluster
		var lease coordinationv1.Lease
		_ = a.c.Get(ctx, types.NamespacedName{Namespace: a.ns, Name: clusterName(i)}, &cl)
		_ = a.c.Get(ctx, types.NamespacedName{Namespace: access.ClusterNamespace(a.ns, clusterName(i)), Name: v1alpha1.AgentLeaseName}, &lease)
		state := "no Ready condition"
		if cond := meta.FindStatusCondition(cl.Status.Conditions, v1alpha1.ReadyCondition); cond != nil {
			state = fmt.Sprintf("Ready=%s %s since %s (%q)", cond.Status, cond.Reason, cond.LastTransitionTime.UTC().Format(time.RFC3339), cond.Message)
		}
		var renewed string
		if lease.Spec.RenewTime != nil {
			renewed = lease.Spec.RenewTime.UTC().Format(time.RFC3339Nano)
		}
		out = append(out, fmt.Sprintf("%s: %s; last renewal %s, Lease renewTime %s, resourceVersion %s", clusterName(i), state,
			time.Unix(0, a.lastRenewal[i].Load()).UTC().Format(time.RFC3339Nano), renewed, cl.ResourceVersion))
	}
	return strings.Join(out, "; ")
}

// apiServerCPU reads the API server's process CPU seconds from its metrics.
func apiServerCPU(b *testing.B) float64 {
	kube := kubernetes.NewForConfigOrDie(apiServer.Config())
	raw, err := kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		b.Fatalf("failed to read the API server's metrics: %v", err)
	}
	sc := bufio.NewScanner(strings.NewReader(string(raw)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "process_cpu_seconds_total "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatal(err)
			}
			return f
		}
	}
	b.Fatal("the API server's metrics have no process_cpu_seconds_total")
	return math.NaN()
}

// processCPU is the CPU seconds this process (the hub and the simulator) used.
func processCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		fmt.Fprintln(os.Stderr, "getrusage:", err)
		return math.NaN()
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}
