package scale

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"testing"
	"time"

	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/flotilla-dev/flotilla/hub"
	"github.com/flotilla-dev/flotilla/hub/clusters"
)

// BenchmarkRestart deploys a fleet (SCALE_FLEETS, 10 × 500 by default; the size is
// 50 × 1,000), then restarts the hub as a pod restart or a standby taking over would: a new
// hub, empty caches, the same API server and agents. It reports how long the new hub takes to
// resync (from its start until every controller's queue has stayed empty for two seconds), the
// writes it makes meanwhile (a resync must change nothing: any write is logged by kind), its
// heap once resynced, and then, with a commit pushed, how long until its first release and
// until every deployment runs the new revision ready.
func BenchmarkRestart(b *testing.B) {
	for _, sc := range fleetSizes(b, []fleetSize{{10, 500}}) {
		b.Run(fmt.Sprintf("%dbundles-x-%dclusters", sc.bundles, sc.clusters), func(b *testing.B) {
			for b.Loop() {
				runRestart(b, sc)
			}
		})
	}
}

func runRestart(b *testing.B, sc fleetSize) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := benchClient(b)
	total := sc.bundles * sc.clusters
	spec := fleetSpec{bundles: sc.bundles, clusters: sc.clusters}
	files := map[string]string{}
	configMaps := func(v int) {
		for i := range sc.bundles {
			files[fmt.Sprintf("b%02d/fleet.yaml", i)] = spec.fleetYAML(i)
			files[fmt.Sprintf("b%02d/cm.yaml", i)] = fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm-%d}\ndata: {v: \"%d\"}\n", i, v)
		}
	}
	configMaps(1)
	health := freeLoopbackAddr(b)
	s := startScenario(ctx, b, c, sc.clusters, files, true, func(o *hub.Options) { o.HealthAddr = health })
	defer s.stop()
	start := time.Now()
	s.createRepo(ctx, b)
	s.fleet.waitAllReady(b, total, 1, start)
	b.Logf("first deployment of %d deployments: %v", total, time.Since(start))

	// The hub has written what it held back (progress counts are written at most every three
	// status delays): what the restarted hub writes is then its own doing.
	settleFor(b, s.counter, 0, 3*clusters.DefaultStatusDelay+5*time.Second)
	// The old hub's memory goes with it: what remains is the harness's (its agents' view).
	s.stopHubOnly()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	baseline, _ := controllerLoad(b)
	start = time.Now()
	s.restartHub(b)
	resynced := waitResynced(b, "http://"+health+"/readyz", baseline, 2*time.Second, 5*time.Minute)
	resync := time.Since(start)
	writes := s.counter.writes.Load()
	if writes > 0 {
		s.counter.mu.Lock()
		b.Logf("the restarted hub wrote %d times while it resynced: %v", writes, s.counter.byKind)
		s.counter.mu.Unlock()
	}
	runtime.GC()
	runtime.ReadMemStats(&after)

	// Back to releasing: a commit pushed now.
	configMaps(2)
	start = time.Now()
	s.push(b, files)
	firstRelease := s.fleet.waitAllReady(b, total, 2, start)
	update := time.Since(start)
	updateWrites := s.counter.writes.Load() - writes

	b.ReportMetric(resync.Seconds(), "resync-s")
	b.ReportMetric(resynced, "reconciles")
	b.ReportMetric(float64(writes), "resync-writes")
	b.ReportMetric(float64(after.HeapInuse-min(after.HeapInuse, before.HeapInuse))/(1<<20), "heap-MB")
	b.ReportMetric(firstRelease.Seconds(), "first-release-s")
	b.ReportMetric(update.Seconds(), "update-s")
	b.ReportMetric(float64(updateWrites)/float64(total), "hub-writes/bd-update")
}

// waitResynced waits until the hub is ready (its informers synced: readyz), its controllers
// reconciled more than baseline (the process's count before it started) and every work queue
// has stayed empty for quiet, and returns how many reconciles that took. An item due later (a
// requeue after) is not in a queue until it is due: a hub that rechecks its clusters now and
// then is quiet between. A hub not resynced within limit fails the benchmark.
func waitResynced(b *testing.B, readyz string, baseline float64, quiet, limit time.Duration) float64 {
	deadline := time.Now().Add(limit)
	ready := false
	var emptySince time.Time
	for ; time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if !ready {
			resp, err := http.Get(readyz)
			if err != nil {
				continue
			}
			resp.Body.Close()
			if ready = resp.StatusCode == http.StatusOK; !ready {
				continue
			}
		}
		reconciles, depth := controllerLoad(b)
		switch {
		case reconciles <= baseline || depth > 0:
			emptySince = time.Time{}
		case emptySince.IsZero():
			emptySince = time.Now()
		case time.Since(emptySince) >= quiet:
			return reconciles - baseline
		}
	}
	b.Fatalf("the restarted hub was not ready with empty work queues for %v within %v (ready: %v)", quiet, limit, ready)
	return 0
}

// controllerLoad reads the process's controller metrics: reconciles so far and items waiting in
// the work queues now, over every controller.
func controllerLoad(b *testing.B) (reconciles, depth float64) {
	fams, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, fam := range fams {
		for _, m := range fam.GetMetric() {
			switch fam.GetName() {
			case "controller_runtime_reconcile_total":
				reconciles += m.GetCounter().GetValue()
			case "workqueue_depth":
				depth += m.GetGauge().GetValue()
			}
		}
	}
	return reconciles, depth
}
