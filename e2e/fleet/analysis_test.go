package fleet

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/e2e/promserver"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/metrics"
	"github.com/flotilla-dev/flotilla/hub/report"
)

// Analysis gates (ROLLOUT.md §7) on workload clusters with real agents, measured from a real
// Prometheus server that scrapes an exporter the test drives: one error-ratio series per
// cluster.

// errorRatio is the Cluster check of these tests: the cluster's error ratio under 5%.
func errorRatio(provider string) v1alpha1.AnalysisCheck {
	return v1alpha1.AnalysisCheck{Name: "error-rate", Provider: provider, Query: `max(` + promserver.Metric + `{cluster="{{ .Cluster.Name }}"})`,
		Condition: "result < 0.05", Interval: &metav1.Duration{Duration: 5 * time.Second}}
}

// metricsFleet starts an exporter with every workload cluster at ratio 0 and a Prometheus
// scraping it.
func metricsFleet(t *testing.T) (*promserver.Exporter, *promserver.Server) {
	t.Helper()
	exp := promserver.NewExporter(t)
	for _, w := range workloads {
		exp.Set(w.Name, 0)
	}
	prom := promserver.Start(t, exp.Addr())
	prom.WaitFor(t, workloads[0].Name, 0)
	return exp, prom
}

// createProvider defines an AnalysisProvider in the fleet's namespace, as the operator does.
func createProvider(t *testing.T, f *fleetEnv, name, address string) *v1alpha1.AnalysisProvider {
	t.Helper()
	p := &v1alpha1.AnalysisProvider{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns},
		Spec: v1alpha1.AnalysisProviderSpec{Prometheus: &v1alpha1.PrometheusProvider{Address: address}, Timeout: &metav1.Duration{Duration: 2 * time.Second}}}
	if err := f.hub.Create(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	return p
}

func analysisOf(t *testing.T, f *fleetEnv, check string, rev int64) v1alpha1.AnalysisStatus {
	for _, a := range bundleOf(t, f, "shop-web").Status.Analysis {
		if a.Check == check && a.Revision == rev {
			return a
		}
	}
	return v1alpha1.AnalysisStatus{}
}

