package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/flotilla-dev/flotilla/hub/operate"
	"github.com/flotilla-dev/flotilla/rollout"
)

const stagedClusters = `
- {name: stg-1, labels: {env: staging}}
- {name: can-1, labels: {env: prod, ring: canary}}
- {name: prod-2, labels: {env: prod, order: "2"}}
- {name: prod-1, labels: {env: prod, order: "1"}}
`

const stagedStrategy = `
apiVersion: flotilla.dev/v1alpha1
kind: StagedUpdateStrategy
metadata: {name: s}
spec:
  stages:
  - {name: staging, labelSelector: {matchLabels: {env: staging}}, afterStageTasks: [{type: TimedWait, waitTime: 1h}]}
  - {name: canary, labelSelector: "ring=canary", beforeStageTasks: [{type: Approval}]}
  - {name: production, labelSelector: "env=prod,!ring", sortingLabelKey: order, maxConcurrency: 2}
`

func TestPlanStagedJSON(t *testing.T) {
	dir := t.TempDir()
	clusters := writeFile(t, dir, "clusters.yaml", stagedClusters)
	strategy := writeFile(t, dir, "strategy.yaml", stagedStrategy)
	out, err := runCLI("plan", "--clusters", clusters, "--strategy", strategy, "--approve-after", "10m", "-o", "json")
	if err != nil {
		t.Fatalf("plan: %v\n%s", err, out)
	}
	var got struct {
		Stages []struct {
			Name           string `json:"name"`
			MaxConcurrency int    `json:"maxConcurrency"`
			Groups         []struct {
				Name     string   `json:"name"`
				Clusters []string `json:"clusters"`
			} `json:"groups"`
		} `json:"stages"`
		Steps []struct {
			At        string   `json:"at"`
			Started   []string `json:"started"`
			Completed []string `json:"completed"`
			Gate      string   `json:"gate"`
		} `json:"steps"`
		Completed bool   `json:"completed"`
		ETA       string `json:"eta"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if !got.Completed || got.ETA != "1h11m30s" {
		t.Errorf("completed %v, eta %q; want 30s + 1h wait + 10m approval + 30s + 30s", got.Completed, got.ETA)
	}
	if len(got.Stages) != 3 || got.Stages[2].MaxConcurrency != 2 {
		t.Fatalf("stages %+v", got.Stages)
	}
	if diff := cmp.Diff([]string{"prod-1", "prod-2"}, got.Stages[2].Groups[0].Clusters); diff != "" {
		t.Errorf("R3.2 order in production (-want +got):\n%s", diff)
	}
	var gates []string
	for _, s := range got.Steps {
		gates = append(gates, s.Gate)
	}
	if !strings.Contains(strings.Join(gates, "|"), "approval plan-before-canary") {
		t.Errorf("no approval gate in the timeline: %v", gates)
	}
}

func TestPlanStagedStopsAtGateWithoutApprover(t *testing.T) {
	dir := t.TempDir()
	out, err := runCLI("plan", "--clusters", writeFile(t, dir, "c.yaml", stagedClusters), "--strategy", writeFile(t, dir, "s.yaml", stagedStrategy))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "Not completed") || !strings.Contains(out, "waiting for approval "+rollout.ApprovalName("plan", "Before", "canary", "")+" (nobody approves in this plan: pass --approve-after") {
		t.Errorf("output:\n%s", out)
	}
}

func TestPlanSequence(t *testing.T) {
	dir := t.TempDir()
	clusters := writeFile(t, dir, "c.yaml", "- {name: d, labels: {tier: dev}}\n- {name: p, labels: {tier: prod}}\n")
	seq := writeFile(t, dir, "seq.yaml", "groups:\n- {name: dev, clusterSelector: 'tier=dev', soak: 48h}\n- {name: prod, upstream: dev, clusterSelector: 'tier=prod', soak: 0s}\n")
	out, err := runCLI("plan", "--clusters", clusters, "--sequence", seq, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Completed bool   `json:"completed"`
		ETA       string `json:"eta"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil || !got.Completed || got.ETA != "48h1m0s" {
		t.Errorf("completed %v, eta %q, err %v", got.Completed, got.ETA, err)
	}
}

func TestPlanStagedAndSequenceBadInput(t *testing.T) {
	dir := t.TempDir()
	clusters := writeFile(t, dir, "clusters.yaml", stagedClusters)
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"two before-stage tasks", []string{"--strategy", writeFile(t, dir, "s1.yaml", "stages:\n- {name: a, labelSelector: {}, beforeStageTasks: [{type: Approval}, {type: Approval}]}\n")},
			"s1.yaml: stages[0].beforeStageTasks: at most one task"},
		{"mistyped strategy field", []string{"--strategy", writeFile(t, dir, "s2.yaml", "kind: StagedUpdateStrategy\nspec:\n  stages:\n  - {name: a, labelSelectr: {}}\n")},
			`s2.yaml: spec: unknown field "labelSelectr"`},
		{"bad selector string", []string{"--strategy", writeFile(t, dir, "s3.yaml", "stages:\n- {name: a, labelSelector: 'env in prod'}\n")},
			`s3.yaml: label selector "env in prod": invalid label key`},
		{"cluster in no stage", []string{"--strategy", writeFile(t, dir, "s4.yaml", "stages:\n- {name: a, labelSelector: 'env=staging'}\n")},
			"clusters.yaml: initialization failed: clusters in no stage: can-1, prod-1, prod-2"},
		{"sequence branch", []string{"--sequence", writeFile(t, dir, "q1.yaml", "groups:\n- {name: a, clusterGroup: x}\n- {name: b, upstream: a, clusterGroup: y}\n- {name: c, upstream: a, clusterGroup: z}\n")},
			"q1.yaml: groups[2].upstream: a is already the upstream of b: sequences do not branch"},
		{"wrong kind", []string{"--sequence", writeFile(t, dir, "q2.yaml", "kind: StagedUpdateStrategy\nspec: {}\n")},
			`q2.yaml: kind: "StagedUpdateStrategy", want RolloutSequence`},
		{"bad maintenance window", []string{"--strategy", writeFile(t, dir, "s5.yaml", "stages:\n- {name: a, labelSelector: {}}\n"), "--clusters", writeFile(t, dir, "w.yaml", "- {name: a, maintenanceWindow: {schedule: 'at noon', duration: 1h}}\n")},
			`w.yaml: clusters[0].maintenanceWindow.schedule: invalid cron schedule "at noon"`},
		{"two modes", []string{"--strategy", "x", "--sequence", "y"}, "choose one of --fleet-yaml, --strategy and --sequence"},
		// What the API server refuses, the plan refuses (R3.1, R4.1).
		{"more stages than the API takes", []string{"--strategy", writeFile(t, dir, "s6.yaml", "stages:\n"+repeatLines(32, "- {name: s%[1]d, labelSelector: {}}\n"))},
			"s6.yaml: stages: at most 31 stages, got 32"},
		{"more sequence groups than the API takes", []string{"--sequence", writeFile(t, dir, "q3.yaml", "groups:\n- {name: g0, clusterGroup: x}\n"+repeatLines(20, "- {name: g%[1]d, upstream: g%[2]d, clusterGroup: x}\n"))},
			"q3.yaml: groups: at most 20 groups, got 21"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"plan", "--clusters", clusters}, c.args...)
			_, err := runCLI(args...)
			var in *operate.ErrInput
			if !errors.As(err, &in) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want an input error containing %q", err, c.want)
			}
		})
	}
}

