package scale

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/e2e/controlplane"
	"github.com/flotilla-dev/flotilla/e2e/gitserver"
	"github.com/flotilla-dev/flotilla/hub"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/manifests"
)

var apiServer *controlplane.Cluster

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	os.Exit(controlplane.RunTests(m, func(ctx context.Context, env *controlplane.Environment) (err error) {
		if apiServer, err = env.StartCluster(ctx, controlplane.ClusterOptions{Name: "hub"}); err != nil {
			return err
		}
		crds, err := manifests.CRDs()
		if err != nil {
			return err
		}
		return controlplane.InstallCRDs(ctx, apiServer.Config(), crds)
	}))
}

// writeCounter counts the requests that change something.
type writeCounter struct {
	rt     http.RoundTripper
	writes atomic.Int64

	mu     sync.Mutex
	byKind map[string]int
}

func (w *writeCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.writes.Add(1)
		w.mu.Lock()
		if w.byKind == nil {
			w.byKind = map[string]int{}
		}
		w.byKind[r.Method+" "+resourceOf(r.URL.Path)]++
		w.mu.Unlock()
	}
	return w.rt.RoundTrip(r)
}

// resourceOf reduces an API path to its resource (and subresource).
func resourceOf(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	for i, p := range parts {
		if p == "namespaces" && i+2 < len(parts) {
			rest := parts[i+2:]
			if len(rest) >= 3 {
				return rest[0] + "/" + rest[2]
			}
			return rest[0]
		}
	}
	if len(parts) > 0 {
		return parts[len(parts)-1]
	}
	return path
}

func fastConfig() *rest.Config {
	cfg := apiServer.Config()
	cfg.QPS, cfg.Burst = 1000, 2000
	return cfg
}

func BenchmarkFleet(b *testing.B) {
	for _, sc := range []struct{ bundles, clusters int }{{1, 200}, {50, 50}, {10, 500}} {
		b.Run(fmt.Sprintf("%dbundles-x-%dclusters", sc.bundles, sc.clusters), func(b *testing.B) {
			for b.Loop() {
				runScenario(b, sc.bundles, sc.clusters)
			}
		})
	}
}

func runScenario(b *testing.B, bundles, clusters int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	scheme, _ := hub.Scheme()
	c, err := client.New(fastConfig(), client.Options{Scheme: scheme})
	if err != nil {
		b.Fatal(err)
	}
	total := bundles * clusters

	floor := writeFloor(b, c, total)

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "scale-"}}
	if err := c.Create(ctx, ns); err != nil {
		b.Fatal(err)
	}
	files := map[string]string{}
	for i := range bundles {
		// Without a fleet.yaml anywhere the repository root would be one bundle.
		files[fmt.Sprintf("b%02d/fleet.yaml", i)] = fmt.Sprintf("defaultNamespace: scale-%d\n", i)
		files[fmt.Sprintf("b%02d/cm.yaml", i)] = fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm-%d}\ndata: {v: \"1\"}\n", i)
	}
	up := gitserver.New(b)
	up.Commit("main", files)
	srv := up.ServeHTTP("", "")
	register(b, c, ns.Name, clusters)

	var heapBefore runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&heapBefore)
	counter := &writeCounter{}
	hubCfg := fastConfig()
	hubCfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { counter.rt = rt; return counter })
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		_ = hub.Run(ctx, hub.Options{Config: hubCfg, CacheDir: b.TempDir(), PollWorkers: 4})
	}()
	go func() { defer wg.Done(); simulateAgents(ctx, b, c) }()
	defer wg.Wait()
	defer cancel()

	start := time.Now()
	repo := &v1alpha1.GitRepo{ObjectMeta: metav1.ObjectMeta{Name: "scale", Namespace: ns.Name}, Spec: v1alpha1.GitRepoSpec{
		Repo: srv.URL + "/repo.git", PollingInterval: &metav1.Duration{Duration: time.Second},
		Targets: []v1alpha1.Target{{ClusterMatch: v1alpha1.ClusterMatch{ClusterSelector: &metav1.LabelSelector{}}}},
	}}
	if err := c.Create(ctx, repo); err != nil {
		b.Fatal(err)
	}
	waitAllReady(b, c, ns.Name, total, 1)
	deploy := time.Since(start)
	writesDeploy := counter.writes.Load()

	for i := range bundles {
		files[fmt.Sprintf("b%02d/cm.yaml", i)] = fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm-%d}\ndata: {v: \"2\"}\n", i)
	}
	start = time.Now()
	up.Commit("main", files)
	waitAllReady(b, c, ns.Name, total, 2)
	update := time.Since(start)
	writesUpdate := counter.writes.Load() - writesDeploy

	var heap runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&heap)
	if os.Getenv("SCALE_WRITES") != "" {
		counter.mu.Lock()
		b.Logf("hub writes by kind: %v", counter.byKind)
		counter.mu.Unlock()
	}
	b.ReportMetric(deploy.Seconds(), "deploy-s")
	b.ReportMetric(update.Seconds(), "update-s")
	b.ReportMetric(floor.Seconds(), "floor-s")
	b.ReportMetric(deploy.Seconds()/floor.Seconds(), "deploy/floor")
	b.ReportMetric(update.Seconds()/floor.Seconds(), "update/floor")
	b.ReportMetric(float64(writesDeploy)/float64(total), "hub-writes/bd-deploy")
	b.ReportMetric(float64(writesUpdate)/float64(total), "hub-writes/bd-update")
	b.ReportMetric(float64(heap.HeapInuse-min(heap.HeapInuse, heapBefore.HeapInuse))/(1<<20), "heap-MB")
}

