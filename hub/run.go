package hub

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/flotilla-dev/flotilla/bundle"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/contentstore"
	"github.com/flotilla-dev/flotilla/hub/events"
	"github.com/flotilla-dev/flotilla/hub/gitsource"
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
	endpoint, err := resolveAgentEndpoint(opts.Server, opts.CACert, opts.Config, os.Getenv)
	if err != nil {
		return err
	}
	sh := shard(opts.Shard)
	mgr, err := newManager(ctx, opts, sh)
	if err != nil {
		return err
	}
	// The Events an operator reads later; written by every replica for its own controllers.
	recorder := events.New(mgr.GetClient(), EventsController)
	recorder.OnDrop(eventsDropped.Inc)
	if err := mgr.Add(recorder); err != nil {
		return err
	}
	if err := collectFleetState(mgr.GetCache()); err != nil {
		return fmt.Errorf("failed to register the fleet's metrics: %w", err)
	}
	live, err := watchLiveness(ctx, mgr.GetCache(), opts.HeartbeatInterval, opts.HeartbeatDeadline)
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(opts.Config)
	if err != nil {
		return err
	}
	src, b := newSource(mgr, opts, sh, live, recorder)
	for _, c := range controllers(mgr, opts, endpoint, sh, src, b, kube, live, recorder) {
		if c.fleetWide && !sh.fleetWide() {
			continue
		}
		if err := c.setup(mgr); err != nil {
			return fmt.Errorf("failed to set up the %s controller: %w", c.name, err)
		}
	}
	if sh.fleetWide() {
		if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
			if err := recordVersion(ctx, mgr.GetClient(), opts.Namespace, opts.Version); err != nil {
				ctrl.Log.WithName("hub").Error(err, "the CLI will not compare agent versions with the hub's")
			}
			return nil
		})); err != nil {
			return err
		}
	}
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error { src.poller.Run(ctx); return nil })); err != nil {
		return err
	}
	if opts.WebhookAddr != "" {
		if err := serveWebhooks(ctx, mgr, src, opts.WebhookAddr); err != nil {
			return err
		}
	}
	return mgr.Start(ctx)
}

