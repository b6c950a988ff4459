package hub

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// groupState is a group's progress on a revision as the Bundle reports it.
func (f *simFleet) groupState(group string, rev int64) v1alpha1.SequenceRevisionStatus {
	for _, g := range f.getBundle().Status.Sequence {
		for _, r := range g.Revisions {
			if g.Name == group && r.Index == rev {
				return r
			}
		}
	}
	return v1alpha1.SequenceRevisionStatus{}
}

// onRevision lists, sorted, the clusters released rev.
func (f *simFleet) onRevision(rev int64, clusters ...string) bool {
	got := f.released(rev)
	for _, c := range clusters {
		if !slices.Contains(got, c) {
			return false
		}
	}
	return true
}

// A sequence of five groups through the real hub, on a simulated clock (R4.1): an empty group
// with an upstream passes a revision straight through (R4.8); a paused revision starts nowhere,
// then resumes, while the group downstream still works on the one before (R4.4, R4.10); a group
// stuck for 30 days soaks anyway (R4.5); a cancelled revision goes no further (R4.10); a cluster
// already on a newer revision than its group's target neither blocks the group nor is taken back
// (R4.7). A cluster that joins a group gets the revision the group completed (R4.3).
func TestR4_1_R4_3_R4_4_R4_5_R4_7_R4_8_R4_10_SequenceThroughTheHub(t *testing.T) {
	clock := &simClock{at: time.Now()}
	clusters := map[string]map[string]string{
		"d1": {"tier": "dev"}, "s1": {"tier": "stage"}, "p1": {"tier": "prod"}, "p2": {"tier": "prod"}, "e1": {"tier": "edge"},
	}
	f := newSimFleet(t, Options{Clock: clock.now}, "defaultNamespace: web\nsequence: {name: chain}\n", clusters)
	ctx := context.Background()
	hour := &metav1.Duration{Duration: time.Hour}
	seq := &v1alpha1.RolloutSequence{ObjectMeta: metav1.ObjectMeta{Name: "chain", Namespace: f.ns}, Spec: v1alpha1.RolloutSequenceSpec{
		Groups: []v1alpha1.SequenceGroup{
			{Name: "dev", Selector: "tier=dev", Soak: hour},
			{Name: "qa", Upstream: "dev", Selector: "tier=qa", Soak: hour}, // no cluster
			{Name: "stage", Upstream: "qa", Selector: "tier=stage", Soak: &metav1.Duration{}},
			{Name: "prod", Upstream: "stage", Selector: "tier=prod", Soak: hour},
			{Name: "edge", Upstream: "prod", Selector: "tier=edge", Soak: &metav1.Duration{}},
		},
		// Revision 2 is paused before it exists.
		Revisions: []v1alpha1.SequenceRevisionControl{{Index: 2, Paused: true}},
	}}
	if err := f.c.Create(ctx, seq); err != nil {
		t.Fatal(err)
	}
	// control changes the sequence's per-revision controls; any change of its spec also makes
	// the hub look at its bundles again after the clock moved.
	control := func(change func(*v1alpha1.RolloutSequenceSpec)) {
		t.Helper()
		var s v1alpha1.RolloutSequence
		if err := f.c.Get(ctx, client.ObjectKeyFromObject(seq), &s); err != nil {
			t.Fatal(err)
		}
		orig := s.DeepCopy()
		change(&s.Spec)
		if err := f.c.Patch(ctx, &s, client.MergeFrom(orig)); err != nil {
			t.Fatal(err)
		}
	}
	poke := func(rev int64) { // the soak of revision rev in the empty group, which has no effect of its own
		control(func(s *v1alpha1.RolloutSequenceSpec) {
			for i := range s.Revisions {
				if s.Revisions[i].Index == rev {
					if len(s.Revisions[i].SoakOverrides) == 0 {
						s.Revisions[i].SoakOverrides = []v1alpha1.SoakOverride{{Group: "qa"}}
					}
					s.Revisions[i].SoakOverrides[0].Soak.Duration += time.Minute
					return
				}
			}
			s.Revisions = append(s.Revisions, v1alpha1.SequenceRevisionControl{Index: rev, SoakOverrides: []v1alpha1.SoakOverride{{Group: "qa", Soak: metav1.Duration{Duration: time.Minute}}}})
		})
	}

	f.until("dev receives revision 1", func() bool { return f.onRevision(1, "d1") })
	f.ready("d1")
	f.until("dev soaks revision 1", func() bool { return f.groupState("dev", 1).State == v1alpha1.SequenceSoaking })
	clock.advance(time.Hour)
	poke(1)
	f.until("qa, empty, passes revision 1 through and stage receives it", func() bool {
		return f.groupState("qa", 1).State == v1alpha1.SequenceComplete && f.onRevision(1, "s1")
	})
	f.ready("s1")
	f.until("prod receives revision 1", func() bool { return f.onRevision(1, "p1", "p2") })
	f.ready("p1")
	f.report(false, "p2") // stuck: prod cannot finish revision 1

	// Revision 2, paused, starts nowhere; resumed, it reaches dev while prod still works on 1.
	f.commit("2", "")
	f.until("revision 2 waits, paused", func() bool {
		return strings.Contains(f.groupState("dev", 2).Message, "revision paused")
	})
	if f.onRevision(2, "d1") {
		t.Fatalf("a paused revision was released:\n%s", f.dump())
	}
	control(func(s *v1alpha1.RolloutSequenceSpec) { s.Revisions[0].Paused = false })
	f.until("dev receives revision 2 while prod is on revision 1", func() bool {
		return f.onRevision(2, "d1") && f.groupState("prod", 1).State == v1alpha1.SequenceInProgress
	})
	f.ready("d1")
	control(func(s *v1alpha1.RolloutSequenceSpec) { s.Revisions[0].Cancelled = true })
	// The clock moves only once the hub has seen the cancellation: a pass planned on the moved
	// clock with a cache from before it would end dev's soak of revision 2.
	f.until("the hub sees revision 2 cancelled", func() bool { return strings.Contains(f.groupState("dev", 2).Message, "cancelled") })

	// 30 days on, prod soaks revision 1 although p2 never finished it; an hour later edge
	// receives it.
	clock.advance(30*24*time.Hour + time.Minute)
	poke(1)
	f.until("prod is forced to soak revision 1", func() bool {
		st := f.groupState("prod", 1)
		return st.State == v1alpha1.SequenceForcedSoaking && strings.Contains(st.Message, "R4.5")
	})
	clock.advance(time.Hour)
	poke(1)
	f.until("edge receives revision 1", func() bool { return f.onRevision(1, "e1") })
	if f.onRevision(2, "s1") || f.groupState("stage", 2).State == v1alpha1.SequenceComplete {
		t.Fatalf("the cancelled revision 2 went on downstream:\n%s", f.dump())
	}

	// d1 moves to edge, running revision 2: ahead of edge's target, it is ignored.
	var d1 v1alpha1.Cluster
	if err := f.c.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "d1"}, &d1); err != nil {
		t.Fatal(err)
	}
	orig := d1.DeepCopy()
	d1.Labels["tier"] = "edge"
	if err := f.c.Patch(ctx, &d1, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	f.ready("e1")
	f.until("edge completes revision 1 without d1", func() bool {
		st := f.groupState("edge", 1)
		return st.State == v1alpha1.SequenceComplete
	})
	if !f.onRevision(2, "d1") {
		t.Errorf("d1, ahead of its group, was taken back to revision 1:\n%s", f.dump())
	}

	// A cluster joining stage gets the revision its group completed, at once (R4.3).
	registerCluster(t, f.c, f.ns, "s2", map[string]string{"tier": "stage"})
	f.until("the joining cluster receives revision 1", func() bool { return f.onRevision(1, "s2") })
	if b := f.getBundle(); b.Spec.LatestRevision != 2 {
		t.Errorf("a joining cluster made revision %d: it must take the latest revision as it is", b.Spec.LatestRevision)
	}
}

