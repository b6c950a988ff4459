package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/flotilla-dev/flotilla/hub/operate"
	"github.com/google/go-cmp/cmp"
)

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func runCLI(args ...string) (string, error) {
	var out bytes.Buffer
	cmd := newRootCommand()
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

const clustersYAML = `
clusters:
- {name: canary-1, labels: {ring: canary}}
- {name: canary-2, labels: {ring: canary}}
- {name: prod-1, labels: {env: prod}}
- {name: prod-2, labels: {env: prod}}
- {name: prod-3, labels: {env: prod}}
- {name: lab-1, labels: {env: lab}}
`

const fleetYAML = `
defaultNamespace: web
rolloutStrategy:
  maxUnavailable: 1
  partitions:
  - name: canary
    maxUnavailable: 0
    clusterSelector: {matchLabels: {ring: canary}}
  - name: prod
    clusterSelector: {matchLabels: {env: prod}}
`

func TestPlanJSON(t *testing.T) {
	dir := t.TempDir()
	clusters := writeFile(t, dir, "clusters.yaml", clustersYAML)
	fleet := writeFile(t, dir, "fleet.yaml", fleetYAML)
	out, err := runCLI("plan", "--clusters", clusters, "--fleet-yaml", fleet, "--ready-after", "1m", "-o", "json")
	if err != nil {
		t.Fatalf("plan: %v\n%s", err, out)
	}
	var got struct {
		Partitions []struct {
			Name           string   `json:"name"`
			Clusters       []string `json:"clusters"`
			MaxUnavailable int      `json:"maxUnavailable"`
		} `json:"partitions"`
		Unpartitioned []string `json:"unpartitioned"`
		Steps         []struct {
			At       string   `json:"at"`
			Released []string `json:"released"`
			Paused   string   `json:"paused"`
		} `json:"steps"`
		Completed bool `json:"completed"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	if !got.Completed {
		t.Errorf("completed = false")
	}
	if diff := cmp.Diff([]string{"lab-1"}, got.Unpartitioned); diff != "" {
		t.Errorf("unpartitioned (-want +got):\n%s", diff)
	}
	if len(got.Partitions) != 2 || got.Partitions[0].MaxUnavailable != 0 || got.Partitions[1].MaxUnavailable != 1 {
		t.Errorf("partitions = %+v", got.Partitions)
	}
	if len(got.Steps) != 2 || got.Steps[0].At != "0s" || got.Steps[1].At != "1m0s" {
		t.Fatalf("steps = %+v", got.Steps)
	}
	if diff := cmp.Diff([]string{"canary-1", "canary-2"}, got.Steps[0].Released); diff != "" {
		t.Errorf("first release (-want +got):\n%s", diff)
	}
	if !strings.Contains(got.Steps[0].Paused, "canary") {
		t.Errorf("first step pause = %q", got.Steps[0].Paused)
	}
	if diff := cmp.Diff([]string{"prod-1", "prod-2", "prod-3"}, got.Steps[1].Released); diff != "" {
		t.Errorf("second release (-want +got):\n%s", diff)
	}
}

func TestPlanTableShowsStuckRollout(t *testing.T) {
	dir := t.TempDir()
	clusters := writeFile(t, dir, "clusters.yaml", clustersYAML)
	fleet := writeFile(t, dir, "fleet.yaml", fleetYAML)
	out, err := runCLI("plan", "--clusters", clusters, "--fleet-yaml", fleet, "--fail", "canary-2")
	if err != nil {
		t.Fatalf("plan: %v", err)
	}
	// A canary that never becomes Ready holds the rollout, and after failureTimeout (10m) the
	// rollout has failed (R5.3); Pause, the default, keeps it where it is.
	for _, want := range []string{"PARTITION", "canary", "never released", "1 partitions NotReady (canary)",
		"Failed after 10m0s: revision 2 failed (partition canary: 1 failing, more than its maxUnavailable 0) on: canary-2 (R5.3); the rollout holds (onFailure: Pause)", "Outcome: Failed"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

// R1.2 reads percentages; one that is no number is refused naming its line and field, in
// the same words as the hub's (bundle.DecodeFleetYAML), for a manual partition's too.
func TestR1_2_PlanNamesTheFieldOfAnUnreadablePercentage(t *testing.T) {
	dir := t.TempDir()
	clusters := writeFile(t, dir, "clusters.yaml", clustersYAML)
	for fleet, want := range map[string]string{
		"rolloutStrategy:\n  maxUnavailable: abc%\n": `fleet.yaml:2: rolloutStrategy.maxUnavailable: invalid value "abc%": want an integer or a percentage like "25%"`,
		"rolloutStrategy:\n  partitions:\n  - {name: a, clusterName: c}\n  - name: b\n    clusterName: d\n    maxUnavailable: 1O%\n": `fleet.yaml:6: rolloutStrategy.partitions[1].maxUnavailable: invalid value "1O%"`,
	} {
		_, err := runCLI("plan", "--clusters", clusters, "--fleet-yaml", writeFile(t, dir, "fleet.yaml", fleet))
		var in *operate.ErrInput
		if !errors.As(err, &in) || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want an input error with %q", fleet, err, want)
		}
	}
}

func TestPlanBadInputNamesFileAndField(t *testing.T) {
	dir := t.TempDir()
	clusters := writeFile(t, dir, "clusters.yaml", clustersYAML)
	cases := []struct {
		name  string
		fleet string
		args  []string
		want  []string
	}{
		{"mistyped field", "rolloutStrategy:\n  maxUnavalable: 1\n", nil, []string{"fleet.yaml:2: rolloutStrategy.maxUnavalable: unknown field", `did you mean "maxUnavailable"?`}},
		{"percent above 100", "rolloutStrategy:\n  maxUnavailable: 150%\n", nil, []string{"fleet.yaml: rolloutStrategy.maxUnavailable: 150% is above 100%"}},
		{"partition without selector", "rolloutStrategy:\n  partitions:\n  - name: a\n", nil, []string{"fleet.yaml: rolloutStrategy.partitions[0]: needs clusterName"}},
		{"maxSurge zero", "placement:\n  rollingUpdate:\n    maxSurge: 0\n", nil, []string{"fleet.yaml: placement.rollingUpdate.maxSurge: must not be 0"}},
		{"wrong type", "rolloutStrategy:\n  maxNew: many\n", nil, []string{"fleet.yaml:2: rolloutStrategy.maxNew: wrong type"}},
		{"unknown failing cluster", "", []string{"--fail", "nope"}, []string{`--fail: cluster "nope" is not in`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fleet := writeFile(t, dir, "fleet.yaml", c.fleet)
			_, err := runCLI(append([]string{"plan", "--clusters", clusters, "--fleet-yaml", fleet}, c.args...)...)
			var in *operate.ErrInput
			if !errors.As(err, &in) {
				t.Fatalf("want an input error (exit code 2), got %v", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
	t.Run("cluster without name", func(t *testing.T) {
		bad := writeFile(t, dir, "bad-clusters.yaml", "- {labels: {a: b}}\n")
		_, err := runCLI("plan", "--clusters", bad)
		if err == nil || !strings.Contains(err.Error(), "bad-clusters.yaml: clusters[0].name: is required") {
			t.Errorf("error = %v", err)
		}
	})
}

func TestPlanRollingUpdatePlacement(t *testing.T) {
	dir := t.TempDir()
	clusters := writeFile(t, dir, "clusters.yaml", clustersYAML)
	fleet := writeFile(t, dir, "fleet.yaml", "placement:\n  type: PickN\n  numberOfClusters: 4\n  rollingUpdate: {maxUnavailable: 1, maxSurge: 1, unavailablePeriodSeconds: 30}\n")
	out, err := runCLI("plan", "--clusters", clusters, "--fleet-yaml", fleet)
	if err != nil {
		t.Fatalf("plan: %v", err)
	}
	for _, want := range []string{"Rolling update to N = 4 of 6 clusters: keep at least 3 available, at most 5 carrying", "removed 2", "Completed after"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "not picked") {
		t.Errorf("an unpicked cluster is shown as the reason to wait:\n%s", out)
	}
}

// R1.15: --ineligible names clusters that cannot run the new revision; the plan goes on
// without them, as the hub does, and says which and why. A time is refused: a cluster is
// ineligible from its release on.
func TestR1_15_PlanGoesOnWithoutAnIneligibleCluster(t *testing.T) {
	dir := t.TempDir()
	clusters := writeFile(t, dir, "clusters.yaml", "- {name: canary-0, labels: {tier: canary}}\n- {name: prod-0, labels: {tier: prod}}\n- {name: prod-1, labels: {tier: prod}}\n")
	fleet := writeFile(t, dir, "fleet.yaml", "rolloutStrategy:\n  maxUnavailable: 0\n  partitions:\n  - {name: canary, clusterSelector: {matchLabels: {tier: canary}}}\n  - {name: prod, clusterSelector: {matchLabels: {tier: prod}}}\n")
	out, err := runCLI("plan", "--clusters", clusters, "--fleet-yaml", fleet, "--ineligible", "prod-0", "-o", "json")
	if err != nil {
		t.Fatalf("plan: %v\n%s", err, out)
	}
	var plan struct {
		Warnings  []string `json:"warnings"`
		Completed bool     `json:"completed"`
		Duration  string   `json:"duration"`
	}
	if err := json.Unmarshal([]byte(out), &plan); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	want := "1 clusters cannot run revision 2 and run what they ran before: prod-0 does not serve an API of the revision (R1.15)"
	if !plan.Completed || plan.Duration != "1m0s" || !slices.Contains(plan.Warnings, want) {
		t.Errorf("completed %v after %s, warnings %q; want completed after 1m0s, warning %q\n%s", plan.Completed, plan.Duration, plan.Warnings, want, out)
	}
	if out, err := runCLI("plan", "--clusters", clusters, "--fleet-yaml", fleet, "--ineligible", "prod-0@5m"); err == nil || !strings.Contains(err.Error(), "--ineligible prod-0: a cluster is ineligible for the revision from its release on") {
		t.Errorf("--ineligible prod-0@5m: %v, want it refused\n%s", err, out)
	}
}
