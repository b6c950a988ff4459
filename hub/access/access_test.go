package access

import (
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/model"
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
	releasedOther := base()
	releasedOther.Spec.Released = &v1alpha1.RevisionRef{Index: 2, ContentID: "s-ccc"}
	otherNS := base()
	otherNS.Spec.BundleNamespace = "other"
	for _, tc := range []struct {
		name    string
		updated *v1alpha1.BundleDeployment
		changed bool
	}{
		{"status write", statusOnly, false},
		{"new staged content", newStaged, true},
		{"release of the staged content", released, false},
		{"release of other content", releasedOther, true},
		{"other bundle namespace", otherNS, true},
	} {
		if got := model.ContentRefsChanged(base(), tc.updated); got != tc.changed {
			t.Errorf("%s: changed = %v, want %v", tc.name, got, tc.changed)
		}
	}
}

func TestClusterOfReadsTheBundlerLabels(t *testing.T) {
	bd := &v1alpha1.BundleDeployment{}
	if _, ok := clusterOf(bd); ok {
		t.Errorf("an unlabelled deployment maps to a cluster")
	}
	bd.Labels = map[string]string{model.LabelCluster: "edge-1", model.LabelBundleNamespace: "fleet-default"}
	req, ok := clusterOf(bd)
	if !ok || req.Namespace != "fleet-default" || req.Name != "edge-1" {
		t.Errorf("clusterOf = %v, %v; want fleet-default/edge-1", req, ok)
	}
}

// A Role is rewritten only when it lacks something: the content of the revision a cluster ran
// before may stay granted until the next write, but nothing of another kind may.
func TestRulesCoverOnlyWhatIsNeeded(t *testing.T) {
	content := func(names ...string) rbacv1.PolicyRule {
		return rbacv1.PolicyRule{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"contents"}, ResourceNames: names, Verbs: []string{"get"}}
	}
	anyContent := rbacv1.PolicyRule{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"contents"}, Verbs: []string{"get"}}
	listContent := content("s-new")
	listContent.Verbs = []string{"get", "list"}
	for _, tc := range []struct {
		name       string
		have, want []rbacv1.PolicyRule
		covers     bool
	}{
		{"same grants", []rbacv1.PolicyRule{content("s-new")}, []rbacv1.PolicyRule{content("s-new")}, true},
		{"the previous revision's content still granted", []rbacv1.PolicyRule{content("s-new", "s-old")}, []rbacv1.PolicyRule{content("s-new")}, true},
		{"new content missing", []rbacv1.PolicyRule{content("s-old")}, []rbacv1.PolicyRule{content("s-new")}, false},
		{"every content instead of named ones", []rbacv1.PolicyRule{anyContent}, []rbacv1.PolicyRule{content("s-new")}, false},
		{"more verbs", []rbacv1.PolicyRule{listContent}, []rbacv1.PolicyRule{content("s-new")}, false},
		{"an extra rule", []rbacv1.PolicyRule{content("s-new"), anyContent}, []rbacv1.PolicyRule{content("s-new")}, false},
		{"a rule missing", nil, []rbacv1.PolicyRule{content("s-new")}, false},
	} {
		if got := rulesCover(tc.have, tc.want); got != tc.covers {
			t.Errorf("%s: rulesCover = %v, want %v", tc.name, got, tc.covers)
		}
	}
}
