package scale

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
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

var (
	apiServer *controlplane.Cluster
	warmUp    sync.Once
)

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

	// A fresh API server is slower for its first few thousand writes: warm it up first, or the
	// first scenario's floor would be the slowest.
	warmUp.Do(func() { writeFloor(b, c, 2000, false) })
	floor := writeFloor(b, c, total, false)
	shapedFloor := writeFloor(b, c, total, true)

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
	webhook := freeLoopbackAddr(b)
	go func() {
		defer wg.Done()
		_ = hub.Run(ctx, hub.Options{Config: hubCfg, CacheDir: b.TempDir(), PollWorkers: 4, WebhookAddr: webhook})
	}()
	fleet := &fleetWatch{}
	go func() { defer wg.Done(); fleet.simulateAgents(ctx, b, c, ns.Name, clusters) }()
	defer removeScenario(b, c, ns.Name, clusters) // once the hub stopped
	defer wg.Wait()
	defer cancel()

	// Registration is not part of a deployment: the clock starts once the hub has given every
	// cluster its identity (ServiceAccount, Roles, RoleBindings) and written its status.
	registration := settle(b, counter, int64(5*clusters))
	start := time.Now()
	// Pushes are announced by a webhook, as a fleet that wants changes out fast would set up;
	// the poll is the fallback.
	hook := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "hook", Namespace: ns.Name}, Data: map[string][]byte{"token": []byte(webhookSecret)}}
	if err := c.Create(ctx, hook); err != nil {
		b.Fatal(err)
	}
	repo := &v1alpha1.GitRepo{ObjectMeta: metav1.ObjectMeta{Name: "scale", Namespace: ns.Name}, Spec: v1alpha1.GitRepoSpec{
		Repo: srv.URL + "/repo.git", PollingInterval: &metav1.Duration{Duration: time.Minute}, WebhookSecretRef: &v1alpha1.LocalObjectReference{Name: hook.Name},
		Targets: []v1alpha1.Target{{ClusterMatch: v1alpha1.ClusterMatch{ClusterSelector: &metav1.LabelSelector{}}}},
	}}
	if err := c.Create(ctx, repo); err != nil {
		b.Fatal(err)
	}
	fleet.waitAllReady(b, total, 1, start)
	deploy := time.Since(start)
	writesDeploy := counter.writes.Load() - registration

	for i := range bundles {
		files[fmt.Sprintf("b%02d/cm.yaml", i)] = fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm-%d}\ndata: {v: \"2\"}\n", i)
	}
	start = time.Now()
	up.Commit("main", files)
	announcePush(b, webhook, srv.URL+"/repo.git")
	fleet.waitAllReady(b, total, 2, start)
	update := time.Since(start)
	writesUpdate := counter.writes.Load() - writesDeploy - registration

	var heap runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&heap)
	if path := os.Getenv("SCALE_HEAP_PROFILE"); path != "" {
		writeHeapProfile(b, fmt.Sprintf("%s.%dx%d", path, bundles, clusters))
	}
	if os.Getenv("SCALE_WRITES") != "" {
		counter.mu.Lock()
		b.Logf("hub writes by kind (registration %d included): %v", registration, counter.byKind)
		b.Logf("watches started by the simulated agents: %d; their failed writes: %d", fleet.watches.Load(), fleet.failures.Load())
		counter.mu.Unlock()
		logSizes(b, c, ns.Name)
	}
	b.ReportMetric(deploy.Seconds(), "deploy-s")
	b.ReportMetric(update.Seconds(), "update-s")
	b.ReportMetric(floor.Seconds(), "floor-s")
	b.ReportMetric(deploy.Seconds()/floor.Seconds(), "deploy/floor")
	b.ReportMetric(update.Seconds()/floor.Seconds(), "update/floor")
	b.ReportMetric(shapedFloor.Seconds()/floor.Seconds(), "shaped-floor/floor")
	b.ReportMetric(float64(writesDeploy)/float64(total), "hub-writes/bd-deploy")
	b.ReportMetric(float64(writesUpdate)/float64(total), "hub-writes/bd-update")
	b.ReportMetric(float64(heap.HeapInuse-min(heap.HeapInuse, heapBefore.HeapInuse))/(1<<20), "heap-MB")
}