// R1.11: --offline holds a cluster in a staged plan as the hub holds it: never started, and the
// plan says it cannot finish because of that cluster.
func TestR1_11_StagedPlanHoldsAnOfflineCluster(t *testing.T) {
	dir := t.TempDir()
	clusters := writeFile(t, dir, "clusters.yaml", stagedClusters)
	strategy := writeFile(t, dir, "s.yaml", "stages:\n- {name: staging, labelSelector: 'env=staging'}\n- {name: production, labelSelector: 'env=prod', maxConcurrency: 1}\n")
	out, err := runCLI("plan", "--clusters", clusters, "--strategy", strategy, "--offline", "prod-2")
	if err != nil {
		t.Fatalf("plan: %v\n%s", err, out)
	}
	if !strings.Contains(out, "prod-2: agent offline: starts when it is back (R1.11)") || strings.Contains(out, "Completed after") {
		t.Errorf("the plan does not hold the offline cluster:\n%s", out)
	}
}

// R1.11: --offline NAME@AFTER..BACK brings the agent back at BACK: the staged plan starts the
// cluster then, says why it waited until then, and completes; bad spans name the flag and part.
func TestR1_11_StagedPlanStartsAClusterWhenItsAgentIsBack(t *testing.T) {
	dir := t.TempDir()
	clusters := writeFile(t, dir, "clusters.yaml", stagedClusters)
	strategy := writeFile(t, dir, "s.yaml", "stages:\n- {name: staging, labelSelector: 'env=staging'}\n- {name: production, labelSelector: 'env=prod', maxConcurrency: 1}\n")
	out, err := runCLI("plan", "--clusters", clusters, "--strategy", strategy, "--offline", "prod-2@..2h", "-o", "json")
	if err != nil {
		t.Fatalf("plan: %v\n%s", err, out)
	}
	var plan struct {
		Steps []struct {
			At      string   `json:"at"`
			Started []string `json:"started"`
			Gate    string   `json:"gate"`
		} `json:"steps"`
		Completed bool   `json:"completed"`
		ETA       string `json:"eta"`
	}
	if err := json.Unmarshal([]byte(out), &plan); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	startedAt := "never"
	held := false
	for _, m := range plan.Steps {
		if slices.Contains(m.Started, "prod-2") {
			startedAt = m.At
		}
		held = held || strings.Contains(m.Gate, "prod-2: agent offline: starts when it is back (R1.11)")
	}
	if startedAt != "2h0m0s" || !held || !plan.Completed || plan.ETA != "2h0m30s" {
		t.Errorf("prod-2 started at %s (held with its reason: %v), completed %v after %s; want started at 2h, held, completed after 2h0m30s\n%s",
			startedAt, held, plan.Completed, plan.ETA, out)
	}
	for value, want := range map[string]string{
		"prod-2@1h..30m": "BACK must come after AFTER",
		"prod-2@..soon":  "BACK must be a positive duration",
		"prod-2@-1m..1h": "AFTER must be a positive duration",
		"nobody@..1h":    `cluster "nobody" is not in`,
	} {
		if out, err := runCLI("plan", "--clusters", clusters, "--strategy", strategy, "--offline", value); err == nil || !strings.Contains(err.Error(), "--offline") || !strings.Contains(err.Error(), want) {
			t.Errorf("--offline %s: error %v, want one naming --offline and %q\n%s", value, err, want, out)
		}
	}
}

