package scale

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/e2e/controlplane"
	"github.com/flotilla-dev/flotilla/e2e/gitserver"
	"github.com/flotilla-dev/flotilla/hub"
	"github.com/flotilla-dev/flotilla/hub/access"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/model"
)

var (
	apiServer *controlplane.Cluster
	warmUp    sync.Once
)

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	os.Exit(controlplane.RunTests(m, func(ctx context.Context, env *controlplane.Environment) (err error) {
		environment = env
		cpu, err := apiServerCPULimit()
		if err != nil {
			return err
		}
		if apiServer, err = env.StartCluster(ctx, controlplane.ClusterOptions{Name: "hub", APIServerCPU: cpu}); err != nil {
			return err
		}
		return controlplane.InstallFlotillaAPI(ctx, apiServer.Config())
	}))
}

// writeCounter counts the requests that change something, and with them, by kind, the reads
// (lists and gets, not watches).
type writeCounter struct {
	rt     http.RoundTripper
	writes atomic.Int64

	mu     sync.Mutex
	byKind map[string]int
}

func (w *writeCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	write := r.Method != http.MethodGet && r.Method != http.MethodHead
	if write {
		w.writes.Add(1)
	}
	if write || r.URL.Query().Get("watch") == "" {
		// Reads by kind too: an uncached read costs the API server as well.
		w.mu.Lock()
		if w.byKind == nil {
			w.byKind = map[string]int{}
		}
		w.byKind[r.Method+" "+resourceOf(r.URL.Path)]++
		w.mu.Unlock()
	}
	return w.rt.RoundTrip(r)
}

