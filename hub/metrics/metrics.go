package metrics

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/gitsource"
	"github.com/flotilla-dev/flotilla/hub/model"
)

// servedMetrics are the names of every metric the hub serves, with or without series yet.
var servedMetrics []string

// served names a metric of the hub's.
func served(name string) string {
	servedMetrics = append(servedMetrics, name)
	return name
}

// MetricNames are the names of the hub's own metrics: what dashboards and alert rules may
// query. A state gauge has series only while objects are in its states (flotilla_stage_clusters
// while staged runs exist).
func MetricNames() []string { return slices.Clone(servedMetrics) }

// The hub's metrics, served with controller-runtime's on Options.MetricsAddr. States are read
// from the informer caches when Prometheus scrapes (fleetState), so they cost nothing between
// scrapes and always agree with the objects' status. No metric has a per-cluster label: a
// fleet of 10,000 clusters has as many series as one of ten.
var (
	RenderDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    served("flotilla_render_duration_seconds"),
		Help:    "Time to render a commit of a GitRepo: every bundle for every cluster it targets.",
		Buckets: prometheus.ExponentialBuckets(0.05, 2, 12), // 50 ms … 100 s
	})
	commitToReady = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    served("flotilla_commit_to_ready_seconds"),
		Help:    "Time from a bundle's revision being staged from a commit to every cluster it targets running it Ready.",
		Buckets: prometheus.ExponentialBuckets(1, 2, 16), // 1 s … 9 h
	})
	SyncErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: served("flotilla_git_sync_errors_total"),
		Help: "Polls of a GitRepo that failed to reach or resolve its repository, by reason.",
	}, []string{"reason"})
	RenderErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: served("flotilla_render_errors_total"),
		Help: "Commits that failed to render (the GitRepo keeps its last good commit deployed).",
	})
	ReleasesWritten = prometheus.NewCounter(prometheus.CounterOpts{
		Name: served("flotilla_releases_total"),
		Help: "Releases of a revision to a cluster the hub wrote, every strategy together.",
	})
	EventsDropped = prometheus.NewCounter(prometheus.CounterOpts{
		Name: served("flotilla_events_dropped_total"),
		Help: "Events not recorded because the recorder's queue was full.",
	})
	// The analysis gates (§7): measurements by outcome and provider type, their duration, and
	// how many checks on clusters and gates are judged now. No label names a cluster, a check
	// or a bundle.
	AnalysisMeasurements = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: served("flotilla_analysis_measurements_total"),
		Help: "Measurements of analysis checks, by provider type and outcome (Pass, Fail, Inconclusive).",
	}, []string{"provider", "outcome"})
	AnalysisDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    served("flotilla_analysis_measurement_duration_seconds"),
		Help:    "Time to take one measurement of an analysis check: its query and the condition.",
		Buckets: prometheus.ExponentialBuckets(0.005, 2, 12), // 5 ms … 10 s
	}, []string{"provider"})
	AnalysisJudged = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: served("flotilla_analysis_judged"),
		Help: "Checks judged now: one per cluster for a Cluster check, one per gate for a Gate check.",
	})
	AnalysisFailed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: served("flotilla_analysis_failed_total"),
		Help: "Checks whose verdict became Failed on a cluster or gate, by scope.",
	}, []string{"scope"})
	// Notifications: messages of the alerts, by provider type and result (delivered, failed
	// after its retries, dropped by a full queue, rate_limited by its alert).
	Notifications = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: served("flotilla_notifications_total"),
		Help: "Notification messages, by provider type and result (delivered, failed, dropped, rate_limited).",
	}, []string{"provider_type", "result"})
)

// NotificationResults are the results flotilla_notifications_total counts.
var NotificationResults = []string{"delivered", "failed", "dropped", "rate_limited"}

// The provider types and measurement outcomes the analysis metrics are served with.
var (
	analysisProviders = []string{"prometheus", "http", "unresolved"}
	analysisOutcomes  = []string{"Pass", "Fail", "Inconclusive"}
)

