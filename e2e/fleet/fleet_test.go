package fleet

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/agent"
	"github.com/flotilla-dev/flotilla/e2e/controlplane"
	"github.com/flotilla-dev/flotilla/e2e/gitserver"
	"github.com/flotilla-dev/flotilla/hub"
	"github.com/flotilla-dev/flotilla/hub/access"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/operate"
	"github.com/flotilla-dev/flotilla/manifests"
)

var (
	hubCluster *controlplane.Cluster
	workloads  []*controlplane.Cluster
)

// workloadClusters is how many downstream clusters every scenario runs on: one canary and two
// more, so that "the rest" is a partition or stage of several clusters.
const workloadClusters = 3

// allReady is the ready column of a GitRepo or Bundle deployed to every workload cluster.
func allReady() string { return fmt.Sprintf("%d/%d", len(workloads), len(workloads)) }

// availableEverywhere reports whether the Deployment runs image on all the given clusters (all
// workload clusters when none are given).
func availableEverywhere(t *testing.T, ns, name, image string, clusters ...*controlplane.Cluster) bool {
	if len(clusters) == 0 {
		clusters = workloads
	}
	for _, w := range clusters {
		if !deploymentAvailable(t, w, ns, name, image) {
			return false
		}
	}
	return true
}

func TestMain(m *testing.M) {
	if kubeconfig := os.Getenv(hubProcessKubeconfig); kubeconfig != "" {
		os.Exit(runHubProcess(kubeconfig)) // a hub replica of TestR1_7_LeaderLoss…, not the tests
	}
	ctrl.SetLogger(logr.Discard())
	os.Exit(controlplane.RunTests(m, func(ctx context.Context, env *controlplane.Environment) (err error) {
		// The hub reaches its API server at an address agents cannot use, as in a pod; they
		// reach it at another address, each from a cluster with a CA of its own.
		if hubCluster, err = env.StartCluster(ctx, controlplane.ClusterOptions{Name: "hub", Kind: controlplane.Bare, External: true}); err != nil {
			return err
		}
		if err := controlplane.InstallFlotillaAPI(ctx, hubCluster.Config()); err != nil {
			return err
		}
		if err := installHubRole(ctx); err != nil {
			return err
		}
		for i := range workloadClusters {
			w, err := env.StartCluster(ctx, controlplane.ClusterOptions{Name: fmt.Sprintf("edge-%d", i), Kind: controlplane.Workload})
			if err != nil {
				return err
			}
			workloads = append(workloads, w)
		}
		return nil
	}))
}

// fleetEnv is a running hub and one agent per workload cluster, in their own namespace. Each
// component can be stopped and started again.
type fleetEnv struct {
	t   *testing.T
	hub client.Client
	ns  string
	// agentConfigs are each cluster's agent credentials; clusterNamespaces its hub namespace.
	agentConfigs      map[string]*rest.Config
	clusterNamespaces map[string]string
	hubCache          string

	mu      sync.Mutex
	stops   map[string]func() // running components by name
	running sync.WaitGroup
}

func startFleet(t *testing.T) *fleetEnv {
	t.Helper()
	return startFleetWith(t, (*fleetEnv).startHub)
}

