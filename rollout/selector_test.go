package rollout

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestR3_6_SelectorStringForm(t *testing.T) {
	labels := map[string]string{"env": "prod", "region": "eu", "tier": "web"}
	cases := []struct {
		in    string
		match bool
		want  *Selector
	}{
		{"env=prod", true, &Selector{MatchExpressions: []Requirement{{Key: "env", Operator: OpIn, Values: []string{"prod"}}}}},
		{"env==prod", true, nil},
		{"env!=prod", false, &Selector{MatchExpressions: []Requirement{{Key: "env", Operator: OpNotIn, Values: []string{"prod"}}}}},
		{"env!=dev", true, nil},
		{"missing!=x", true, nil}, // != matches when the key is absent
		{"region in (eu, us)", true, &Selector{MatchExpressions: []Requirement{{Key: "region", Operator: OpIn, Values: []string{"eu", "us"}}}}},
		{"region notin (eu,us)", false, nil},
		{"tier", true, &Selector{MatchExpressions: []Requirement{{Key: "tier", Operator: OpExists}}}},
		{"!tier", false, &Selector{MatchExpressions: []Requirement{{Key: "tier", Operator: OpDoesNotExist}}}},
		{"!gpu", true, nil},
		{"env=prod, region in (eu), !gpu", true, nil},
		{"env=prod,region=us", false, nil},
		{"", true, &Selector{}},
	}
	for _, c := range cases {
		sel, err := ParseSelector(c.in)
		if err != nil {
			t.Errorf("%q: %v", c.in, err)
			continue
		}
		if got := sel.Matches(labels); got != c.match {
			t.Errorf("%q matches = %v, want %v", c.in, got, c.match)
		}
		if c.want != nil {
			if diff := cmp.Diff(c.want, sel); diff != "" {
				t.Errorf("%q parsed (-want +got):\n%s", c.in, diff)
			}
		}
	}
	for _, bad := range []string{"a b=c", "env in prod", "env in (a", "env like (a)", ",env=prod", "env=prod,,a=b", "!", "x in (a b)"} {
		if _, err := ParseSelector(bad); err == nil {
			t.Errorf("%q parsed without error", bad)
		}
	}
}

func TestSelectorJSONForms(t *testing.T) {
	var s struct{ A, B Selector }
	if err := json.Unmarshal([]byte(`{"A":"env in (prod,staging)","B":{"matchLabels":{"env":"prod"}}}`), &s); err != nil {
		t.Fatal(err)
	}
	if !s.A.Matches(map[string]string{"env": "staging"}) || !s.B.Matches(map[string]string{"env": "prod"}) {
		t.Errorf("decoded selectors do not match: %+v", s)
	}
	if err := json.Unmarshal([]byte(`{"A":{"matchLabel":{"env":"prod"}}}`), &s); err == nil {
		t.Errorf("mistyped selector field accepted")
	}
}

func FuzzParseSelector(f *testing.F) {
	for _, s := range []string{"env=prod", "a in (b,c),!d", "x notin (y)", "k", "a!=b", "((", "a=b,,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sel, err := ParseSelector(s)
		if err != nil {
			return
		}
		// What parses renders to a form that parses to the same selector.
		again, err := ParseSelector(sel.String())
		if sel.String() == "<all>" {
			return
		}
		if err != nil {
			t.Fatalf("%q → %q does not parse: %v", s, sel.String(), err)
		}
		labels := map[string]string{"a": "b", "env": "prod"}
		if sel.Matches(labels) != again.Matches(labels) {
			t.Fatalf("%q and its rendering %q disagree", s, sel.String())
		}
	})
}

// R3.6: stages, stage groups and sequence groups take the string form in a field of its own,
// selecting what the structured form would; one that does not read names its field.
func TestR3_6_StringFormInStagesAndSequenceGroups(t *testing.T) {
	strategy := StagedStrategy{Stages: []Stage{{Name: "prod", Selector: "env in (prod),ring notin (canary)", MaxConcurrency: Percent(100),
		Groups: []StageGroup{{Name: "eu", Selector: "zone=eu", MaxConcurrency: Percent(100)}, {Name: "us", Selector: "zone!=eu", MaxConcurrency: Percent(100)}}}}}
	fleet := runFleet("a:env=prod,zone=eu", "b:env=prod,ring=canary,zone=eu", "c:env=prod,zone=us", "d:env=dev")
	for i := range fleet {
		fleet[i].Deployment = nil
	}
	res := Step(&Run{Name: "r", Revision: 1, Action: ActionRun, Strategy: strategy}, fleet[:1:1], nil, t0)
	if len(res.Release) != 1 {
		t.Fatalf("one cluster, one stage: released %v (%s)", res.Release, res.Status.Message)
	}
	res = Step(&Run{Name: "r", Revision: 1, Action: ActionRun, Strategy: StagedStrategy{Stages: []Stage{{Name: "prod", Selector: "env in (prod),ring notin (canary)", MaxConcurrency: Percent(100)},
		{Name: "rest", Selector: "ring=canary || env=dev"}}}}, fleet, nil, t0)
	if res.Status.State != RunFailed || !strings.Contains(res.Status.Message, "stages[1].selector:") {
		t.Errorf("an unreadable string selector: %s %q, want the run failed naming stages[1].selector", res.Status.State, res.Status.Message)
	}
	seq := Sequence{Groups: []SequenceGroup{{Name: "dev", Selector: "env=dev"}, {Name: "prod", Upstream: "dev", Selector: "env=prod,!ring"}}}
	got := map[string]int{}
	for _, g := range seq.Groups {
		got[g.Name] = CountGroupClusters(g, []SequenceCluster{{Name: "a", Labels: fleet[0].Labels}, {Name: "b", Labels: fleet[1].Labels}, {Name: "c", Labels: fleet[2].Labels}, {Name: "d", Labels: fleet[3].Labels}})
	}
	if got["dev"] != 1 || got["prod"] != 2 {
		t.Errorf("sequence groups by string selector: %v, want dev 1 and prod 2 (a, c)", got)
	}
	seq.Groups[1].ClusterGroup = "prod"
	if _, err := seq.ChainOrder(); err == nil || !strings.Contains(err.Error(), "exactly one of clusterSelector, selector and clusterGroup") {
		t.Errorf("a group with two ways to select: %v", err)
	}
}
