package scale

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/e2e/controlplane"
	"github.com/flotilla-dev/flotilla/e2e/testpki"
	"github.com/flotilla-dev/flotilla/e2e/wait"
	"github.com/flotilla-dev/flotilla/hub"
	"github.com/flotilla-dev/flotilla/hub/access"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// BenchmarkRealAgents runs the real flotilla-agent binary, one process per workload cluster
// (SCALE_REAL_AGENTS, default 3; each cluster a real API server, controller-manager, scheduler
// and kwok), with 50 bundles of mixed kinds (plain manifests, a Helm chart, a Kustomize
// overlay; each a Deployment beside ConfigMaps, a Service or a Secret). Each agent reaches the
// hub through its own front: a TLS proxy of another CA on its own loopback address, which counts
// the agent's requests. It reports, per agent, resident memory and CPU idle (over a window of
// three heartbeats) and while a revision of every bundle rolls out, and the requests it makes to
// the hub: idle, only the Lease's renewal at each heartbeat (any other request fails the
// benchmark), and while rolling out. SCALE_AGENT_LOGS names a directory to keep the agents'
// logs in.
func BenchmarkRealAgents(b *testing.B) {
	agents := envCount(b, "SCALE_REAL_AGENTS", 3)
	for b.Loop() {
		runRealAgents(b, agents, 50)
	}
}

// heartbeat is the interval the benchmark's hub asks agents to renew their Lease at: short, so
// that an idle window of three heartbeats takes a minute.
const heartbeat = 20 * time.Second

func runRealAgents(b *testing.B, agents, bundles int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := benchClient(b)
	binary := buildAgent(b)

	workloads := make([]*controlplane.Cluster, agents)
	parallel(agents, func(i int) {
		w, err := environment.StartCluster(ctx, controlplane.ClusterOptions{Name: fmt.Sprintf("agent%d-%d", i, time.Now().UnixNano()%1e6), Kind: controlplane.Workload})
		if err != nil {
			b.Error(err)
			return
		}
		workloads[i] = w
	})
	defer func() {
		for _, w := range workloads {
			if w != nil {
				w.Stop()
			}
		}
	}()
	if b.Failed() {
		b.FailNow()
	}

	files := mixedBundles(bundles, "1")
	s := startScenario(ctx, b, c, agents, files, false, func(o *hub.Options) { o.HeartbeatInterval = heartbeat })
	defer s.stop()
	procs := make([]*agentProcess, agents)
	for i := range agents {
		procs[i] = startAgentProcess(ctx, b, binary, workloads[i], s.ns, clusterName(i))
	}
	defer func() {
		for _, p := range procs {
			p.stop(b)
		}
	}()

	s.createRepo(ctx, b)
	waitBundlesReady(b, c, s.ns, bundles, agents, 1)

	// Idle: every bundle Ready everywhere, nothing changes. The window is a measurement, not a
	// synchronisation: what is measured is what the agents do in it.
	for _, p := range procs {
		p.mark()
	}
	idleFrom := time.Now()
	samplePeak(procs, time.Now().Add(3*heartbeat))
	idle := time.Since(idleFrom)
	var idleRSS, idleAnon, idleFile, idleCPU, idleRequests float64
	for _, p := range procs {
		u := p.usage()
		idleRSS, idleCPU = max(idleRSS, u.rssMB), max(idleCPU, u.cpu.Seconds()/idle.Seconds())
		idleAnon, idleFile = max(idleAnon, u.anonMB), max(idleFile, u.fileMB)
		idleRequests = max(idleRequests, float64(u.requests)/idle.Minutes())
		if other := u.otherThanLease(); len(other) > 0 {
			b.Errorf("agent of %s made requests to the hub other than its Lease's renewal while nothing changed: %v", p.cluster, other)
		}
		if u.leaseRenewals == 0 {
			b.Errorf("agent of %s renewed no Lease in %s: the idle window did not see it run", p.cluster, idle.Round(time.Second))
		}
	}

	// Rolling out: a new revision of every bundle.
	for _, p := range procs {
		p.mark()
	}
	start := time.Now()
	s.push(b, mixedBundles(bundles, "2"))
	done := make(chan struct{})
	var peaks []float64
	go func() { defer close(done); peaks = samplePeak(procs, time.Time{}) }()
	waitBundlesReady(b, c, s.ns, bundles, agents, 2)
	rollout := time.Since(start)
	for _, p := range procs {
		p.stopSampling()
	}
	<-done
	var busyRSS, busyCPU, busyRequests float64
	for i, p := range procs {
		u := p.usage()
		busyRSS, busyCPU = max(busyRSS, peaks[i]), max(busyCPU, u.cpu.Seconds())
		busyRequests = max(busyRequests, float64(u.requests)/rollout.Minutes())
		if os.Getenv("SCALE_WRITES") != "" {
			b.Logf("agent of %s, rolling out: requests to the hub %v", p.cluster, u.byKind)
		}
	}
	b.ReportMetric(idleRSS, "idle-rss-MB")
	b.ReportMetric(idleAnon, "idle-rss-anon-MB")
	b.ReportMetric(idleFile, "idle-rss-file-MB")
	b.ReportMetric(idleCPU*1000, "idle-cpu-millicores")
	b.ReportMetric(idleRequests, "idle-hub-req/min")
	b.ReportMetric(busyRSS, "rollout-peak-rss-MB")
	b.ReportMetric(busyCPU, "rollout-cpu-s")
	b.ReportMetric(busyRequests, "rollout-hub-req/min")
	b.ReportMetric(rollout.Seconds(), "rollout-s")
}