// count is how many requests of method and resource (as resourceOf names it) were made.
func (w *writeCounter) count(methodAndResource string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.byKind[methodAndResource]
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

// benchClient is a client of the benchmark's API server with the hub's scheme.
func benchClient(b *testing.B) client.Client {
	scheme, err := hub.Scheme()
	if err != nil {
		b.Fatal(err)
	}
	c, err := client.New(fastConfig(), client.Options{Scheme: scheme})
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// benchNamespace creates a namespace named with prefix for one run of a benchmark.
func benchNamespace(b *testing.B, c client.Client, prefix string) *corev1.Namespace {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}
	if err := c.Create(context.Background(), ns); err != nil {
		b.Fatal(err)
	}
	return ns
}

func fastConfig() *rest.Config {
	cfg := apiServer.Config()
	cfg.QPS, cfg.Burst = 1000, 2000
	return cfg
}

// BenchmarkFleet runs fleets of bundles × clusters: by default the sizes CI's machine takes in
// minutes; SCALE_FLEETS (such as "1x5000,1x10000,50x1000") runs those fleet sizes instead.
func BenchmarkFleet(b *testing.B) {
	for _, sc := range fleetSizes(b, []fleetSize{{1, 200}, {50, 50}, {10, 500}}) {
		b.Run(fmt.Sprintf("%dbundles-x-%dclusters", sc.bundles, sc.clusters), func(b *testing.B) {
			for b.Loop() {
				runScenario(b, fleetSpec{bundles: sc.bundles, clusters: sc.clusters})
			}
		})
	}
}

// envCount is the positive number the environment variable name holds, or def when it is unset;
// anything else fails the benchmark.
func envCount(b *testing.B, name string, def int) int {
	n, err := positiveEnv(name, def)
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// apiServerThrottled is how long the kernel has held the API server back for its CPU limit,
// 0 without one.
func apiServerThrottled(b *testing.B) float64 {
	if os.Getenv("SCALE_APISERVER_CPU") == "" {
		return 0
	}
	_, seconds, err := apiServer.APIServerThrottled()
	if err != nil {
		b.Fatal(err)
	}
	return seconds
}

// apiServerCPULimit is SCALE_APISERVER_CPU: the cores of CPU time the API server is limited
// to, 0 for none.
func apiServerCPULimit() (float64, error) {
	v := os.Getenv("SCALE_APISERVER_CPU")
	if v == "" {
		return 0, nil
	}
	cores, err := strconv.ParseFloat(v, 64)
	if err != nil || cores <= 0 {
		return 0, fmt.Errorf("SCALE_APISERVER_CPU: %q is not a positive number of cores", v)
	}
	return cores, nil
}

// positiveEnv is the positive number the environment variable name holds, or def when unset.
func positiveEnv(name string, def int) (int, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%s: %q is not a positive number", name, v)
	}
	return n, nil
}

// fleetSize is a benchmark's fleet: bundles, each targeting every one of clusters.
type fleetSize struct{ bundles, clusters int }

// fleetSizes are the sizes SCALE_FLEETS names, or def.
func fleetSizes(b *testing.B, def []fleetSize) []fleetSize {
	spec := os.Getenv("SCALE_FLEETS")
	if spec == "" {
		return def
	}
	var out []fleetSize
	for _, f := range strings.Split(spec, ",") {
		var sz fleetSize
		if _, err := fmt.Sscanf(strings.TrimSpace(f), "%dx%d", &sz.bundles, &sz.clusters); err != nil || sz.bundles < 1 || sz.clusters < 1 {
			b.Fatalf("SCALE_FLEETS: %q is not BUNDLESxCLUSTERS", f)
		}
		out = append(out, sz)
	}
	return out
}

// BenchmarkFleetWithChecks is BenchmarkFleet's 10 × 500 fleet with a Cluster analysis check on
// every bundle (ROLLOUT.md §7), asked of an HTTP provider the benchmark serves on loopback:
// 5,000 checks judged at once. Their results are the planner's inputs, not writes: the hub's
// writes per BundleDeployment must be BenchmarkFleet's.
func BenchmarkFleetWithChecks(b *testing.B) {
	for b.Loop() {
		runScenario(b, fleetSpec{bundles: 10, clusters: 500, checks: true})
	}
}

// BenchmarkStrategies rolls one bundle out over SCALE_STRATEGY_CLUSTERS clusters (1,000 by
// default; the size is 10,000) with each strategy that releases them in steps, each
// cluster's deployment written when its step reaches it: a staged run of five stages (ring r0 …
// r4, each stage all at once, started by the revision: autoRun) and a sequence of three groups
// (r0; r1 and r2; r3 and r4; no soak). It reports what BenchmarkFleet does: the steps wait for
// the agents' reports, so the time against the watched floor is what a step costs beyond the
// writes.
func BenchmarkStrategies(b *testing.B) {
	clusters := max(envCount(b, "SCALE_STRATEGY_CLUSTERS", 1000), rings)
	for _, strategy := range []rolloutKind{stagedRun, sequence} {
		b.Run(fmt.Sprintf("%s-x-%dclusters", strategy, clusters), func(b *testing.B) {
			for b.Loop() {
				runScenario(b, fleetSpec{bundles: 1, clusters: clusters, rollout: strategy})
			}
		})
	}
}

// rolloutKind is how a scenario's bundles roll out.
type rolloutKind string

const (
	continuous rolloutKind = ""
	stagedRun  rolloutKind = "staged-5-stages"
	sequence   rolloutKind = "sequence-3-groups"
)

// rings is how many rings (label ring=r0 …) the clusters are spread over, round robin.
const rings = 5

func ringOf(i int) string { return fmt.Sprintf("r%d", i%rings) }

// fleetSpec is a benchmark's fleet: bundles, each targeting every one of clusters, rolled out
// as rollout says, with a Cluster analysis check on each bundle when checks is set.
type fleetSpec struct {
	bundles, clusters int
	checks            bool
	rollout           rolloutKind
}

// fleetYAML is bundle i's fleet.yaml.
func (f fleetSpec) fleetYAML(i int) string {
	out := fmt.Sprintf("defaultNamespace: scale-%d\n", i)
	switch f.rollout {
	case stagedRun:
		out += "stagedUpdate: {strategy: rings, autoRun: true}\n"
	case sequence:
		out += "sequence: {name: rings}\n"
	}
	if f.checks {
		out += "rolloutStrategy:\n  analysis:\n" +
			"  - {name: errors, provider: verdicts, interval: 30s, query: 'errors of {{ .Cluster.Name }}', condition: 'result.errors == 0'}\n"
	}
	return out
}

// strategyObjects are the objects the fleet's rollout names, in namespace ns.
func (f fleetSpec) strategyObjects(ns string) []client.Object {
	all := intstr.FromString("100%")
	zero := &metav1.Duration{}
	switch f.rollout {
	case stagedRun:
		var stages []v1alpha1.StageConfig
		for r := range rings {
			stages = append(stages, v1alpha1.StageConfig{Name: ringOf(r), Selector: "ring=" + ringOf(r), MaxConcurrency: &all})
		}
		return []client.Object{&v1alpha1.StagedUpdateStrategy{ObjectMeta: metav1.ObjectMeta{Name: "rings", Namespace: ns},
			Spec: v1alpha1.StagedUpdateStrategySpec{Stages: stages}}}
	case sequence:
		return []client.Object{&v1alpha1.RolloutSequence{ObjectMeta: metav1.ObjectMeta{Name: "rings", Namespace: ns}, Spec: v1alpha1.RolloutSequenceSpec{
			Groups: []v1alpha1.SequenceGroup{
				{Name: "first", Selector: "ring=r0", Soak: zero},
				{Name: "second", Upstream: "first", Selector: "ring in (r1, r2)", Soak: zero},
				{Name: "rest", Upstream: "second", Selector: "ring in (r3, r4)", Soak: zero},
			}}}}
	}
	return nil
}

func runScenario(b *testing.B, spec fleetSpec) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := benchClient(b)
	bundles, clusters, checks := spec.bundles, spec.clusters, spec.checks
	total := bundles * clusters

	// A fresh API server is slower for its first few thousand writes: warm it up first, or the
	// first scenario's floor would be the slowest.
	warmUp.Do(func() { writeFloor(b, c, 2000, floorShape{}) })
	floor := writeFloor(b, c, total, floorShape{}).took
	shapedFloor := writeFloor(b, c, total, floorShape{shaped: true}).took
	watched, watchedSpread := medianWatchedFloor(b, c, total)
	watchedFloor := watched.took

	files := map[string]string{}
	for i := range bundles {
		// Without a fleet.yaml anywhere the repository root would be one bundle.
		files[fmt.Sprintf("b%02d/fleet.yaml", i)] = spec.fleetYAML(i)
		files[fmt.Sprintf("b%02d/cm.yaml", i)] = fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm-%d}\ndata: {v: \"1\"}\n", i)
	}
	s := startScenario(ctx, b, c, clusters, files, true)
	defer s.stop()
	ns, counter, fleet, registration, heapBefore := s.ns, s.counter, s.fleet, s.registration, s.heapBefore
	var measured atomic.Int64
	if checks {
		verdicts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			measured.Add(1)
			_, _ = w.Write([]byte(`{"errors": 0}`))
		}))
		defer verdicts.Close()
		provider := &v1alpha1.AnalysisProvider{ObjectMeta: metav1.ObjectMeta{Name: "verdicts", Namespace: ns},
			Spec: v1alpha1.AnalysisProviderSpec{HTTP: &v1alpha1.HTTPProvider{URL: verdicts.URL}}}
		if err := c.Create(ctx, provider); err != nil {
			b.Fatal(err)
		}
	}
	for _, o := range spec.strategyObjects(ns) {
		if err := c.Create(ctx, o); err != nil {
			b.Fatal(err)
		}
	}
	start, apiCPU := time.Now(), apiServerCPU(b)
	throttled0 := apiServerThrottled(b)
	roleUpdates := counter.count("PUT roles")
	s.createRepo(ctx, b)
	profiled := profileAPIServer(b, fmt.Sprintf("%dx%d", bundles, clusters))
	fleet.waitAllReady(b, total, 1, start)
	deploy := time.Since(start)
	apiCPUDeploy := apiServerCPU(b) - apiCPU
	writesDeploy := counter.writes.Load() - registration
	profiled() // after the measurement: the profile may outlast the deployment

	for i := range bundles {
		files[fmt.Sprintf("b%02d/cm.yaml", i)] = fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm-%d}\ndata: {v: \"2\"}\n", i)
	}
	start, apiCPU = time.Now(), apiServerCPU(b)
	s.push(b, files)
	profiled = profileAPIServer(b, fmt.Sprintf("%dx%d-update", bundles, clusters))
	fleet.waitAllReady(b, total, 2, start)
	update := time.Since(start)
	apiCPUUpdate := apiServerCPU(b) - apiCPU
	writesUpdate := counter.writes.Load() - writesDeploy - registration
	profiled()
	// Each bundle's content goes to every cluster: granted once for all (two writes per bundle
	// and revision) whenever that is fewer writes than a Role per cluster. An own Role written
	// then is a shared grant lost on the way (pruned before the rollout reached the cluster).
	// Reported, and logged when it happens: a failed benchmark would report no figure at all.
	roleUpdates = counter.count("PUT roles") - roleUpdates
	if 2*bundles < clusters && roleUpdates > 0 {
		b.Logf("LOST GRANTS: the hub updated %d clusters' own Roles although each bundle's content is granted once for all its clusters", roleUpdates)
	}
	b.ReportMetric(float64(roleUpdates), "own-role-writes")

	var heap runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&heap)
	if path := os.Getenv("SCALE_HEAP_PROFILE"); path != "" {
		writeHeapProfile(b, fmt.Sprintf("%s.%dx%d", path, bundles, clusters))
	}
	if os.Getenv("SCALE_WRITES") != "" {
		counter.mu.Lock()
		b.Logf("hub writes by kind (registration %d included): %v", registration, counter.byKind)
		b.Logf("watches started by the simulated agents: %d; their failed writes: %d; their Events dropped: %d", fleet.watches.Load(), fleet.failures.Load(), fleet.eventsDropped.Load())
		counter.mu.Unlock()
		logSizes(b, c, ns)
	}
	b.ReportMetric(deploy.Seconds(), "deploy-s")
	b.ReportMetric(update.Seconds(), "update-s")
	b.ReportMetric(floor.Seconds(), "floor-s")
	b.ReportMetric(deploy.Seconds()/floor.Seconds(), "deploy/floor")
	b.ReportMetric(update.Seconds()/floor.Seconds(), "update/floor")
	b.ReportMetric(shapedFloor.Seconds()/floor.Seconds(), "shaped-floor/floor")
	b.ReportMetric(watchedFloor.Seconds()/floor.Seconds(), "watched-floor/floor")
	b.ReportMetric(watchedSpread, "watched-floor-spread")
	// The API server's CPU for the writes alone, against apiserver-cpu-s-deploy: how much of the
	// distance to the floor is the API server's own extra work and how much is waiting.
	b.ReportMetric(watched.apiCPU, "apiserver-cpu-s-watched-floor")
	// What the scenarios are judged by: the time beyond what the API server needs for the same
	// writes watched as the hub and the agents watch them.
	b.ReportMetric(deploy.Seconds()/watchedFloor.Seconds(), "deploy/watched-floor")
	b.ReportMetric(update.Seconds()/watchedFloor.Seconds(), "update/watched-floor")
	b.ReportMetric(float64(writesDeploy)/float64(total), "hub-writes/bd-deploy")
	b.ReportMetric(float64(writesUpdate)/float64(total), "hub-writes/bd-update")
	b.ReportMetric(float64(heap.HeapInuse-min(heap.HeapInuse, heapBefore.HeapInuse))/(1<<20), "heap-MB")
	// What the API server spent (its process CPU, agents' reports included): the sizing of a hub.
	b.ReportMetric(apiCPUDeploy, "apiserver-cpu-s-deploy")
	b.ReportMetric(apiCPUUpdate, "apiserver-cpu-s-update")
	if throttled := apiServerThrottled(b) - throttled0; throttled > 0 {
		// The API server's CPU limit at work (SCALE_APISERVER_CPU): how long the kernel held
		// it back over the deployment and the update.
		b.ReportMetric(throttled, "apiserver-throttled-s")
	}
	if checks {
		if measured.Load() == 0 {
			b.Fatal("no check was measured: the benchmark would not show what checks cost")
		}
		b.ReportMetric(float64(measured.Load()), "measurements")
	}
}

