package fleet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/flotilla-dev/flotilla/e2e/gitserver"
	"github.com/flotilla-dev/flotilla/e2e/hubmetrics"
	"github.com/flotilla-dev/flotilla/hub"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/model"
)

// A hub replica runs as a process of its own, so that a test can kill it as a node failure
// would: the test binary runs itself with these variables set.
const (
	hubProcessKubeconfig = "FLOTILLA_E2E_HUB_KUBECONFIG"
	hubProcessNamespace  = "FLOTILLA_E2E_HUB_NAMESPACE"
	hubProcessMetrics    = "FLOTILLA_E2E_HUB_METRICS"
	hubProcessCache      = "FLOTILLA_E2E_HUB_CACHE"
	// hubProcessIdentity, when set, is the replica's identity in the election (its pod's name
	// in a cluster); hubProcessLease its Lease duration instead of haLeaseDuration.
	hubProcessIdentity = "FLOTILLA_E2E_HUB_IDENTITY"
	hubProcessLease    = "FLOTILLA_E2E_HUB_LEASE"
)

// The replicas' election, short enough for a test: a dead leader's Lease expires after 4 s.
const (
	haLeaseDuration = 4 * time.Second
	haRenewDeadline = 3 * time.Second
	haRetryPeriod   = 500 * time.Millisecond
)

// runHubProcess is the test binary as one hub replica, with leader election, until it is
// killed or stopped.
func runHubProcess(kubeconfig string) int {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hub replica:", err)
		return 2
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	lease := haLeaseDuration
	if d, err := time.ParseDuration(os.Getenv(hubProcessLease)); err == nil {
		lease = d
	}
	err = hub.Run(ctx, hub.Options{Config: asTheHub(cfg), CacheDir: os.Getenv(hubProcessCache), MetricsAddr: os.Getenv(hubProcessMetrics),
		Namespace: os.Getenv(hubProcessNamespace), Version: hubVersion, StatusDelay: time.Second,
		LeaderElection: true, LeaseDuration: lease, RenewDeadline: haRenewDeadline, RetryPeriod: haRetryPeriod,
		LeaderElectionIdentity: os.Getenv(hubProcessIdentity)})
	var lost *hub.LeaseLostError
	if errors.As(err, &lost) {
		// As flotilla-hub does (cmd/flotilla-hub): the same process, a fresh image.
		fmt.Fprintf(os.Stderr, "hub replica: %v; stepping back into the election as %s\n", err, lost.Identity)
		err = hub.StepBackIn(lost.Identity, os.Args, append(os.Environ(), hubProcessIdentity+"="+lost.Identity))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "hub replica:", err)
		return 1
	}
	return 0
}

// hubReplica is a hub process the test started.
type hubReplica struct {
	name, metrics, log string
	cmd                *exec.Cmd
}

// startHubReplica starts a hub replica process; stop(name) kills it (SIGKILL: no goodbye, its
// Lease stays until it expires). env adds to its environment (hubProcessIdentity, …).
func (f *fleetEnv) startHubReplica(name string, env ...string) *hubReplica {
	f.t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.t.Fatal(err)
	}
	metrics := ln.Addr().String()
	ln.Close()
	logFile, err := os.Create(filepath.Join(f.t.TempDir(), name+".log"))
	if err != nil {
		f.t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), hubProcessKubeconfig+"="+hubCluster.KubeconfigPath, hubProcessNamespace+"="+f.ns,
		hubProcessMetrics+"="+metrics, hubProcessCache+"="+f.t.TempDir())
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		f.t.Fatal(err)
	}
	r := &hubReplica{name: name, metrics: metrics, log: logFile.Name(), cmd: cmd}
	f.mu.Lock()
	f.stops[name] = func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logFile.Close()
		if f.t.Failed() {
			if out, err := os.ReadFile(logFile.Name()); err == nil {
				f.t.Logf("%s's output:\n%s", name, out)
			}
		}
	}
	f.mu.Unlock()
	return r
}

// leads reads the replica's metrics: whether it holds the hub's Lease.
func (r *hubReplica) leads() bool { return hubmetrics.Leads(r.metrics) }