// A canary that stays Ready while its error ratio rises during its soak: its Cluster check
// fails, the group fails by R7.6 and the revision is rolled back on the canary alone, the
// rest never receiving it. The check passed and was shown while the soak went well; its
// failure is one Event, and counted in the metrics.
func TestR7_1_R7_6_R7_9_ACanaryWhoseErrorsRiseDuringItsSoakIsRolledBackWhileReady(t *testing.T) {
	exp, prom := metricsFleet(t)
	noSoak := &metav1.Duration{}
	canary := v1alpha1.SequenceGroup{Name: "canary", ClusterSelector: canaryClusters, Soak: &metav1.Duration{Duration: 3 * time.Minute},
		Analysis: []v1alpha1.AnalysisCheck{errorRatio("metrics")}}
	up, f, seq := sequenceFleet(t, "seq-analysis", canary, v1alpha1.SequenceGroup{Name: "rest", Upstream: "canary", Selector: restClusters, Soak: noSoak})
	createProvider(t, f, "metrics", prom.URL)
	ctx := context.Background()
	patchSequence(t, f, seq, func(s *v1alpha1.RolloutSequenceSpec) {
		s.OnFailure = v1alpha1.FailureActionRollback
		s.Revisions = []v1alpha1.SequenceRevisionControl{{Index: 1, SoakOverrides: []v1alpha1.SoakOverride{{Group: "canary", Soak: *noSoak}}}}
	})
	eventually(t, "revision 1 runs everywhere", 2*time.Minute, func() bool { return availableEverywhere(t, "seq-analysis", "web", "example.invalid/web:1") })
	waitRepo(t, f, "all ready", func(r *v1alpha1.GitRepo) bool { return r.Status.Display.ReadyClusters == allReady() })
	before := snapshotDeployments(t, f)
	failedBefore := testutil.ToFloat64(metrics.AnalysisMeasurements.WithLabelValues("prometheus", "Fail"))

	up.Commit("main", map[string]string{"web/deployment.yaml": webManifest("example.invalid/web:2")})
	eventually(t, "the canary soaks revision 2 and its check passed", 2*time.Minute, func() bool {
		return groupOf(t, f, "canary", 2).State == v1alpha1.SequenceSoaking && analysisOf(t, f, "error-rate", 2).Verdict == "Passed"
	}, func() string { return fmt.Sprintf("bundle status: %+v", bundleOf(t, f, "shop-web").Status) })
	if a := analysisOf(t, f, "error-rate", 2); a.Counts["Passed"] != 1 || a.Scope != "Cluster" || !strings.Contains(a.Message, "result 0") {
		t.Errorf("the check on the Bundle while it passes: %+v", a)
	}
	var out strings.Builder
	if err := report.Write(ctx, &out, f.hub, f.ns, "shop"); err != nil {
		t.Fatal(err)
	}
	if !lineWith(out.String(), "analysis error-rate", "revision 2", "Passed", "1 Passed") {
		t.Errorf("flotilla status does not show the check:\n%s", out.String())
	}

	// The canary's errors rise; it stays Ready all along.
	exp.Set(workloads[0].Name, 0.4)
	readyThroughout := true
	eventually(t, "the canary's check fails the group", time.Minute, func() bool {
		bd := deploymentOn(t, f, workloads[0].Name)
		if bd.Status.AppliedRevision == 2 && !bd.Status.Ready {
			readyThroughout = false
		}
		o := bundleOf(t, f, "shop-web").Status.Outcome
		return o != nil && o.Failure != nil && o.Failure.Revision == 2
	}, func() string { return fmt.Sprintf("bundle status: %+v", bundleOf(t, f, "shop-web").Status) })
	if !readyThroughout {
		t.Error("the canary was NotReady on revision 2: the check is not what failed it")
	}
	o := bundleOf(t, f, "shop-web").Status.Outcome
	if o.Failure.Rule != "R7.6" || !strings.Contains(o.Failure.Message, "analysis error-rate failed") || !strings.Contains(o.Failure.Message, "result 0.4") {
		t.Errorf("the failure %+v: want R7.6 naming the check and its value", o.Failure)
	}
	expectRolledBack(t, f, 2, workloads[0].Name)
	eventually(t, "the canary runs revision 1 again", time.Minute, func() bool {
		return deploymentAvailable(t, workloads[0], "seq-analysis", "web", "example.invalid/web:1")
	}, showDeployments(t, f))
	for _, w := range workloads[1:] {
		if !before.unchangedSince(t, f, w.Name) {
			t.Errorf("%s, which never received revision 2, was touched by the rollback: %+v", w.Name, deploymentOn(t, f, w.Name).Spec)
		}
	}
	eventually(t, "one Event tells the check failed", 30*time.Second, func() bool {
		story := bundleStory(t, f)
		return story.Count("AnalysisFailed: revision 2: analysis error-rate failed on "+workloads[0].Name+": ") == 1
	}, func() string { return bundleStory(t, f).String() })
	if got := testutil.ToFloat64(metrics.AnalysisMeasurements.WithLabelValues("prometheus", "Fail")); got <= failedBefore {
		t.Errorf("flotilla_analysis_measurements_total{outcome=Fail} = %g, not above %g", got, failedBefore)
	}
}

