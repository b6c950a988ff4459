package lifecycle

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// A deleted deployment goes once its agent confirmed, at once when there is nothing to
// remove or no agent will, and at the uninstall timeout otherwise.
func TestNextRemovalStep(t *testing.T) {
	deleted := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	const timeout = 10 * time.Minute
	applied := func() *v1alpha1.BundleDeployment {
		bd := &v1alpha1.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Name: "fleet-web", Namespace: "cluster-a", DeletionTimestamp: &metav1.Time{Time: deleted}}}
		bd.Status.AppliedDeploymentID = "d1"
		return bd
	}
	confirmed := applied()
	confirmed.Status.Conditions = []metav1.Condition{{Type: v1alpha1.UninstalledCondition, Status: metav1.ConditionTrue, Reason: v1alpha1.UninstalledReason}}
	neverApplied := applied()
	neverApplied.Status.AppliedDeploymentID = ""
	member := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Status: v1alpha1.ClusterStatus{Namespace: "cluster-a"}}
	leaving := member.DeepCopy()
	leaving.DeletionTimestamp = &metav1.Time{Time: deleted}
	moved := member.DeepCopy()
	moved.Status.Namespace, moved.Status.PreviousNamespace = "cluster-a-0123456789", "cluster-a"
	for _, tc := range []struct {
		name     string
		bd       *v1alpha1.BundleDeployment
		cluster  *v1alpha1.Cluster
		reported bool
		now      time.Duration // after the deletion
		want     removalStep
	}{
		{"the agent confirmed", confirmed, member, true, time.Second, removalStep{release: true}},
		{"the agent works on it", applied(), member, true, time.Minute, removalStep{wait: timeout - time.Minute}},
		{"the agent did not confirm in time", applied(), member, true, timeout, removalStep{release: true, timedOut: true}},
		{"nothing was applied", neverApplied, member, true, 0, removalStep{release: true}},
		{"no agent ever reported for the cluster", applied(), member, false, 0, removalStep{release: true}},
		{"the cluster is gone", applied(), nil, true, 0, removalStep{release: true}},
		{"the cluster leaves the fleet", applied(), leaving, true, 0, removalStep{release: true}},
		{"the cluster moved to another namespace", applied(), moved, true, 0, removalStep{release: true}},
	} {
		if got := nextRemovalStep(tc.bd, tc.cluster, tc.reported, deleted.Add(tc.now), timeout); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
