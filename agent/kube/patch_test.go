package kube

import (
	"encoding/json"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// A status patch carries what changed, removes what the new status dropped (a merge patch
// would keep a field it does not name: an old revision's readyAt beside a new revision), and,
// with a resourceVersion, applies only to that version.
func TestStatusPatchCarriesTheChangeAlone(t *testing.T) {
	readyAt := metav1.Now()
	orig := v1alpha1.BundleDeploymentStatus{AppliedDeploymentID: "d1", Ready: true, ReadyAt: &readyAt}
	cases := []struct {
		name            string
		status          v1alpha1.BundleDeploymentStatus
		resourceVersion string
		want            string
	}{
		{"a new revision drops readyAt", v1alpha1.BundleDeploymentStatus{AppliedDeploymentID: "d2"}, "7",
			`{"metadata":{"resourceVersion":"7"},"status":{"appliedDeploymentID":"d2","ready":null,"readyAt":null}}`},
		{"unlocked", v1alpha1.BundleDeploymentStatus{AppliedDeploymentID: "d1", Ready: true, ReadyAt: &readyAt, State: "Ready"}, "",
			`{"status":{"state":"Ready"}}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			patch, err := StatusPatch(orig, c.status, c.resourceVersion)
			if err != nil {
				t.Fatal(err)
			}
			var got, want any
			if err := json.Unmarshal(patch, &got); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(c.want), &want); err != nil {
				t.Fatal(err)
			}
			if gotJSON, _ := json.Marshal(got); string(gotJSON) != mustJSON(t, want) {
				t.Errorf("patch %s, want %s", gotJSON, c.want)
			}
		})
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