// A staged run's Analysis task after the canary stage, a Gate check over the stage's clusters:
// while the canary's errors are high (within failureLimit) the next stage waits and the run
// says why (R7.8); once they are good it goes on. A revision whose errors stay high fails the
// stage by R7.7, and the rest never receive it.
func TestR7_2_R7_3_R7_7_R7_8_AnAnalysisTaskHoldsTheNextStageUntilTheMetricIsGood(t *testing.T) {
	exp, prom := metricsFleet(t)
	gate := v1alpha1.AnalysisCheck{Name: "stage-errors", Provider: "metrics", Scope: "Gate", FailureLimit: 3, Interval: &metav1.Duration{Duration: 5 * time.Second},
		Query:     `max(` + promserver.Metric + `{cluster=~"{{ range $i, $c := .Clusters }}{{ if $i }}|{{ end }}{{ $c }}{{ end }}"})`,
		Condition: "result < 0.05"}
	up, f, runOf := stagedFleet(t, "staged-analysis",
		v1alpha1.StageConfig{Name: "canary", LabelSelector: canaryClusters, AfterStageTasks: []v1alpha1.StageTask{{Type: v1alpha1.TaskAnalysis, Analysis: []v1alpha1.AnalysisCheck{gate}}}},
		v1alpha1.StageConfig{Name: "rest", Selector: restClusters})
	createProvider(t, f, "metrics", prom.URL)
	eventually(t, "the run of revision 1 completes", 3*time.Minute, func() bool { return runOf("shop-web-r1").Status.State == v1alpha1.RunCompleted })

	exp.Set(workloads[0].Name, 0.3)
	prom.WaitFor(t, workloads[0].Name, 0.3)
	up.Commit("main", map[string]string{"web/deployment.yaml": webManifest("example.invalid/web:2")})
	task := func(run string) v1alpha1.TaskStatus {
		st := runOf(run).Status
		if len(st.Stages) == 0 || len(st.Stages[0].AfterTasks) == 0 {
			return v1alpha1.TaskStatus{}
		}
		return st.Stages[0].AfterTasks[0]
	}
	eventually(t, "the Analysis task holds the rest while the canary's errors are high", 2*time.Minute, func() bool {
		return strings.Contains(task("shop-web-r2").Message, "analysis stage-errors Failing")
	}, func() string { return fmt.Sprintf("run: %+v", runOf("shop-web-r2").Status) })
	for _, w := range workloads[1:] {
		if released(deploymentOn(t, f, w.Name)) == 2 {
			t.Fatalf("%s received revision 2 while the canary's analysis held", w.Name)
		}
	}
	if msg := runOf("shop-web-r2").Status.Message; !strings.Contains(msg, "stage-errors") {
		t.Errorf("the run does not say what it waits for: %q", msg)
	}
	exp.Set(workloads[0].Name, 0)
	eventually(t, "the run of revision 2 completes once the metric is good", 2*time.Minute, func() bool {
		return runOf("shop-web-r2").Status.State == v1alpha1.RunCompleted
	}, func() string { return fmt.Sprintf("run: %+v", runOf("shop-web-r2").Status) })
	if !availableEverywhere(t, "staged-analysis", "web", "example.invalid/web:2") {
		t.Error("revision 2 does not run everywhere")
	}

	exp.Set(workloads[0].Name, 0.3)
	prom.WaitFor(t, workloads[0].Name, 0.3)
	up.Commit("main", map[string]string{"web/deployment.yaml": webManifest("example.invalid/web:3")})
	eventually(t, "the check fails the run of revision 3", 2*time.Minute, func() bool {
		st := runOf("shop-web-r3").Status
		return st.State == v1alpha1.RunFailed && st.Failure != nil
	}, func() string { return fmt.Sprintf("run: %+v", runOf("shop-web-r3").Status) })
	run := runOf("shop-web-r3")
	if run.Status.Failure.Rule != "R7.7" || !strings.Contains(run.Status.Failure.Message, "4 failed measurements, more than failureLimit 3") {
		t.Errorf("the run's failure %+v: want R7.7 past the failure limit", run.Status.Failure)
	}
	for _, w := range workloads[1:] {
		if released(deploymentOn(t, f, w.Name)) == 3 {
			t.Errorf("%s received revision 3 from a stage whose analysis failed", w.Name)
		}
	}
}

// A provider that is down gives no verdict: the canary's check is inconclusive, the rest
// partition waits and the Bundle says why (R7.5). Once the operator points the provider at a
// Prometheus that answers, the check passes and the rollout completes.
func TestR7_4_R7_5_AProviderThatIsDownHoldsTheRolloutAndSaysSo(t *testing.T) {
	_, prom := metricsFleet(t)
	up, f := deployWeb(t, canaryFirst("analysis-down"))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there any more: connections are refused
	provider := createProvider(t, f, "metrics", down)

	withChecks := canaryFirst("analysis-down", "analysis:",
		"- {name: error-rate, provider: metrics, interval: 5s, inconclusiveLimit: 10m, condition: \"result < 0.05\",",
		"   query: 'max("+promserver.Metric+"{cluster=\"{{ .Cluster.Name }}\"})'}")
	up.Commit("main", map[string]string{"web/fleet.yaml": withChecks, "web/deployment.yaml": webManifest("example.invalid/web:2")})
	eventually(t, "the canary's check is inconclusive and holds the rollout", 2*time.Minute, func() bool {
		a := analysisOf(t, f, "error-rate", 2)
		paused := meta.FindStatusCondition(bundleOf(t, f, "shop-web").Status.Conditions, v1alpha1.RolloutPausedCondition)
		return a.Verdict == "Inconclusive" && strings.Contains(a.Message, "provider unreachable") && paused != nil &&
			strings.Contains(paused.Message, workloads[0].Name+": analysis error-rate Inconclusive")
	}, func() string { return fmt.Sprintf("bundle status: %+v", bundleOf(t, f, "shop-web").Status) })
	if a := analysisOf(t, f, "error-rate", 2); len(a.Targets) != 1 || a.Targets[0] != workloads[0].Name || a.Since == nil {
		t.Errorf("the inconclusive check does not name the canary and since when: %+v", a)
	}
	if !deploymentAvailable(t, workloads[0], "analysis-down", "web", "example.invalid/web:2") {
		t.Error("the canary does not run revision 2 Ready: it is not the readiness that holds")
	}
	for _, w := range workloads[1:] {
		if released(deploymentOn(t, f, w.Name)) == 2 {
			t.Fatalf("%s received revision 2 while the canary's check was inconclusive", w.Name)
		}
	}
	if o := bundleOf(t, f, "shop-web").Status.Outcome; o != nil && o.Failure != nil {
		t.Fatalf("an inconclusive check within its limit failed the rollout: %+v", o.Failure)
	}

	ctx := context.Background()
	orig := provider.DeepCopy()
	provider.Spec.Prometheus.Address = prom.URL
	if err := f.hub.Patch(ctx, provider, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "revision 2 reaches every cluster once the provider answers", 3*time.Minute, func() bool {
		return availableEverywhere(t, "analysis-down", "web", "example.invalid/web:2")
	}, func() string { return fmt.Sprintf("bundle status: %+v", bundleOf(t, f, "shop-web").Status) })
	eventually(t, "revision 2 completes", time.Minute, func() bool {
		o := bundleOf(t, f, "shop-web").Status.Outcome
		return o != nil && o.Revision == 2 && o.Outcome == v1alpha1.OutcomeCompleted
	})
}

