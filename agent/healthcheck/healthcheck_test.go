package healthcheck

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

var database = schema.GroupKind{Group: "db.example.com", Kind: "Database"}

func phaseRule() Rule {
	return Rule{APIVersion: "db.example.com/v1", Kind: "Database",
		Current: "status.phase == 'Running'", Failed: "status.phase == 'Error'", InProgress: "status.phase == 'Provisioning'"}
}

func TestEvaluate(t *testing.T) {
	s, err := Compile([]Rule{phaseRule()})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		gk     schema.GroupKind
		object map[string]any
		want   Status
		judged bool
		says   string
	}{
		{"running is current", database, obj("Running"), Current, true, "current"},
		{"error is failed", database, obj("Error"), Failed, true, "failed"},
		{"provisioning is in progress", database, obj("Provisioning"), InProgress, true, "inProgress"},
		{"an unknown phase is in progress", database, obj("Resizing"), InProgress, true, "does not hold yet"},
		{"no status yet is in progress, with the reason", database, map[string]any{"kind": "Database"}, InProgress, true, "cannot be evaluated"},
		{"a phase of another type is not Running", database, map[string]any{"status": map[string]any{"phase": int64(3)}}, InProgress, true, "does not hold yet"},
		{"another kind is left to kstatus", schema.GroupKind{Group: "apps", Kind: "Deployment"}, obj("Running"), "", false, ""},
		{"the same kind in another group is left to kstatus", schema.GroupKind{Group: "other.example.com", Kind: "Database"}, obj("Running"), "", false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, msg, judged := s.Evaluate(tc.gk, tc.object)
			if got != tc.want || judged != tc.judged || !strings.Contains(msg, tc.says) {
				t.Fatalf("Evaluate = %q, %q, %v; want %q, …%s…, %v", got, msg, judged, tc.want, tc.says, tc.judged)
			}
		})
	}
}

func TestEvaluateHasAndConditions(t *testing.T) {
	s, err := Compile([]Rule{{APIVersion: "v1", Kind: "ConfigMap", Current: "has(metadata.annotations) && metadata.annotations['ready'] == 'yes'"},
		{APIVersion: "example.com/v1beta1", Kind: "Widget",
			Current: "status.conditions.exists(c, c.type == 'Healthy' && c.status == 'True')",
			Failed:  "status.conditions.exists(c, c.type == 'Healthy' && c.status == 'False' && c.reason.startsWith('Fatal'))"}})
	if err != nil {
		t.Fatal(err)
	}
	if st, msg, _ := s.Evaluate(schema.GroupKind{Kind: "ConfigMap"}, map[string]any{"metadata": map[string]any{"name": "a"}}); st != InProgress {
		t.Errorf("ConfigMap without annotations: %s (%s), want InProgress", st, msg)
	}
	if st, msg, _ := s.Evaluate(schema.GroupKind{Kind: "ConfigMap"}, map[string]any{"metadata": map[string]any{"annotations": map[string]any{"ready": "yes"}}}); st != Current {
		t.Errorf("ConfigMap ready: %s (%s), want Current", st, msg)
	}
	widget := func(status, reason string) map[string]any {
		return map[string]any{"status": map[string]any{"conditions": []any{map[string]any{"type": "Healthy", "status": status, "reason": reason}}}}
	}
	gk := schema.GroupKind{Group: "example.com", Kind: "Widget"}
	if st, msg, _ := s.Evaluate(gk, widget("False", "FatalDiskFull")); st != Failed {
		t.Errorf("Widget fatal: %s (%s), want Failed", st, msg)
	}
	if st, msg, _ := s.Evaluate(gk, widget("False", "Waiting")); st != InProgress {
		t.Errorf("Widget waiting: %s (%s), want InProgress", st, msg)
	}
	if st, msg, _ := s.Evaluate(gk, widget("True", "")); st != Current {
		t.Errorf("Widget healthy: %s (%s), want Current", st, msg)
	}
}