// scenario is a fleet of simulated agents registered on the benchmark's API server with the
// real hub running beside them, and the repository it will follow.
type scenario struct {
	c       client.Client
	ns      string
	counter *writeCounter // the hub's requests
	fleet   *fleetWatch
	up      *gitserver.Upstream
	repoURL string
	webhook string // where the hub takes webhooks
	// registration is the hub's writes for admitting the clusters, before any deployment.
	registration int64
	// heapBefore is the process's heap before the hub started.
	heapBefore runtime.MemStats
	// stopHub stops the hub and the simulated agents (once); stop does and removes what the
	// scenario created.
	stopHub, stop func()
	// The hub runs with opts until hubCtx ends or stopHubOnly is called (restartHub).
	opts        hub.Options
	hubCtx      context.Context
	stopHubOnly func()
}

// restartHub stops the scenario's hub and starts another with the same options, its requests
// counted afresh, while the agents go on: a hub restarted, or a standby taking over.
func (s *scenario) restartHub(b *testing.B) {
	s.stopHubOnly()
	s.counter, s.stopHubOnly = startHub(s.hubCtx, b, s.opts)
}

// startScenario registers clusters, commits files, starts the hub (with options as configure
// sets them) and, when simulated, the simulated agents, and returns once the hub has settled the
// registrations. stop stops them and removes what the scenario created.
func startScenario(ctx context.Context, b *testing.B, c client.Client, clusters int, files map[string]string, simulated bool, configure ...func(*hub.Options)) *scenario {
	ctx, cancel := context.WithCancel(ctx)
	s := &scenario{c: c, ns: benchNamespace(b, c, "scale-").Name, fleet: &fleetWatch{}, up: gitserver.New(b), webhook: freeLoopbackAddr(b)}
	s.up.Commit("main", files)
	s.repoURL = s.up.ServeHTTP("", "").URL + "/repo.git"
	register(b, c, s.ns, clusters)

	runtime.GC()
	runtime.ReadMemStats(&s.heapBefore)
	opts := hub.Options{PollWorkers: 4, WebhookAddr: s.webhook, AllowedProviderAddresses: []string{"127.0.0.1"}}
	for _, f := range configure {
		f(&opts)
	}
	s.opts, s.hubCtx = opts, ctx
	s.counter, s.stopHubOnly = startHub(ctx, b, opts)
	var sims sync.WaitGroup
	if simulated {
		sims.Add(1)
		go func() { defer sims.Done(); s.fleet.simulateAgents(ctx, b, c, s.ns, clusters) }()
	}
	s.stopHub = sync.OnceFunc(func() { cancel(); s.stopHubOnly(); sims.Wait() })
	s.stop = func() {
		s.stopHub()
		removeScenario(b, c, s.ns, clusters) // once the hub stopped
	}
	// Registration is not part of a deployment: the clock starts once the hub has given every
	// cluster its identity (ServiceAccount, Roles, RoleBindings) and written its status.
	s.registration = settle(b, s.counter, int64(5*clusters))
	return s
}

