package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// planOutcome is what -o json says of a simulated failure, in every mode.
type planOutcome struct {
	Outcome string `json:"outcome"`
	Failure *struct {
		Revision int64    `json:"revision"`
		Rule     string   `json:"rule"`
		Clusters []string `json:"clusters"`
	} `json:"failure"`
	Steps []struct {
		RolledBack []string `json:"rolledBack"`
	} `json:"steps"`
}

func (p planOutcome) rolledBack() []string {
	var out []string
	for _, s := range p.Steps {
		out = append(out, s.RolledBack...)
	}
	return out
}

func runPlanJSON(t *testing.T, args ...string) planOutcome {
	t.Helper()
	out, err := runCLI(append(append([]string{"plan"}, args...), "-o", "json")...)
	if err != nil {
		t.Fatalf("plan: %v\n%s", err, out)
	}
	var got planOutcome
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	return got
}

// R5.2, R5.4: a dev cluster regressing during the soak rolls the revision back from dev only;
// prod never received it.
func TestR5_4_R5_6_PlanSimulatesARegressionInASequenceSoak(t *testing.T) {
	dir := t.TempDir()
	clusters := writeFile(t, dir, "c.yaml", "- {name: d1, labels: {tier: dev}}\n- {name: d2, labels: {tier: dev}}\n- {name: p1, labels: {tier: prod}}\n")
	seq := writeFile(t, dir, "seq.yaml", "onFailure: Rollback\ngroups:\n- {name: dev, clusterSelector: 'tier=dev', soak: 2h}\n- {name: prod, upstream: dev, clusterSelector: 'tier=prod', soak: 0s}\n")
	got := runPlanJSON(t, "--clusters", clusters, "--sequence", seq, "--regress", "d1@45m")
	if got.Outcome != "RolledBack" || got.Failure == nil || got.Failure.Rule != "R5.2" {
		t.Fatalf("outcome %q, failure %+v: want RolledBack by R5.2", got.Outcome, got.Failure)
	}
	if diff := cmp.Diff([]string{"d1", "d2"}, got.rolledBack()); diff != "" {
		t.Errorf("rolled back (-want +got):\n%s", diff)
	}
	out, err := runCLI("plan", "--clusters", clusters, "--sequence", seq, "--regress", "d1@45m")
	if err != nil || !strings.Contains(out, "rolled back 2: d1, d2") || !strings.Contains(out, "Outcome: RolledBack") {
		t.Errorf("text output (err %v):\n%s", err, out)
	}
}

// R5.3: a canary whose apply fails 5 minutes after its release holds the partitioned rollout
// (Pause, the default) once failureTimeout passed: the outcome is Failed, nothing rolled back.
func TestR5_3_PlanSimulatesAFailingCanary(t *testing.T) {
	dir := t.TempDir()
	clusters := writeFile(t, dir, "clusters.yaml", clustersYAML)
	fleet := writeFile(t, dir, "fleet.yaml", fleetYAML+"  failureTimeout: 2m\n")
	got := runPlanJSON(t, "--clusters", clusters, "--fleet-yaml", fleet, "--fail", "canary-1@5m")
	if got.Outcome != "Failed" || got.Failure == nil || !slicesEqual(got.Failure.Clusters, []string{"canary-1"}) || len(got.rolledBack()) != 0 {
		t.Errorf("outcome %q, failure %+v, rolled back %v", got.Outcome, got.Failure, got.rolledBack())
	}
	// With nothing earlier to go back to, a first deployment's rollback removes the bundle.
	rollback := writeFile(t, dir, "rollback.yaml", fleetYAML+"  onFailure: Rollback\n")
	got = runPlanJSON(t, "--clusters", clusters, "--fleet-yaml", rollback, "--fail", "canary-2", "--first-deployment")
	if got.Outcome != "RolledBack" || !slicesEqual(got.rolledBack(), []string{"canary-1", "canary-2"}) {
		t.Errorf("first deployment: outcome %q, rolled back %v", got.Outcome, got.rolledBack())
	}
}

