package hub

import (
	"testing"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// Agent status writes must not wake the access controller; content reference changes must.
func TestContentRefsChangeOnlyWithReferences(t *testing.T) {
	base := func() *v1alpha1.BundleDeployment {
		return &v1alpha1.BundleDeployment{Spec: v1alpha1.BundleDeploymentSpec{BundleNamespace: "fleet", Staged: v1alpha1.RevisionRef{Index: 1, ContentID: "s-aaa"}}}
	}
	statusOnly := base()
	statusOnly.Status.Ready = true
	newStaged := base()
	newStaged.Spec.Staged.ContentID = "s-bbb"
	released := base()
	released.Spec.Released = &v1alpha1.RevisionRef{Index: 1, ContentID: "s-aaa"}
	otherNS := base()
	otherNS.Spec.BundleNamespace = "other"
	for _, tc := range []struct {
		name    string
		updated *v1alpha1.BundleDeployment
		changed bool
	}{
		{"status write", statusOnly, false},
		{"new staged content", newStaged, true},
		{"first release", released, true},
		{"other bundle namespace", otherNS, true},
	} {
		if got := contentRefs(base()) != contentRefs(tc.updated); got != tc.changed {
			t.Errorf("%s: changed = %v, want %v", tc.name, got, tc.changed)
		}
	}
}

func TestClusterOfReadsTheBundlerLabels(t *testing.T) {
	bd := &v1alpha1.BundleDeployment{}
	if _, ok := clusterOf(bd); ok {
		t.Errorf("an unlabelled deployment maps to a cluster")
	}
	bd.Labels = map[string]string{LabelCluster: "edge-1", LabelBundleNamespace: "fleet-default"}
	req, ok := clusterOf(bd)
	if !ok || req.Namespace != "fleet-default" || req.Name != "edge-1" {
		t.Errorf("clusterOf = %v, %v; want fleet-default/edge-1", req, ok)
	}
}
