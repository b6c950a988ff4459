package hub

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/model"
	"github.com/flotilla-dev/flotilla/hub/operate"
)

// The rules of outcome-gated rollouts (§5) through the real hub, its agents played by the
// test: what is recorded, in which order, and which deployments a rollback writes.

const canaryRollback = `defaultNamespace: web
rolloutStrategy:
  maxUnavailable: 0
  onFailure: Rollback
  failureTimeout: 10s
  partitions:
  - {name: canary, clusterSelector: {matchLabels: {ring: canary}}}
  - {name: rest, maxUnavailable: 1, clusterSelector: {matchLabels: {ring: main}}}
`

// lastGood is the revision a deployment recorded as its cluster's last good one, 0 for none.
func lastGood(bd v1alpha1.BundleDeployment) int64 {
	if bd.Spec.LastGood == nil {
		return 0
	}
	return bd.Spec.LastGood.Index
}

// R5.1, R5.3–R5.5: a canary that regresses on revision 2 after the rest received it fails the
// revision once failureTimeout passed; the quarantine is recorded, then every cluster that
// received revision 2 gets revision 1 back (the failed canary at once, the rest within its
// budget), revision 2 is not released again until a person retries it, and the next commit
// rolls out normally.
func TestR5_1_R5_3_R5_4_R5_5_APartitionedRolloutRollsBackIsRetriedAndFixed(t *testing.T) {
	clusters := clustersNamed(map[string]string{"ring": "canary"}, "c1")
	for name, l := range clustersNamed(map[string]string{"ring": "main"}, "m1", "m2", "m3") {
		clusters[name] = l
	}
	f := newSimFleet(t, Options{}, canaryRollback, clusters)
	f.releasedExactly(1, "partitions NotReady (canary)", "c1")
	f.ready("c1")
	f.until("revision 1 reaches the rest", func() bool { return len(f.released(1)) == 4 })
	f.ready("m1", "m2", "m3")
	f.until("revision 1 completes", func() bool {
		o := f.getBundle().Status.Outcome
		return o != nil && o.Revision == 1 && o.Outcome == v1alpha1.OutcomeCompleted
	})

	f.commit("2", "")
	f.releasedExactly(2, "partitions NotReady (canary)", "c1")
	f.ready("c1")
	f.until("revision 2 reaches the rest", func() bool { return len(f.released(2)) == 4 })
	for name, bd := range f.deployments() {
		if lastGood(bd) != 1 || bd.Spec.ReleasedAt == nil {
			t.Fatalf("%s: last good %d, released at %v: a release records the revision it replaces", name, lastGood(bd), bd.Spec.ReleasedAt)
		}
	}
	// The canary regresses, then the rest reports Ready. Told the other way round, a pass
	// could see all four Ready for a moment: the rollout completed, and with no healthWindow
	// a regression after that is no longer judged (R5.1).
	f.report(false, "c1")
	f.ready("m1", "m2", "m3")
	f.until("revision 2 is quarantined", func() bool {
		q := f.getBundle().Status.Quarantined
		return len(q) == 1 && q[0].Revision == 2 && q[0].Rule == "R5.2" && slices.Equal(q[0].Clusters, []string{"c1"})
	})
	f.until("every cluster that received revision 2 runs revision 1 again", func() bool { return len(f.released(2)) == 0 && len(f.released(1)) == 4 })
	for name, bd := range f.deployments() {
		if !bd.Spec.Rollback || lastGood(bd) != 1 {
			t.Errorf("%s: rollback %v, last good %d: a restore is marked and keeps the last good revision", name, bd.Spec.Rollback, lastGood(bd))
		}
	}
	f.ready("c1", "m1", "m2", "m3")
	f.until("the Bundle says it rolled back", func() bool {
		b := f.getBundle()
		o := b.Status.Outcome
		return o != nil && o.Outcome == v1alpha1.OutcomeRolledBack && o.RestoredRevision == 1 && b.Status.Display.State == "RolledBack"
	})
	if got := f.released(2); len(got) != 0 {
		t.Errorf("quarantined revision 2 released again to %v (R5.5)", got)
	}
	story, err := model.ReadStory(context.Background(), f.c, f.ns, EventsController)
	if err != nil {
		t.Fatal(err)
	}
	if !story.Tells("RollbackStarted: revision 2 failed (R5.2)", "RolledBack: revision 2 rolled back") {
		t.Errorf("the Events do not tell the rollback:\n%s", story)
	}
	waitForObject(t, f.c, types.NamespacedName{Namespace: f.ns, Name: "shop"}, "the GitRepo shows the rollback", func(r *v1alpha1.GitRepo) bool {
		return r.Status.Display.State == "RolledBack" && strings.Contains(r.Status.Display.Message, "web: revision 2 failed and was rolled back (R5.2): the clusters that received it run their last good revision (1) again")
	})

	// A person's retry (`flotilla rollout retry shop-web --revision 2`) lifts the quarantine:
	// revision 2 rolls out again. Only a quarantined revision can be retried.
	if _, err := operate.Retry(context.Background(), f.c, f.ns, "shop-web", 3, "test"); err == nil || !strings.Contains(err.Error(), "--revision 3 is not quarantined (quarantined: 2)") {
		t.Errorf("retrying a revision that is not quarantined: %v", err)
	}
	if _, err := operate.Retry(context.Background(), f.c, f.ns, "shop-web", 2, "test"); err != nil {
		t.Fatal(err)
	}
	f.releasedExactly(2, "partitions NotReady (canary)", "c1")
	if q := f.getBundle().Status.Quarantined; len(q) != 0 {
		t.Errorf("quarantine %+v kept after the retry", q)
	}
	f.ready("c1")
	f.until("the retried revision 2 reaches the rest", func() bool { return len(f.released(2)) == 4 })
	f.ready("m1", "m2", "m3")

	// A fixing commit is a new revision: it rolls out as any other.
	f.commit("3", "")
	f.releasedExactly(3, "partitions NotReady (canary)", "c1")
	f.ready("c1")
	f.until("revision 3 reaches the rest", func() bool { return len(f.released(3)) == 4 })
	f.ready("m1", "m2", "m3")
	f.until("revision 3 completes", func() bool {
		o := f.getBundle().Status.Outcome
		return o != nil && o.Revision == 3 && o.Outcome == v1alpha1.OutcomeCompleted
	})
}

