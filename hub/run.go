package hub

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/flotilla-dev/flotilla/bundle"
	"github.com/flotilla-dev/flotilla/hub/access"
	"github.com/flotilla-dev/flotilla/hub/analysis"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/clusters"
	"github.com/flotilla-dev/flotilla/hub/contentstore"
	"github.com/flotilla-dev/flotilla/hub/deploy"
	"github.com/flotilla-dev/flotilla/hub/endpoint"
	"github.com/flotilla-dev/flotilla/hub/events"
	"github.com/flotilla-dev/flotilla/hub/gitsource"
	"github.com/flotilla-dev/flotilla/hub/helmops"
	"github.com/flotilla-dev/flotilla/hub/lifecycle"
	"github.com/flotilla-dev/flotilla/hub/liveness"
	"github.com/flotilla-dev/flotilla/hub/metrics"
	"github.com/flotilla-dev/flotilla/hub/model"
	"github.com/flotilla-dev/flotilla/hub/notify"
	"github.com/flotilla-dev/flotilla/hub/sources"
	"github.com/flotilla-dev/flotilla/hub/strategy"
	"github.com/flotilla-dev/flotilla/hub/webhooks"
)

// Scheme holds the kinds the hub reads and writes.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

// Run runs the hub until ctx ends: its manager with every controller of its shard (see the
// map in doc.go), the git poller and the webhook receiver.
func Run(ctx context.Context, opts Options) error {
	if opts.Config == nil {
		return errors.New("hub: no API server configuration")
	}
	if opts.LeaderElection && opts.Namespace == "" {
		return errors.New("hub: leader election needs the hub's namespace (Options.Namespace) for its Lease")
	}
	if opts.LeaderElection {
		// Known before the election: a replica that loses its Lease steps back in under it.
		id, err := electionIdentity(opts.LeaderElectionIdentity)
		if err != nil {
			return fmt.Errorf("hub: no identity for the election: %w", err)
		}
		opts.LeaderElectionIdentity = id
	}
	agentEndpoint, err := clusters.ResolveAgentEndpoint(opts.Server, opts.CACert, opts.Config, os.Getenv)
	if err != nil {
		return err
	}
	sh := model.Shard(opts.Shard)
	if err := waitForAPI(ctx, opts.Config); err != nil {
		return err
	}
	mgr, err := newManager(ctx, opts, sh)
	if err != nil {
		return err
	}
	// The Events an operator reads later; written by every replica for its own controllers.
	recorder := events.New(model.EventSink(mgr.GetClient()), mgr.GetScheme(), EventsController)
	recorder.OnDrop(metrics.EventsDropped.Inc)
	if err := mgr.Add(recorder); err != nil {
		return err
	}
	// What the Events tell, passed on to the providers the alerts of their namespace choose.
	providerAddresses, err := endpoint.ParseAddressList("--allowed-provider-addresses", opts.AllowedProviderAddresses)
	if err != nil {
		return err
	}
	notifyDir := &notify.Cluster{Cached: mgr.GetClient(), Uncached: mgr.GetAPIReader(), Status: mgr.GetClient(), Addresses: providerAddresses}
	notifier := notify.NewDispatcher(notifyDir, nil)
	notifier.DashboardURL = opts.DashboardURL
	recorder.OnTold(notifier.Tell)
	if err := mgr.Add(notifier); err != nil {
		return err
	}
	if err := metrics.CollectFleetState(mgr.GetCache()); err != nil {
		return fmt.Errorf("failed to register the fleet's metrics: %w", err)
	}
	live, err := liveness.WatchLiveness(ctx, mgr.GetCache(), opts.HeartbeatInterval, opts.HeartbeatDeadline)
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(opts.Config)
	if err != nil {
		return err
	}
	// Planning passes read a bundle's fleet through the cache's own indexes (model.FleetIndex).
	fleet, err := model.NewFleetIndex(ctx, mgr.GetCache())
	if err != nil {
		return err
	}
	c := model.IndexedClient{Client: mgr.GetClient(), Fleet: fleet}
	src, b := newSource(mgr, c, opts, sh, live, recorder)
	// The analysis gates' measurements (§7): secrets are read uncached (the client caches
	// none), providers and restrictions from the cache.
	checks := analysis.New(mgr.GetClient(), opts.Clock, 0, providerAddresses)
	checks.Recorder = recorder
	if err := mgr.Add(checks); err != nil {
		return err
	}
	for _, ctl := range controllers(mgr, c, opts, agentEndpoint, sh, src, b, kube, live, recorder, checks, notifyDir) {
		if ctl.fleetWide && !sh.FleetWide() {
			continue
		}
		if err := ctl.setup(mgr); err != nil {
			return fmt.Errorf("failed to set up the %s controller: %w", ctl.name, err)
		}
	}
	if sh.FleetWide() {
		if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
			// Agents cannot renew their tokens until the record holds their lifetime: a write
			// that failed is tried again, backing off, for as long as the hub runs.
			record := hubRecord(opts.Version, model.PositiveOr(opts.AgentTokenTTL, clusters.DefaultAgentTokenTTL))
			keepTrying(ctx, time.Second, time.Minute, func() bool {
				if err := recordHub(ctx, mgr.GetClient(), opts.Namespace, record); err != nil {
					ctrl.Log.WithName("hub").Error(err, "the hub's record is not written: the CLI cannot compare agent versions with the hub's, agents cannot renew their tokens; retrying")
					return false
				}
				return true
			})
			return nil
		})); err != nil {
			return err
		}
	}
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error { src.Poller.Run(ctx); return nil })); err != nil {
		return err
	}
	if opts.WebhookAddr != "" {
		if err := webhooks.Serve(ctx, mgr, src, opts.WebhookAddr); err != nil {
			return err
		}
	}
	return stepBackOnLostLease(ctx, mgr.Start(ctx), opts)
}