// environment is the control plane of the package's tests: the hub's API server, and the
// workload clusters a benchmark starts.
var environment *controlplane.Environment

// buildAgent builds cmd/flotilla-agent as it ships.
func buildAgent(b *testing.B) string {
	out := filepath.Join(b.TempDir(), "flotilla-agent")
	cmd := exec.Command("go", "build", "-o", out, "github.com/flotilla-dev/flotilla/cmd/flotilla-agent")
	if msg, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("go build flotilla-agent: %v\n%s", err, msg)
	}
	return out
}

// mixedBundles is a repository of n bundles, in turn plain manifests, a local Helm chart and a
// Kustomize overlay over a base; version changes a value of each.
func mixedBundles(n int, version string) map[string]string {
	files := map[string]string{}
	deployment := func(name string) string {
		return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: %[1]s}
spec:
  replicas: 1
  selector: {matchLabels: {app: %[1]s}}
  template:
    metadata: {labels: {app: %[1]s}}
    spec: {containers: [{name: app, image: registry.example/app:1}]}
`, name)
	}
	for i := range n {
		dir := fmt.Sprintf("b%02d", i)
		name := fmt.Sprintf("app-%02d", i)
		switch i % 3 {
		case 0:
			files[dir+"/fleet.yaml"] = fmt.Sprintf("defaultNamespace: real-%02d\n", i)
			files[dir+"/deployment.yaml"] = deployment(name)
			files[dir+"/config.yaml"] = fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: %s}\ndata: {version: %q}\n", name, version)
			files[dir+"/service.yaml"] = fmt.Sprintf("apiVersion: v1\nkind: Service\nmetadata: {name: %[1]s}\nspec: {selector: {app: %[1]s}, ports: [{port: 80}]}\n", name)
		case 1:
			files[dir+"/fleet.yaml"] = fmt.Sprintf("defaultNamespace: real-%02d\nhelm:\n  chart: ./chart\n  releaseName: %s\n  values: {version: %q}\n", i, name, version)
			files[dir+"/chart/Chart.yaml"] = "apiVersion: v2\nname: app\nversion: 1.0.0\n"
			files[dir+"/chart/values.yaml"] = "version: \"0\"\n"
			files[dir+"/chart/templates/deployment.yaml"] = deployment("{{ .Release.Name }}")
			files[dir+"/chart/templates/config.yaml"] = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: '{{ .Release.Name }}'}\ndata: {version: '{{ .Values.version }}'}\n"
			files[dir+"/chart/templates/secret.yaml"] = "apiVersion: v1\nkind: Secret\nmetadata: {name: '{{ .Release.Name }}'}\nstringData: {token: 'not-a-secret'}\n"
		case 2:
			files[dir+"/fleet.yaml"] = fmt.Sprintf("defaultNamespace: real-%02d\nkustomize: {dir: overlay}\n", i)
			files[dir+"/base/kustomization.yaml"] = "resources: [deployment.yaml]\n"
			files[dir+"/base/deployment.yaml"] = deployment(name)
			files[dir+"/overlay/kustomization.yaml"] = fmt.Sprintf("resources: [../base]\nconfigMapGenerator:\n- {name: %s, literals: [version=%s]}\n", name, version)
		}
	}
	return files
}

// waitBundlesReady waits until every bundle of ns runs revision rev, Ready on every cluster.
func waitBundlesReady(b *testing.B, c client.Client, ns string, bundles, clusters int, rev int64) {
	var list v1alpha1.BundleList
	ready := func() int {
		n := 0
		for _, bun := range list.Items {
			if bun.Spec.LatestRevision == rev && bun.Status.ReleasingRevision == rev && int(bun.Status.Summary.Ready) == clusters && int(bun.Status.Summary.DesiredReady) == clusters {
				n++
			}
		}
		return n
	}
	wait.Until(b, fmt.Sprintf("%d bundles on revision %d, Ready on %d clusters", bundles, rev, clusters), 5*time.Minute, func() bool {
		if err := c.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			return false
		}
		return ready() == bundles
	}, func() string {
		var out []string
		for _, bun := range list.Items {
			out = append(out, fmt.Sprintf("%s: latest %d releasing %d, %s %s", bun.Name, bun.Spec.LatestRevision, bun.Status.ReleasingRevision, bun.Status.Display.ReadyClusters, bun.Status.Display.Message))
		}
		slices.Sort(out)
		return strings.Join(out, "\n")
	})
}

// agentProcess is a flotilla-agent binary running for one cluster, and the front through which
// it reaches the hub.
type agentProcess struct {
	cluster string
	cmd     *exec.Cmd
	front   *httptest.Server
	// frontCA is the CA of front's certificate, which the agent's kubeconfig trusts.
	frontCA []byte
	exited  chan struct{}

	mu       sync.Mutex
	byKind   map[string]int // requests since mark: "METHOD resource", watches apart
	cpuMark  time.Duration
	sampling chan struct{} // closed to stop samplePeak
}

// startAgentProcess registers nothing (the scenario has): it issues the cluster's agent its hub
// credentials, writes them into a kubeconfig that names the agent's front, and starts the binary.
func startAgentProcess(ctx context.Context, b *testing.B, binary string, w *controlplane.Cluster, fleetNS, cluster string) *agentProcess {
	p := &agentProcess{cluster: cluster, exited: make(chan struct{}), byKind: map[string]int{}}
	clusterNS := access.ClusterNamespace(fleetNS, cluster)
	var creds *rest.Config
	wait.Until(b, "the hub's identity for the agent of "+cluster, time.Minute, func() bool {
		var err error
		creds, err = access.AgentConfig(ctx, apiServer.Config(), clusterNS, time.Hour)
		return err == nil
	})
	p.front = agentFront(b, p)
	dir := b.TempDir()
	hubKubeconfig := filepath.Join(dir, "hub.kubeconfig")
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["hub"] = &clientcmdapi.Cluster{Server: p.front.URL, CertificateAuthorityData: p.frontCA}
	cfg.AuthInfos["agent"] = &clientcmdapi.AuthInfo{Token: creds.BearerToken}
	cfg.Contexts["hub"] = &clientcmdapi.Context{Cluster: "hub", AuthInfo: "agent"}
	cfg.CurrentContext = "hub"
	if err := clientcmd.WriteToFile(*cfg, hubKubeconfig); err != nil {
		b.Fatal(err)
	}
	logDir := dir
	if keep := os.Getenv("SCALE_AGENT_LOGS"); keep != "" {
		logDir = keep // kept after the benchmark
	}
	logs, err := os.Create(filepath.Join(logDir, cluster+".log"))
	if err != nil {
		b.Fatal(err)
	}
	p.cmd = exec.Command(binary, "--kubeconfig", w.KubeconfigPath, "--hub-kubeconfig", hubKubeconfig, "--namespace", clusterNS,
		"--cluster-name", cluster, "--cluster-namespace", fleetNS, "--state-namespace", "flotilla-system")
	p.cmd.Stdout, p.cmd.Stderr = logs, logs
	if err := p.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); logs.Close(); close(p.exited) }()
	return p
}

func (p *agentProcess) stop(b *testing.B) {
	select {
	case <-p.exited:
		b.Errorf("the agent of %s exited before the benchmark ended: %v", p.cluster, p.cmd.ProcessState)
	default:
		_ = p.cmd.Process.Signal(os.Interrupt)
		select {
		case <-p.exited:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	}
	p.front.Close()
}

// agentFront is the agent's way to the hub: a TLS server of its own CA on its own loopback
// address that forwards each request, with the agent's own credentials and nothing else, to
// the hub's API server, counting it. p.frontCA is set to the front's CA.
func agentFront(b *testing.B, p *agentProcess) *httptest.Server {
	hubCfg := apiServer.Config()
	target, err := url.Parse(hubCfg.Host)
	if err != nil {
		b.Fatal(err)
	}
	// The hub's CA, no client certificate: the agent's bearer token is the request's identity.
	transport, err := rest.TransportFor(&rest.Config{Host: hubCfg.Host, TLSClientConfig: rest.TLSClientConfig{CAData: hubCfg.CAData, ServerName: hubCfg.ServerName}})
	if err != nil {
		b.Fatal(err)
	}
	proxy := &httputil.ReverseProxy{Transport: transport, FlushInterval: -1, Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(target)
		r.Out.Host = ""
	}}
	front := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		kind := r.Method + " " + resourceOf(r.URL.Path)
		if r.URL.Query().Get("watch") != "" {
			kind = "WATCH " + resourceOf(r.URL.Path)
		}
		p.mu.Lock()
		p.byKind[kind]++
		p.mu.Unlock()
		proxy.ServeHTTP(w, r)
	}))
	ca := testpki.NewCA(b, "front of "+p.cluster)
	front.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Server(b, "127.0.0.1")}}
	front.StartTLS()
	p.frontCA = ca.PEM()
	return front
}

// agentUsage is what an agent used since its last mark.
type agentUsage struct {
	rssMB float64
	// anonMB is the process's own memory (heap, stacks); fileMB the pages of its binary it
	// touched, shared with every process of the same binary and reclaimable.
	anonMB, fileMB float64
	cpu            time.Duration
	requests       int
	leaseRenewals  int
	byKind         map[string]int
}

// otherThanLease lists the requests that were not a renewal of the agent's Lease.
func (u agentUsage) otherThanLease() map[string]int {
	out := map[string]int{}
	for kind, n := range u.byKind {
		if kind != "PUT leases" {
			out[kind] = n
		}
	}
	return out
}

// mark starts a measurement: requests and CPU count from now.
func (p *agentProcess) mark() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.byKind, p.cpuMark, p.sampling = map[string]int{}, agentCPU(p.cmd.Process.Pid), make(chan struct{})
}

func (p *agentProcess) stopSampling() { close(p.sampling) }

// usage is what the agent used since mark; its memory is resident now.
func (p *agentProcess) usage() agentUsage {
	p.mu.Lock()
	defer p.mu.Unlock()
	pid := p.cmd.Process.Pid
	u := agentUsage{rssMB: processRSS(pid), anonMB: procStatusMB(pid, "RssAnon"), fileMB: procStatusMB(pid, "RssFile"), cpu: agentCPU(pid) - p.cpuMark, byKind: p.byKind, leaseRenewals: p.byKind["PUT leases"]}
	for _, n := range p.byKind {
		u.requests += n
	}
	return u
}

// samplePeak samples the processes' resident memory every 100 ms until until (or, when zero,
// until each is told to stop sampling) and returns each one's peak in MB.
func samplePeak(procs []*agentProcess, until time.Time) []float64 {
	peaks := make([]float64, len(procs))
	for {
		stopped := 0
		for i, p := range procs {
			peaks[i] = max(peaks[i], processRSS(p.cmd.Process.Pid))
			select {
			case <-p.sampling:
				stopped++
			default:
			}
		}
		if (!until.IsZero() && time.Now().After(until)) || (until.IsZero() && stopped == len(procs)) {
			return peaks
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// processRSS is a process's resident set in MB (VmRSS), 0 once it is gone.
func processRSS(pid int) float64 { return procStatusMB(pid, "VmRSS") }

// procStatusMB reads a field in kB of /proc/PID/status, in MB; 0 once the process is gone.
func procStatusMB(pid int, field string) float64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

// agentCPU is the CPU time a process used so far, user and system (utime and stime, in
// clock ticks of 1/100 s on Linux).
func agentCPU(pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name may hold spaces: fields count from after its closing parenthesis.
	s := string(data)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}
