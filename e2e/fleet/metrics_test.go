package fleet

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/e2e/controlplane"
	"github.com/flotilla-dev/flotilla/e2e/gitserver"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/metrics"
	"github.com/flotilla-dev/flotilla/manifests"
)

// scrape is one read of a hub's /metrics.
type scrape map[string]*dto.MetricFamily

func scrapeHub(t *testing.T, addr string) scrape {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("the hub's metrics do not parse: %v", err)
	}
	return fams
}

// value is the sample of metric name whose labels include every "key=value" pair of labels
// (a counter's or gauge's value, a histogram's count); -1 when there is none.
func (s scrape) value(name string, labels ...string) float64 {
	fam := s[name]
	if fam == nil {
		return -1
	}
next:
	for _, m := range fam.Metric {
		for _, want := range labels {
			k, v, _ := strings.Cut(want, "=")
			found := false
			for _, l := range m.Label {
				found = found || l.GetName() == k && l.GetValue() == v
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	return -1
}

// The hub's metrics follow a partitioned rollout: the bundle's revision and its clusters'
// states, the partitions, releases, render time and errors, and commit-to-ready time move as
// the rollout does. The hub runs as a process of its own, so its metrics are its alone.
func TestHubMetricsFollowARollout(t *testing.T) {
	fleetYAML := canaryFirst("metered")
	up := gitserver.New(t)
	up.Commit("main", map[string]string{"web/fleet.yaml": fleetYAML, "web/deployment.yaml": webManifest("example.invalid/web:1")})
	srv := up.ServeHTTP("", "")
	var replica *hubReplica
	f := startFleetWith(t, func(f *fleetEnv) { replica = f.startHubReplica("hub") })
	createRepo(t, f, srv.URL+"/repo.git", map[string]string{"env": "prod"})
	bundle, ns := "bundle=shop-web", "namespace="+f.ns
	clusters := float64(len(workloads))
	var m scrape
	metricsShow := func(what string, cond func(scrape) bool) {
		t.Helper()
		defer func() {
			if t.Failed() {
				t.Logf("the hub's flotilla_* metrics:\n%s", m.flotilla())
			}
		}()
		eventually(t, "the hub's metrics show "+what, 90*time.Second, func() bool {
			m = scrapeHub(t, replica.metrics)
			return m != nil && cond(m)
		})
	}
	metricsShow("revision 1 ready on every cluster", func(m scrape) bool {
		return m.value("flotilla_bundle_clusters", ns, bundle, "state=ready") == clusters &&
			m.value("flotilla_bundles", ns, "state=Ready") == 1 && m.value("flotilla_clusters", ns, "state=Ready") == clusters &&
			m.value("flotilla_partition_clusters", ns, bundle, "partition=rest", "state=desired_ready") == clusters-1 &&
			m.value("flotilla_commit_to_ready_seconds") >= 1
	})
	releases, renders, ready := m.value("flotilla_releases_total"), m.value("flotilla_render_duration_seconds"), m.value("flotilla_commit_to_ready_seconds")
	if releases < clusters || renders < 1 {
		t.Errorf("after the first deployment: %v releases, %v renders; want at least %v and 1", releases, renders, clusters)
	}

	// A revision whose pods never become ready: the canary holds it, the rest wait on 1.
	broken := strings.Replace(webManifest("example.invalid/web:2"), "labels: {app: web}}", "labels: {app: web, "+controlplane.NeverReadyLabel+": \"true\"}}", 1)
	up.Commit("main", map[string]string{"web/deployment.yaml": broken})
	metricsShow("revision 2 held at the canary", func(m scrape) bool {
		return m.value("flotilla_bundle_revision", ns, bundle, "revision=releasing") == 2 &&
			m.value("flotilla_partition_clusters", ns, bundle, "partition=canary", "state=unavailable") == 1 &&
			m.value("flotilla_partition_clusters", ns, bundle, "partition=rest", "state=out_of_sync") == clusters-1 &&
			m.value("flotilla_bundles", ns, "state=NotReady") == 1 && m.value("flotilla_releases_total") == releases+1
	})

	// A commit that does not render counts as a render error; the rollout stays where it was.
	renderErrors := m.value("flotilla_render_errors_total")
	up.Commit("main", map[string]string{"web/fleet.yaml": "defaultNamespace: metered\nhelm: {chart: ../../../etc}\n"})
	metricsShow("the render error", func(m scrape) bool {
		return m.value("flotilla_render_errors_total") > max(renderErrors, 0) && m.value("flotilla_gitrepos", ns, "state="+v1alpha1.RenderFailedReason) == 1 &&
			m.value("flotilla_gitrepo_info", ns, "ready=false", "state="+v1alpha1.RenderFailedReason) == 1 &&
			m.value("flotilla_bundle_info", ns, bundle, "rendered=false") == 1
	})

	// The fix rolls out: every cluster ready on revision 3, one more rollout measured.
	up.Commit("main", map[string]string{"web/fleet.yaml": fleetYAML, "web/deployment.yaml": webManifest("example.invalid/web:3")})
	metricsShow("revision 3 ready on every cluster", func(m scrape) bool {
		return m.value("flotilla_bundle_revision", ns, bundle, "revision=releasing") == 3 &&
			m.value("flotilla_bundle_clusters", ns, bundle, "state=ready") == clusters && m.value("flotilla_bundles", ns, "state=Ready") == 1 &&
			m.value("flotilla_bundle_info", ns, bundle, "rendered=true", "state=Ready") == 1 && m.value("flotilla_gitrepo_info", ns, "ready=true") == 1 &&
			m.value("flotilla_commit_to_ready_seconds") > ready && m.value("flotilla_releases_total") >= releases+1+clusters
	})

	// The Grafana dashboard and the chart's alert rules query only metrics the hub serves, and
	// the hub's process serves every metric it declares that has series now.
	served := metrics.MetricNames()
	for name := range m {
		// The hub runs as this test binary, which links the agent and so serves its metrics too.
		if strings.HasPrefix(name, "flotilla_") && !strings.HasPrefix(name, "flotilla_agent_") && !slices.Contains(served, name) {
			t.Errorf("the hub serves %s, which metrics.MetricNames does not name", name)
		}
	}
	for _, file := range queryFiles(t) {
		for _, name := range flotillaMetric.FindAllString(file.text, -1) {
			base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
			if !slices.Contains(served, base) {
				t.Errorf("%s queries %s, which the hub does not serve", file.name, name)
			}
		}
	}
}

// flotillaMetric is the name of a metric of the hub's in a query.
var flotillaMetric = regexp.MustCompile(`flotilla_[a-z_]+`)

type queryFile struct{ name, text string }

// queryFiles are the files of manifests/ that query the hub's metrics: the dashboards' and
// the alert rules' expressions.
func queryFiles(t *testing.T) []queryFile {
	t.Helper()
	var out []queryFile
	dashboards, err := fs.Glob(manifests.Dashboards, "grafana/*.json")
	if err != nil || len(dashboards) == 0 {
		t.Fatalf("dashboards: %v %v", dashboards, err)
	}
	for _, name := range dashboards {
		data, err := fs.ReadFile(manifests.Dashboards, name)
		if err != nil {
			t.Fatal(err)
		}
		var d struct {
			Panels []struct {
				Targets []struct{ Expr string } `json:"targets"`
			} `json:"panels"`
		}
		if err := json.Unmarshal(data, &d); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var exprs []string
		for _, p := range d.Panels {
			for _, tg := range p.Targets {
				exprs = append(exprs, tg.Expr)
			}
		}
		out = append(out, queryFile{name, strings.Join(exprs, "\n")})
	}
	rules, err := fs.ReadFile(manifests.Charts, "charts/flotilla-hub/files/alert-rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var list []struct{ Expr string }
	if err := yaml.Unmarshal(rules, &list); err != nil || len(list) == 0 {
		t.Fatalf("alert rules: %v", err)
	}
	for _, r := range list {
		out = append(out, queryFile{"the alert rules", r.Expr})
	}
	return out
}

// flotilla lists the flotilla_* samples, for a failing test's log.
func (s scrape) flotilla() string {
	var b strings.Builder
	for name, fam := range s {
		if !strings.HasPrefix(name, "flotilla_") {
			continue
		}
		for _, m := range fam.Metric {
			fmt.Fprintf(&b, "%s %v %v %v %v\n", name, m.Label, m.Gauge.GetValue(), m.Counter.GetValue(), m.Histogram.GetSampleCount())
		}
	}
	return b.String()
}