// startFleetWith starts a fleet whose hub startHub starts.
func startFleetWith(t *testing.T, startHub func(*fleetEnv)) *fleetEnv {
	t.Helper()
	scheme, _ := hub.Scheme()
	c, err := client.New(hubCluster.Config(), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "fleet-"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	grantSecrets(t, ns.Name)
	f := &fleetEnv{t: t, hub: c, ns: ns.Name, agentConfigs: map[string]*rest.Config{}, clusterNamespaces: map[string]string{}, hubCache: t.TempDir(), stops: map[string]func(){}}
	t.Cleanup(func() {
		f.mu.Lock()
		for _, stop := range f.stops {
			stop()
		}
		f.mu.Unlock()
		f.running.Wait()
		f.removeWorkloads()
	})
	startHub(f)
	for i, w := range workloads {
		cl := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: w.Name, Namespace: ns.Name, Labels: map[string]string{"env": "prod", "index": fmt.Sprint(i)}},
			Spec: v1alpha1.ClusterSpec{HeartbeatDeadline: &metav1.Duration{Duration: 6 * time.Second}}}
		if err := c.Create(ctx, cl); err != nil {
			t.Fatal(err)
		}
		if err := access.AdmitCluster(ctx, c, cl); err != nil {
			t.Fatal(err)
		}
		f.agentConfigs[w.Name] = agentConfig(t, cl.Status.Namespace)
		f.clusterNamespaces[w.Name] = cl.Status.Namespace
		f.startAgent(w)
	}
	return f
}

// removeWorkloads deletes, on every workload cluster, the namespaces this test's deployments
// used (read from the agents' inventories) and its agents' state namespace: the clusters are
// shared by the package's tests, and the agent never takes over another deployment's objects,
// so a test that runs again (go test -count) needs them gone. It does not wait: a run that
// comes while they terminate has its agents retry until they are gone.
func (f *fleetEnv) removeWorkloads() {
	ctx := context.Background()
	state := "flotilla-" + f.ns
	for _, w := range workloads {
		cs := kubernetes.NewForConfigOrDie(w.Config())
		cms, err := cs.CoreV1().ConfigMaps(state).List(ctx, metav1.ListOptions{})
		if err != nil {
			continue
		}
		namespaces := map[string]bool{state: true}
		for _, cm := range cms.Items {
			for _, line := range strings.Fields(cm.Data["inventory"]) {
				o, err := agent.ParseObjMeta(line)
				if err != nil {
					continue
				}
				ns := o.Namespace
				if o.Group == "" && o.Kind == "Namespace" {
					ns = o.Name
				}
				if ns != "" && ns != "default" && !strings.HasPrefix(ns, "kube-") {
					namespaces[ns] = true
				}
			}
		}
		now := int64(0)
		for ns := range namespaces {
			// Pods first, without the grace period the namespace's deletion would wait out.
			_ = cs.AppsV1().Deployments(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &now}, metav1.ListOptions{})
			_ = cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &now}, metav1.ListOptions{})
			if err := cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{GracePeriodSeconds: &now}); err != nil && !apierrors.IsNotFound(err) {
				f.t.Errorf("cleanup: deleting namespace %s on %s: %v", ns, w.Name, err)
			}
		}
	}
}

