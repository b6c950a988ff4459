package main

import (
	"context"
	"embed"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/agent"
	"github.com/flotilla-dev/flotilla/agent/kube"
	"github.com/flotilla-dev/flotilla/cmd/internal/version"
	"github.com/flotilla-dev/flotilla/e2e/controlplane"
	"github.com/flotilla-dev/flotilla/e2e/gitrepo"
	"github.com/flotilla-dev/flotilla/hub"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/dashboard"
	"github.com/flotilla-dev/flotilla/hub/model"
	"github.com/flotilla-dev/flotilla/hub/operate"
	"github.com/flotilla-dev/flotilla/hub/report"
)

//go:embed all:example
var example embed.FS

type quickstartOptions struct {
	once     bool
	clusters int
	dir      string
	timeout  time.Duration
}

func newQuickstartCommand() *cobra.Command {
	o := &quickstartOptions{}
	cmd := &cobra.Command{
		Use:   "quickstart",
		Short: "Run a hub, workload clusters, agents and a git repository on this machine and watch a rollout",
		Long: `quickstart builds (the first time, with progress) and starts a local hub cluster and workload
clusters, runs the hub and one agent per cluster, serves an example git repository (a Helm chart
rolled out canary first, and a Kustomize overlay) over local HTTP, creates a GitRepo and shows the
rollout live. It then commits a change and shows it rolling partition by partition. It leaves a
kubeconfig of the hub so you can use kubectl; Ctrl-C tears everything down.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd.Context(), cmd.OutOrStdout()) },
	}
	cmd.Flags().BoolVar(&o.once, "once", false, "run the demo without a terminal: print progress as lines and exit when both rollouts completed")
	cmd.Flags().IntVar(&o.clusters, "clusters", 3, "number of workload clusters")
	cmd.Flags().StringVar(&o.dir, "dir", "", "directory for the hub kubeconfig and the clusters' data (default: a new one in the system's temporary directory, removed at the end)")
	cmd.Flags().DurationVar(&o.timeout, "timeout", 15*time.Minute, "give up when a rollout takes longer (with --once)")
	return cmd
}

// localFleet is a hub and workload clusters on this machine, with the hub and one agent per
// cluster running in this process, and git servers on loopback: what the quickstart and
// `flotilla dev` run. runLocalFleet tears it down.
type localFleet struct {
	say func(format string, args ...any)
	dir string
	// servers are the git servers serveGit started, closed at the end.
	servers []*http.Server
	env     *controlplane.Environment
	hub     *controlplane.Cluster
	c       client.Client
	ns      string
	ctx     context.Context
	wg      sync.WaitGroup
	// header are the lines a live view keeps on top: how to reach the hub and its metrics.
	header []string
}

// localFleetNamespace is the fleet namespace of the quickstart and `flotilla dev`.
const localFleetNamespace = "fleet-default"

// runLocalFleet starts the control planes and the hub in dir (a new temporary one when empty,
// removed at the end), runs body, and tears everything down.
func runLocalFleet(ctx context.Context, out io.Writer, prefix, dir string, body func(f *localFleet) error) (err error) {
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt)
	defer stop()
	ctrl.SetLogger(logr.Discard())
	f := &localFleet{say: func(format string, args ...any) { fmt.Fprintf(out, prefix+": "+format+"\n", args...) }, ns: localFleetNamespace}
	if dir == "" {
		// Outside the working directory, and gone with the clusters it serves.
		if dir, err = os.MkdirTemp("", "flotilla-"+prefix+"-"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f.dir, _ = filepath.Abs(dir)
	// What the in-process components write to stderr themselves (Kustomize's deprecation
	// notes, for one) goes to a log of the fleet's, not across the live view.
	logPath := filepath.Join(f.dir, "fleet.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	stderr := os.Stderr
	os.Stderr = logFile
	defer func() { os.Stderr = stderr; logFile.Close() }()
	defer f.closeServers()
	f.say("starting the control planes (the first run builds Kubernetes, etcd and kwok: several minutes)")
	if f.env, err = controlplane.Start(ctx, controlplane.Options{Dir: filepath.Join(f.dir, "clusters"), Progress: out}); err != nil {
		return err
	}
	defer f.env.Stop()
	if f.hub, err = f.env.StartCluster(ctx, controlplane.ClusterOptions{Name: "hub"}); err != nil {
		return err
	}
	if err := controlplane.InstallFlotillaAPI(ctx, f.hub.Config()); err != nil {
		return err
	}
	kubeconfig := filepath.Join(f.dir, "hub.kubeconfig")
	if data, err := os.ReadFile(f.hub.KubeconfigPath); err == nil {
		_ = os.WriteFile(kubeconfig, data, 0o600)
	}
	f.say("hub cluster ready: export KUBECONFIG=%s; kubectl get gitrepos,bundles,clusters -A", kubeconfig)
	metrics, err := freeLoopbackAddr()
	if err != nil {
		return err
	}
	f.say("hub metrics: http://%s/metrics; the components' own output: %s", metrics, logPath)
	f.header = []string{"export KUBECONFIG=" + kubeconfig + "   # kubectl get gitrepos,bundles,clusters -A", "hub metrics: http://" + metrics + "/metrics   Ctrl-C tears everything down", ""}
	defer f.wg.Wait()
	var cancel context.CancelFunc
	f.ctx, cancel = context.WithCancel(ctx)
	defer cancel()
	f.background("hub", func(ctx context.Context) error {
		return hub.Run(ctx, hub.Options{Config: f.hub.Config(), CacheDir: filepath.Join(f.dir, "hub-cache"), MetricsAddr: metrics})
	})
	scheme, _ := hub.Scheme()
	if f.c, err = client.New(f.hub.Config(), client.Options{Scheme: scheme}); err != nil {
		return err
	}
	if err := f.serveDashboard(ctx, scheme); err != nil {
		return err
	}
	if err := f.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.ns}}); client.IgnoreAlreadyExists(err) != nil {
		return err
	}
	// Clusters join as they would anywhere: a registration token, `flotilla agent install`
	// applied to the cluster, and the agent registering on first start.
	if err := f.c.Create(ctx, &v1alpha1.ClusterRegistrationToken{ObjectMeta: metav1.ObjectMeta{Name: prefix, Namespace: f.ns}}); client.IgnoreAlreadyExists(err) != nil {
		return err
	}
	return body(f)
}

// serveDashboard serves the web dashboard of the fleet on loopback, as the hub's admin (the
// kubeconfig the fleet leaves), and puts its link on top of the live view.
func (f *localFleet) serveDashboard(ctx context.Context, scheme *runtime.Scheme) error {
	srv, err := dashboard.New(ctx, dashboard.Options{Config: f.hub.Config(), Scheme: scheme, Namespace: f.ns, Version: version.Version()})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("dashboard: %w", err)
	}
	link := "http://" + ln.Addr().String() + srv.LoginPath()
	f.background("dashboard", func(ctx context.Context) error { return srv.Serve(ctx, ln, nil) })
	f.say("dashboard: %s", link)
	f.header = append(f.header[:len(f.header)-1], "dashboard: "+link, "")
	return nil
}

// background runs a component of the fleet until the fleet stops.
func (f *localFleet) background(name string, run func(context.Context) error) {
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		if err := run(f.ctx); err != nil && f.ctx.Err() == nil {
			f.say("%s stopped: %v", name, err)
		}
	}()
}

// join starts a workload cluster that registers with the fleet's token, labelled on the hub as
// an operator would (flotilla agent install --label), and runs its agent.
func (f *localFleet) join(ctx context.Context, token, name string, labels map[string]string) error {
	w, err := f.env.StartCluster(ctx, controlplane.ClusterOptions{Name: name, Kind: controlplane.Workload})
	if err != nil {
		return err
	}
	reg, err := joinCluster(ctx, f.c, w, operate.AgentInstall{Namespace: f.ns, Token: token, ClusterName: name, ClusterLabels: labels})
	if err != nil {
		return fmt.Errorf("cluster %s: %w", name, err)
	}
	opts := agent.RunOptions{HubConfig: reg.HubConfig, LocalConfig: w.Config(), Namespace: reg.Namespace, ClusterName: reg.ClusterName, ClusterNamespace: reg.ClusterNamespace,
		StateNamespace: "flotilla-system", HeartbeatInterval: 5 * time.Second, ResyncInterval: 3 * time.Second, Version: "local"}
	f.background("agent "+name, func(ctx context.Context) error { return agent.Run(ctx, opts) })
	return nil
}

// createRepo creates a GitRepo that follows url, finding bundles in paths (none: everywhere),
// and targets every cluster.
func (f *localFleet) createRepo(ctx context.Context, name, url string, paths []string) error {
	repo := &v1alpha1.GitRepo{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns}, Spec: v1alpha1.GitRepoSpec{
		Repo: url, PollingInterval: &metav1.Duration{Duration: 2 * time.Second}, Paths: paths,
		Targets: []v1alpha1.Target{{Name: "all", ClusterMatch: v1alpha1.ClusterMatch{ClusterSelector: &metav1.LabelSelector{}}}},
	}}
	return f.c.Create(ctx, repo)
}

// freeLoopbackAddr is a loopback address with a port nothing listens on now.
func freeLoopbackAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func (o *quickstartOptions) run(ctx context.Context, out io.Writer) error {
	return runLocalFleet(ctx, out, "quickstart", o.dir, func(f *localFleet) error { return o.demo(f.ctx, out, f) })
}

// demo joins the clusters, serves the example repository and follows two rollouts.
func (o *quickstartOptions) demo(ctx context.Context, out io.Writer, f *localFleet) error {
	regions := []string{"eu", "us", "ap"}
	for i := range o.clusters {
		name := fmt.Sprintf("edge-%d", i+1)
		ring := "main"
		if i == 0 {
			ring = "canary"
		}
		if err := f.join(ctx, "quickstart", name, map[string]string{"ring": ring, "region": regions[i%len(regions)]}); err != nil {
			return err
		}
		f.say("workload cluster %s (ring %s) registered with token quickstart, agent running", name, ring)
	}

	files := map[string]string{}
	if err := fs.WalkDir(example, "example", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := example.ReadFile(p)
		files[strings.TrimPrefix(p, "example/")] = string(data)
		return err
	}); err != nil {
		return err
	}
	up, url, err := f.serveGit()
	if err != nil {
		return err
	}
	if _, err := up.Commit("main", files); err != nil {
		return err
	}
	f.say("example repository served at %s", url)
	if err := f.createRepo(ctx, "example", url, nil); err != nil {
		return err
	}
	want := fmt.Sprintf("%d/%d", 2*o.clusters, 2*o.clusters)
	if err := o.follow(ctx, out, f, "first deployment", "", want); err != nil {
		return err
	}
	f.say("committing a new image tag: watch it go to the canary first, then the rest")
	changed := strings.Replace(files["web/fleet.yaml"], `tag: "1.0"`, `tag: "1.1"`, 1)
	commit, err := up.Commit("main", map[string]string{"web/fleet.yaml": changed})
	if err != nil {
		return err
	}
	if err := o.follow(ctx, out, f, "update", commit, want); err != nil {
		return err
	}
	if o.once {
		f.say("both rollouts completed")
		return nil
	}
	f.say("done; the fleet keeps running. Ctrl-C tears everything down.")
	<-ctx.Done()
	return nil
}

// joinCluster applies the output of `flotilla agent install` to a workload cluster and does
// what the agent binary does on first start: register with the bootstrap Secret.
func joinCluster(ctx context.Context, c client.Client, w *controlplane.Cluster, in operate.AgentInstall) (*agent.Registration, error) {
	var manifest []byte
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		manifest, err = operate.AgentManifest(ctx, c, in)
		return err == nil, nil // the hub issues the token's secret shortly after it is created
	})
	if err != nil {
		return nil, fmt.Errorf("registration token %s was not issued: %w", in.Token, err)
	}
	if _, err := controlplane.Apply(ctx, w.Config(), manifest); err != nil {
		return nil, err
	}
	local, err := kube.NewLocal(w.Config())
	if err != nil {
		return nil, err
	}
	return agent.Bootstrap(ctx, local, agent.BootstrapOptions{Namespace: "flotilla-system", BootstrapSecret: "flotilla-agent-bootstrap"})
}

// follow shows the rollout until the GitRepo is on commit (any, when empty) and want clusters
// are ready: a live view in a terminal, progress lines with --once.
func (o *quickstartOptions) follow(ctx context.Context, out io.Writer, f *localFleet, what, commit, want string) error {
	c, ns := f.c, f.ns
	live := newScreen(out, f.header...)
	deadline := time.Now().Add(o.timeout)
	last := ""
	for {
		var repo v1alpha1.GitRepo
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "example"}, &repo); err != nil && client.IgnoreNotFound(err) != nil {
			return err
		}
		var view strings.Builder
		if err := report.Write(ctx, &view, c, ns, "example"); err != nil {
			return err
		}
		line := fmt.Sprintf("%s: %s ready", what, repo.Status.Display.ReadyClusters)
		if msg := repo.Status.Display.Message; msg != "" {
			line += ", " + msg
		}
		switch {
		case commit != "" && repo.Status.Commit != commit:
			line = fmt.Sprintf("%s: waiting for the hub to pick up commit %.12s", what, commit)
		case repo.Status.Commit == "":
			line = fmt.Sprintf("%s: waiting for the hub to fetch the repository", what)
		}
		switch {
		case o.once && line != last:
			fmt.Fprintf(out, "quickstart: %s\n", line)
			last = line
		case !o.once:
			live.draw(view.String())
		}
		settled, err := allApplied(ctx, c, ns)
		if err != nil {
			return err
		}
		if settled && repo.Status.Display.ReadyClusters == want && (commit == "" || repo.Status.Commit == commit) {
			if o.once {
				// As it is now: the view above was taken before the check.
				return report.Write(ctx, out, c, ns, "example")
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not complete within %s:\n%s", what, o.timeout, view.String())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// allApplied reports whether every BundleDeployment of the namespace's bundles runs its
// bundle's revision and is Ready.
func allApplied(ctx context.Context, c client.Client, ns string) (bool, error) {
	deployments, err := deploymentStates(ctx, c, ns)
	if err != nil {
		return false, err
	}
	for _, d := range deployments {
		if d.state != v1alpha1.StateReady {
			return false, nil
		}
	}
	return len(deployments) > 0, nil
}

// failedApplies lists, once every other deployment of the namespace is Ready, the ones whose
// apply failed ("bundle on cluster: why"): what is left then will not heal by waiting (a kind
// the cluster does not know, an object another deployment owns). Empty while anything else
// moves.
func failedApplies(ctx context.Context, c client.Client, ns string) ([]string, error) {
	deployments, err := deploymentStates(ctx, c, ns)
	if err != nil {
		return nil, err
	}
	var failed []string
	for _, d := range deployments {
		switch d.state {
		case v1alpha1.StateReady:
		case v1alpha1.StateErrApplied:
			why := "apply failed"
			if cond := meta.FindStatusCondition(d.bd.Status.Conditions, v1alpha1.AppliedCondition); cond != nil && cond.Message != "" {
				why = cond.Message
			}
			failed = append(failed, fmt.Sprintf("%s on %s: %s", d.bd.Spec.Bundle, d.bd.Labels[model.LabelCluster], why))
		default:
			return nil, nil
		}
	}
	sort.Strings(failed)
	return failed, nil
}

// deploymentState is a BundleDeployment of the namespace's bundles with its state.
type deploymentState struct {
	bd    *v1alpha1.BundleDeployment
	state v1alpha1.ClusterState
}

func deploymentStates(ctx context.Context, c client.Client, ns string) ([]deploymentState, error) {
	var bundles v1alpha1.BundleList
	if err := c.List(ctx, &bundles, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	byName := map[string]*v1alpha1.Bundle{}
	for i := range bundles.Items {
		byName[bundles.Items[i].Name] = &bundles.Items[i]
	}
	var bds v1alpha1.BundleDeploymentList
	if err := c.List(ctx, &bds, client.MatchingLabels{model.LabelBundleNamespace: ns}); err != nil {
		return nil, err
	}
	out := make([]deploymentState, len(bds.Items))
	for i := range bds.Items {
		bd := &bds.Items[i]
		out[i] = deploymentState{bd: bd, state: model.DeploymentState(byName[bd.Spec.Bundle], bd)}
	}
	return out, nil
}

// serveGit creates a repository under the fleet's directory and serves it over HTTP on
// loopback until the fleet stops; it returns the repository and its URL.
func (f *localFleet) serveGit() (*gitrepo.Repo, string, error) {
	dir, err := os.MkdirTemp(f.dir, "git-")
	if err != nil {
		return nil, "", err
	}
	repo, err := gitrepo.Init(dir)
	if err != nil {
		return nil, "", err
	}
	handler, err := repo.Handler("", "")
	if err != nil {
		return nil, "", err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	f.servers = append(f.servers, srv)
	return repo, "http://" + ln.Addr().String() + "/repo.git", nil
}

func (f *localFleet) closeServers() {
	for _, srv := range f.servers {
		_ = srv.Close()
	}
}