// R3.13: the plan lists a stage's clusters in the order the run starts them, which is the
// hub's: at 09:00 (the plan's start) c's window is open, b has none, a's opens at 20:00, so
// c, b, a, although the sorting label says a, b, c.
func TestR3_13_StagedPlanOrdersClustersAsTheRunStartsThem(t *testing.T) {
	dir := t.TempDir()
	clusters := writeFile(t, dir, "clusters.yaml", `
- {name: a, labels: {order: "1"}, maintenanceWindow: {schedule: "0 20 * * *", duration: 1h}}
- {name: b, labels: {order: "2"}}
- {name: c, labels: {order: "3"}, maintenanceWindow: {schedule: "0 8 * * *", duration: 2h}}
`)
	strategy := writeFile(t, dir, "s.yaml", "stages:\n- {name: all, labelSelector: {}, sortingLabelKey: order}\n")
	out, err := runCLI("plan", "--clusters", clusters, "--strategy", strategy, "-o", "json")
	if err != nil {
		t.Fatalf("plan: %v\n%s", err, out)
	}
	var got struct {
		Stages []struct{ Groups []struct{ Clusters []string } }
		Steps  []struct{ Started []string }
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil || len(got.Stages) != 1 {
		t.Fatalf("%v\n%s", err, out)
	}
	if order := got.Stages[0].Groups[0].Clusters; !slices.Equal(order, []string{"c", "b", "a"}) {
		t.Errorf("the plan lists %v, want c, b, a: the order the run starts them", order)
	}
	var started []string
	for _, s := range got.Steps {
		started = append(started, s.Started...)
	}
	if !slices.Equal(started, []string{"c", "b", "a"}) {
		t.Errorf("the run started %v, want c, b, a", started)
	}
}

// repeatLines formats line n times, with i (from 1) and i−1 as its arguments.
func repeatLines(n int, line string) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, line, i, i-1)
	}
	return b.String()
}