// start runs a component until stop(name) or the end of the test.
func (f *fleetEnv) start(name string, run func(context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	f.running.Add(1)
	go func() {
		defer f.running.Done()
		defer close(done)
		if err := run(ctx); err != nil && ctx.Err() == nil {
			f.t.Errorf("%s: %v", name, err)
		}
	}()
	f.mu.Lock()
	f.stops[name] = func() { cancel(); <-done }
	f.mu.Unlock()
}

// stop stops a running component and waits for it.
func (f *fleetEnv) stop(name string) {
	f.mu.Lock()
	stop := f.stops[name]
	delete(f.stops, name)
	f.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// stopKnownAgent stops a cluster's agent once the hub has counted its heartbeat. A scenario of
// an agent that goes away starts from an agent the hub knows: a cluster whose agent never
// reported is one with nothing to wait for (its deletions go at once, it is never Offline),
// and an agent stopped a second after it started may not have been counted yet.
func (f *fleetEnv) stopKnownAgent(w *controlplane.Cluster) {
	f.t.Helper()
	var cl v1alpha1.Cluster
	eventually(f.t, "the hub counts the heartbeat of "+w.Name, 30*time.Second, func() bool {
		if err := f.hub.Get(context.Background(), types.NamespacedName{Namespace: f.ns, Name: w.Name}, &cl); err != nil {
			return false
		}
		ready := meta.FindStatusCondition(cl.Status.Conditions, v1alpha1.ReadyCondition)
		return ready != nil && ready.Reason != v1alpha1.AgentNotConnectedReason
	}, func() string { return fmt.Sprintf("cluster status: %+v", cl.Status) })
	f.stop("agent " + w.Name)
}

func (f *fleetEnv) startHub() {
	f.startHubWith(func(o *hub.Options) { o.Version = hubVersion })
}

// startHubWith runs the hub as it is deployed: connected with its kubeconfig, which names its
// CA by file and dials the in-cluster address, and told the address agents reach it at
// (--agent-api-server-url); set changes the options.
func (f *fleetEnv) startHubWith(set func(*hub.Options)) {
	f.t.Helper()
	opts := hubOptions(f.t)
	opts.CacheDir, opts.StatusDelay, opts.Namespace = f.hubCache, time.Second, f.ns
	set(&opts)
	f.start("hub", func(ctx context.Context) error { return hub.Run(ctx, opts) })
}

// hubOptions are the connection options of a hub of the hub cluster.
func hubOptions(t *testing.T) hub.Options {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", hubCluster.KubeconfigPath)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.CAFile == "" || len(cfg.CAData) > 0 {
		t.Fatalf("the hub's kubeconfig should name its CA by file: %+v", cfg.TLSClientConfig)
	}
	// The fleet's providers (Prometheus, webhooks) and chart servers are served on loopback:
	// listed, as an operator lists where theirs are.
	return hub.Options{Config: asTheHub(cfg), Server: hubCluster.ExternalHost, AllowedProviderAddresses: []string{"127.0.0.1"}, AllowedChartHosts: []string{"127.0.0.1"}}
}

// hubServiceAccount is the identity the fleet's hubs run as: bound to the hub's ClusterRole
// (manifests/rbac) and nothing else, so that every scenario proves the role is enough, and the
// admission policies see the hub as they see it when it is installed.
const hubServiceAccount = "system:serviceaccount:flotilla-system:flotilla-hub"

// asTheHub makes cfg act as the hub's service account.
func asTheHub(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: hubServiceAccount,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:flotilla-system", "system:authenticated"}}
	return cfg
}

// installHubRole installs the hub's ClusterRoles as users do and binds the hub's to
// hubServiceAccount; the Secrets role is bound in each fleet namespace (grantSecrets).
func installHubRole(ctx context.Context) error {
	role, err := fs.ReadFile(manifests.Install, "rbac/role.yaml")
	if err != nil {
		return err
	}
	secrets, err := fs.ReadFile(manifests.Install, "rbac/secrets.yaml")
	if err != nil {
		return err
	}
	binding := `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: flotilla-hub}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: flotilla-hub}
subjects: [{kind: ServiceAccount, name: flotilla-hub, namespace: flotilla-system}]
`
	for _, doc := range [][]byte{role, secrets, []byte(binding)} {
		if _, err := controlplane.Apply(ctx, hubCluster.Config(), doc); err != nil {
			return fmt.Errorf("failed to install the hub's role: %w", err)
		}
	}
	return nil
}

// grantSecrets makes ns a fleet namespace whose Secrets the hub may read and write, as the
// chart's fleetNamespaces do: a RoleBinding of flotilla-hub-secrets.
func grantSecrets(t *testing.T, ns string) {
	t.Helper()
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "flotilla-hub-secrets", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "flotilla-hub-secrets"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "flotilla-hub", Namespace: "flotilla-system"}}}
	if _, err := kubernetes.NewForConfigOrDie(hubCluster.Config()).RbacV1().RoleBindings(ns).Create(context.Background(), binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rulesHeld(t, asTheHub(hubCluster.Config()), ns, []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "create", "delete"}}})
}