// waitForAPI waits until the API server serves Flotilla's kinds: the manager maps every kind it
// caches when it is created, and fails while the API server is down or restarting (its
// aggregated CRDs not served yet). A hub that starts or steps back in meanwhile waits, and
// goes on within a second of the API server answering, instead of exiting into a kubelet's
// back-off.
func waitForAPI(ctx context.Context, cfg *rest.Config) error {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	log := ctrl.Log.WithName("hub")
	attempts := 0
	keepTrying(ctx, 100*time.Millisecond, time.Second, func() bool {
		_, err := dc.ServerResourcesForGroupVersion(v1alpha1.GroupVersion.String())
		if attempts++; err != nil && attempts%10 == 1 {
			log.Info("waiting for the API server to serve "+v1alpha1.GroupVersion.String(), "error", err.Error())
		}
		return err == nil
	})
	return ctx.Err()
}

// keepTrying calls try until it succeeds or ctx ends, waiting first, then twice as long after
// each failure, up to most (wait.Backoff's cap ends its steps instead).
func keepTrying(ctx context.Context, first, most time.Duration, try func() bool) {
	for delay := first; !try(); delay = min(2*delay, most) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
	}
}

// LeaseLostError is Run's error when the replica stopped leading without being asked to: it
// could not renew its Lease within the renew deadline (a stalled API server or etcd, a network
// partition). A manager starts only once, and the goroutines of the lost term are abandoned,
// not awaited: the process steps back into the election by replacing itself (StepBackIn) under
// Identity. Still the Lease's holder, the new image takes it back at the first renewal the API
// server answers, caches filled from the API server's watch cache; a standby that took over
// meanwhile keeps it.
type LeaseLostError struct {
	Identity string
	Err      error
}

func (e *LeaseLostError) Error() string {
	return fmt.Sprintf("hub: replica %s lost the Lease: %v", e.Identity, e.Err)
}

func (e *LeaseLostError) Unwrap() error { return e.Err }

// stepBackOnLostLease turns the manager's error for a lost Lease into a LeaseLostError. The
// manager says so only in its message (controller-runtime's "leader election lost");
// TestAStalledAPIServerCostsTheFleetSecondsOnceItAnswers fails if that changes.
func stepBackOnLostLease(ctx context.Context, err error, opts Options) error {
	if err == nil || ctx.Err() != nil || !opts.LeaderElection || err.Error() != "leader election lost" {
		return err
	}
	return &LeaseLostError{Identity: opts.LeaderElectionIdentity, Err: err}
}

// IdentityEnv holds the identity a replica that lost its Lease passes to the image that
// replaces it, when no --leader-elect-identity names one.
const IdentityEnv = "FLOTILLA_LEADER_ELECT_IDENTITY"

// StepBackIn replaces the process with a fresh image of its own executable, run with args and
// env and IdentityEnv set to identity. The pid stays (a kubelet sees no restart and applies no
// back-off), no goroutine of the lost term survives, and the listening sockets close with the
// old image (close-on-exec) for the new one to bind. It returns only on failure.
func StepBackIn(identity string, args, env []string) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("hub: cannot step back into the election: %w", err)
	}
	kept := slices.DeleteFunc(slices.Clone(env), func(kv string) bool { return strings.HasPrefix(kv, IdentityEnv+"=") })
	err = syscall.Exec(exe, args, append(kept, IdentityEnv+"="+identity))
	return fmt.Errorf("hub: cannot step back into the election: %w", err)
}

