package hub

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
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

// Run runs the hub until ctx ends: the GitRepo source controller with its poller, and the
// webhook receiver.
func Run(ctx context.Context, opts Options) error {
	if opts.Config == nil {
		return errors.New("hub: no API server configuration")
	}
	scheme, err := Scheme()
	if err != nil {
		return fmt.Errorf("failed to build scheme: %w", err)
	}
	if opts.LeaderElection && opts.Namespace == "" {
		return errors.New("hub: leader election needs the hub's namespace (Options.Namespace) for its Lease")
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
		// Of RoleBindings it reads only the shared content grants it wrote, uncopied (a grant
		// names hundreds of agents and is read for each cluster's content): readers copy
		// before they change one. Of Leases, only the agents' heartbeats.
		Cache: cache.Options{DefaultTransform: cache.TransformStripManagedFields(), ByObject: map[client.Object]cache.ByObject{
			&rbacv1.RoleBinding{}:   {Label: contentGrantSelector(), UnsafeDisableDeepCopy: ptr.To(true)},
			&coordinationv1.Lease{}: {Label: labelExists(v1alpha1.AgentLeaseLabel)},
		}},
		// Secrets and ConfigMaps are read from the API server when a GitRepo needs one (its
		// credentials, a webhook secret, valuesFrom), never cached: the hub keeps no copy of
		// every Secret of the cluster in memory.
		Client: client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}, &corev1.ConfigMap{}}}},
		// Tests run several hubs in one process; metric names stay unique per process anyway.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		// A replica that stops hands the Lease on at once; one that dies, after LeaseDuration.
		LeaderElection:                opts.LeaderElection,
		LeaderElectionID:              LeaderElectionID,
		LeaderElectionNamespace:       opts.Namespace,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 ptr.To(positiveOr(opts.LeaseDuration, 15*time.Second)),
		RenewDeadline:                 ptr.To(positiveOr(opts.RenewDeadline, 10*time.Second)),
		RetryPeriod:                   ptr.To(positiveOr(opts.RetryPeriod, 2*time.Second)),
	})
	if err != nil {
		return fmt.Errorf("failed to create manager: %w", err)
	}
	if opts.HealthAddr != "" {
		if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
			return err
		}
		if err := mgr.AddReadyzCheck("informers", func(req *http.Request) error {
			if !mgr.GetCache().WaitForCacheSync(req.Context()) {
				return errors.New("informer caches are not synced")
			}
			return nil
		}); err != nil {
			return err
		}
	}
	if err := indexDeployments(ctx, mgr.GetFieldIndexer()); err != nil {
		return fmt.Errorf("failed to index deployments: %w", err)
	}
	// Kinds the hub reads on every commit without watching them start with the manager: on
	// first use, a commit would wait for their caches to fill.
	for _, o := range []client.Object{&v1alpha1.Content{}, &rbacv1.Role{}} {
		if _, err := mgr.GetCache().GetInformer(ctx, o); err != nil {
			return fmt.Errorf("failed to set up the %T cache: %w", o, err)
		}
	}
	recordEvery := time.Duration(positiveOr(opts.PollRecordInterval, 300)) * time.Second
	src := &sourceReconciler{
		client:           mgr.GetClient(),
		bundles:          mgr.GetAPIReader(),
		git:              &gitsource.Client{CacheDir: filepath.Join(opts.CacheDir, "git")},
		recordEvery:      recordEvery,
		now:              time.Now,
		schedules:        map[string]gitsource.Schedule{},
		webhooks:         map[string]time.Time{},
		rerender:         map[string]bool{},
		forwarded:        map[string]string{},
		uninstallTimeout: positiveOr(opts.UninstallTimeout, DefaultUninstallTimeout),
	}
	src.poller = &gitsource.Poller{Sync: src.sync, Workers: opts.PollWorkers, Log: ctrl.Log.WithName("poller")}
	content := &contentstore.Store{Client: mgr.GetClient()}
	revisions := &revisionStore{content: content}
	released, staging := &releases{}, newStagingNow()
	writes := make(writeSlots, positiveOr(opts.WritesInFlight, DefaultWritesInFlight))
	live, err := watchLiveness(ctx, mgr.GetCache(), opts.HeartbeatInterval, opts.HeartbeatDeadline)
	if err != nil {
		return err
	}
	b := &bundler{client: mgr.GetClient(), live: live, crossNamespaceRefs: opts.AllowCrossNamespaceRefs, content: content, revisions: revisions, released: released, staging: staging, writes: writes,
		charts:  &bundle.ChartFetcher{CacheDir: filepath.Join(opts.CacheDir, "charts"), AllowedHosts: opts.AllowedChartHosts},
		sandbox: &bundle.Sandbox{Timeout: opts.RenderTimeout, Memory: opts.RenderMemory}, now: time.Now}
	src.onCommit = b.onCommit
	if err := (&rolloutReconciler{client: mgr.GetClient(), live: live, revisions: revisions, released: released, staging: staging, writes: writes, now: time.Now, progress: progressThrottle{every: progressEvery, perSecond: bundleProgressPerSecond}}).setup(mgr); err != nil {
		return fmt.Errorf("failed to set up the rollout controller: %w", err)
	}
	if err := (&sequenceReconciler{client: mgr.GetClient(), revisions: revisions, now: time.Now}).setup(mgr); err != nil {
		return fmt.Errorf("failed to set up the sequence controller: %w", err)
	}
	if err := (&sequenceStatusReconciler{client: mgr.GetClient()}).setup(mgr); err != nil {
		return fmt.Errorf("failed to set up the sequence status controller: %w", err)
	}
	statusDelay := positiveOr(opts.StatusDelay, defaultStatusDelay)
	// A cluster's counts alone are written at most every three status delays (15 s by default),
	// and all clusters' together at most clusterProgressPerSecond.
	clusterStatus := &clusterStatusReconciler{client: mgr.GetClient(), live: live, now: time.Now, delay: statusDelay,
		progress: progressThrottle{every: 3 * statusDelay, perSecond: clusterProgressPerSecond}}
	if err := clusterStatus.setup(mgr); err != nil {
		return fmt.Errorf("failed to set up the cluster status controller: %w", err)
	}
	if err := (&clusterGroupStatusReconciler{client: mgr.GetClient(), delay: statusDelay}).setup(mgr); err != nil {
		return fmt.Errorf("failed to set up the cluster group status controller: %w", err)
	}
	kube, err := kubernetes.NewForConfig(opts.Config)
	if err != nil {
		return err
	}
	server, ca := opts.Server, opts.CACert
	if server == "" {
		server = opts.Config.Host
	}
	if len(ca) == 0 {
		ca = opts.Config.CAData
	}
	if err := (&tokenReconciler{client: mgr.GetClient(), kube: kube, server: server, ca: ca}).setup(mgr); err != nil {
		return fmt.Errorf("failed to set up the registration token controller: %w", err)
	}
	if err := (&registrationReconciler{client: mgr.GetClient(), kube: kube, now: time.Now, tokenTTL: positiveOr(opts.AgentTokenTTL, DefaultAgentTokenTTL),
		limits: tokenLimits{every: positiveOr(opts.RegistrationInterval, DefaultRegistrationInterval), burst: positiveOr(opts.RegistrationBurst, DefaultRegistrationBurst)}}).setup(mgr); err != nil {
		return fmt.Errorf("failed to set up the registration controller: %w", err)
	}
	if err := (&runReconciler{client: mgr.GetClient(), revisions: revisions, now: time.Now}).setup(mgr); err != nil {
		return fmt.Errorf("failed to set up the staged run controller: %w", err)
	}
	if err := (&contentGrantReconciler{client: mgr.GetClient(), now: time.Now, delay: positiveOr(opts.GrantPruneDelay, defaultGrantPruneDelay)}).setup(mgr); err != nil {
		return fmt.Errorf("failed to set up the content grant controller: %w", err)
	}
	contentGrace := positiveOr(opts.ContentGrace, DefaultContentGrace)
	// Collecting is never urgent: a pass per namespace at most every quarter of the grace period
	// (30 s by default), so a rollout's deployment writes do not make it a hot path.
	if err := (&contentCollector{client: mgr.GetClient(), revisions: revisions, now: time.Now, grace: contentGrace, delay: min(max(contentGrace/4, time.Second), 30*time.Second)}).setup(mgr); err != nil {
		return fmt.Errorf("failed to set up the content collector: %w", err)
	}
	if err := (&deploymentRemovalReconciler{client: mgr.GetClient(), live: live, now: time.Now, timeout: src.uninstallTimeout}).setup(mgr); err != nil {
		return fmt.Errorf("failed to set up the deployment removal controller: %w", err)
	}
	if err := (&bundleRemovalReconciler{client: mgr.GetClient()}).setup(mgr); err != nil {
		return fmt.Errorf("failed to set up the bundle removal controller: %w", err)
	}
	if err := (&accessReconciler{client: mgr.GetClient(), uncached: mgr.GetAPIReader(), heartbeats: live}).setup(mgr); err != nil {
		return fmt.Errorf("failed to set up the cluster access controller: %w", err)
	}
	if err := (&repoStatusReconciler{client: mgr.GetClient()}).setup(mgr); err != nil {
		return fmt.Errorf("failed to set up the gitrepo status controller: %w", err)
	}
	if err := src.setup(mgr); err != nil {
		return fmt.Errorf("failed to set up the gitrepo controller: %w", err)
	}
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		if err := recordVersion(ctx, mgr.GetClient(), opts.Namespace, opts.Version); err != nil {
			ctrl.Log.WithName("hub").Error(err, "the CLI will not compare agent versions with the hub's")
		}
		return nil
	})); err != nil {
		return err
	}
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error { src.poller.Run(ctx); return nil })); err != nil {
		return err
	}
	if opts.WebhookAddr != "" {
		ln, err := net.Listen("tcp", opts.WebhookAddr)
		if err != nil {
			return fmt.Errorf("failed to listen for webhooks on %s: %w", opts.WebhookAddr, err)
		}
		mux := http.NewServeMux()
		// Every replica receives webhooks (the Service reaches them all); the leader polls at
		// once, the others forward the delivery to it.
		notify := func(s gitsource.Subscriber, p gitsource.Push) {
			select {
			case <-mgr.Elected():
				src.notify(s, p)
			default:
				src.forward(ctx, s)
			}
		}
		mux.Handle("/", &gitsource.Receiver{Subscribers: src.subscribers(ctx), Notify: notify, Log: ctrl.Log.WithName("webhook")})
		// Senders are untrusted: a slow or idle one must not hold a connection for long.
		server := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
			WriteTimeout: 30 * time.Second, IdleTimeout: 60 * time.Second, MaxHeaderBytes: 64 << 10}
		if err := mgr.Add(everyReplica(func(ctx context.Context) error {
			go func() { <-ctx.Done(); _ = server.Close() }()
			if err := server.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		})); err != nil {
			return err
		}
	}
	return mgr.Start(ctx)
}

// LeaderElectionID names the Lease the hub's replicas elect their leader with.
const LeaderElectionID = "flotilla-hub"

// everyReplica is a runnable that runs in every replica, leader or not.
type everyReplica func(context.Context) error

func (r everyReplica) Start(ctx context.Context) error { return r(ctx) }
func (everyReplica) NeedLeaderElection() bool          { return false }

// positiveOr is v, or def when v is not set (zero or negative): how options take their defaults.
func positiveOr[T int | int64 | time.Duration](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}
