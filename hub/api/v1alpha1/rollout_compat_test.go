package v1alpha1_test

import (
	"encoding/json"
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