// electionIdentity is the replica's identity: the operator's, else one new at this start,
// unique as controller-runtime makes its own.
func electionIdentity(given string) (string, error) {
	if given != "" {
		return given, nil
	}
	host, err := os.Hostname()
	if err != nil {
		return "", err
	}
	return host + "_" + string(uuid.NewUUID()), nil
}

// The leader election's timings unless the hub is told others (Options, the --leader-elect-*
// flags): a leader that cannot renew within DefaultRenewDeadline stops; a standby takes over
// DefaultLeaseDuration after the leader's last renewal.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// leaseLock is the election's Lease as this replica holds it under opts.LeaderElectionIdentity
// (Run sets one when the operator did not); nil without leader election.
func leaseLock(opts Options, sh model.Shard) (resourcelock.Interface, error) {
	if !opts.LeaderElection {
		return nil, nil
	}
	cfg := rest.AddUserAgent(rest.CopyConfig(opts.Config), "leader-election")
	// One hung request must not cost the Lease: as controller-runtime bounds its own.
	cfg.Timeout = max(model.PositiveOr(opts.RenewDeadline, DefaultRenewDeadline)/2, time.Second)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return resourcelock.New(resourcelock.LeasesResourceLock, opts.Namespace, sh.LeaderElectionID(), cs.CoreV1(), cs.CoordinationV1(),
		resourcelock.ResourceLockConfig{Identity: opts.LeaderElectionIdentity})
}

// newManager creates the hub's manager (caches, leader election, metrics and health
// endpoints) and the cache indexes and informers the controllers count on.
func newManager(ctx context.Context, opts Options, sh model.Shard) (ctrl.Manager, error) {
	scheme, err := Scheme()
	if err != nil {
		return nil, fmt.Errorf("failed to build scheme: %w", err)
	}
	metricsAddr := opts.MetricsAddr
	if metricsAddr == "" {
		metricsAddr = "0"
	}
	metricsOpts := metricsserver.Options{BindAddress: metricsAddr}
	if opts.MetricsSecure {
		// Metrics tell which repositories, clusters and tenants the hub serves: only to
		// those the API server says may read them.
		metricsOpts.SecureServing, metricsOpts.CertDir = true, opts.MetricsCertDir
		metricsOpts.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	lock, err := leaseLock(opts, sh)
	if err != nil {
		return nil, err
	}
	mgr, err := ctrl.NewManager(opts.Config, ctrl.Options{
		Scheme:  scheme,
		Metrics: metricsOpts,
		// The replica's own identity, when it has one that outlives a restart.
		LeaderElectionResourceLockInterface: lock,
		HealthProbeBindAddress:              opts.HealthAddr,
		// The hub never reads managed fields: the caches keep objects without them (less
		// memory, cheaper copies). Writes from cached objects leave the server's record alone.
		// What each cache holds: shard.cacheScope.
		Cache: cache.Options{DefaultTransform: cache.TransformStripManagedFields(), ByObject: sh.CacheScope()},
		// Secrets and ConfigMaps are read from the API server when a GitRepo needs one (its
		// credentials, a webhook secret, valuesFrom), never cached: the hub keeps no copy of
		// every Secret of the cluster in memory.
		Client: client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}, &corev1.ConfigMap{}}}},
		// Tests run several hubs in one process; metric names stay unique per process anyway.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		// A replica that stops hands the Lease on at once; one that dies, after LeaseDuration.
		LeaderElection:                opts.LeaderElection,
		LeaderElectionID:              sh.LeaderElectionID(),
		LeaderElectionNamespace:       opts.Namespace,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 ptr.To(model.PositiveOr(opts.LeaseDuration, DefaultLeaseDuration)),
		RenewDeadline:                 ptr.To(model.PositiveOr(opts.RenewDeadline, DefaultRenewDeadline)),
		RetryPeriod:                   ptr.To(model.PositiveOr(opts.RetryPeriod, DefaultRetryPeriod)),
	})
	if err != nil {
		return nil, fmt.Errorf("failed to create manager: %w", err)
	}
	if opts.HealthAddr != "" {
		if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
			return nil, err
		}
		if err := mgr.AddReadyzCheck("informers", func(req *http.Request) error {
			if !mgr.GetCache().WaitForCacheSync(req.Context()) {
				return errors.New("informer caches are not synced")
			}
			return nil
		}); err != nil {
			return nil, err
		}
	}
	if err := model.IndexDeployments(ctx, mgr.GetFieldIndexer()); err != nil {
		return nil, fmt.Errorf("failed to index deployments: %w", err)
	}
	// Kinds the hub reads on every commit without watching them start with the manager: on
	// first use, a commit would wait for their caches to fill.
	preloaded := []client.Object{&v1alpha1.Content{}}
	if sh.FleetWide() {
		preloaded = append(preloaded, &rbacv1.Role{}) // agents' content is granted there
	}
	for _, o := range preloaded {
		if _, err := mgr.GetCache().GetInformer(ctx, o); err != nil {
			return nil, fmt.Errorf("failed to set up the %T cache: %w", o, err)
		}
	}
	return mgr, nil
}