// writeFloor creates n small objects and writes each one's status once, with the same client
// concurrency the hub has: the least the API server needs for n deployments.
func writeFloor(b *testing.B, c client.Client, n int) time.Duration {
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "floor-"}}
	if err := c.Create(ctx, ns); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	parallel(n, func(i int) {
		bd := &v1alpha1.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bd-%d", i), Namespace: ns.Name},
			Spec: v1alpha1.BundleDeploymentSpec{Bundle: "b", BundleNamespace: "n", Staged: v1alpha1.RevisionRef{Index: 1, ContentID: "c", DeploymentID: "d"}}}
		if err := c.Create(ctx, bd); err != nil {
			b.Error(err)
			return
		}
		orig := bd.DeepCopy()
		bd.Status.Ready, bd.Status.AppliedRevision = true, 1
		if err := c.Status().Patch(ctx, bd, client.MergeFrom(orig)); err != nil {
			b.Error(err)
		}
	})
	return time.Since(start)
}

// register creates n Clusters and admits them, as registration does.
func register(b *testing.B, c client.Client, ns string, n int) {
	ctx := context.Background()
	parallel(n, func(i int) {
		name := fmt.Sprintf("c%04d", i)
		cl := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
		if err := c.Create(ctx, cl); err != nil {
			b.Error(err)
			return
		}
		if err := hub.AdmitCluster(ctx, c, cl); err != nil {
			b.Error(err)
		}
	})
}

// parallel runs f for 0..n-1 on 8 workers, the hub's client concurrency.
func parallel(n int, f func(i int)) {
	work := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				f(i)
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
}

// simFailures counts simulated agents' failed status writes (each is retried).
var simFailures atomic.Int64

