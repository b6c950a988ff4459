package analysis

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/endpoint"
	"github.com/flotilla-dev/flotilla/rollout"
)

var t0 = time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)

// loopback is the policy of providers served by the tests, on 127.0.0.1.
var loopback = endpoint.Policy{endpoint.MustParseAddressList("the test's list", "127.0.0.1")}

func TestPromValuesReadScalarsAndVectors(t *testing.T) {
	for _, tc := range []struct {
		typ, raw string
		want     any
		err      string
	}{
		{"scalar", `[1714550400, "0.25"]`, 0.25, ""},
		{"vector", `[{"metric": {"cluster": "a"}, "value": [1714550400, "0.01"]}]`, 0.01, ""},
		{"vector", `[{"value": [1, "1"]}, {"value": [1, "2"]}]`, []any{1.0, 2.0}, ""},
		{"vector", `[]`, nil, "no data"},
		{"vector", `[{"value": [1, "NaN-ish"]}]`, nil, "is not a number"},
		{"matrix", `[]`, nil, "needs an instant vector or a scalar"},
	} {
		got, err := promValues(tc.typ, json.RawMessage(tc.raw))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s %s: %v, %v; want an error saying %q", tc.typ, tc.raw, got, err, tc.err)
			}
			continue
		}
		if err != nil || fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s %s = %v, %v; want %v", tc.typ, tc.raw, got, err, tc.want)
		}
	}
}

// A provider that answers with a redirect is not followed (the query goes only where the
// operator said), one that answers too much is cut off, and an error status is inconclusive
// with its reason.
func TestAProviderIsAskedOnlyWhereTheOperatorSaid(t *testing.T) {
	var elsewhere atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { elsewhere.Add(1) }))
	defer other.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.FormValue("query") {
		case "redirect":
			http.Redirect(w, r, other.URL+"/api/v1/query", http.StatusTemporaryRedirect)
		case "huge":
			_, _ = w.Write([]byte(`{"status":"success","data":{"resultType":"scalar","result":[0,"` + strings.Repeat("9", maxResponse) + `"]}}`))
		case "broken":
			http.Error(w, "bad_data: parse error", http.StatusBadRequest)
		default:
			_, _ = w.Write([]byte(`{"status":"success","data":{"resultType":"vector","result":[{"value":[0,"0.002"]}]}}`))
		}
	}))
	defer srv.Close()
	p, err := (&providers{}).build(context.Background(), &v1alpha1.AnalysisProvider{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "n"},
		Spec: v1alpha1.AnalysisProviderSpec{Prometheus: &v1alpha1.PrometheusProvider{Address: srv.URL + "/"}}}, loopback)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if v, err := p.queryPrometheus(ctx, "ok"); err != nil || v != 0.002 {
		t.Fatalf("a plain query: %v, %v", v, err)
	}
	for query, says := range map[string]string{"redirect": "not followed", "huge": "larger than", "broken": "400 Bad Request: bad_data"} {
		if _, err := p.queryPrometheus(ctx, query); err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("%s: %v, want …%s…", query, err, says)
		}
	}
	if n := elsewhere.Load(); n != 0 {
		t.Errorf("the redirect's target received %d requests", n)
	}
	for _, address := range []string{"ftp://metrics.example", "http://", "metrics:9090"} {
		if _, err := (&providers{}).build(ctx, &v1alpha1.AnalysisProvider{Spec: v1alpha1.AnalysisProviderSpec{Prometheus: &v1alpha1.PrometheusProvider{Address: address}}}, loopback); err == nil {
			t.Errorf("a provider at %q was built", address)
		}
	}
}

// An HTTP provider receives the query with the cluster, bundle and revision as JSON; its JSON
// answer is the result.
func TestAnHTTPProviderReceivesTheMeasurement(t *testing.T) {
	var got httpQuery
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := json.NewDecoder(r.Body).Decode(&got); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		_, _ = w.Write([]byte(`{"healthy": true, "score": 97}`))
	}))
	defer srv.Close()
	p, err := (&providers{}).build(context.Background(), &v1alpha1.AnalysisProvider{Spec: v1alpha1.AnalysisProviderSpec{HTTP: &v1alpha1.HTTPProvider{URL: srv.URL + "/verdict"}}}, loopback)
	if err != nil {
		t.Fatal(err)
	}
	d := dueEntry{owner: Owner{Kind: KindRollout, Namespace: "shop", Name: "web", Bundle: "web"}, key: rollout.AnalysisKey{Check: "smoke", Revision: 4, Cluster: "eu-1"},
		labels: map[string]string{"env": "prod"}}
	result, err := p.post(context.Background(), "GET /checkout", d)
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := result.(map[string]any); !ok || m["healthy"] != true {
		t.Errorf("result %v", result)
	}
	if got.Query != "GET /checkout" || got.Cluster != "eu-1" || got.Revision != 4 || got.Bundle != "web" || got.Namespace != "shop" || got.Labels["env"] != "prod" {
		t.Errorf("the provider received %+v", got)
	}
}