// releaseLog records, from a watch of the fleet's BundleDeployments, every write that released
// a revision and how many clusters were released but not ready at once.
type releaseLog struct {
	mu sync.Mutex
	// released counts, per deployment and revision, the writes that released it; releasedAt
	// is when the last of them was seen.
	released   map[string]map[int64]int
	releasedAt map[string]map[int64]time.Time
	last       map[string]*v1alpha1.BundleDeployment
	// mostUnready is the most deployments released on rev and not ready on it at one time.
	rev         int64
	mostUnready int
	// timeline records each release and report, for a failure's message.
	timeline []string
	start    time.Time
}

func (l *releaseLog) observe(bd *v1alpha1.BundleDeployment) {
	l.mu.Lock()
	defer l.mu.Unlock()
	key := bd.Namespace + "/" + bd.Name
	prev := l.last[key]
	if rel := bd.Spec.Released; rel != nil && (prev == nil || prev.Spec.Released == nil || prev.Spec.Released.DeploymentID != rel.DeploymentID) {
		if l.released[key] == nil {
			l.released[key], l.releasedAt[key] = map[int64]int{}, map[int64]time.Time{}
		}
		l.released[key][rel.Index]++
		l.releasedAt[key][rel.Index] = time.Now()
	}
	l.last[key] = bd
	l.timeline = append(l.timeline, fmt.Sprintf("%6.2fs %s: released %v, applied %d ready %v, generation %d", time.Since(l.start).Seconds(), bd.Labels[model.LabelCluster],
		released(*bd), bd.Status.AppliedRevision, bd.Status.Ready, bd.Generation))
	unready := 0
	for _, d := range l.last {
		if d.Spec.Released != nil && d.Spec.Released.Index == l.rev && !(d.Status.Ready && d.Status.AppliedRevision == l.rev) {
			unready++
		}
	}
	l.mostUnready = max(l.mostUnready, unready)
}

