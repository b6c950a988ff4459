package hub

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/model"
)

// The rules of continuous rollouts (§1) through the real hub; the planner's own tests cover
// each rule's arithmetic, these show the hub acting on it.

func clustersNamed(labels map[string]string, names ...string) map[string]map[string]string {
	out := map[string]map[string]string{}
	for _, n := range names {
		l := map[string]string{}
		for k, v := range labels {
			l[k] = v
		}
		out[n] = l
	}
	return out
}

// R1.1, R1.14: without a rolloutStrategy every default holds: maxUnavailable 100% makes each
// partition Ready at once, so the first pass releases every cluster, and the Bundle warns that
// the rollout does not wait.
func TestR1_1_R1_14_DefaultsReleaseEveryClusterAndSaySo(t *testing.T) {
	f := newSimFleet(t, Options{}, "defaultNamespace: web\n", clustersNamed(nil, "a", "b", "c"))
	f.until("revision 1 is released to every cluster before any reports", func() bool { return len(f.released(1)) == 3 })
	f.until("the Bundle warns about the unsafe default", func() bool {
		c := meta.FindStatusCondition(f.getBundle().Status.Conditions, v1alpha1.UnsafeDefaultsCondition)
		return c != nil && strings.Contains(c.Message, "maxUnavailable is 100%") && strings.Contains(c.Message, "R1.14")
	})
}

// R1.2, R1.3, R1.5, R1.7, R1.9: manual partitions go in the order written; a cluster in none is
// never released and is named on the Bundle; a manual partition uses its own maxUnavailable
// (49% of 4 clusters rounds down to 1), one without uses the global one (0); the global budget,
// counted over every cluster, holds the next partition even when its predecessor is within its
// own threshold.
func TestR1_2_R1_3_R1_5_R1_7_R1_9_PartitionThresholdsAndTheGlobalBudget(t *testing.T) {
	fleet := `defaultNamespace: web
rolloutStrategy:
  maxUnavailable: 0
  partitions:
  - {name: canary, maxUnavailable: 49%, clusterSelector: {matchLabels: {ring: canary}}}
  - {name: rest, clusterSelector: {matchLabels: {ring: main}}}
`
	clusters := clustersNamed(map[string]string{"ring": "canary"}, "c1", "c2", "c3", "c4")
	for name, l := range clustersNamed(map[string]string{"ring": "main"}, "m1", "m2") {
		clusters[name] = l
	}
	clusters["x1"] = map[string]string{"ring": "lab"}
	f := newSimFleet(t, Options{}, fleet, clusters)
	f.releasedExactly(1, "partitions NotReady (canary)", "c1", "c2", "c3", "c4")
	f.until("the partitions report their thresholds", func() bool {
		ps := f.getBundle().Status.Partitions
		return len(ps) == 2 && ps[0].MaxUnavailable == 1 && ps[1].MaxUnavailable == 0
	})
	f.ready("c1", "c2")
	f.report(false, "c3", "c4")
	f.releasedExactly(1, "partitions NotReady (canary)", "c1", "c2", "c3", "c4") // 2 unavailable > 1 (R1.6)
	f.ready("c3")
	// The canary is within its threshold now (1 ≤ 1), but 1 unavailable exceeds the global 0.
	f.releasedExactly(1, "1 clusters unavailable, more than maxUnavailable 0 (0) (R1.9)", "c1", "c2", "c3", "c4")
	f.ready("c4")
	f.until("the rest partition is released", func() bool { return len(f.released(1)) == 6 })
	f.ready("m1", "m2")
	f.until("the Bundle names the cluster in no partition", func() bool {
		c := meta.FindStatusCondition(f.getBundle().Status.Conditions, v1alpha1.UnpartitionedClustersCondition)
		return c != nil && strings.Contains(c.Message, "x1")
	})
	if _, ok := f.deployments()["x1"]; ok {
		t.Errorf("x1, in no partition, has a deployment (R1.3):\n%s", f.dump())
	}
	// A cluster joining the rest partition, which the rollout has reached, gets the revision
	// without a new one.
	registerCluster(t, f.c, f.ns, "m3", map[string]string{"ring": "main"})
	f.until("the joining cluster receives revision 1", func() bool { return len(f.released(1)) == 7 })
	if b := f.getBundle(); b.Spec.LatestRevision != 1 {
		t.Errorf("a joining cluster made revision %d: it must take the latest revision as it is", b.Spec.LatestRevision)
	}
}

