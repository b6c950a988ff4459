// Package promserver runs a real Prometheus server (Debian's prometheus, installed by
// e2e/prepare) on loopback for the analysis tests, scraping an exporter the test drives: one
// time series per cluster, whose value the test sets. Everything it starts stops with the
// test.
package promserver

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
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

	"github.com/flotilla-dev/flotilla/e2e/wait"
)

// Metric is the exporter's gauge: flotilla_test_error_ratio{cluster="…"}.
const Metric = "flotilla_test_error_ratio"

// Exporter serves Metric for each cluster it was given a value for.
type Exporter struct {
	mu     sync.Mutex
	values map[string]float64
	addr   string
}

// NewExporter serves /metrics on a loopback port until the test ends.
func NewExporter(t *testing.T) *Exporter {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &Exporter{values: map[string]float64{}, addr: ln.Addr().String()}
	srv := &http.Server{Handler: http.HandlerFunc(e.serve), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return e
}

// Set makes the cluster's series value v from the next scrape on.
func (e *Exporter) Set(cluster string, v float64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.values[cluster] = v
}

// Addr is host:port, for a scrape target.
func (e *Exporter) Addr() string { return e.addr }

func (e *Exporter) serve(w http.ResponseWriter, _ *http.Request) {
	e.mu.Lock()
	defer e.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	fmt.Fprintf(w, "# TYPE %s gauge\n", Metric)
	for _, c := range slices.Sorted(maps.Keys(e.values)) {
		fmt.Fprintf(w, "%s{cluster=%q} %s\n", Metric, c, strconv.FormatFloat(e.values[c], 'g', -1, 64))
	}
}

// Server is a running Prometheus.
type Server struct {
	// URL is its base address, http://127.0.0.1:PORT.
	URL  string
	stop func()
}

// Binary is where Debian installs Prometheus.
const Binary = "/usr/bin/prometheus"

// Start runs Prometheus scraping the targets (host:port) every second until the test ends or
// Stop is called. A machine without it fails the test, naming the command that installs it.
func Start(t *testing.T, targets ...string) *Server {
	t.Helper()
	if _, err := os.Stat(Binary); err != nil {
		t.Fatalf("%s is missing: `go run ./e2e/prepare` installs Debian's prometheus (%v)", Binary, err)
	}
	dir := t.TempDir()
	quoted := make([]string, len(targets))
	for i, tg := range targets {
		quoted[i] = strconv.Quote(tg)
	}
	config := fmt.Sprintf("global: {scrape_interval: 1s, evaluation_interval: 1s}\nscrape_configs:\n- job_name: test\n  static_configs:\n  - targets: [%s]\n", strings.Join(quoted, ", "))
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, Binary, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--storage.tsdb.retention.time=1h", "--log.level=warn")
	logFile, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("starting prometheus: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	var once sync.Once
	s := &Server{URL: "http://" + addr}
	s.stop = func() {
		once.Do(func() {
			cancel()
			<-done
			_ = logFile.Close()
		})
	}
	t.Cleanup(s.stop)
	wait.Until(t, "prometheus is ready", time.Minute, func() bool {
		resp, err := http.Get(s.URL + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, func() string {
		log, _ := os.ReadFile(filepath.Join(dir, "prometheus.log"))
		return string(log)
	})
	return s
}

// Stop ends the server now (a provider that is down); the test's end stops it otherwise.
func (s *Server) Stop() { s.stop() }

// Value queries the cluster's series: its value and whether Prometheus has one.
func (s *Server) Value(cluster string) (float64, bool) {
	resp, err := http.Get(s.URL + "/api/v1/query?query=" + url.QueryEscape(fmt.Sprintf("%s{cluster=%q}", Metric, cluster)))
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	var out struct {
		Data struct {
			Result []struct {
				Value []any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || len(out.Data.Result) != 1 || len(out.Data.Result[0].Value) != 2 {
		return 0, false
	}
	str, _ := out.Data.Result[0].Value[1].(string)
	v, err := strconv.ParseFloat(str, 64)
	return v, err == nil
}

// WaitFor waits until Prometheus shows the cluster's series at v: the exporter's value was
// scraped.
func (s *Server) WaitFor(t *testing.T, cluster string, v float64) {
	t.Helper()
	wait.Until(t, fmt.Sprintf("prometheus shows %s at %g", cluster, v), 30*time.Second, func() bool {
		got, ok := s.Value(cluster)
		return ok && got == v
	})
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