func init() {
	metrics.Registry.MustRegister(RenderDuration, commitToReady, SyncErrors, RenderErrors, ReleasesWritten, EventsDropped,
		AnalysisMeasurements, AnalysisDuration, AnalysisJudged, AnalysisFailed, Notifications)
	for _, p := range []v1alpha1.NotificationProviderType{v1alpha1.ProviderSlack, v1alpha1.ProviderMSTeams, v1alpha1.ProviderGenericHMAC, v1alpha1.ProviderCloudEvents,
		v1alpha1.ProviderGitHub, v1alpha1.ProviderGitLab, v1alpha1.ProviderGitea, v1alpha1.ProviderBitbucket} {
		for _, r := range NotificationResults {
			Notifications.WithLabelValues(string(p), r)
		}
	}
	for _, p := range analysisProviders {
		for _, o := range analysisOutcomes {
			AnalysisMeasurements.WithLabelValues(p, o)
		}
	}
	for _, scope := range []string{"Cluster", "Gate"} {
		AnalysisFailed.WithLabelValues(scope)
	}
	// Every reason is served from the start, at 0: a rate or increase over a series that
	// appears only with its first error misses that error.
	for _, reason := range []string{string(gitsource.CauseAuthentication), string(gitsource.CauseUnreachable), string(gitsource.CauseRefNotFound), string(gitsource.CauseOther), v1alpha1.RestrictedReason} {
		SyncErrors.WithLabelValues(reason)
	}
}

// Descriptions of the state gauges.
var (
	bundlesDesc = prometheus.NewDesc(served("flotilla_bundles"),
		"Bundles by state: the least advanced state of their clusters, Ready, or Stalled.", []string{"namespace", "state"}, nil)
	bundleClustersDesc = prometheus.NewDesc(served("flotilla_bundle_clusters"),
		"A bundle's clusters by state (desired_ready is all it targets).", []string{"namespace", "bundle", "state"}, nil)
	bundleRevisionDesc = prometheus.NewDesc(served("flotilla_bundle_revision"),
		"A bundle's latest revision, and the one its rollout releases.", []string{"namespace", "bundle", "revision"}, nil)
	partitionClustersDesc = prometheus.NewDesc(served("flotilla_partition_clusters"),
		"Clusters in a partition of a continuous rollout, by state (desired_ready is all of them, unavailable those counted against its maxUnavailable).",
		[]string{"namespace", "bundle", "partition", "state"}, nil)
	stageClustersDesc = prometheus.NewDesc(served("flotilla_stage_clusters"),
		"Clusters in a stage of a bundle's current staged run: all of them (desired), and those done (completed).",
		[]string{"namespace", "bundle", "stage", "state"}, nil)
	clustersDesc = prometheus.NewDesc(served("flotilla_clusters"),
		"Clusters by state: Ready, a bundle state, Offline, WaitingForAgent or NotAdmitted.", []string{"namespace", "state"}, nil)
	gitReposDesc = prometheus.NewDesc(served("flotilla_gitrepos"),
		"GitRepos by state.", []string{"namespace", "state"}, nil)
	// The info metrics have one series per object, never per cluster: they join the counts
	// above (on namespace and bundle or gitrepo) to the commit and state a dashboard shows.
	gitRepoInfoDesc = prometheus.NewDesc(served("flotilla_gitrepo_info"),
		"1 for every GitRepo, with its repository, the commit it deploys, its state and whether it is Ready.", []string{"namespace", "gitrepo", "repo", "commit", "state", "ready"}, nil)
	bundleInfoDesc = prometheus.NewDesc(served("flotilla_bundle_info"),
		"1 for every Bundle, with its GitRepo, the commit it rolls out, its state, its rollout's outcome and whether the newest commit renders.",
		[]string{"namespace", "bundle", "gitrepo", "commit", "state", "outcome", "rendered"}, nil)
)

// fleetState is the collector of the state gauges, read from a cache at each scrape.
type fleetState struct {
	cache client.Reader
}

func (s fleetState) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{bundlesDesc, bundleClustersDesc, bundleRevisionDesc, partitionClustersDesc, stageClustersDesc, clustersDesc, gitReposDesc, gitRepoInfoDesc, bundleInfoDesc} {
		ch <- d
	}
}

