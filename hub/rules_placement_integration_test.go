package hub

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// A rolling update with placement (§2) through the real hub: PickN takes N clusters in name
// order (R2.1, R2.2); the default budgets of 25% of N = 3 round up to one unavailable and one
// surplus cluster (R2.3); an update takes one cluster down at a time, and a cluster counts as
// available only unavailablePeriodSeconds after it applied (R2.4, R2.5); a cluster leaving the
// selection keeps the workload until a new one carries it and availability allows (R2.4, R2.6).
func TestR2_1_R2_2_R2_3_R2_4_R2_5_R2_6_RollingUpdateThroughTheHub(t *testing.T) {
	placement := func(period string) string {
		return "defaultNamespace: web\nplacement: {type: PickN, numberOfClusters: 3, rollingUpdate: {unavailablePeriodSeconds: " + period + "}}\n"
	}
	f := newSimFleet(t, Options{}, placement("3600"), clustersNamed(nil, "a", "b", "c", "d"))
	ctx := context.Background()

	// First deployment: new clusters spend only the surge budget, so all three picked go at once.
	f.until("revision 1 is released to the three clusters PickN picks", func() bool { return slices.Equal(f.released(1), []string{"a", "b", "c"}) })
	f.reportApplied(true, time.Now().Add(-2*time.Hour), "a", "b", "c") // applied long enough ago to count as available
	f.until("the bundle is ready", func() bool {
		return meta.IsStatusConditionTrue(f.getBundle().Status.Conditions, v1alpha1.ReadyCondition)
	})
	if _, ok := f.deployments()["d"]; ok {
		t.Fatalf("d, not picked by PickN 3, has a deployment:\n%s", f.dump())
	}

	// An in-place update: one cluster at a time, and a cluster that applied counts as available
	// only an hour later.
	f.commit("2", "")
	f.releasedExactly(2, "2 of 3 clusters available, at least N−maxUnavailable = 2 must stay available (R2.4)", "a")
	f.ready("a")
	f.until("the hub counts a Ready on revision 2", func() bool {
		b := f.getBundle()
		return b.Status.ReleasingRevision == 2 && b.Status.Summary.Ready >= 1
	})
	if got := f.released(2); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("revision 2 went on to %v while a's unavailable period runs (R2.5)\n%s", got, f.dump())
	}
	f.commit("2", placement("1")) // the period ends: the update goes on
	f.until("b is released once a counts as available", func() bool { return slices.Contains(f.released(2), "b") })
	f.ready("b")
	f.until("c is released", func() bool { return len(f.released(2)) == 3 })
	f.ready("c")
	f.until("the bundle is ready on revision 2", func() bool {
		b := f.getBundle()
		return b.Status.ReleasingRevision == 2 && meta.IsStatusConditionTrue(b.Status.Conditions, v1alpha1.ReadyCondition)
	})

	// c turns unready, then b leaves the selection: d takes its place within the surge, and b
	// keeps the workload while a and b are all that is available.
	f.report(false, "c")
	var b v1alpha1.Cluster
	if err := f.c.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "b"}, &b); err != nil {
		t.Fatal(err)
	}
	orig := b.DeepCopy()
	b.Labels = map[string]string{"retired": "true"}
	if err := f.c.Patch(ctx, &b, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	f.until("d carries the workload and b waits to leave", func() bool {
		bd, kept := f.deployments()["b"]
		return slices.Contains(f.released(2), "d") && kept && bd.DeletionTimestamp.IsZero() && strings.Contains(f.pausedFor(), "leaving:")
	})
	f.ready("d")
	f.until("b's deployment is removed once d counts as available", func() bool {
		bd, kept := f.deployments()["b"]
		return !kept || !bd.DeletionTimestamp.IsZero()
	})
	if bds := f.deployments(); bds["a"].DeletionTimestamp != nil || bds["c"].DeletionTimestamp != nil {
		t.Errorf("only b left the selection:\n%s", f.dump())
	}
}

