package analysisexpr

import (
	"errors"
	"strings"
	"testing"

	"github.com/flotilla-dev/flotilla/rollout"
)

func TestQueryRendersTheClusterBundleAndRevision(t *testing.T) {
	q, err := ParseQuery(`sum(rate(http_requests_total{cluster="{{ .Cluster.Name }}",env="{{ .Cluster.Labels.env }}",code=~"5.."}[5m])) / {{ .Revision }} # {{ .Namespace }}/{{ .Bundle }}`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := q.Render(QueryData{Cluster: ClusterData{Name: "eu-1", Labels: map[string]string{"env": "prod"}}, Bundle: "web", Namespace: "shop", Revision: 7})
	if want := `sum(rate(http_requests_total{cluster="eu-1",env="prod",code=~"5.."}[5m])) / 7 # shop/web`; err != nil || got != want {
		t.Fatalf("Render = %q, %v\nwant     %q", got, err, want)
	}
	gate, _ := ParseQuery(`max(errors{cluster=~"{{ range $i, $c := .Clusters }}{{ if $i }}|{{ end }}{{ $c }}{{ end }}"}) # {{ .Gate }}`)
	if got, err := gate.Render(QueryData{Gate: "stage canary", Clusters: []string{"a", "b"}}); err != nil || got != `max(errors{cluster=~"a|b"}) # stage canary` {
		t.Fatalf("gate Render = %q, %v", got, err)
	}
	// A label the cluster does not have is an error, not an empty matcher that matches all.
	if _, err := q.Render(QueryData{Cluster: ClusterData{Name: "eu-1"}}); err == nil {
		t.Error("a missing label rendered")
	}
}

// A template built to make the hub build a huge query stops at MaxQueryLength.
func TestAQueryBuiltToGrowIsBounded(t *testing.T) {
	q, err := ParseQuery(`{{ range .Clusters }}{{ . }}{{ . }}{{ . }}{{ . }}{{ end }}`)
	if err != nil {
		t.Fatal(err)
	}
	many := make([]string, 1000)
	for i := range many {
		many[i] = "cluster-with-a-long-name"
	}
	if out, err := q.Render(QueryData{Clusters: many}); !errors.Is(err, errQueryTooLong) || out != "" {
		t.Fatalf("Render = %d bytes, %v; want the limit", len(out), err)
	}
}

// A repository's template that would make the hub loop or allocate without bound is refused
// when it is compiled (at render, and in the hub), before anything runs.
func TestAQueryBuiltToRunForeverIsRefused(t *testing.T) {
	for _, tc := range []struct{ query, says string }{
		{"{{ range 1000000000 }}{{ end }}", "range over something other than"},
		{"{{ range $i := .Revision }}x{{ end }}", "range over something other than"},
		{`{{ printf "%999999999d" 1 }}`, `function "printf" is not allowed`},
		{"{{ range .Clusters }}{{ range $.Clusters }}{{ end }}{{ end }}", "a range inside a range"},
		{`{{ define "x" }}{{ template "x" }}{{ end }}{{ template "x" }}`, "a query is one template"},
		{"{{ call .Bundle }}", `function "call" is not allowed`},
		{`{{ slice .Bundle 0 1 }}`, `function "slice" is not allowed`},
		{"{{ (printf \"%s\" .Bundle) }}", `function "printf" is not allowed`},
	} {
		if _, err := ParseQuery(tc.query); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("ParseQuery(%q) = %v; want it refused: …%s…", tc.query, err, tc.says)
		}
	}
	for _, ok := range []string{`up{cluster="{{ .Cluster.Name }}",env="{{ index .Cluster.Labels "env" }}"}`,
		`{{ range $i, $c := .Clusters }}{{ if $i }}|{{ end }}{{ $c }}{{ end }}`, `{{ range $k, $v := .Cluster.Labels }}{{ $k }}={{ $v }},{{ end }}`,
		`{{ if eq .Gate "" }}cluster{{ else }}gate {{ len .Clusters }}{{ end }}`, `{{ .Bundle | urlquery }}`} {
		if _, err := ParseQuery(ok); err != nil {
			t.Errorf("ParseQuery(%q): %v", ok, err)
		}
	}
}