func (s fleetState) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	var bundles v1alpha1.BundleList
	if err := s.cache.List(ctx, &bundles); err != nil {
		log.FromContext(ctx).Error(err, "metrics: bundles not listed")
	}
	byState := map[[2]string]int{}
	for i := range bundles.Items {
		b := &bundles.Items[i]
		byState[[2]string{b.Namespace, bundleState(b)}]++
		for state, n := range countsByState(b.Status.Summary) {
			gauge(bundleClustersDesc, float64(n), b.Namespace, b.Name, state)
		}
		outcome := ""
		if b.Status.Outcome != nil {
			outcome = string(b.Status.Outcome.Outcome)
		}
		gauge(bundleInfoDesc, 1, b.Namespace, b.Name, b.Labels[model.LabelGitRepo], b.Status.Commit, bundleState(b), outcome, strconv.FormatBool(b.Status.RenderFailure == nil))
		gauge(bundleRevisionDesc, float64(b.Spec.LatestRevision), b.Namespace, b.Name, "latest")
		gauge(bundleRevisionDesc, float64(b.Status.ReleasingRevision), b.Namespace, b.Name, "releasing")
		for _, p := range b.Status.Partitions {
			for state, n := range countsByState(p.Summary) {
				gauge(partitionClustersDesc, float64(n), b.Namespace, b.Name, p.Name, state)
			}
			gauge(partitionClustersDesc, float64(p.Unavailable), b.Namespace, b.Name, p.Name, "unavailable")
		}
		for _, st := range b.Status.Stages {
			gauge(stageClustersDesc, float64(st.Clusters), b.Namespace, b.Name, st.Name, "desired")
			gauge(stageClustersDesc, float64(st.Completed), b.Namespace, b.Name, st.Name, "completed")
		}
	}
	countGauges(ch, bundlesDesc, byState)
	var clusters v1alpha1.ClusterList
	if err := s.cache.List(ctx, &clusters); err != nil {
		log.FromContext(ctx).Error(err, "metrics: clusters not listed")
	}
	countGauges(ch, clustersDesc, countDisplayed(clusters.Items, func(c *v1alpha1.Cluster) (string, string) { return c.Namespace, c.Status.Display.State }))
	var repos v1alpha1.GitRepoList
	if err := s.cache.List(ctx, &repos); err != nil {
		log.FromContext(ctx).Error(err, "metrics: gitrepos not listed")
	}
	countGauges(ch, gitReposDesc, countDisplayed(repos.Items, func(r *v1alpha1.GitRepo) (string, string) { return r.Namespace, r.Status.Display.State }))
	for i := range repos.Items {
		r := &repos.Items[i]
		gauge(gitRepoInfoDesc, 1, r.Namespace, r.Name, gitsource.SanitizeURL(r.Spec.Repo), r.Status.Commit, orUnknown(r.Status.Display.State),
			strconv.FormatBool(meta.IsStatusConditionTrue(r.Status.Conditions, v1alpha1.ReadyCondition)))
	}
}

// countDisplayed counts objects by namespace and the state they display.
func countDisplayed[T any](items []T, displayed func(*T) (namespace, state string)) map[[2]string]int {
	counts := map[[2]string]int{}
	for i := range items {
		ns, state := displayed(&items[i])
		counts[[2]string{ns, orUnknown(state)}]++
	}
	return counts
}

func countGauges(ch chan<- prometheus.Metric, d *prometheus.Desc, counts map[[2]string]int) {
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(n), k[0], k[1])
	}
}

// bundleState is a bundle's state for flotilla_bundles: Stalled when its Stalled condition
// holds, else the state its printer column shows.
func bundleState(b *v1alpha1.Bundle) string {
	if meta.IsStatusConditionTrue(b.Status.Conditions, v1alpha1.StalledCondition) {
		return "Stalled"
	}
	return orUnknown(b.Status.Display.State)
}

func orUnknown(s string) string {
	if s == "" {
		return "Unknown"
	}
	return s
}

// countsByState names the counts of a summary in the metrics' snake case.
func countsByState(c v1alpha1.StateCounts) map[string]int32 {
	return map[string]int32{"desired_ready": c.DesiredReady, "ready": c.Ready, "pending": c.Pending, "out_of_sync": c.OutOfSync,
		"wait_applied": c.WaitApplied, "err_applied": c.ErrApplied, "not_ready": c.NotReady, "modified": c.Modified}
}

// fleetStateCollector is the collector registered for this process: tests run several hubs in
// one process, each replacing the one before (the metrics are then the newest hub's).
var fleetStateCollector struct {
	sync.Mutex
	current prometheus.Collector
}

// CollectFleetState makes the state gauges read cache.
func CollectFleetState(cache client.Reader) error {
	fleetStateCollector.Lock()
	defer fleetStateCollector.Unlock()
	if fleetStateCollector.current != nil {
		metrics.Registry.Unregister(fleetStateCollector.current)
	}
	c := &fleetState{cache: cache}
	if err := metrics.Registry.Register(c); err != nil {
		return err
	}
	fleetStateCollector.current = c
	return nil
}

// ObserveCompletion records a bundle's revision becoming Ready everywhere: the time since it
// was staged.
func ObserveCompletion(bun *v1alpha1.Bundle, now time.Time) {
	if rev := model.FindRevision(bun, bun.Status.ReleasingRevision); rev != nil && !rev.Created.IsZero() {
		commitToReady.Observe(now.Sub(rev.Created.Time).Seconds())
	}
}