// newManager creates the hub's manager (caches, leader election, metrics and health
// endpoints) and the cache indexes and informers the controllers count on.
func newManager(ctx context.Context, opts Options, sh shard) (ctrl.Manager, error) {
	scheme, err := Scheme()
	if err != nil {
		return nil, fmt.Errorf("failed to build scheme: %w", err)
	}
	metricsAddr := opts.MetricsAddr
	if metricsAddr == "" {
		metricsAddr = "0"
	}
	mgr, err := ctrl.NewManager(opts.Config, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress: opts.HealthAddr,
		// The hub never reads managed fields: the caches keep objects without them (less
		// memory, cheaper copies). Writes from cached objects leave the server's record alone.
		// What each cache holds: shard.cacheScope.
		Cache: cache.Options{DefaultTransform: cache.TransformStripManagedFields(), ByObject: sh.cacheScope()},
		// Secrets and ConfigMaps are read from the API server when a GitRepo needs one (its
		// credentials, a webhook secret, valuesFrom), never cached: the hub keeps no copy of
		// every Secret of the cluster in memory.
		Client: client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}, &corev1.ConfigMap{}}}},
		// Tests run several hubs in one process; metric names stay unique per process anyway.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		// A replica that stops hands the Lease on at once; one that dies, after LeaseDuration.
		LeaderElection:                opts.LeaderElection,
		LeaderElectionID:              sh.leaderElectionID(),
		LeaderElectionNamespace:       opts.Namespace,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 ptr.To(positiveOr(opts.LeaseDuration, 15*time.Second)),
		RenewDeadline:                 ptr.To(positiveOr(opts.RenewDeadline, 10*time.Second)),
		RetryPeriod:                   ptr.To(positiveOr(opts.RetryPeriod, 2*time.Second)),
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
	if err := indexDeployments(ctx, mgr.GetFieldIndexer()); err != nil {
		return nil, fmt.Errorf("failed to index deployments: %w", err)
	}
	// Kinds the hub reads on every commit without watching them start with the manager: on
	// first use, a commit would wait for their caches to fill.
	preloaded := []client.Object{&v1alpha1.Content{}}
	if sh.fleetWide() {
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
func newSource(mgr ctrl.Manager, opts Options, sh shard, live *liveness, recorder *events.Recorder) (*sourceReconciler, *bundler) {
	src := &sourceReconciler{
		client:           mgr.GetClient(),
		uncached:         mgr.GetAPIReader(),
		shard:            sh,
		git:              &gitsource.Client{CacheDir: filepath.Join(opts.CacheDir, "git"), MaxCacheBytes: opts.GitCacheBytes, Log: ctrl.Log.WithName("gitsource")},
		recordEvery:      time.Duration(positiveOr(opts.PollRecordInterval, 300)) * time.Second,
		now:              time.Now,
		schedules:        map[string]gitsource.Schedule{},
		webhooks:         map[string]time.Time{},
		rerender:         map[string]int{},
		forwarded:        map[string]string{},
		uninstallTimeout: positiveOr(opts.UninstallTimeout, DefaultUninstallTimeout),
		recorder:         recorder,
	}
	src.poller = &gitsource.Poller{Sync: src.sync, Workers: opts.PollWorkers, Log: ctrl.Log.WithName("poller")}
	content := &contentstore.Store{Client: mgr.GetClient()}
	if !sh.fleetWide() {
		content.Labels, content.Uncached = map[string]string{v1alpha1.ShardLabel: string(sh)}, mgr.GetAPIReader()
	}
	b := &bundler{client: mgr.GetClient(), shard: sh, uncached: mgr.GetAPIReader(), live: live, crossNamespaceRefs: opts.AllowCrossNamespaceRefs, content: content,
		revisions: &revisionStore{content: content}, released: &releases{}, staging: newStagingNow(), writes: make(writeSlots, positiveOr(opts.WritesInFlight, DefaultWritesInFlight)),
		charts:  &bundle.ChartFetcher{CacheDir: filepath.Join(opts.CacheDir, "charts"), AllowedHosts: opts.AllowedChartHosts},
		sandbox: &bundle.Sandbox{Timeout: opts.RenderTimeout, Memory: opts.RenderMemory}, renderBudget: opts.RenderBudget, now: time.Now, recorder: recorder}
	src.onCommit = b.onCommit
	b.checkout = func(ctx context.Context, repo *v1alpha1.GitRepo, commit string) (string, error) {
		from, err := src.repoFor(ctx, repo)
		if err != nil {
			return "", err
		}
		return src.git.Checkout(ctx, from, commit)
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

// controllers is the hub's table of controllers; the bundler's state that the rollout
// controllers share (revisions, releases, staging, write slots) comes from b.
func controllers(mgr ctrl.Manager, opts Options, endpoint agentEndpoint, sh shard, src *sourceReconciler, b *bundler, kube kubernetes.Interface, live *liveness, recorder *events.Recorder) []controllerSetup {
	statusDelay := positiveOr(opts.StatusDelay, defaultStatusDelay)
	contentGrace := positiveOr(opts.ContentGrace, DefaultContentGrace)
	uncached := mgr.GetAPIReader()
	clock := opts.Clock
	if clock == nil {
		clock = time.Now
	}
	c := mgr.GetClient()
	return []controllerSetup{
		{"rollout", false, (&rolloutReconciler{client: c, uncached: uncached, shard: sh, live: live, revisions: b.revisions, released: b.released, staging: b.staging, writes: b.writes, now: clock,
			progress: progressThrottle{every: progressEvery, perSecond: bundleProgressPerSecond}, recorder: recorder}).setup},
		{"sequence", false, (&sequenceReconciler{client: c, shard: sh, live: live, revisions: b.revisions, now: clock, recorder: recorder}).setup},
		{"staged run", false, (&runReconciler{client: c, shard: sh, live: live, uncached: uncached, revisions: b.revisions, now: clock, recorder: recorder}).setup},
		{"deployment removal", false, (&deploymentRemovalReconciler{client: c, shard: sh, live: live, now: time.Now, timeout: src.uninstallTimeout}).setup},
		{"bundle removal", false, (&bundleRemovalReconciler{client: c, shard: sh}).setup},
		{"gitrepo status", false, (&repoStatusReconciler{client: c}).setup},
		{"gitrepo", false, src.setup},
		{"sequence status", true, (&sequenceStatusReconciler{client: c}).setup},
		// A cluster's counts alone are written at most every three status delays (15 s by
		// default), and all clusters' together at most clusterProgressPerSecond.
		{"cluster status", true, (&clusterStatusReconciler{client: c, live: live, now: time.Now, delay: statusDelay,
			progress: progressThrottle{every: 3 * statusDelay, perSecond: clusterProgressPerSecond}, recorder: recorder}).setup},
		{"cluster group status", true, (&clusterGroupStatusReconciler{client: c, delay: statusDelay}).setup},
		{"registration token", true, (&tokenReconciler{client: c, kube: kube, endpoint: endpoint, ttl: opts.RegistrationTokenTTL}).setup},
		{"registration", true, (&registrationReconciler{client: c, kube: kube, now: time.Now, tokenTTL: positiveOr(opts.AgentTokenTTL, DefaultAgentTokenTTL),
			limits: tokenLimits{every: positiveOr(opts.RegistrationInterval, DefaultRegistrationInterval), burst: positiveOr(opts.RegistrationBurst, DefaultRegistrationBurst)}}).setup},
		{"content grant", true, (&contentGrantReconciler{client: c, now: time.Now, delay: positiveOr(opts.GrantPruneDelay, defaultGrantPruneDelay)}).setup},
		// Collecting is never urgent: a pass per namespace at most every quarter of the grace
		// period (30 s by default), so a rollout's deployment writes do not make it a hot path.
		{"content collector", true, (&contentCollector{client: c, revisions: b.revisions, now: time.Now, grace: contentGrace, delay: min(max(contentGrace/4, time.Second), 30*time.Second)}).setup},
		{"cluster access", true, (&accessReconciler{client: c, uncached: uncached, heartbeats: live}).setup},
	}
}

// EventsController is the reportingController of the hub's Events.
const EventsController = "flotilla.dev/hub"