// R1.4: above autoPartitionThreshold, automatic partitions of autoPartitionSize (40% of 5 → 2)
// are taken in name order, the remainder forming a last, smaller one; with maxUnavailable 0
// each waits for the one before.
func TestR1_4_AutomaticPartitionsAboveTheThreshold(t *testing.T) {
	fleet := "defaultNamespace: web\nrolloutStrategy: {maxUnavailable: 0, autoPartitionThreshold: 4, autoPartitionSize: 40%}\n"
	f := newSimFleet(t, Options{}, fleet, clustersNamed(nil, "a5", "a1", "a4", "a2", "a3"))
	f.releasedExactly(1, "NotReady", "a1", "a2")
	f.until("three automatic partitions of 2, 2 and 1", func() bool {
		var sizes []string
		for _, p := range f.getBundle().Status.Partitions {
			sizes = append(sizes, fmt.Sprint(p.Count))
		}
		return strings.Join(sizes, ",") == "2,2,1"
	})
	f.ready("a1", "a2")
	f.releasedExactly(1, "NotReady", "a1", "a2", "a3", "a4")
	f.ready("a3", "a4")
	f.until("the last partition is released", func() bool { return len(f.released(1)) == 5 })
}

// R1.8 through the hub: one pass releases at most maxNew clusters of a partition, and the
// partition's threshold is checked again, with the batch just written counted, before the next
// batch. With maxUnavailable 2 the partition of five takes a batch of two, is still Ready (2 is
// not more than 2), takes the next two and stops: the fifth waits although the partition was
// entered. With maxUnavailable 1 the first batch alone fills the threshold.
func TestR1_8_MaxNewReleasesInBatchesCheckedAgainstTheThreshold(t *testing.T) {
	fleet := func(maxUnavailable int) string {
		return fmt.Sprintf("defaultNamespace: web\nrolloutStrategy: {maxUnavailable: %d, maxNew: 2}\n", maxUnavailable)
	}
	f := newSimFleet(t, Options{}, fleet(2), clustersNamed(nil, "a", "b", "c", "d", "e"))
	f.releasedExactly(1, "4 clusters unavailable, more than its maxUnavailable 2 (2) (R1.6)", "a", "b", "c", "d")
	f.ready("a", "b", "c", "d")
	f.until("the last cluster is released once the batches are Ready", func() bool { return len(f.released(1)) == 5 })
	f.ready("e")

	f.commit("2", fleet(1))
	f.releasedExactly(2, "2 clusters unavailable, more than its maxUnavailable 1 (1) (R1.6)", "a", "b")
	f.ready("a")
	f.releasedExactly(2, "3 clusters unavailable, more than its maxUnavailable 1 (1) (R1.6)", "a", "b", "c", "d") // b unavailable is within 1: the next batch of two
	f.ready("b", "c", "d")
	f.until("revision 2 reaches e", func() bool { return len(f.released(2)) == 5 })
}

// R1.10 through the hub, on a clock that never moves: nothing the hub times can move this
// rollout, so every step below is the hub answering an event when it happens: a report that
// opens the next partition, a paused cluster unpaused, a new revision.
func TestR1_10_ARolloutMovesOnEventsAloneWhileTheClockStandsStill(t *testing.T) {
	start := time.Now()
	still := &simClock{at: start}
	fleet := canaryThenRest
	clusters := clustersNamed(map[string]string{"ring": "canary"}, "c1")
	for name, l := range clustersNamed(map[string]string{"ring": "main"}, "m1", "m2") {
		clusters[name] = l
	}
	f := newSimFleetOf(t, Options{Clock: still.now}, fleet, clusters, map[string]v1alpha1.ClusterSpec{"m2": {Paused: true}})
	f.releasedExactly(1, "partitions NotReady (canary)", "c1")
	f.ready("c1")
	f.until("the canary's report opens the rest, where the paused m2 waits", func() bool { return slices.Equal(f.released(1), []string{"c1", "m1"}) })
	f.ready("m1")
	f.until("the hub counts m1 Ready", func() bool { return f.getBundle().Status.Summary.Ready == 2 })
	if got := f.released(1); !slices.Equal(got, []string{"c1", "m1"}) {
		t.Fatalf("revision 1 released to %v while m2 is paused (R1.13)\n%s", got, f.dump())
	}
	f.editCluster("m2", func(c *v1alpha1.Cluster) { c.Spec.Paused = false })
	f.until("unpausing m2 releases it", func() bool { return len(f.released(1)) == 3 })
	f.ready("m2")

	f.commit("2", "")
	f.releasedExactly(2, "partitions NotReady (canary)", "c1")
	f.ready("c1")
	f.until("the canary's report opens the rest for revision 2", func() bool { return len(f.released(2)) == 3 })
	f.ready("m1", "m2")
	f.until("revision 2 completes", func() bool {
		o := f.getBundle().Status.Outcome
		return o != nil && o.Revision == 2 && o.Outcome == v1alpha1.OutcomeCompleted
	})
	if got := still.now(); !got.Equal(start) {
		t.Fatalf("the clock moved to %s", got)
	}
}