// A repository cannot make the hub ask an address of its choosing (R7.1): a check that names
// a URL for its provider, or carries a url of its own, is refused at render with the file and
// field, and the server behind the URL receives nothing. A provider the namespace's
// FleetRestriction does not allow is never asked either: its check is inconclusive and says so.
func TestR7_1_ARepositoryCannotMakeTheHubAskAnAddressOfItsChoosing(t *testing.T) {
	var asked atomic.Int64
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	trap := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		asked.Add(1)
		_, _ = w.Write([]byte(`{"status":"success","data":{"resultType":"scalar","result":[0,"0"]}}`))
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = trap.Serve(ln) }()
	t.Cleanup(func() { _ = trap.Close() })
	trapURL := "http://" + ln.Addr().String()

	up, f := deployWeb(t, canaryFirst("analysis-trap"))
	for _, c := range []struct{ name, check, field string }{
		{"an address for a provider", "- {name: e, provider: \"" + trapURL + "/api\", query: up, condition: \"result > 0.0\"}", "rolloutStrategy.analysis[0].provider"},
		{"a url of its own", "- {name: e, provider: metrics, url: \"" + trapURL + "\", query: up, condition: \"result > 0.0\"}", "rolloutStrategy.analysis[0].url"},
	} {
		up.Commit("main", map[string]string{"web/fleet.yaml": canaryFirst("analysis-trap", "analysis:", c.check), "web/deployment.yaml": webManifest("example.invalid/web:2")})
		waitRepo(t, f, c.name+": Rendered=False naming the file and field", func(r *v1alpha1.GitRepo) bool {
			cond := meta.FindStatusCondition(r.Status.Conditions, v1alpha1.RenderedCondition)
			return cond != nil && cond.Status == metav1.ConditionFalse && strings.Contains(cond.Message, "web/fleet.yaml") && strings.Contains(cond.Message, c.field)
		})
		if b := bundleOf(t, f, "shop-web"); b.Spec.LatestRevision != 1 {
			t.Fatalf("%s: the refused commit made revision %d", c.name, b.Spec.LatestRevision)
		}
	}

	// The operator's provider points at the trap, but the namespace's restriction allows
	// another one only.
	createProvider(t, f, "forbidden", trapURL)
	restriction := &v1alpha1.FleetRestriction{ObjectMeta: metav1.ObjectMeta{Name: "tenant", Namespace: f.ns},
		Spec: v1alpha1.FleetRestrictionSpec{AnalysisProviders: &v1alpha1.AllowedProviders{Allowed: []string{"metrics"}}}}
	if err := f.hub.Create(context.Background(), restriction); err != nil {
		t.Fatal(err)
	}
	up.Commit("main", map[string]string{"web/fleet.yaml": canaryFirst("analysis-trap", "analysis:",
		"- {name: e, provider: forbidden, interval: 5s, query: up, condition: \"result >= 0.0\"}"), "web/deployment.yaml": webManifest("example.invalid/web:2")})
	eventually(t, "the check of a provider the restriction does not allow is inconclusive", 2*time.Minute, func() bool {
		a := analysisOf(t, f, "e", 2)
		return a.Verdict == "Inconclusive" && strings.Contains(a.Message, `AnalysisProvider "forbidden" is not allowed by FleetRestriction tenant`)
	}, func() string { return fmt.Sprintf("bundle status: %+v", bundleOf(t, f, "shop-web").Status) })
	if n := asked.Load(); n != 0 {
		t.Fatalf("the server behind the repository's and the forbidden provider's address received %d requests", n)
	}
	for _, w := range workloads[1:] {
		if released(deploymentOn(t, f, w.Name)) == 2 {
			t.Errorf("%s received revision 2 past a check that never had a verdict", w.Name)
		}
	}
}