func (f *fleetEnv) startAgent(w *controlplane.Cluster) {
	opts := f.agentOptions(w)
	f.start("agent "+w.Name, func(ctx context.Context) error { return agent.Run(ctx, opts) })
}

// agentOptions are the options of a workload cluster's agent, with its own hub credentials.
func (f *fleetEnv) agentOptions(w *controlplane.Cluster) agent.RunOptions {
	version := hubVersion
	if w == workloads[0] {
		version = olderAgentVersion // one agent a version behind the hub, as during an upgrade
	}
	return agent.RunOptions{HubConfig: f.agentConfigs[w.Name], LocalConfig: w.Config(), Namespace: f.clusterNamespaces[w.Name], ClusterName: w.Name,
		ClusterNamespace: f.ns, StateNamespace: "flotilla-" + f.ns, HeartbeatInterval: 2 * time.Second, ResyncInterval: 2 * time.Second, Version: version,
		Events: agent.EventsAll, NotReadyWarning: 2 * time.Second} // the scenarios read each cluster's whole story
}

// The versions the fleet's hub and agents report.
const (
	hubVersion        = "v0.9.0"
	olderAgentVersion = "v0.8.3"
)

// agentConfig waits for the hub to create the agent's identity in its namespace and returns
// hub credentials with that identity alone, as registration hands them to the agent.
func agentConfig(t *testing.T, clusterNS string) *rest.Config {
	t.Helper()
	var cfg *rest.Config
	var err error
	eventually(t, "the agent's credentials in "+clusterNS, 30*time.Second, func() bool {
		cfg, err = access.AgentConfig(context.Background(), hubCluster.ExternalConfig(), clusterNS, time.Hour)
		return err == nil
	}, func() string { return fmt.Sprint("last error: ", err) })
	return cfg
}

func deploymentAvailable(t *testing.T, w *controlplane.Cluster, ns, name string, image string) bool {
	t.Helper()
	d, err := kubernetes.NewForConfigOrDie(w.Config()).AppsV1().Deployments(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return false
	}
	if image != "" && d.Spec.Template.Spec.Containers[0].Image != image {
		return false
	}
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentAvailable && c.Status == corev1.ConditionTrue {
			return d.Status.UpdatedReplicas == *d.Spec.Replicas && d.Status.AvailableReplicas == *d.Spec.Replicas
		}
	}
	return false
}

func webManifest(image string) string {
	return `apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: ` + image + `}]}
`
}