// R5.4 for staged runs: a cluster over the stage's failure budget rolls back the clusters that
// received the revision, the later stages untouched.
func TestR5_4_PlanSimulatesAStagedRollback(t *testing.T) {
	dir := t.TempDir()
	clusters := writeFile(t, dir, "clusters.yaml", stagedClusters)
	strategy := writeFile(t, dir, "s.yaml", "onFailure: Rollback\nhealthWindow: 1h\nstages:\n- {name: staging, labelSelector: 'env=staging'}\n- {name: production, labelSelector: 'env=prod', maxConcurrency: 1}\n")
	got := runPlanJSON(t, "--clusters", clusters, "--strategy", strategy, "--regress", "prod-2@10m")
	if got.Outcome != "RolledBack" || got.Failure == nil || !slicesEqual(got.Failure.Clusters, []string{"prod-2"}) {
		t.Fatalf("outcome %q, failure %+v", got.Outcome, got.Failure)
	}
	for _, c := range got.rolledBack() {
		if c == "stg-1" {
			return // staging received the revision too: it goes back as well
		}
	}
	t.Errorf("rolled back %v: staging received the revision and must be restored", got.rolledBack())
}

// R7.9: --analysis-fail makes a check fail from a moment on; a sequence whose dev group's
// check fails during its soak rolls back dev (R7.6), and prod never receives the revision.
func TestR7_9_PlanSimulatesAFailingCheck(t *testing.T) {
	dir := t.TempDir()
	clusters := writeFile(t, dir, "c.yaml", "- {name: d1, labels: {tier: dev}}\n- {name: d2, labels: {tier: dev}}\n- {name: p1, labels: {tier: prod}}\n")
	seq := writeFile(t, dir, "seq.yaml", `onFailure: Rollback
groups:
- name: dev
  clusterSelector: 'tier=dev'
  soak: 2h
  analysis:
  - {name: error-rate, provider: prometheus, query: 'errors{cluster="{{ .Cluster.Name }}"}', condition: result < 0.01, interval: 1m}
- {name: prod, upstream: dev, clusterSelector: 'tier=prod', soak: 0s}
`)
	got := runPlanJSON(t, "--clusters", clusters, "--sequence", seq, "--analysis-fail", "error-rate@30m")
	if got.Outcome != "RolledBack" || got.Failure == nil || got.Failure.Rule != "R7.6" || !slicesEqual(got.Failure.Clusters, []string{"d1", "d2"}) {
		t.Fatalf("outcome %q, failure %+v: want dev rolled back by R7.6", got.Outcome, got.Failure)
	}
	if ok := runPlanJSON(t, "--clusters", clusters, "--sequence", seq); ok.Outcome != "Completed" {
		t.Errorf("without the fault: outcome %q", ok.Outcome)
	}
	for _, c := range []struct{ value, want string }{
		{"error-rte@30m", `has no check "error-rte" (its checks: error-rate)`},
		{"error-rate", "is not NAME@AFTER"},
		{"error-rate@soon", `"soon" is not a duration`},
	} {
		if out, err := runCLI("plan", "--clusters", clusters, "--sequence", seq, "--analysis-fail", c.value); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--analysis-fail %s: error %v, want %q\n%s", c.value, err, c.want, out)
		}
	}
}

func TestR5_PlanRefusesFaultsWithoutTheirTime(t *testing.T) {
	dir := t.TempDir()
	clusters := writeFile(t, dir, "clusters.yaml", clustersYAML)
	for _, c := range []struct{ flag, value, want string }{
		{"--regress", "canary-1", "give the time after the release, as NAME@AFTER"},
		{"--fail", "canary-1@soon", "AFTER must be a positive duration"},
		{"--regress", "nobody@1m", `cluster "nobody" is not in`},
	} {
		if out, err := runCLI("plan", "--clusters", clusters, c.flag, c.value); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %s: error %v, want %q\n%s", c.flag, c.value, err, c.want, out)
		}
	}
}

func slicesEqual(a, b []string) bool { return cmp.Equal(a, b) }