func TestCompileRefuses(t *testing.T) {
	long := "status.phase == '" + strings.Repeat("x", MaxExpressionLength) + "'"
	for _, tc := range []struct {
		name  string
		rules []Rule
		field string
		says  string
	}{
		{"a syntax error", []Rule{{APIVersion: "v1", Kind: "Pod", Current: "status.phase =="}}, "[0].current", "not a valid CEL expression"},
		{"an unknown variable", []Rule{{APIVersion: "v1", Kind: "Pod", Current: "self.status.phase == 'x'"}}, "[0].current", "undeclared reference"},
		{"a result that is not a bool", []Rule{{APIVersion: "v1", Kind: "Pod", Current: "'yes'"}}, "[0].current", "must give a bool"},
		{"a missing current", []Rule{{APIVersion: "v1", Kind: "Pod", Failed: "true"}}, "[0].current", "is required"},
		{"a missing kind", []Rule{{APIVersion: "v1", Current: "true"}}, "[0].kind", "is required"},
		{"an apiVersion without a version", []Rule{{APIVersion: "example.com/", Kind: "X", Current: "true"}}, "[0].apiVersion", "not group/version"},
		{"an apiVersion of three parts", []Rule{{APIVersion: "a/b/c", Kind: "X", Current: "true"}}, "[0].apiVersion", "not group/version"},
		{"the same kind twice", []Rule{{APIVersion: "x.io/v1", Kind: "X", Current: "true"}, {APIVersion: "x.io/v2", Kind: "X", Current: "true"}}, "[1].kind", "earlier check"},
		{"an expression too long", []Rule{{APIVersion: "v1", Kind: "Pod", Current: long}}, "[0].current", "characters long"},
		{"a bad failed expression", []Rule{{APIVersion: "v1", Kind: "Pod", Current: "true", Failed: "status.("}}, "[0].failed", "not a valid CEL expression"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Compile(tc.rules)
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field || !strings.Contains(fe.Message, tc.says) {
				t.Fatalf("Compile = %v; want a FieldError at %s saying …%s…", err, tc.field, tc.says)
			}
		})
	}
	many := make([]Rule, MaxChecks+1)
	for i := range many {
		many[i] = Rule{APIVersion: "x.io/v1", Kind: "K" + strings.Repeat("x", i), Current: "true"}
	}
	if _, err := Compile(many); err == nil {
		t.Fatalf("Compile accepted %d checks", len(many))
	}
}

// TestAnExpressionBuiltToBurnCPUIsStopped: a repository's expression that would visit billions
// of elements ends with an error at the cost limit, and the object stays in progress.
func TestAnExpressionBuiltToBurnCPUIsStopped(t *testing.T) {
	burn := "[1,2,3,4,5,6,7,8,9,10].all(a, [1,2,3,4,5,6,7,8,9,10].all(b, [1,2,3,4,5,6,7,8,9,10].all(c, " +
		"[1,2,3,4,5,6,7,8,9,10].all(d, [1,2,3,4,5,6,7,8,9,10].all(e, [1,2,3,4,5,6,7,8,9,10].all(f, a+b+c+d+e+f > 0))))))"
	s, err := Compile([]Rule{{APIVersion: "v1", Kind: "Pod", Current: burn}})
	if err != nil {
		t.Fatal(err)
	}
	st, msg, _ := s.Evaluate(schema.GroupKind{Kind: "Pod"}, map[string]any{})
	if st != InProgress || !strings.Contains(msg, "cost limit") {
		t.Fatalf("Evaluate = %s, %q; want InProgress at the cost limit", st, msg)
	}
}

// FuzzHealthCheck searches for an expression or object that panics the agent, or that makes
// an evaluation answer anything but the three statuses.
func FuzzHealthCheck(f *testing.F) {
	f.Add("status.phase == 'Running'", "Running")
	f.Add("status.conditions.exists(c, c.type == 'Ready')", "")
	f.Add("size(metadata.name) > 3 && metadata.name.matches('^a.*')", "x")
	f.Add("spec.replicas / 0 == 1", "y")
	f.Fuzz(func(t *testing.T, source, phase string) {
		s, err := Compile([]Rule{{APIVersion: "v1", Kind: "Pod", Current: source, Failed: source}})
		if err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("Compile error %v is not a FieldError", err)
			}
			return
		}
		st, _, judged := s.Evaluate(schema.GroupKind{Kind: "Pod"}, map[string]any{
			"metadata": map[string]any{"name": phase}, "spec": map[string]any{"replicas": int64(len(phase))},
			"status": map[string]any{"phase": phase, "conditions": []any{map[string]any{"type": phase}}}})
		if !judged || (st != Current && st != InProgress && st != Failed) {
			t.Fatalf("Evaluate(%q) = %q, judged %v", source, st, judged)
		}
	})
}

func obj(phase string) map[string]any {
	return map[string]any{"apiVersion": "db.example.com/v1", "kind": "Database", "metadata": map[string]any{"name": "orders"},
		"status": map[string]any{"phase": phase}}
}