// TestFirstDeploymentAndUpdate is e2e scenario 1 (and the happy path of 2): a GitRepo reaches
// Ready on every cluster, the status says x/x, and a new commit rolls out.
func TestFirstDeploymentAndUpdate(t *testing.T) {
	up := gitserver.New(t)
	up.Commit("main", map[string]string{
		"web/fleet.yaml":      "defaultNamespace: shop\nrolloutStrategy: {maxUnavailable: 1}\n",
		"web/deployment.yaml": webManifest("example.invalid/web:1"),
	})
	srv := up.ServeHTTP("", "")
	f := startFleet(t)
	ctx := context.Background()
	repo := &v1alpha1.GitRepo{ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: f.ns}, Spec: v1alpha1.GitRepoSpec{
		Repo: srv.URL + "/repo.git", PollingInterval: &metav1.Duration{Duration: 2 * time.Second},
		Targets: []v1alpha1.Target{{ClusterMatch: v1alpha1.ClusterMatch{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}}}},
	}}
	group := &v1alpha1.ClusterGroup{ObjectMeta: metav1.ObjectMeta{Name: "prod", Namespace: f.ns}, Spec: v1alpha1.ClusterGroupSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}}}
	if err := f.hub.Create(ctx, group); err != nil {
		t.Fatal(err)
	}
	if err := f.hub.Create(ctx, repo); err != nil {
		t.Fatal(err)
	}
	waitRepo(t, f, "all ready", func(r *v1alpha1.GitRepo) bool { return r.Status.Display.ReadyClusters == allReady() })
	// Clusters and groups sum their bundles with the same state function.
	eventually(t, "every Cluster reports its bundle ready", 30*time.Second, func() bool {
		var clusters v1alpha1.ClusterList
		if err := f.hub.List(ctx, &clusters, client.InNamespace(f.ns)); err != nil || len(clusters.Items) != len(workloads) {
			return false
		}
		for _, c := range clusters.Items {
			if c.Status.Display.ReadyClusters != "1/1" || !meta.IsStatusConditionTrue(c.Status.Conditions, v1alpha1.ReadyCondition) {
				return false
			}
		}
		return true
	})
	eventually(t, "the ClusterGroup sums its members", 30*time.Second, func() bool {
		var g v1alpha1.ClusterGroup
		if err := f.hub.Get(ctx, client.ObjectKeyFromObject(group), &g); err != nil {
			return false
		}
		return g.Status.ClusterCount == int32(len(workloads)) && g.Status.NonReadyClusterCount == 0 && g.Status.Display.ReadyClusters == allReady()
	})
	for _, w := range workloads {
		if !deploymentAvailable(t, w, "shop", "web", "example.invalid/web:1") {
			t.Errorf("%s: web is not Available", w.Name)
		}
	}
	up.Commit("main", map[string]string{"web/deployment.yaml": webManifest("example.invalid/web:2")})
	eventually(t, "revision 2 Available everywhere", 90*time.Second, func() bool { return availableEverywhere(t, "shop", "web", "example.invalid/web:2") })
	waitRepo(t, f, "all ready on revision 2", func(r *v1alpha1.GitRepo) bool {
		return r.Status.Display.ReadyClusters == allReady() && r.Status.Summary.Ready == int32(len(workloads))
	})

	// A rollback deploys revision 1 again, as it was rendered, under the same strategy.
	if _, err := operate.Rollback(ctx, f.hub, f.ns, "shop-web", 1, "e2e-operator"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "revision 1 is back everywhere", 90*time.Second, func() bool { return availableEverywhere(t, "shop", "web", "example.invalid/web:1") })
	eventually(t, "the bundle reports revision 1 ready", 30*time.Second, func() bool {
		st := bundleOf(t, f, "shop-web").Status
		return st.ReleasingRevision == 1 && st.Display.State == "Ready" && st.Display.ReadyClusters == allReady()
	})
	if _, err := operate.Rollback(ctx, f.hub, f.ns, "shop-web", 7, "e2e-operator"); err == nil || !strings.Contains(err.Error(), "available: 1, 2") {
		t.Errorf("a rollback to an unknown revision must name the available ones, got %v", err)
	}
	// The next commit is the fix going forward: it ends the rollback.
	up.Commit("main", map[string]string{"web/deployment.yaml": webManifest("example.invalid/web:3")})
	eventually(t, "revision 3 everywhere after the rollback", 90*time.Second, func() bool { return availableEverywhere(t, "shop", "web", "example.invalid/web:3") })
	if bun := bundleOf(t, f, "shop-web"); bun.Spec.TargetRevision != nil || bun.Status.ReleasingRevision != 3 {
		t.Errorf("the new commit did not end the rollback: targetRevision %v, releasing %d", bun.Spec.TargetRevision, bun.Status.ReleasingRevision)
	}
}

func waitRepo(t *testing.T, f *fleetEnv, what string, cond func(*v1alpha1.GitRepo) bool) {
	t.Helper()
	var r v1alpha1.GitRepo
	eventually(t, "gitrepo: "+what, 90*time.Second, func() bool {
		return f.hub.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: "shop"}, &r) == nil && cond(&r)
	}, func() string {
		var bds v1alpha1.BundleDeploymentList
		_ = f.hub.List(context.Background(), &bds)
		return fmt.Sprintf("status: %+v\ndeployments: %+v", r.Status, bds.Items)
	})
}
