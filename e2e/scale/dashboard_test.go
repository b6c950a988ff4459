package scale

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/e2e/browser"
	"github.com/flotilla-dev/flotilla/hub"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/dashboard"
)

// BenchmarkDashboard opens the dashboard in headless Chromium on one bundle rolled out to
// 10,000 clusters (SCALE_DASHBOARD_CLUSTERS to change it) in 10 partitions, by the real hub
// and simulated agents, and follows an update of that bundle in the page. It reports what the
// first page of the bundle transfers (assets, session and the first pushed view), the time
// from navigation to the drawn bundle and the longest a push took the page to draw, the
// dashboard server's heap for the view (its informers of 10,000 Clusters and deployments
// included), and the pushes and bytes a second the page received during the update.
func BenchmarkDashboard(b *testing.B) {
	clusters := envCount(b, "SCALE_DASHBOARD_CLUSTERS", 10000)
	for b.Loop() {
		runDashboard(b, clusters)
	}
}

// byteCounter counts what a handler answers, by whether it is the live stream.
type byteCounter struct {
	next         http.Handler
	page, stream atomic.Int64
}

func (c *byteCounter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := &c.page
	if r.URL.Path == "/api/stream" {
		n = &c.stream
	}
	c.next.ServeHTTP(&countingWriter{ResponseWriter: w, n: n}, r)
}

type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (w *countingWriter) Write(p []byte) (int, error) {
	n, err := w.ResponseWriter.Write(p)
	w.n.Add(int64(n))
	return n, err
}

func (w *countingWriter) Flush() { w.ResponseWriter.(http.Flusher).Flush() }

// pageTiming is what the page measured of its pushes (performance entries "flotilla:view").
type pageTiming struct {
	Views     int     `json:"views"`
	FirstDone float64 `json:"firstDone"` // ms from navigation start to the first view drawn
	MaxDraw   float64 `json:"maxDraw"`   // ms, the longest push to parse and draw
	Lanes     int     `json:"lanes"`
	Chips     int     `json:"chips"`
	Rows      int     `json:"rows"`
}

const pageTimingJS = `(() => {
	const v = performance.getEntriesByName('flotilla:view');
	return JSON.stringify({views: v.length, firstDone: v.length ? v[0].startTime + v[0].duration : 0,
		maxDraw: Math.max(0, ...v.map((e) => e.duration)), lanes: document.querySelectorAll('[data-lane]').length,
		chips: document.querySelectorAll('[data-lane] [data-chip]').length, rows: document.querySelectorAll('tr [data-chip]').length});
})()`

func readTiming(b *testing.B, p *browser.Page) pageTiming {
	s, err := browser.Eval[string](p, pageTimingJS)
	if err != nil {
		b.Fatal(err)
	}
	var t pageTiming
	if err := json.Unmarshal([]byte(s), &t); err != nil {
		b.Fatal(err)
	}
	return t
}