// R2.3, R2.5 through the hub with nothing set but the placement: the default budgets of 25%
// of 4 let one cluster at a time be unavailable, and the default settling period is a minute.
// On a simulated clock, a cluster that applied revision 2 59 s ago does not count as available
// yet, so the next cluster waits; two seconds later it does, and the next one is released.
func TestR2_3_R2_5_TheDefaultSettlingPeriodIsAMinute(t *testing.T) {
	clock := &simClock{at: time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)}
	f := newSimFleet(t, Options{Clock: clock.now}, "defaultNamespace: web\nplacement: {type: PickAll}\n", clustersNamed(nil, "a", "b", "c", "d"))
	f.until("revision 1 is released to every cluster", func() bool { return len(f.released(1)) == 4 })
	f.reportApplied(true, clock.now().Add(-time.Hour), "a", "b", "c", "d")
	f.until("revision 1 is Ready everywhere", func() bool { return f.getBundle().Status.Summary.Ready == 4 })

	f.commit("2", "")
	hold := "maxUnavailable: 3 of 4 clusters available, at least N−maxUnavailable = 3 must stay available (R2.4)"
	f.releasedExactly(2, hold, "a")
	f.reportApplied(true, clock.now().Add(-59*time.Second), "a")
	f.until("the hub counts a Ready on revision 2", func() bool {
		b := f.getBundle()
		return b.Status.ReleasingRevision == 2 && b.Status.Summary.Ready == 1
	})
	if got := f.released(2); !slices.Equal(got, []string{"a"}) || !strings.Contains(f.pausedFor(), hold) {
		t.Fatalf("59 s after a applied, revision 2 went on to %v (%q): the default settling period is 60 s (R2.3)\n%s", got, f.pausedFor(), f.dump())
	}
	clock.advance(2 * time.Second)
	f.poke()
	f.until("61 s after a applied, the next cluster is released", func() bool { return len(f.released(2)) == 2 })
}

// R2.1 with affinity, from a fleet.yaml, through the hub: PickN of 2 takes only clusters in
// westus, the gold one first, then by name; a picked cluster moved out of westus leaves the
// pick, another takes its place first, and the one that left loses the workload once the new
// one is available.
func TestR2_1_PickNAffinityThroughTheHub(t *testing.T) {
	fleet := `defaultNamespace: web
placement:
  type: PickN
  numberOfClusters: 2
  affinity:
    clusterAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        clusterSelectorTerms:
        - labelSelector: {matchLabels: {location: westus}}
      preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 50
        preference: {labelSelector: {matchLabels: {tier: gold}}}
  rollingUpdate: {unavailablePeriodSeconds: 1}
`
	f := newSimFleet(t, Options{}, fleet, map[string]map[string]string{
		"a": {"location": "westus"}, "b": {"location": "eastus", "tier": "gold"}, "c": {"location": "westus", "tier": "gold"}, "d": {"location": "westus"},
	})
	f.until("revision 1 is released to c (gold) and a (by name)", func() bool { return slices.Equal(f.released(1), []string{"a", "c"}) })
	f.reportApplied(true, time.Now().Add(-time.Hour), "a", "c")
	f.until("the bundle is ready", func() bool {
		return meta.IsStatusConditionTrue(f.getBundle().Status.Conditions, v1alpha1.ReadyCondition)
	})
	if _, ok := f.deployments()["b"]; ok {
		t.Fatalf("b, outside the required terms, has a deployment:\n%s", f.dump())
	}
	f.editCluster("a", func(c *v1alpha1.Cluster) { c.Labels["location"] = "eastus" })
	f.until("d takes a's place", func() bool { return slices.Contains(f.released(1), "d") })
	f.reportApplied(true, time.Now().Add(-time.Hour), "d")
	f.until("a loses the workload once d is available", func() bool {
		bd, kept := f.deployments()["a"]
		return !kept || !bd.DeletionTimestamp.IsZero()
	})
}