// logSizes logs how large a Bundle and a BundleDeployment are as stored (JSON, managed fields
// included): the API server's cost per write grows with it.
func logSizes(b *testing.B, c client.Client, ns string) {
	var bundles v1alpha1.BundleList
	var bds v1alpha1.BundleDeploymentList
	if c.List(context.Background(), &bundles, client.InNamespace(ns), client.Limit(1)) != nil || len(bundles.Items) == 0 ||
		c.List(context.Background(), &bds, client.MatchingLabels{hub.LabelBundleNamespace: ns}, client.Limit(1)) != nil || len(bds.Items) == 0 {
		return
	}
	bun, _ := json.Marshal(bundles.Items[0])
	bd, _ := json.Marshal(bds.Items[0])
	b.Logf("stored sizes: Bundle %d bytes, BundleDeployment %d bytes", len(bun), len(bd))
}

const webhookSecret = "scale-hook"

// freeLoopbackAddr returns a loopback address nothing listens on.
func freeLoopbackAddr(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// announcePush delivers a signed GitHub push webhook for the repository to the hub.
func announcePush(b *testing.B, addr, cloneURL string) {
	body := fmt.Sprintf(`{"ref":"refs/heads/main","repository":{"clone_url":%q}}`, cloneURL)
	mac := hmac.New(sha256.New, []byte(webhookSecret))
	mac.Write([]byte(body))
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr, strings.NewReader(body))
	req.Header.Set("X-GitHub-Event", "push")
	req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		b.Fatalf("webhook delivery: %s", resp.Status)
	}
}

// writeHeapProfile writes the process's live heap (the hub's and the harness's) to path.
func writeHeapProfile(b *testing.B, path string) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.WriteHeapProfile(f); err != nil {
		b.Fatal(err)
	}
}

// settle waits until the hub made at least atLeast writes and then none for a second, and returns
// how many it made.
func settle(b *testing.B, counter *writeCounter, atLeast int64) int64 {
	deadline := time.Now().Add(2 * time.Minute)
	last, quietSince := counter.writes.Load(), time.Now()
	for time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		switch n := counter.writes.Load(); {
		case n != last:
			last, quietSince = n, time.Now()
		case n >= atLeast && time.Since(quietSince) >= time.Second:
			return n
		}
	}
	b.Fatalf("the hub did not settle after registering the clusters: %d writes, expected at least %d", last, atLeast)
	return 0
}

// writeFloor creates n small objects and writes each one's status once, with the same client
// concurrency the hub has: the least the API server needs for n deployments. With shaped, the
// objects are deployments as the hub writes them and the status what an agent reports: how
// much of the distance to the floor the objects' size and shape take alone.
func writeFloor(b *testing.B, c client.Client, n int, shaped bool) time.Duration {
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "floor-"}}
	if err := c.Create(ctx, ns); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	parallel(n, func(i int) {
		bd := &v1alpha1.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bd-%d", i), Namespace: ns.Name},
			Spec: v1alpha1.BundleDeploymentSpec{Bundle: "b", BundleNamespace: "n", Staged: v1alpha1.RevisionRef{Index: 1, ContentID: "c", DeploymentID: "d"}}}
		if shaped {
			bd = hubShaped(ns.Name, i, 1)
		}
		if err := c.Create(ctx, bd); err != nil {
			b.Error(err)
			return
		}
		orig := bd.DeepCopy()
		bd.Status.Ready, bd.Status.AppliedRevision = true, 1
		if shaped {
			agentReport(bd)
		}
		if err := c.Status().Patch(ctx, bd, client.MergeFrom(orig)); err != nil {
			b.Error(err)
		}
	})
	took := time.Since(start)
	// The next scenarios' hubs would cache these too.
	if err := c.DeleteAllOf(ctx, &v1alpha1.BundleDeployment{}, client.InNamespace(ns.Name)); err != nil {
		b.Fatal(err)
	}
	return took
}

// hubShaped is deployment i of a bundle as the hub writes it: labelled for its bundle and
// cluster, revision rev staged and released, with full-length content and deployment ids.
func hubShaped(ns string, i int, rev int64) *v1alpha1.BundleDeployment {
	r := shapedRef(rev)
	return &v1alpha1.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("fleet-b%04d", i), Namespace: ns,
		Labels: map[string]string{hub.LabelBundle: "b", hub.LabelBundleNamespace: ns, hub.LabelCluster: clusterName(i)}},
		Spec: v1alpha1.BundleDeploymentSpec{Bundle: "b", BundleNamespace: ns, Staged: r, Released: &r, Options: v1alpha1.DeploymentOptions{DefaultNamespace: "web"}}}
}