func runDashboard(b *testing.B, clusters int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := benchClient(b)
	fleetYAML := "defaultNamespace: dashboard\nrolloutStrategy: {autoPartitionSize: \"10%\", maxUnavailable: \"10%\", maxUnavailablePartitions: 1}\n"
	files := map[string]string{"web/fleet.yaml": fleetYAML, "web/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web}\ndata: {v: \"1\"}\n"}
	// The simulated agents renew their Leases once, and the hub counts them online for the
	// benchmark's length: the page shows online clusters, as a healthy fleet's.
	s := startScenario(ctx, b, c, clusters, files, true, func(o *hub.Options) { o.HeartbeatInterval, o.HeartbeatDeadline = 30*time.Minute, time.Hour })
	defer s.stop()
	agents := &idleAgents{c: c, ns: s.ns, leases: make([]*coordinationv1.Lease, clusters)}
	parallel(clusters, func(i int) {
		if err := agents.renewLease(ctx, i); err != nil {
			b.Error(err)
		}
	})
	settle(b, s.counter, s.registration+int64(clusters))
	s.createRepo(ctx, b)
	s.fleet.waitAllReady(b, clusters, 1, time.Now())
	var bundles v1alpha1.BundleList
	if err := c.List(ctx, &bundles, client.InNamespace(s.ns)); err != nil || len(bundles.Items) != 1 {
		b.Fatalf("bundles: %d, %v; want the one of web/", len(bundles.Items), err)
	}
	bundle := bundles.Items[0].Name

	// An update nobody watches: what the same update costs the rollout with the page open is
	// measured against it.
	revision := func(v int) map[string]string {
		files["web/cm.yaml"] = fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web}\ndata: {v: \"%d\"}\n", v)
		return files
	}
	start := time.Now()
	s.push(b, revision(2))
	s.fleet.waitAllReady(b, clusters, 2, start)
	unwatched := time.Since(start)

	// The dashboard as `flotilla dashboard` serves it, in this process.
	scheme, _ := hub.Scheme()
	srv, err := dashboard.New(ctx, dashboard.Options{Config: fastConfig(), Scheme: scheme, Namespace: s.ns})
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	counted := &byteCounter{next: srv.Handler()}
	web := &http.Server{Handler: counted, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = web.Serve(ln) }()
	defer web.Close()
	base := "http://" + ln.Addr().String()
	p := browser.Open(b)

	// Signing in opens the fleet view: the viewer's informers start and sync then.
	coldStart := time.Now()
	p.Navigate(base + srv.LoginPath())
	p.Until("the fleet view is drawn", `performance.getEntriesByName('flotilla:view').length > 0`, 5*time.Minute)
	cold := time.Since(coldStart)

	// The bundle's page, loaded anew: its first page is everything it transfers to be drawn.
	counted.page.Store(0)
	counted.stream.Store(0)
	p.Navigate(base + "/?page=bundle#/" + s.ns + "/bundle/" + bundle)
	p.Until("the bundle's lanes are drawn", `performance.getEntriesByName('flotilla:view').length > 0 && document.querySelectorAll('[data-lane]').length > 0`, time.Minute)
	firstPage := counted.page.Load() + counted.stream.Load()
	first := readTiming(b, p)
	if first.Lanes != 10 || first.Rows != 100 {
		b.Errorf("the bundle's page has %d lanes and %d table rows, want 10 partitions and a page of 100", first.Lanes, first.Rows)
	}

	// The next update, followed live by the page.
	p.Mark()
	pushesBefore, streamBefore := srv.Pushes(), counted.stream.Load()
	start = time.Now()
	s.push(b, revision(3))
	s.fleet.waitAllReady(b, clusters, 3, start)
	update := time.Since(start)
	p.Until("the page shows every cluster ready on revision 3", `document.querySelector('h1') && document.querySelector('h1').textContent.includes('revision 3') && `+
		`[...document.querySelectorAll('[data-lane] [data-count="ready"]')].reduce((n, e) => n + parseInt(e.textContent), 0) === `+strconv.Itoa(clusters), time.Minute)
	p.StillLive()
	during := readTiming(b, p)
	// What this page received (the server's count includes pages closed since).
	pushes := during.Views - first.Views
	serverPushes := srv.Pushes() - pushesBefore
	streamed := counted.stream.Load() - streamBefore

	// The dashboard's memory: the process's heap with the page open, the hub stopped, less
	// the heap once the page is closed and the dashboard has stopped its informers.
	s.stopHub()
	var withView, without runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&withView)
	p.Navigate("about:blank")
	web.Close()
	srv.Close()
	runtime.GC()
	runtime.ReadMemStats(&without)

	if os.Getenv("SCALE_WRITES") != "" {
		b.Logf("first page: %d bytes (page %d, stream %d); page: %+v; during the update: %+v; %d pushes to the page (%d by the server), %d bytes in %v (%v unwatched)",
			firstPage, counted.page.Load(), firstPage-counted.page.Load(), first, during, pushes, serverPushes, streamed, update, unwatched)
	}
	b.ReportMetric(float64(firstPage)/1024, "first-page-KiB")
	b.ReportMetric(first.FirstDone, "open-ms")
	b.ReportMetric(cold.Seconds()*1000, "cold-open-ms")
	b.ReportMetric(during.MaxDraw, "max-draw-ms")
	b.ReportMetric(float64(withView.HeapInuse-min(withView.HeapInuse, without.HeapInuse))/(1<<20), "server-heap-MB")
	b.ReportMetric(float64(pushes)/update.Seconds(), "pushes/s")
	b.ReportMetric(float64(streamed)/1024/update.Seconds(), "stream-KiB/s")
	b.ReportMetric(update.Seconds(), "update-watched-s")
	b.ReportMetric(unwatched.Seconds(), "update-s")
}
