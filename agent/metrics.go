package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// The agent's metrics, served on RunOptions.MetricsAddr at /metrics beside the Go runtime's
// and the process's: what it applied, pruned and corrected on its cluster. Labels are
// bounded: no bundle or object names.
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

// Registry holds the agent's metrics. Agents run in one process (the quickstart, tests) share
// it: its counts are all of theirs.
var Registry = prometheus.NewRegistry()

func init() {
	Registry.MustRegister(applies, applyDuration, pruned, driftCorrections,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
}

// serveMetrics serves the metrics on addr until ctx ends.
func serveMetrics(ctx context.Context, addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("failed to serve metrics on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(Registry, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("metrics on %s: %w", addr, err)
	}
	return nil
}
