package bundle

import (
	"reflect"
	"testing"
)

// A comparePatches remove operation excludes its path from drift detection like a JSON
// pointer: the agent, which knows pointers only, honours it.
func TestComparePatchRemoveOperationsBecomePointers(t *testing.T) {
	got := deploymentOptions(Options{Diff: &Diff{ComparePatches: []ComparePatch{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web",
		JSONPointers: []string{"/metadata/labels"}, Operations: []Operation{{Op: "remove", Path: "/spec/replicas"}}}}}})
	want := []ComparePatch{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", JSONPointers: []string{"/metadata/labels", "/spec/replicas"}}}
	if !reflect.DeepEqual(got.ComparePatches, want) {
		t.Errorf("comparePatches = %+v, want %+v", got.ComparePatches, want)
	}
}