// newSource creates the GitRepo source controller with its poller, and the bundler that
// renders and stages what it finds.
func newSource(mgr ctrl.Manager, c client.Client, opts Options, sh model.Shard, live *liveness.Liveness, recorder *events.Recorder) (*sources.SourceReconciler, *sources.Bundler) {
	src := &sources.SourceReconciler{
		Client:   c,
		Uncached: mgr.GetAPIReader(),
		Shard:    sh,
		Git: &gitsource.Client{CacheDir: filepath.Join(opts.CacheDir, "git"), MaxCacheBytes: opts.GitCacheBytes, Log: ctrl.Log.WithName("gitsource"),
			Timeout: opts.GitTimeout, StallTimeout: opts.GitStallTimeout, MaxCheckoutBytes: opts.CheckoutMaxBytes, MaxCheckoutFiles: opts.CheckoutMaxFiles,
			MaxObjectBytes: opts.GitMaxObjectBytes, MaxPackObjects: opts.GitMaxPackObjects},
		RecordEvery:      time.Duration(model.PositiveOr(opts.PollRecordInterval, 300)) * time.Second,
		Now:              time.Now,
		Schedules:        map[string]gitsource.Schedule{},
		Webhooks:         map[string]time.Time{},
		Rerender:         map[string]int{},
		Forwarded:        map[string]string{},
		UninstallTimeout: model.PositiveOr(opts.UninstallTimeout, lifecycle.DefaultUninstallTimeout),
		Recorder:         recorder,
	}
	src.Poller = &gitsource.Poller{Sync: src.Sync, Workers: opts.PollWorkers, Host: src.Host, Log: ctrl.Log.WithName("poller")}
	content := &contentstore.Store{Client: mgr.GetClient()}
	if !sh.FleetWide() {
		content.Labels, content.Uncached = map[string]string{v1alpha1.ShardLabel: string(sh)}, mgr.GetAPIReader()
	}
	b := &sources.Bundler{Client: c, Shard: sh, Uncached: mgr.GetAPIReader(), Live: live, CrossNamespaceRefs: opts.AllowCrossNamespaceRefs, Content: content,
		Revisions: &model.RevisionStore{Content: content}, Released: &deploy.Releases{}, Staging: deploy.NewStagingNow(), Writes: make(deploy.WriteSlots, model.PositiveOr(opts.WritesInFlight, deploy.DefaultWritesInFlight)),
		Charts:  &bundle.ChartFetcher{CacheDir: filepath.Join(opts.CacheDir, "charts"), AllowedHosts: opts.AllowedChartHosts, Closed: true},
		Sandbox: &bundle.Sandbox{Timeout: opts.RenderTimeout, Memory: opts.RenderMemory}, RenderBudget: opts.RenderBudget, Now: rolloutClock(opts), Recorder: recorder}
	src.OnCommit = b.OnCommit
	b.Checkout = func(ctx context.Context, repo *v1alpha1.GitRepo, commit string) (string, error) {
		from, err := src.RepoFor(ctx, repo)
		if err != nil {
			return "", err
		}
		return src.Checkout(ctx, repo, from, gitsource.Ref{Commit: commit})
	}
	return src, b
}

// controllerSetup is one controller of the hub: fleet-wide ones run in the default shard only
// (see shard).
type controllerSetup struct {
	name      string
	fleetWide bool
	setup     func(ctrl.Manager) error
}

// rolloutClock is the time rollouts are decided and released at (Options.Clock).
func rolloutClock(opts Options) func() time.Time {
	if opts.Clock != nil {
		return opts.Clock
	}
	return time.Now
}

