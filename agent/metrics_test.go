package agent

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/flotilla-dev/flotilla/e2e/wait"
)

// The agent serves its own metrics and the Go runtime's and process's on --metrics-addr, as
// Prometheus scrapes them, and stops serving when its run ends.
func TestMetricsAreServedForTheRunsLifetime(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- serveMetrics(ctx, addr) }()
	pruned.Add(0) // a counter without labels is exposed from its start
	var families []string
	wait.Until(t, "the metrics are served", 10*time.Second, func() bool {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		parser := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := parser.TextToMetricFamilies(resp.Body)
		if err != nil {
			t.Fatalf("the metrics do not parse: %v", err)
		}
		families = families[:0]
		for name := range fams {
			families = append(families, name)
		}
		return fams["flotilla_agent_pruned_objects_total"] != nil && fams["go_goroutines"] != nil && fams["process_resident_memory_bytes"] != nil
	}, func() string { return "families: " + strings.Join(families, " ") })
	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("serving ended with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serving did not end with the run")
	}
	if resp, err := http.Get("http://" + addr + "/metrics"); err == nil {
		resp.Body.Close()
		t.Error("the metrics are still served after the run ended")
	}
}
