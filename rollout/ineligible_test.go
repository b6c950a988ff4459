package rollout

import (
	"strings"
	"testing"
	"time"
)

// R1.15: a cluster whose agent found that it does not serve an API of the revision runs what it
// ran before. It counts on that revision (available while Ready there, so it spends no budget),
// it is no failure however long it lasts, no strategy waits for it, and every status names it.
func TestR1_15_IneligibleClusterIsJudgedOnWhatItStillRuns(t *testing.T) {
	now := SimStart.Add(time.Hour)
	released := SimStart
	ineligible := func(ready bool, applied int64) *Deployment {
		return &Deployment{Staged: 2, Released: 2, Applied: applied, Ready: ready, WasReady: ready, ReleasedAt: released, AppliedAt: released.Add(-24 * time.Hour),
			Unserved: []string{"autoscaling/v2beta2 HorizontalPodAutoscaler"}}
	}
	for _, tc := range []struct {
		name            string
		d               *Deployment
		wantUnavailable bool
	}{
		{"Ready on the revision before: available", ineligible(true, 1), false},
		{"NotReady on the revision before: unavailable (R1.6)", ineligible(false, 1), true},
		{"nothing runs there (a first deployment): no capacity lost", ineligible(false, 0), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := &Target{Cluster: "old-1", Deployment: tc.d}
			if got := unavailable(target, 2); got != tc.wantUnavailable {
				t.Errorf("unavailable = %v, want %v", got, tc.wantUnavailable)
			}
			if f, _ := faultOf(tc.d, 2, false); f != noFault {
				t.Errorf("fault %v an hour after its release, want none: an ineligible cluster is not failing", f)
			}
			if s := ClusterState(tc.d, 2); s != ErrApplied {
				t.Errorf("state %s, want ErrApplied: the agent could not apply it", s)
			}
			if !finished(target, 2) {
				t.Error("not finished: the rollout would wait for a cluster that cannot run the revision")
			}
			if got, want := tc.d.IneligibleReason(), "does not serve autoscaling/v2beta2 HorizontalPodAutoscaler (R1.15)"; got != want {
				t.Errorf("reason %q, want %q", got, want)
			}
		})
	}
	t.Run("a newer revision is released to it as to any cluster", func(t *testing.T) {
		in := Input{Revision: 3, Now: now, Targets: []Target{{Cluster: "old-1", Deployment: ineligible(true, 1)}}}
		if d := Plan(&in); len(d.Release) != 1 || d.Release[0] != "old-1" {
			t.Errorf("released %v, want [old-1]", d.Release)
		}
	})
}

// R1.15 in each strategy, played through the simulations the plan uses: with the default
// failure policy (R5.3: 10 minutes), a cluster that cannot run the revision neither fails it
// nor holds it; the others get it in order, and the rollout ends.
func TestR1_15_EveryStrategyGoesOnWithoutAnIneligibleCluster(t *testing.T) {
	clusters := func() []SimCluster {
		return []SimCluster{
			{Name: "canary-0", Labels: map[string]string{"tier": "canary"}},
			{Name: "prod-0", Labels: map[string]string{"tier": "prod"}, Ineligible: true},
			{Name: "prod-1", Labels: map[string]string{"tier": "prod"}},
		}
	}
	partition := func(tier string) Partition {
		return Partition{Name: tier, Match: Match{ClusterSelector: sel("tier=" + tier)}}
	}

	t.Run("partitions", func(t *testing.T) {
		tl := Simulate(Simulation{Clusters: clusters(), Strategy: Strategy{MaxUnavailable: Int(0), Partitions: []Partition{partition("canary"), partition("prod")}}})
		if !tl.Completed || tl.Outcome != OutcomeCompleted || tl.Failure != nil {
			t.Fatalf("completed %v, outcome %q, failure %+v, stuck %q: want Completed without a failure", tl.Completed, tl.Outcome, tl.Failure, tl.Stuck)
		}
		// The canary Ready at 30 s opens prod; prod-1 Ready at 60 s ends it, prod-0 is not waited for.
		if tl.Duration != time.Minute {
			t.Errorf("ended after %s, want 1m0s", tl.Duration)
		}
	})

	t.Run("rolling update", func(t *testing.T) {
		tl := Simulate(Simulation{Clusters: clusters(), Placement: &Placement{RollingUpdate: &RollingUpdate{MaxUnavailable: Int(1), MaxSurge: Int(0), UnavailablePeriodSeconds: ptr(1)}}})
		if !tl.Completed || tl.Failure != nil {
			t.Fatalf("completed %v, failure %+v, stuck %q: want completed without a failure", tl.Completed, tl.Failure, tl.Stuck)
		}
	})

	t.Run("staged run", func(t *testing.T) {
		run := SimulateRun(RunSimulation{Clusters: clusters(), Strategy: StagedStrategy{Stages: []Stage{
			{Name: "canary", LabelSelector: sel("tier=canary")}, {Name: "prod", LabelSelector: sel("tier=prod")}}}})
		if run.Final.State != RunCompleted {
			t.Fatalf("run %s: %s; want Completed", run.Final.State, run.Final.Message)
		}
		var got ClusterRunStatus
		for _, g := range run.Final.Stages[1].Groups {
			for _, c := range g.Clusters {
				if c.Name == "prod-0" {
					got = c
				}
			}
		}
		if got.State != RunSkipped || got.Message != "ineligible: does not serve "+SimUnservedAPI+" (R1.15)" {
			t.Errorf("prod-0 %s %q, want Skipped and why", got.State, got.Message)
		}
	})

	t.Run("sequence: left behind by its group, named", func(t *testing.T) {
		seq := SimulateSequence(SequenceSimulation{Clusters: clusters(), Revisions: []SimRevision{{Index: 2}},
			Sequence: Sequence{Groups: []SequenceGroup{seqGroup("canary", "", 0), seqGroup("prod", "canary", 0)}}})
		if seq.Err != nil || !seq.Completed {
			t.Fatalf("completed %v (%v), stuck %q; want completed", seq.Completed, seq.Err, seq.Stuck)
		}
		prod := seq.Final.Groups[1].Revisions[0]
		if prod.State != SeqComplete || !strings.Contains(prod.Message, "1 clusters left behind, ineligible (R1.15): prod-0 does not serve") {
			t.Errorf("prod %s %q, want COMPLETE naming prod-0 as left behind", prod.State, prod.Message)
		}
	})

	t.Run("sequence: a group none of whose clusters can run it qualifies nothing", func(t *testing.T) {
		cs := clusters()
		cs[0].Ineligible = true // the canary cannot run it: prod must not get an untried revision
		seq := SimulateSequence(SequenceSimulation{Clusters: cs, Revisions: []SimRevision{{Index: 2}}, Horizon: 24 * time.Hour,
			Sequence: Sequence{Groups: []SequenceGroup{seqGroup("canary", "", 0), seqGroup("prod", "canary", 0)}}})
		if seq.Completed {
			t.Fatal("completed: prod received a revision that no canary ran")
		}
		canary := seq.Final.Groups[0].Revisions[0]
		if canary.State == SeqComplete || !strings.Contains(canary.Message, "no cluster of the group can run revision 2, so the group does not qualify it (R1.15): canary-0 does not serve") {
			t.Errorf("canary %s %q, want held, saying why", canary.State, canary.Message)
		}
		if got := revisionState(seq.Final.Groups[1], 2); got == SeqInProgress || got == SeqComplete || got == SeqSoaking {
			t.Errorf("prod is %s on revision 2, want it not started", got)
		}
	})
}
