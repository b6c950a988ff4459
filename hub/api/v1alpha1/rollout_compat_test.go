package v1alpha1_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/manifests"
	"github.com/flotilla-dev/flotilla/rollout"
)

// TestAPIAndPlannerSpeakTheSameJSON: the hub converts API specs to the planner's types by
// encoding, so every field of the samples must decode strictly into the planner's types.
func TestAPIAndPlannerSpeakTheSameJSON(t *testing.T) {
	samples, err := manifests.Samples()
	if err != nil {
		t.Fatal(err)
	}
	roundTrip := func(file string, api any, spec func() any, planner any) {
		t.Helper()
		if err := yaml.UnmarshalStrict(samples[file], api); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		data, err := json.Marshal(spec())
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.UnmarshalStrict(data, planner); err != nil {
			t.Fatalf("%s: the planner cannot read the API's JSON: %v\n%s", file, err, data)
		}
	}
	var strategy v1alpha1.StagedUpdateStrategy
	var staged rollout.StagedStrategy
	roundTrip("stagedupdatestrategy.yaml", &strategy, func() any { return strategy.Spec }, &staged)
	if err := rollout.ValidateStaged(&staged); err != nil || len(staged.Stages) != 3 || len(staged.Stages[2].Groups) != 2 {
		t.Errorf("staged strategy: %v, %+v", err, staged)
	}
	// A run's status goes from the planner to the API and back: the start keeps its
	// microseconds, which order runs set running within one second (R3.14).
	started := rollout.MicroTime{Time: time.Date(2026, 3, 1, 12, 0, 0, 123456000, time.UTC)}
	out, err := json.Marshal(rollout.RunStatus{State: rollout.RunRunning, StartedAt: started})
	if err != nil {
		t.Fatal(err)
	}
	var runStatus v1alpha1.StagedUpdateRunStatus
	if err := json.Unmarshal(out, &runStatus); err != nil || runStatus.StartedAt == nil || !runStatus.StartedAt.Equal(&metav1.MicroTime{Time: started.Time}) {
		t.Fatalf("the API reads the planner's run status start as %v: %v", runStatus.StartedAt, err)
	}
	back, _ := json.Marshal(runStatus)
	var again rollout.RunStatus
	if err := json.Unmarshal(back, &again); err != nil || !again.StartedAt.Equal(started.Time) {
		t.Errorf("the planner reads the API's start as %v: %v", again.StartedAt, err)
	}
	var sequence v1alpha1.RolloutSequence
	var seq rollout.Sequence
	roundTrip("rolloutsequence.yaml", &sequence, func() any { return sequence.Spec }, &seq)
	if _, err := seq.ChainOrder(); err != nil || len(seq.Revisions[0].SoakOverrides) != 1 {
		t.Errorf("sequence: %v, %+v", err, seq)
	}
	var bundle v1alpha1.Bundle
	var continuous rollout.Strategy
	roundTrip("bundle.yaml", &bundle, func() any { return bundle.Spec.RolloutStrategy }, &continuous)
	if err := rollout.Validate(&continuous, nil); err != nil || len(continuous.Partitions) != 2 || continuous.MaxUnavailable.String() != "10%" {
		t.Errorf("rollout strategy: %v, %+v", err, continuous)
	}
}

// TestR3_1_R4_1_ThePlannerRefusesWhatTheAPIServerRefuses: the planner's list limits, which
// `flotilla plan` applies, are the CRDs' maxItems, read from the generated schemas.
func TestR3_1_R4_1_ThePlannerRefusesWhatTheAPIServerRefuses(t *testing.T) {
	crds, err := manifests.CRDs()
	if err != nil {
		t.Fatal(err)
	}
	schemas := map[string]map[string]any{} // kind → spec schema
	for _, data := range crds {
		var crd struct {
			Spec struct {
				Names    struct{ Kind string }
				Versions []struct {
					Schema struct {
						OpenAPIV3Schema map[string]any `json:"openAPIV3Schema"`
					}
				}
			}
		}
		if err := yaml.Unmarshal(data, &crd); err != nil || len(crd.Spec.Versions) == 0 {
			continue // the kustomization
		}
		schemas[crd.Spec.Names.Kind] = crd.Spec.Versions[0].Schema.OpenAPIV3Schema
	}
	maxItems := func(kind string, path ...string) int {
		t.Helper()
		node := schemas[kind]
		for _, p := range append([]string{"spec"}, path...) {
			if p == "[]" {
				node, _ = node["items"].(map[string]any)
				continue
			}
			props, _ := node["properties"].(map[string]any)
			node, _ = props[p].(map[string]any)
		}
		n, ok := node["maxItems"].(float64)
		if !ok {
			t.Fatalf("%s %v has no maxItems", kind, path)
		}
		return int(n)
	}
	for _, c := range []struct {
		what    string
		crd     int
		planner int
	}{
		{"stages", maxItems("StagedUpdateStrategy", "stages"), rollout.MaxStages},
		{"groups of a stage", maxItems("StagedUpdateStrategy", "stages", "[]", "groups"), rollout.MaxStageGroups},
		{"groups of a sequence", maxItems("RolloutSequence", "groups"), rollout.MaxSequenceGroups},
		{"partitions", maxItems("Bundle", "rolloutStrategy", "partitions"), rollout.MaxPartitions},
	} {
		if c.crd != c.planner {
			t.Errorf("%s: the API server refuses more than %d, the planner more than %d", c.what, c.crd, c.planner)
		}
	}
	// And the planner does refuse one more.
	stages := make([]rollout.Stage, rollout.MaxStages+1)
	for i := range stages {
		stages[i] = rollout.Stage{Name: fmt.Sprintf("s%d", i), Selector: "ring=" + fmt.Sprint(i)}
	}
	if err := rollout.ValidateStaged(&rollout.StagedStrategy{Stages: stages}); err == nil || !strings.Contains(err.Error(), "stages: at most 31 stages, got 32") {
		t.Errorf("32 stages: %v", err)
	}
}