func TestConditionHolds(t *testing.T) {
	for _, tc := range []struct {
		condition string
		result    any
		holds     bool
		err       string
	}{
		{"result < 0.01", 0.002, true, ""},
		{"result < 0.01", 0.2, false, ""},
		{"result.all(r, r < 0.5)", []any{0.1, 0.4}, true, ""},
		{"result.all(r, r < 0.5)", []any{0.1, 0.6}, false, ""},
		{"result.status == 'ok' && result.score >= 90.0", map[string]any{"status": "ok", "score": 93.0}, true, ""},
		{"result < 0.01", "NaN", false, "no such overload"},
		{"result.missing > 1.0", map[string]any{}, false, "no such key"},
	} {
		c, err := CompileCondition(tc.condition)
		if err != nil {
			t.Fatalf("%s: %v", tc.condition, err)
		}
		holds, err := c.Holds(tc.result)
		if holds != tc.holds || (tc.err == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s on %v = %v, %v; want %v, …%s…", tc.condition, tc.result, holds, err, tc.holds, tc.err)
		}
	}
}

func TestValidateNamesTheField(t *testing.T) {
	for _, tc := range []struct {
		check rollout.Check
		field string
		says  string
	}{
		{rollout.Check{Query: "up{cluster=\"{{ .Cluster.Name \"}", Condition: "result > 0.0"}, "s.analysis[0].query", "not a valid template"},
		{rollout.Check{Query: "up", Condition: "result >"}, "s.analysis[0].condition", "not a valid CEL expression"},
		{rollout.Check{Query: "up", Condition: "'text'"}, "s.analysis[0].condition", "must give a bool"},
		{rollout.Check{Query: "up", Condition: "cluster == 'a'"}, "s.analysis[0].condition", "undeclared reference to 'cluster'"},
	} {
		err := Validate("s.analysis", []rollout.Check{tc.check})
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field || !strings.Contains(fe.Message, tc.says) {
			t.Errorf("Validate(%+v) = %v; want %s: …%s…", tc.check, err, tc.field, tc.says)
		}
	}
}

// FuzzQueryAndCondition searches for a template or condition from a repository that panics
// the hub, escapes the output bound, or evaluates to anything but a bool or an error.
func FuzzQueryAndCondition(f *testing.F) {
	f.Add(`up{cluster="{{ .Cluster.Name }}"}`, "result > 0.5", 0.7)
	f.Add(`{{ range .Clusters }}{{ . }}{{ end }}`, "result.all(r, r < 1.0)", 0.1)
	f.Add(`{{ printf "%s%s" .Bundle .Gate }}`, "[1,2,3].exists(x, x == int(result))", 2.0)
	f.Add(`{{ call .Bundle }}`, "result / 0.0 > 1.0", 1.0)
	f.Add(`{{ range 9 }}{{ end }}`, "true", 0.0)
	f.Fuzz(func(t *testing.T, query, condition string, value float64) {
		if q, err := ParseQuery(query); err == nil {
			out, _ := q.Render(QueryData{Cluster: ClusterData{Name: "c", Labels: map[string]string{"env": "prod"}}, Bundle: "b", Namespace: "n", Revision: 3,
				Gate: "stage s", Clusters: []string{"c", "d"}})
			if len(out) > MaxQueryLength {
				t.Fatalf("a query of %d bytes", len(out))
			}
		}
		c, err := CompileCondition(condition)
		if err != nil {
			return
		}
		for _, result := range []any{value, []any{value, value}, map[string]any{"v": value}} {
			if _, err := c.Holds(result); err != nil && strings.Contains(err.Error(), "panic") {
				t.Fatalf("%s on %v: %v", condition, result, err)
			}
		}
	})
}
