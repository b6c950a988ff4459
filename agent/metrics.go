package agent

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// The agent's metrics, served with controller-runtime's on RunOptions.MetricsAddr: what it
// applied, pruned and corrected on its cluster. Labels are bounded: no bundle or object names.
var (
	applies = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flotilla_agent_applies_total",
		Help: "Applies of a released revision, by result (succeeded, failed).",
	}, []string{"result"})
	applyDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "flotilla_agent_apply_duration_seconds",
		Help:    "Time to apply a revision to the cluster: server-side apply of its objects and the prune of those that left it.",
		Buckets: prometheus.ExponentialBuckets(0.01, 2, 14), // 10 ms … 80 s
	})
	pruned = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "flotilla_agent_pruned_objects_total",
		Help: "Objects deleted from the cluster because they left their bundle.",
	})
	driftCorrections = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "flotilla_agent_drift_corrections_total",
		Help: "Revisions applied again to undo changes made outside Flotilla (correctDrift).",
	})
)

func init() {
	metrics.Registry.MustRegister(applies, applyDuration, pruned, driftCorrections)
}