// startHub runs the real hub with opts (its client and cache directory the benchmark's), its
// requests counted, until stop is called or ctx ends.
func startHub(ctx context.Context, b *testing.B, opts hub.Options) (counter *writeCounter, stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	counter = &writeCounter{}
	opts.Config = fastConfig()
	opts.Config.Wrap(func(rt http.RoundTripper) http.RoundTripper { counter.rt = rt; return counter })
	opts.CacheDir = b.TempDir()
	done := make(chan struct{})
	go func() { defer close(done); _ = hub.Run(ctx, opts) }()
	return counter, sync.OnceFunc(func() { cancel(); <-done })
}

// createRepo creates the GitRepo that follows the scenario's repository, targeting every
// cluster. Pushes are announced by a webhook, as a fleet that wants changes out fast would set
// up; the poll is the fallback.
func (s *scenario) createRepo(ctx context.Context, b *testing.B) {
	hook := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "hook", Namespace: s.ns}, Data: map[string][]byte{"token": []byte(webhookSecret)}}
	if err := s.c.Create(ctx, hook); err != nil {
		b.Fatal(err)
	}
	repo := &v1alpha1.GitRepo{ObjectMeta: metav1.ObjectMeta{Name: "scale", Namespace: s.ns}, Spec: v1alpha1.GitRepoSpec{
		Repo: s.repoURL, PollingInterval: &metav1.Duration{Duration: time.Minute}, WebhookSecretRef: &v1alpha1.LocalObjectReference{Name: hook.Name},
		Targets: []v1alpha1.Target{{ClusterMatch: v1alpha1.ClusterMatch{ClusterSelector: &metav1.LabelSelector{}}}},
	}}
	if err := s.c.Create(ctx, repo); err != nil {
		b.Fatal(err)
	}
}