// createSequence creates a RolloutSequence of the fleet's namespace.
func (f *simFleet) createSequence(name string, spec v1alpha1.RolloutSequenceSpec) {
	f.t.Helper()
	if err := f.c.Create(context.Background(), &v1alpha1.RolloutSequence{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns}, Spec: spec}); err != nil {
		f.t.Fatal(err)
	}
}

// R4.9 through the hub, on a simulated clock: a cluster in a 40-day exclusion keeps its group
// from finishing, the rest of the group updating meanwhile; 30 days after the group started,
// it soaks anyway (R4.5) and the next group gets the revision, while the excluded cluster is
// still not touched.
func TestR4_9_AnExclusionHoldsTheGroupUntilItsForcedSoak(t *testing.T) {
	clock := &simClock{at: time.Now()}
	freeze := []v1alpha1.TimeRange{{Name: "freeze", Start: metav1.NewTime(clock.at.Add(-time.Hour)), End: metav1.NewTime(clock.at.Add(40 * 24 * time.Hour))}}
	f := newSimFleetOf(t, Options{Clock: clock.now}, "defaultNamespace: web\nsequence: {name: chain}\n",
		map[string]map[string]string{"d1": {"tier": "dev"}, "d2": {"tier": "dev"}, "p1": {"tier": "prod"}},
		map[string]v1alpha1.ClusterSpec{"d2": {Exclusions: freeze}})
	hour := &metav1.Duration{Duration: time.Hour}
	f.createSequence("chain", v1alpha1.RolloutSequenceSpec{Groups: []v1alpha1.SequenceGroup{
		{Name: "dev", Selector: "tier=dev", Soak: hour},
		{Name: "prod", Upstream: "dev", Selector: "tier=prod", Soak: hour},
	}})
	f.until("dev releases revision 1 to d1 only", func() bool { return slices.Equal(f.released(1), []string{"d1"}) })
	f.ready("d1")
	f.until("dev waits for the excluded cluster", func() bool {
		st := f.groupState("dev", 1)
		return st.State == v1alpha1.SequenceInProgress && st.Summary.Ready == 1 &&
			strings.Contains(st.Message, "1 clusters wait for their maintenance window or an exclusion to end")
	})
	clock.advance(30*24*time.Hour + time.Minute)
	f.poke()
	f.until("dev is forced to soak revision 1", func() bool {
		st := f.groupState("dev", 1)
		return st.State == v1alpha1.SequenceForcedSoaking && strings.Contains(st.Message, "R4.5")
	})
	clock.advance(time.Hour + time.Minute)
	f.poke()
	f.until("prod receives revision 1 after the forced soak", func() bool { return f.onRevision(1, "p1") })
	if f.onRevision(1, "d2") {
		t.Fatalf("the excluded d2 was released during its exclusion:\n%s", f.dump())
	}
}