// R1.8, R1.10: a release the API server refuses is neither lost nor in the others' way. A pass's
// batch is written while the next pass plans, and that pass counts the batch as released: a
// refused write must be forgotten for a later pass to release its cluster again. The clock
// stands still, so the hub's memory of a release never expires on its own: only forgetting
// the refused one releases its cluster once the API server accepts it.
func TestR1_8_AReleaseTheAPIServerRefusesIsReleasedOnceItAccepts(t *testing.T) {
	ctx := context.Background()
	admin := apiClient(t)
	// Named to come last: the rollout controller releases it in the last batch, after the
	// bundler's first pass (which writes the first batch with the revision's staging).
	const refused = "z-refused-by-the-api-server"
	policy := refuseDeploymentsOf(t, admin, refused)

	still := &simClock{at: time.Now()}
	f := newSimFleet(t, Options{Clock: still.now}, "defaultNamespace: web\nrolloutStrategy: {maxUnavailable: 5, maxNew: 2}\n",
		clustersNamed(nil, "a", refused, "b", "c", "d"))
	f.until("every cluster but the refused one is released", func() bool {
		return slices.Equal(f.released(1), []string{"a", "b", "c", "d"})
	})
	if _, ok := f.deployments()[refused]; ok {
		t.Fatalf("the API server refused %s's deployment, yet it exists\n%s", refused, f.dump())
	}
	if err := admin.Delete(ctx, policy); err != nil {
		t.Fatal(err)
	}
	f.until("the refused cluster is released once the API server accepts its deployment", func() bool {
		return len(f.released(1)) == 5
	})
	f.ready("a", refused, "b", "c", "d")
	f.until("revision 1 completes", func() bool {
		o := f.getBundle().Status.Outcome
		return o != nil && o.Revision == 1 && o.Outcome == v1alpha1.OutcomeCompleted
	})
}

// refuseDeploymentsOf makes the API server refuse every write of a BundleDeployment for the
// named cluster (a ValidatingAdmissionPolicy, as an operator's policy or quota would) until the
// returned policy is deleted, and waits until it does.
func refuseDeploymentsOf(t *testing.T, c client.Client, cluster string) client.Object {
	t.Helper()
	ctx := context.Background()
	name := "refuse-" + cluster
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
		FailurePolicy: ptr.To(admissionregistrationv1.Fail),
		MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{v1alpha1.GroupVersion.Group}, APIVersions: []string{v1alpha1.GroupVersion.Version}, Resources: []string{"bundledeployments"}},
		}}}},
		Validations: []admissionregistrationv1.Validation{{
			Expression: fmt.Sprintf("!has(object.metadata.labels) || !('%s' in object.metadata.labels) || object.metadata.labels['%s'] != '%s'", model.LabelCluster, model.LabelCluster, cluster),
			Message:    "refused for the test",
		}},
	}}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
		PolicyName: name, ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
	}}
	for _, o := range []client.Object{policy, binding} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, o := range []client.Object{binding, policy} {
			_ = client.IgnoreNotFound(c.Delete(ctx, o))
		}
	})
	probe := &v1alpha1.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: "default", Labels: map[string]string{model.LabelCluster: cluster}},
		Spec: v1alpha1.BundleDeploymentSpec{Bundle: "b", BundleNamespace: "n", Staged: v1alpha1.RevisionRef{Index: 1, ContentID: "c", DeploymentID: "d"}}}
	waitUntil(t, "the API server enforces the policy", func() bool {
		err := c.Create(ctx, probe.DeepCopy(), client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), "refused for the test")
	})
	return policy
}