// The runner's summary for a Bundle stays bounded at 10,000 clusters: counts per verdict, and
// at most ten names, the worst first.
func TestSummaryIsBoundedAndNamesTheWorst(t *testing.T) {
	now := t0
	r := New(nil, func() time.Time { return now }, 1, endpoint.AddressList{})
	o := Owner{Kind: KindRollout, Namespace: "shop", Name: "web", Bundle: "web"}
	check := &rollout.Check{Name: "error-rate", Provider: "p", Query: "q", Condition: "result < 0.01"}
	var active []rollout.ActiveCheck
	for i := range 10000 {
		active = append(active, rollout.ActiveCheck{Key: rollout.AnalysisKey{Check: "error-rate", Revision: 3, Cluster: fmt.Sprintf("c-%05d", i)}, Check: check})
	}
	r.Track(o, active, nil)
	r.mu.Lock()
	for k, e := range r.owners[o] {
		switch {
		case k.Cluster == "c-00042":
			e.m = rollout.Measurements{Failures: 1, Last: rollout.MeasuredFail, LastAt: now, FailedAt: now, Message: "result 0.3"}
		case k.Cluster < "c-00020":
			e.m = rollout.Measurements{Last: rollout.MeasuredInconclusive, InconclusiveSince: now, Message: "provider unreachable"}
		case k.Cluster < "c-09000":
			e.m = rollout.Measurements{Passes: 1, Last: rollout.MeasuredPass, LastAt: now}
		}
	}
	r.mu.Unlock()
	s := r.Summary(o)
	if len(s) != 1 {
		t.Fatalf("summary %+v", s)
	}
	a := s[0]
	if a.Verdict != "Failed" || a.Counts["Failed"] != 1 || a.Counts["Inconclusive"] != 20 || a.Counts["Pending"] != 1000 || a.Counts["Passed"] != 8979 {
		t.Errorf("verdict %s, counts %v", a.Verdict, a.Counts)
	}
	if len(a.Targets) != maxNamed || a.Targets[0] != "c-00042" || a.Targets[1] != "c-00000" || !strings.Contains(a.Message, "result 0.3") {
		t.Errorf("targets %v, message %q", a.Targets, a.Message)
	}
	// Inputs sets each deployment's worst judgement on the revision it applied, no other.
	deps := map[string]*rollout.Deployment{"c-00042": {Applied: 3, Released: 3}, "c-00001": {Applied: 2, Released: 3}}
	r.Inputs(o, func(c string) *rollout.Deployment { return deps[c] })
	if j := deps["c-00042"].Analysis; j == nil || j.Verdict != rollout.VerdictFailed {
		t.Errorf("c-00042: %+v", j)
	}
	if j := deps["c-00001"].Analysis; j != nil {
		t.Errorf("c-00001 applied another revision and got %+v", j)
	}
	// A pass that no longer judges them drops them all.
	r.Track(o, nil, nil)
	if s := r.Summary(o); s != nil {
		t.Errorf("after the last pass dropped them: %+v", s)
	}
}

// One namespace's checks take at most half of the measurement workers, the longest due first:
// with 160 of its checks due, another namespace's one check starts at once on a worker the
// share leaves; a finished measurement frees its worker for what waited.
func TestMeasurementsLeaveOtherNamespacesTheirShare(t *testing.T) {
	now := t0
	r := New(nil, func() time.Time { return now }, 8, endpoint.AddressList{})
	check := &rollout.Check{Name: "latency", Provider: "p", Query: "q", Condition: "result < 1"}
	greedy := Owner{Kind: KindRollout, Namespace: "greedy", Name: "web", Bundle: "web"}
	var many []rollout.ActiveCheck
	for i := range 160 {
		many = append(many, rollout.ActiveCheck{Key: rollout.AnalysisKey{Check: "latency", Revision: 1, Cluster: fmt.Sprintf("c-%03d", i)}, Check: check})
	}
	r.Track(greedy, many, nil)
	started := r.due()
	if len(started) != 4 {
		t.Fatalf("the greedy namespace started %d of 8 measurements, want its share of 4", len(started))
	}
	now = now.Add(time.Second)
	other := Owner{Kind: KindRollout, Namespace: "other", Name: "api", Bundle: "api"}
	r.Track(other, []rollout.ActiveCheck{{Key: rollout.AnalysisKey{Check: "latency", Revision: 1, Gate: "stage prod"}, Check: check}}, nil)
	next := r.due()
	if len(next) != 1 || next[0].owner != other {
		t.Fatalf("with the greedy namespace at its share, started %+v; want the other namespace's check alone", next)
	}
	if r.inFlight != 5 || r.inFlightNS["greedy"] != 4 {
		t.Errorf("in flight %d (greedy %d), want 5 (4)", r.inFlight, r.inFlightNS["greedy"])
	}
}