// watchReleases follows the fleet's BundleDeployments from now on, those of bundle when given.
func (f *fleetEnv) watchReleases(rev int64, bundle string) *releaseLog {
	f.t.Helper()
	wc, err := client.NewWithWatch(hubCluster.Config(), client.Options{Scheme: f.hub.Scheme()})
	if err != nil {
		f.t.Fatal(err)
	}
	selector := client.MatchingLabels{model.LabelBundleNamespace: f.ns}
	if bundle != "" {
		selector[model.LabelBundle] = bundle
	}
	var list v1alpha1.BundleDeploymentList
	if err := f.hub.List(context.Background(), &list, selector); err != nil {
		f.t.Fatal(err)
	}
	l := &releaseLog{released: map[string]map[int64]int{}, releasedAt: map[string]map[int64]time.Time{}, last: map[string]*v1alpha1.BundleDeployment{}, rev: rev, start: time.Now()}
	for i := range list.Items {
		l.last[list.Items[i].Namespace+"/"+list.Items[i].Name] = &list.Items[i]
	}
	w, err := wc.Watch(context.Background(), &v1alpha1.BundleDeploymentList{}, selector, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(w.Stop)
	go func() {
		for ev := range w.ResultChan() {
			if bd, ok := ev.Object.(*v1alpha1.BundleDeployment); ok && ev.Type != watch.Error {
				l.observe(bd)
			}
		}
	}()
	return l
}

// TestR1_7_LeaderLossMidRolloutReleasesEachClusterOnce: two hub replicas elect a leader; the
// leader is killed after it released an update to the first of three one-cluster partitions.
// The other takes over once the dead leader's Lease expires, and the rollout completes: every
// cluster is released the update exactly once, and the partition gate holds throughout (never
// more than one cluster released and not ready; R1.7).
func TestR1_7_LeaderLossMidRolloutReleasesEachClusterOnce(t *testing.T) {
	up := gitserver.New(t)
	fleetYAML := `defaultNamespace: ha
rolloutStrategy:
  maxUnavailable: 0
  partitions:
  - {name: first, clusterSelector: {matchLabels: {index: "0"}}}
  - {name: second, clusterSelector: {matchLabels: {index: "1"}}}
  - {name: third, clusterSelector: {matchLabels: {index: "2"}}}
`
	up.Commit("main", map[string]string{"web/fleet.yaml": fleetYAML, "web/deployment.yaml": webManifest("example.invalid/web:1")})
	srv := up.ServeHTTP("", "")
	var replicas []*hubReplica
	f := startFleetWith(t, func(f *fleetEnv) {
		replicas = []*hubReplica{f.startHubReplica("hub-a"), f.startHubReplica("hub-b")}
	})
	createRepo(t, f, srv.URL+"/repo.git", map[string]string{"env": "prod"})
	waitRepo(t, f, "all ready", func(r *v1alpha1.GitRepo) bool { return r.Status.Display.ReadyClusters == allReady() })

	releases := f.watchReleases(2, "")
	up.Commit("main", map[string]string{"web/deployment.yaml": webManifest("example.invalid/web:2")})
	eventually(t, "the update released to a first cluster", 60*time.Second, func() bool {
		releases.mu.Lock()
		defer releases.mu.Unlock()
		for _, revs := range releases.released {
			if revs[2] > 0 {
				return true
			}
		}
		return false
	})
	var leader, standby *hubReplica
	for _, r := range replicas {
		if r.leads() {
			leader = r
		} else {
			standby = r
		}
	}
	if leader == nil || standby == nil {
		t.Fatalf("no single leader among the replicas")
	}
	var lease coordinationv1.Lease
	leaseKey := types.NamespacedName{Namespace: f.ns, Name: model.LeaderElectionID}
	if err := f.hub.Get(context.Background(), leaseKey, &lease); err != nil {
		t.Fatal(err)
	}
	deadHolder := *lease.Spec.HolderIdentity
	killed := time.Now()
	f.stop(leader.name)
	eventually(t, "the standby leads", 30*time.Second, standby.leads)
	takeover := time.Since(killed)
	if err := f.hub.Get(context.Background(), leaseKey, &lease); err != nil || *lease.Spec.HolderIdentity == deadHolder {
		t.Errorf("the hub's Lease after the takeover: holder %v (the dead leader was %s), %v", lease.Spec.HolderIdentity, deadHolder, err)
	}
	// The Lease expires at most one lease duration after the leader's last renewal; the standby
	// notices at its next attempt (a retry period, with jitter) and reports it in its metrics.
	t.Logf("%s took over %.1fs after %s was killed (lease duration %s)", standby.name, takeover.Seconds(), leader.name, haLeaseDuration)

	waitRepo(t, f, "all ready on the update", func(r *v1alpha1.GitRepo) bool {
		return r.Status.Display.ReadyClusters == allReady() && availableEverywhere(t, "ha", "web", "example.invalid/web:2")
	})
	releases.mu.Lock()
	defer releases.mu.Unlock()
	if len(releases.released) != len(workloads) {
		t.Errorf("the update was released to %d clusters, want all %d: %v", len(releases.released), len(workloads), releases.released)
	}
	for key, revs := range releases.released {
		if revs[2] != 1 {
			t.Errorf("%s: the update was released %d times, want once", key, revs[2])
		}
	}
	if releases.mostUnready > 1 {
		t.Errorf("%d clusters were released the update and not ready at once; the partitions hold one each, with maxUnavailable 0", releases.mostUnready)
	}
	if t.Failed() {
		t.Logf("the deployments (killed at %.2fs):\n%s", killed.Sub(releases.start).Seconds(), strings.Join(releases.timeline, "\n"))
	}
}

// A replica killed and started again under the same identity (its pod's name, as a kubelet
// restarts its container) takes back the Lease it held at once: it leads again well before the
// Lease it left would have expired, where a new identity would wait that out (30 s here), and
// the fleet moves again within seconds (the issue of a stalled API server: the hub exits when it
// cannot renew, and its restart must not cost the fleet a Lease duration more).
func TestARestartedReplicaTakesItsLeaseBackAtOnce(t *testing.T) {
	const lease = 30 * time.Second
	env := []string{hubProcessIdentity + "=hub-0", hubProcessLease + "=" + lease.String()}
	var first *hubReplica
	f := startFleetWith(t, func(f *fleetEnv) { first = f.startHubReplica("hub-0", env...) })
	eventually(t, "the replica leads", 60*time.Second, first.leads)
	leaseKey := types.NamespacedName{Namespace: f.ns, Name: model.LeaderElectionID}
	var held coordinationv1.Lease
	if err := f.hub.Get(context.Background(), leaseKey, &held); err != nil || held.Spec.HolderIdentity == nil || *held.Spec.HolderIdentity != "hub-0" {
		t.Fatalf("the Lease: %+v, %v; want it held by hub-0", held.Spec, err)
	}
	f.stop("hub-0")
	killed := time.Now()
	if err := f.hub.Get(context.Background(), leaseKey, &held); err != nil {
		t.Fatal(err)
	}
	expires := held.Spec.RenewTime.Add(lease)
	again := f.startHubReplica("hub-0-restarted", env...)
	eventually(t, "the restarted replica leads", lease+30*time.Second, again.leads)
	led := time.Now()
	t.Logf("killed, started again and leading after %s; the Lease it left expired %s after the kill", led.Sub(killed).Round(100*time.Millisecond), expires.Sub(killed).Round(100*time.Millisecond))
	if !led.Before(expires) {
		t.Errorf("the restarted replica led only at %s, after the Lease it left expired (%s): it waited out its own record", led.Format(time.RFC3339Nano), expires.Format(time.RFC3339Nano))
	}
}

// A leader whose API server stalls past its renew deadline loses its Lease; its process steps
// back into the election as the same replica (a fresh image, the same pid: no kubelet back-off)
// and leads again at the first renewal the API server answers, its own Lease taken back
// without waiting it out. The stall here holds every byte between the hub and its API server
// for three lease durations, as a stalled etcd leaves requests unanswered; once it ends, the
// next commit rolls out to every cluster once. The figures (leading again, first release after
// the stall) are logged; hub/README's bound is from them.
func TestAStalledAPIServerCostsTheFleetSecondsOnceItAnswers(t *testing.T) {
	stall, err := hubCluster.NewStallPoint(fmt.Sprintf("stall-%d", time.Now().UnixNano()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stall.Close)
	up := gitserver.New(t)
	up.Commit("main", map[string]string{"web/fleet.yaml": "defaultNamespace: stalled\n", "web/deployment.yaml": webManifest("example.invalid/web:1")})
	srv := up.ServeHTTP("", "")
	var replica *hubReplica
	f := startFleetWith(t, func(f *fleetEnv) {
		replica = f.startHubReplica("hub-0", hubProcessIdentity+"=hub-0", hubProcessKubeconfig+"="+stall.KubeconfigPath)
	})
	createRepo(t, f, srv.URL+"/repo.git", map[string]string{"env": "prod"})
	waitRepo(t, f, "all ready", func(r *v1alpha1.GitRepo) bool { return r.Status.Display.ReadyClusters == allReady() })
	pid := replica.cmd.Process.Pid

	stalled := time.Now()
	stall.Hold()
	eventually(t, "the replica steps back into the election", 60*time.Second, func() bool {
		out, err := os.ReadFile(replica.log)
		return err == nil && strings.Contains(string(out), "stepping back into the election as hub-0")
	})
	steppedBack := time.Since(stalled)
	// The stall lasts three lease durations in all: long enough that a replica under a new
	// identity would have had to wait out the Lease it left.
	time.Sleep(time.Until(stalled.Add(3 * haLeaseDuration)))
	releases := f.watchReleases(2, "")
	stall.Release()
	answered := time.Now()
	eventually(t, "the replica leads again", 60*time.Second, replica.leads)
	ledAgain := time.Since(answered)
	up.Commit("main", map[string]string{"web/deployment.yaml": webManifest("example.invalid/web:2")})
	pushed := time.Now()
	waitRepo(t, f, "all ready on the update", func(r *v1alpha1.GitRepo) bool {
		return r.Status.Display.ReadyClusters == allReady() && availableEverywhere(t, "stalled", "web", "example.invalid/web:2")
	})

	if replica.cmd.ProcessState != nil || syscall.Kill(pid, 0) != nil {
		t.Errorf("the replica's process %d ended; it should have replaced its own image", pid)
	}
	var lease coordinationv1.Lease
	if err := f.hub.Get(context.Background(), types.NamespacedName{Namespace: f.ns, Name: model.LeaderElectionID}, &lease); err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != "hub-0" {
		t.Errorf("the Lease after the stall: %+v, %v; want it held by hub-0", lease.Spec, err)
	}
	releases.mu.Lock()
	defer releases.mu.Unlock()
	if len(releases.released) != len(workloads) {
		t.Errorf("the update was released to %d clusters, want all %d: %v", len(releases.released), len(workloads), releases.released)
	}
	first := time.Duration(0)
	for key, revs := range releases.released {
		if revs[2] != 1 {
			t.Errorf("%s: the update was released %d times, want once", key, revs[2])
		}
		if at := releases.releasedAt[key][2].Sub(pushed); first == 0 || at < first {
			first = at
		}
	}
	t.Logf("stall of %s: the replica stepped back in %.1fs into it, led again %.1fs after the API server answered, released the next commit %.1fs after its push",
		3*haLeaseDuration, steppedBack.Seconds(), ledAgain.Seconds(), first.Seconds())
}