// R5.3, R5.6 in a sequence through the hub: with a failureTimeout of an hour and the default
// onFailure (Pause), a member still not Ready an hour after its release fails its group: the
// group is FAILED, the Bundle's outcome names the cluster and the rule, one RolloutFailed Event
// tells it, and the next group gets nothing. Once the member recovers, the group goes on.
func TestR5_3_R5_6_ASequenceMemberPastFailureTimeoutFailsItsGroup(t *testing.T) {
	clock := &simClock{at: time.Now()}
	f := newSimFleet(t, Options{Clock: clock.now}, "defaultNamespace: web\nsequence: {name: chain}\n",
		map[string]map[string]string{"d1": {"tier": "dev"}, "d2": {"tier": "dev"}, "p1": {"tier": "prod"}})
	zero := &metav1.Duration{}
	f.createSequence("chain", v1alpha1.RolloutSequenceSpec{
		FailurePolicy: v1alpha1.FailurePolicy{FailureTimeout: &metav1.Duration{Duration: time.Hour}},
		Groups: []v1alpha1.SequenceGroup{
			{Name: "dev", Selector: "tier=dev", Soak: zero},
			{Name: "prod", Upstream: "dev", Selector: "tier=prod", Soak: zero},
		}})
	f.until("dev releases revision 1", func() bool { return f.onRevision(1, "d1", "d2") })
	f.ready("d1")
	f.reportApplied(false, clock.now(), "d2")
	f.until("the hub has seen d2 NotReady", func() bool { return f.groupState("dev", 1).Summary.NotReady == 1 })
	if st := f.groupState("dev", 1); st.State != v1alpha1.SequenceInProgress {
		t.Fatalf("dev is %s before the failure timeout: %s", st.State, st.Message)
	}
	clock.advance(time.Hour + time.Minute)
	f.poke()
	f.until("dev fails revision 1 and the Bundle says so", func() bool {
		o := f.getBundle().Status.Outcome
		return f.groupState("dev", 1).State == v1alpha1.SequenceFailed && o != nil && o.Revision == 1 && o.Outcome == v1alpha1.OutcomeFailed &&
			o.Failure != nil && o.Failure.Rule == "R5.3" && slices.Equal(o.Failure.Clusters, []string{"d2"})
	})
	f.until("one RolloutFailed Event tells it", func() bool { return f.story().Tells("RolloutFailed: revision 1 failed (R5.3)") })
	if n := f.story().Count("RolloutFailed"); n != 1 {
		t.Errorf("%d RolloutFailed Events, want 1:\n%s", n, f.story())
	}
	if f.onRevision(1, "p1") || len(f.getBundle().Status.Quarantined) != 0 {
		t.Fatalf("a failure under Pause went on downstream or rolled back:\n%s", f.dump())
	}
	f.ready("d2")
	f.until("prod receives revision 1 once d2 recovered", func() bool { return f.onRevision(1, "p1") })
}
