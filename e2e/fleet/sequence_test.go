package fleet

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/e2e/gitserver"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// sequenceFleet starts a fleet whose repository's bundle web (a Deployment, image tag 1, in
// namespace) follows a RolloutSequence of groups.
func sequenceFleet(t *testing.T, namespace string, groups ...v1alpha1.SequenceGroup) (*gitserver.Upstream, *fleetEnv, *v1alpha1.RolloutSequence) {
	t.Helper()
	up := gitserver.New(t)
	up.Commit("main", map[string]string{
		"web/fleet.yaml":      "defaultNamespace: " + namespace + "\nsequence: {name: waves}\n",
		"web/deployment.yaml": webManifest("example.invalid/web:1"),
	})
	srv := up.ServeHTTP("", "")
	f := startFleet(t)
	seq := &v1alpha1.RolloutSequence{ObjectMeta: metav1.ObjectMeta{Name: "waves", Namespace: f.ns}, Spec: v1alpha1.RolloutSequenceSpec{Groups: groups}}
	if err := f.hub.Create(context.Background(), seq); err != nil {
		t.Fatal(err)
	}
	createRepo(t, f, srv.URL+"/repo.git", map[string]string{"env": "prod"})
	return up, f, seq
}

// A bundle that follows a RolloutSequence: each revision reaches the canary group first, soaks
// there, and only then goes to the rest (R4.2, R4.3); the group's state per revision is
// reported on the Bundle (R4.6).
func TestR4_2_R4_3_R4_6_SequenceSoaksBeforeTheNextGroup(t *testing.T) {
	const soak = 5 * time.Second
	up, f, seq := sequenceFleet(t, "seq",
		v1alpha1.SequenceGroup{Name: "canary", ClusterSelector: canaryClusters, Soak: &metav1.Duration{Duration: soak}},
		v1alpha1.SequenceGroup{Name: "rest", Upstream: "canary", Selector: restClusters, Soak: &metav1.Duration{}})
	ctx := context.Background()

	groupState := func(group string, rev int64) v1alpha1.SequenceRevisionStatus {
		for _, g := range bundleOf(t, f, "shop-web").Status.Sequence {
			for _, r := range g.Revisions {
				if g.Name == group && r.Index == rev {
					return r
				}
			}
		}
		return v1alpha1.SequenceRevisionStatus{}
	}
	for _, step := range []struct {
		rev   int64
		image string
	}{{1, "example.invalid/web:1"}, {2, "example.invalid/web:2"}} {
		rev, image := step.rev, step.image
		if rev == 2 {
			up.Commit("main", map[string]string{"web/deployment.yaml": webManifest(image)})
		}
		eventually(t, "the canary group soaks the revision", 90*time.Second, func() bool { return groupState("canary", rev).State == v1alpha1.SequenceSoaking })
		soakUntil := groupState("canary", rev).SoakUntil
		if !deploymentAvailable(t, workloads[0], "seq", "web", image) {
			t.Errorf("revision %d: the canary soaks a revision it does not run", rev)
		}
		for _, w := range workloads[1:] {
			if r := released(deploymentOn(t, f, w.Name)); r >= rev {
				t.Fatalf("revision %d reached %s while the canary soaked it", rev, w.Name)
			}
		}
		eventually(t, "the rest receive the revision after the soak", 90*time.Second, func() bool {
			return availableEverywhere(t, "seq", "web", image, workloads[1:]...)
		})
		if rest := groupState("rest", rev).StartedAt; rest == nil || soakUntil == nil || rest.Before(soakUntil) {
			t.Errorf("revision %d: the rest group started at %v, before the canary's soak ended at %v", rev, rest, soakUntil)
		}
		eventually(t, "every group completes the revision", 30*time.Second, func() bool {
			return groupState("canary", rev).State == v1alpha1.SequenceComplete && groupState("rest", rev).State == v1alpha1.SequenceComplete
		})
	}
	if st := bundleOf(t, f, "shop-web").Status; st.Display.State != "Ready" || st.Display.ReadyClusters != allReady() {
		t.Errorf("bundle status after both revisions: %+v", st.Display)
	}
	var got v1alpha1.RolloutSequence
	if err := f.hub.Get(ctx, client.ObjectKeyFromObject(seq), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Status.Groups) != 2 || got.Status.Groups[0].Clusters != 1 || got.Status.Groups[1].Clusters != int32(len(workloads)-1) || len(got.Status.Bundles) != 1 {
		t.Errorf("sequence status: %+v", got.Status)
	}
}

// R1.3 for sequences through the hub: targeted clusters in no group of the sequence are never
// released, and the Bundle says so by name, as it does for clusters in no partition.
func TestR1_3_SequenceShowsClustersInNoGroup(t *testing.T) {
	_, f, _ := sequenceFleet(t, "seq-partial", v1alpha1.SequenceGroup{Name: "canary", ClusterSelector: canaryClusters, Soak: &metav1.Duration{}})
	eventually(t, "the bundle names the clusters in no group", 90*time.Second, func() bool {
		bun := bundleOf(t, f, "shop-web")
		cond := meta.FindStatusCondition(bun.Status.Conditions, v1alpha1.UnpartitionedClustersCondition)
		return cond != nil && cond.Reason == "UnsequencedClusters" && bun.Status.UnpartitionedClusters == 2 &&
			strings.Contains(cond.Message, workloads[1].Name) && strings.Contains(cond.Message, workloads[2].Name) &&
			deploymentAvailable(t, workloads[0], "seq-partial", "web", "example.invalid/web:1")
	})
	for _, w := range workloads[1:] {
		if r := released(deploymentOn(t, f, w.Name)); r != 0 {
			t.Errorf("%s is in no group but was released revision %d", w.Name, r)
		}
	}
}