// push commits files and announces the push to the hub.
func (s *scenario) push(b *testing.B, files map[string]string) {
	announcePush(b, s.webhook, s.repoURL, s.up.Commit("main", files))
}

// logSizes logs how large a Bundle and a BundleDeployment are as stored (JSON, managed fields
// included): the API server's cost per write grows with it.
func logSizes(b *testing.B, c client.Client, ns string) {
	var bundles v1alpha1.BundleList
	var bds v1alpha1.BundleDeploymentList
	if c.List(context.Background(), &bundles, client.InNamespace(ns), client.Limit(1)) != nil || len(bundles.Items) == 0 ||
		c.List(context.Background(), &bds, client.MatchingLabels{model.LabelBundleNamespace: ns}, client.Limit(1)) != nil || len(bds.Items) == 0 {
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

// announcePush delivers a signed GitHub push webhook of commit for the repository to the hub.
func announcePush(b *testing.B, addr, cloneURL, commit string) {
	status, err := gitserver.AnnouncePush("http://"+addr, webhookSecret, "main", cloneURL, commit)
	if err != nil {
		b.Fatal(err)
	}
	if status != http.StatusAccepted {
		b.Fatalf("webhook delivery: %d", status)
	}
}

// profileAPIServer starts a CPU profile of the API server when SCALE_APISERVER_PROFILE names a
// path (FLOTILLA_APISERVER_PROFILING=1 must be set too), and returns a function that waits for
// it and writes it to path.<scenario>. The profile covers SCALE_APISERVER_PROFILE_SECONDS (30)
// of a first deployment or an update.
func profileAPIServer(b *testing.B, scenario string) (wait func()) {
	path := os.Getenv("SCALE_APISERVER_PROFILE")
	if path == "" {
		return func() {}
	}
	seconds := os.Getenv("SCALE_APISERVER_PROFILE_SECONDS")
	if seconds == "" {
		seconds = "30"
	}
	hc, err := rest.HTTPClientFor(apiServer.Config())
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		resp, err := hc.Get(apiServer.Config().Host + "/debug/pprof/profile?seconds=" + seconds)
		if err != nil {
			done <- err
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			done <- fmt.Errorf("API server profile: %s (is FLOTILLA_APISERVER_PROFILING=1 set?)", resp.Status)
			return
		}
		f, err := os.Create(path + "." + scenario)
		if err == nil {
			_, err = io.Copy(f, resp.Body)
			err = errors.Join(err, f.Close())
		}
		done <- err
	}()
	return func() {
		if err := <-done; err != nil {
			b.Error(err)
		}
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
// how many it made. A hub that writes nothing for two minutes before that fails it.
func settle(b *testing.B, counter *writeCounter, atLeast int64) int64 {
	return settleFor(b, counter, atLeast, time.Second)
}

// settleFor is settle with quiet as the time without a write that counts as settled.
func settleFor(b *testing.B, counter *writeCounter, atLeast int64, quiet time.Duration) int64 {
	last, quietSince := counter.writes.Load(), time.Now()
	for time.Since(quietSince) < 2*time.Minute {
		time.Sleep(100 * time.Millisecond)
		switch n := counter.writes.Load(); {
		case n != last:
			last, quietSince = n, time.Now()
		case n >= atLeast && time.Since(quietSince) >= quiet:
			return n
		}
	}
	b.Fatalf("the hub stopped writing before it settled the clusters: %d writes, expected at least %d", last, atLeast)
	return 0
}

// removeScenario deletes what a scenario created, so that the next scenario's hub neither
// caches nor acts on it: no controller runs here to collect it.
func removeScenario(b *testing.B, c client.Client, ns string, clusters int) {
	ctx := context.Background()
	parallel(clusters, func(i int) {
		if err := c.DeleteAllOf(ctx, &v1alpha1.BundleDeployment{}, client.InNamespace(access.ClusterNamespace(ns, clusterName(i)))); err != nil {
			b.Error(err)
		}
	})
	for _, o := range []client.Object{&v1alpha1.GitRepo{}, &v1alpha1.Bundle{}, &v1alpha1.Cluster{}} {
		if err := c.DeleteAllOf(ctx, o, client.InNamespace(ns)); err != nil {
			b.Error(err)
		}
	}
	// The hub that would let them go (its finalizers) is stopped.
	dropFinalizers := func(o client.Object) {
		if err := c.Patch(ctx, o, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))); client.IgnoreNotFound(err) != nil {
			b.Error(err)
		}
	}
	var bundles v1alpha1.BundleList
	if err := c.List(ctx, &bundles, client.InNamespace(ns)); err != nil {
		b.Error(err)
	}
	for i := range bundles.Items {
		dropFinalizers(&bundles.Items[i])
	}
	parallel(clusters, func(i int) {
		dropFinalizers(&v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: clusterName(i), Namespace: ns}})
		var bds v1alpha1.BundleDeploymentList
		if err := c.List(ctx, &bds, client.InNamespace(access.ClusterNamespace(ns, clusterName(i)))); err != nil {
			b.Error(err)
		}
		for j := range bds.Items {
			dropFinalizers(&bds.Items[j])
		}
	})
}

func clusterName(i int) string { return fmt.Sprintf("c%04d", i) }

// register creates n Clusters, spread over the rings, and admits them, as registration does.
func register(b *testing.B, c client.Client, ns string, n int) {
	ctx := context.Background()
	parallel(n, func(i int) {
		name := clusterName(i)
		cl := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"ring": ringOf(i)}}}
		if err := c.Create(ctx, cl); err != nil {
			b.Error(err)
			return
		}
		if err := access.AdmitCluster(ctx, c, cl); err != nil {
			b.Error(err)
		}
	})
}