// simulateAgents watches every BundleDeployment and reports each release applied and ready with
// one status write, as agents do: a failed write is retried, and a watch that ends is followed
// by a list and a new watch, so no release is left unanswered.
func simulateAgents(ctx context.Context, b *testing.B, c client.Client) {
	wc, err := client.NewWithWatch(fastConfig(), client.Options{Scheme: c.Scheme()})
	if err != nil {
		b.Error(err)
		return
	}
	work := make(chan *v1alpha1.BundleDeployment, 10000)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for bd := range work {
				orig := bd.DeepCopy()
				now := metav1.Now()
				bd.Status.AppliedRevision, bd.Status.AppliedDeploymentID, bd.Status.AppliedAt = bd.Spec.Released.Index, bd.Spec.Released.DeploymentID, &now
				bd.Status.Ready, bd.Status.State = true, v1alpha1.StateReady
				for attempt := 0; ctx.Err() == nil; attempt++ {
					err := c.Status().Patch(ctx, bd, client.MergeFrom(orig))
					if err == nil || apierrors.IsNotFound(err) {
						break
					}
					simFailures.Add(1)
					if os.Getenv("SCALE_WRITES") != "" && simFailures.Load() <= 3 {
						b.Logf("simulated agent: status write failed (retrying): %v", err)
					}
					time.Sleep(time.Duration(min(attempt+1, 10)) * 100 * time.Millisecond)
				}
			}
		}()
	}
	defer func() { close(work); wg.Wait() }()
	needsAck := func(bd *v1alpha1.BundleDeployment) bool {
		return bd.Spec.Released != nil && bd.Spec.Released.DeploymentID != bd.Status.AppliedDeploymentID
	}
	for ctx.Err() == nil {
		var bds v1alpha1.BundleDeploymentList
		if err := wc.List(ctx, &bds); err != nil {
			continue
		}
		for i := range bds.Items {
			if needsAck(&bds.Items[i]) {
				work <- &bds.Items[i]
			}
		}
		w, err := wc.Watch(ctx, &v1alpha1.BundleDeploymentList{}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: bds.ResourceVersion}})
		if err != nil {
			continue
		}
		for ev := range w.ResultChan() {
			if bd, isBD := ev.Object.(*v1alpha1.BundleDeployment); isBD && ev.Type != watch.Deleted && needsAck(bd) {
				work <- bd
			}
		}
		w.Stop()
	}
}

// waitAllReady waits until every BundleDeployment of the fleet namespace runs revision rev,
// ready. It lists once and then follows a watch: polling with lists would load the server under
// measurement (a list of every deployment each second took a noticeable share of its CPU).
func waitAllReady(b *testing.B, c client.Client, ns string, total int, rev int64) {
	wc, err := client.NewWithWatch(fastConfig(), client.Options{Scheme: c.Scheme()})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	done := map[string]bool{}
	ready := 0
	start := time.Now()
	var firstStaged, allStaged, allReleased time.Duration
	staged, released := map[string]bool{}, map[string]bool{}
	defer func() {
		if os.Getenv("SCALE_WRITES") != "" {
			b.Logf("revision %d: first staged %v, all staged %v, all released %v, all ready %v", rev, firstStaged, allStaged, allReleased, time.Since(start))
		}
	}()
	record := func(bd *v1alpha1.BundleDeployment) {
		key := bd.Namespace + "/" + bd.Name
		if bd.Spec.Staged.Index == rev && !staged[key] {
			staged[key] = true
			if len(staged) == 1 {
				firstStaged = time.Since(start)
			}
			if len(staged) == total {
				allStaged = time.Since(start)
			}
		}
		if bd.Spec.Released != nil && bd.Spec.Released.Index == rev && !released[key] {
			released[key] = true
			if len(released) == total {
				allReleased = time.Since(start)
			}
		}
		now := bd.Status.Ready && bd.Status.AppliedRevision == rev && bd.Spec.Staged.Index == rev
		if now != done[key] {
			done[key] = now
			if now {
				ready++
			} else {
				ready--
			}
		}
	}
	count := func() int { return ready }
	for ctx.Err() == nil {
		var bds v1alpha1.BundleDeploymentList
		if err := wc.List(ctx, &bds, client.MatchingLabels{hub.LabelBundleNamespace: ns}); err != nil {
			continue
		}
		for i := range bds.Items {
			record(&bds.Items[i])
		}
		if count() == total {
			return
		}
		w, err := wc.Watch(ctx, &v1alpha1.BundleDeploymentList{}, client.MatchingLabels{hub.LabelBundleNamespace: ns}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: bds.ResourceVersion}})
		if err != nil {
			continue
		}
		for ev := range w.ResultChan() {
			if bd, ok := ev.Object.(*v1alpha1.BundleDeployment); ok && ev.Type != watch.Deleted {
				record(bd)
				if count() == total {
					w.Stop()
					return
				}
			}
		}
		w.Stop() // the watch ended (timeout, compaction): list again and follow a new one
	}
	b.Fatalf("not all %d deployments ready on revision %d: %d are", total, rev, count())
}