// controllers is the hub's table of controllers; the bundler's state that the rollout
// controllers share (revisions, releases, staging, write slots) comes from b.
func controllers(mgr ctrl.Manager, c client.Client, opts Options, agentEndpoint clusters.AgentEndpoint, sh model.Shard, src *sources.SourceReconciler, b *sources.Bundler, kube kubernetes.Interface, live *liveness.Liveness, recorder *events.Recorder, checks *analysis.Runner, notifyDir *notify.Cluster) []controllerSetup {
	statusDelay := model.PositiveOr(opts.StatusDelay, clusters.DefaultStatusDelay)
	contentGrace := model.PositiveOr(opts.ContentGrace, lifecycle.DefaultContentGrace)
	uncached := mgr.GetAPIReader()
	clock := rolloutClock(opts)
	return []controllerSetup{
		{"rollout", false, (&strategy.RolloutReconciler{Client: c, Uncached: uncached, Shard: sh, Live: live, Revisions: b.Revisions, Released: b.Released, Staging: b.Staging, Writes: b.Writes, Now: clock,
			Progress: model.ProgressThrottle{Every: strategy.ProgressEvery, PerSecond: strategy.BundleProgressPerSecond}, Recorder: recorder, Analysis: checks}).Setup},
		{"sequence", false, (&strategy.SequenceReconciler{Client: c, Shard: sh, Live: live, Uncached: uncached, Revisions: b.Revisions, Released: b.Released, Writes: b.Writes, Now: clock, Recorder: recorder, Analysis: checks}).Setup},
		{"staged run", false, (&strategy.RunReconciler{Client: c, Shard: sh, Live: live, Uncached: uncached, Revisions: b.Revisions, Released: b.Released, Writes: b.Writes, Now: clock, Recorder: recorder, Analysis: checks}).Setup},
		{"deployment removal", false, (&lifecycle.DeploymentRemovalReconciler{Client: c, Shard: sh, Live: live, Now: time.Now, Timeout: src.UninstallTimeout}).Setup},
		{"bundle removal", false, (&lifecycle.BundleRemovalReconciler{Client: c, Shard: sh}).Setup},
		{"gitrepo status", false, (&sources.RepoStatusReconciler{Client: c}).Setup},
		{"commit status", false, (&notify.CommitStatusReconciler{Client: c, Dir: notifyDir, DashboardURL: opts.DashboardURL}).Setup},
		{"gitrepo", false, src.Setup},
		{"helmop", false, (&helmops.SourceReconciler{Client: c, Bundler: b, OCI: src.Git, Dir: filepath.Join(opts.CacheDir, "helmops"), RecordEvery: src.RecordEvery,
			UninstallTimeout: src.UninstallTimeout, Now: time.Now, Recorder: recorder}).Setup},
		{"helmop status", false, (&helmops.StatusReconciler{Client: c}).Setup},
		{"sequence status", true, (&strategy.SequenceStatusReconciler{Client: c}).Setup},
		// A cluster's counts alone are written at most every three status delays (15 s by
		// default), and all clusters' together at most clusterProgressPerSecond.
		{"cluster status", true, (&clusters.ClusterStatusReconciler{Client: c, Live: live, Now: time.Now, Delay: statusDelay,
			Progress: model.ProgressThrottle{Every: 3 * statusDelay, PerSecond: strategy.ClusterProgressPerSecond}, Recorder: recorder}).Setup},
		{"cluster group status", true, (&clusters.ClusterGroupStatusReconciler{Client: c, Delay: statusDelay}).Setup},
		{"registration token", true, (&clusters.TokenReconciler{Client: c, Uncached: uncached, Kube: kube, Endpoint: agentEndpoint, TTL: opts.RegistrationTokenTTL}).Setup},
		{"registration", true, (&clusters.RegistrationReconciler{Client: c, Kube: kube, Now: time.Now, TokenTTL: model.PositiveOr(opts.AgentTokenTTL, clusters.DefaultAgentTokenTTL),
			Limits: clusters.TokenLimits{Every: model.PositiveOr(opts.RegistrationInterval, clusters.DefaultRegistrationInterval), Burst: model.PositiveOr(opts.RegistrationBurst, clusters.DefaultRegistrationBurst)}}).Setup},
		{"content grant", true, (&access.ContentGrantReconciler{Client: c, Revisions: b.Revisions, Now: time.Now, Delay: model.PositiveOr(opts.GrantPruneDelay, access.DefaultGrantPruneDelay)}).Setup},
		// Collecting is never urgent: a pass per namespace at most every quarter of the grace
		// period (30 s by default), so a rollout's deployment writes do not make it a hot path.
		{"content collector", true, (&lifecycle.ContentCollector{Client: c, Revisions: b.Revisions, Now: time.Now, Grace: contentGrace, Delay: min(max(contentGrace/4, time.Second), 30*time.Second)}).Setup},
		{"cluster access", true, (&access.AccessReconciler{Client: c, Uncached: uncached, Heartbeats: live}).Setup},
	}
}

// EventsController is the reportingController of the hub's Events.
const EventsController = "flotilla.dev/hub"