func shapedRef(rev int64) v1alpha1.RevisionRef {
	id := fmt.Sprintf("s-%064x", rev)
	return v1alpha1.RevisionRef{Index: rev, ContentID: id, DeploymentID: id + fmt.Sprintf(":%032x", rev)}
}

// agentReport sets what an agent reports once bd's release is applied and ready.
func agentReport(bd *v1alpha1.BundleDeployment) {
	now := metav1.Now()
	bd.Status.AppliedRevision, bd.Status.AppliedDeploymentID, bd.Status.AppliedAt = bd.Spec.Released.Index, bd.Spec.Released.DeploymentID, &now
	bd.Status.Ready, bd.Status.State = true, v1alpha1.StateReady
}

// removeScenario deletes what a scenario created, so that the next scenario's hub neither
// caches nor acts on it: no controller runs here to collect it.
func removeScenario(b *testing.B, c client.Client, ns string, clusters int) {
	ctx := context.Background()
	for i := range clusters {
		if err := c.DeleteAllOf(ctx, &v1alpha1.BundleDeployment{}, client.InNamespace(hub.ClusterNamespace(ns, clusterName(i)))); err != nil {
			b.Error(err)
		}
	}
	for _, o := range []client.Object{&v1alpha1.GitRepo{}, &v1alpha1.Bundle{}, &v1alpha1.Cluster{}} {
		if err := c.DeleteAllOf(ctx, o, client.InNamespace(ns)); err != nil {
			b.Error(err)
		}
	}
}

func clusterName(i int) string { return fmt.Sprintf("c%04d", i) }

// register creates n Clusters and admits them, as registration does.
func register(b *testing.B, c client.Client, ns string, n int) {
	ctx := context.Background()
	parallel(n, func(i int) {
		name := clusterName(i)
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

	mu   sync.Mutex
	last map[string]*v1alpha1.BundleDeployment
	goal *revisionGoal
}

// revisionGoal is what waitAllReady waits for: every deployment on rev, ready.
type revisionGoal struct {
	rev                                int64
	total                              int
	start                              time.Time
	staged, released, ready            map[string]bool
	firstStaged, allStaged, allRelease time.Duration
	done                               chan struct{}
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

// waitAllReady waits until every deployment of the fleet runs revision rev, ready, and logs
// when the first and the last were staged, released and ready (counted from start).
func (f *fleetWatch) waitAllReady(b *testing.B, total int, rev int64, start time.Time) {
	g := &revisionGoal{rev: rev, total: total, start: start, staged: map[string]bool{}, released: map[string]bool{}, ready: map[string]bool{}, done: make(chan struct{})}
	f.mu.Lock()
	f.goal = g
	for key, bd := range f.last {
		g.record(key, bd)
	}
	f.mu.Unlock()
	select {
	case <-g.done:
	case <-time.After(20 * time.Minute):
		f.mu.Lock()
		defer f.mu.Unlock()
		b.Fatalf("not all %d deployments ready on revision %d: %d are", total, rev, len(g.ready))
	}
	if os.Getenv("SCALE_WRITES") != "" {
		f.mu.Lock()
		b.Logf("revision %d: first staged %v, all staged %v, all released %v, all ready %v", rev, g.firstStaged, g.allStaged, g.allRelease, time.Since(start))
		f.mu.Unlock()
	}
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
		wg.Add(1)
		go func() {
			defer wg.Done()
			for orig := range work {
				bd := orig.DeepCopy() // orig is also the measurement's
				agentReport(bd)
				for attempt := 0; ctx.Err() == nil; attempt++ {
					err := c.Status().Patch(ctx, bd, client.MergeFrom(orig))
					if err == nil || apierrors.IsNotFound(err) {
						break
					}
					if f.failures.Add(1) <= 3 && os.Getenv("SCALE_WRITES") != "" {
						b.Logf("simulated agent: status write failed (retrying): %v", err)
					}
					time.Sleep(time.Duration(min(attempt+1, 10)) * 100 * time.Millisecond)
				}
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
			inCluster := client.InNamespace(hub.ClusterNamespace(ns, clusterName(i)))
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