// R5.3, R5.6 with every default, through the hub on a simulated clock: nothing about failures
// in the fleet.yaml. A canary not Ready ten minutes after its release (the default
// failureTimeout) fails the revision under the default onFailure, Pause: the Bundle's outcome is
// Failed naming the canary and the rule, one RolloutFailed Event tells it, nothing is rolled
// back or quarantined and the rest waits. The canary recovering lets the rollout go on.
func TestR5_3_R5_6_TheDefaultPolicyHoldsAFailedRevisionAndSaysSo(t *testing.T) {
	clock := &simClock{at: time.Now()}
	fleet := canaryThenRest
	clusters := map[string]map[string]string{"c1": {"ring": "canary"}, "m1": {"ring": "main"}}
	f := newSimFleet(t, Options{Clock: clock.now}, fleet, clusters)
	f.releasedExactly(1, "partitions NotReady (canary)", "c1")
	f.reportApplied(false, clock.now(), "c1")
	f.until("the hub has seen the canary NotReady", func() bool { return f.getBundle().Status.Summary.NotReady == 1 })
	if o := f.getBundle().Status.Outcome; o != nil && o.Outcome == v1alpha1.OutcomeFailed {
		t.Fatalf("revision 1 failed before the default failureTimeout: %+v", o)
	}
	clock.advance(10*time.Minute + time.Second)
	f.poke()
	f.until("revision 1 fails under the default policy", func() bool {
		o := f.getBundle().Status.Outcome
		return o != nil && o.Revision == 1 && o.Outcome == v1alpha1.OutcomeFailed && o.Failure != nil &&
			o.Failure.Rule == "R5.3" && o.Failure.Action == v1alpha1.FailureActionPause && slices.Equal(o.Failure.Clusters, []string{"c1"})
	})
	f.until("one RolloutFailed Event tells it", func() bool { return f.story().Tells("RolloutFailed: revision 1 failed (R5.3)") })
	if n := f.story().Count("RolloutFailed"); n != 1 {
		t.Errorf("%d RolloutFailed Events, want 1:\n%s", n, f.story())
	}
	bds := f.deployments()
	if len(f.getBundle().Status.Quarantined) != 0 || bds["c1"].Spec.Rollback || f.onRevision(1, "m1") {
		t.Fatalf("the Pause policy rolled back, quarantined or went on:\n%s", f.dump())
	}
	f.ready("c1")
	f.until("the recovered canary lets the rest have revision 1", func() bool { return f.onRevision(1, "m1") })
	f.ready("m1")
	f.until("revision 1 completes", func() bool {
		o := f.getBundle().Status.Outcome
		return o != nil && o.Revision == 1 && o.Outcome == v1alpha1.OutcomeCompleted
	})
}
