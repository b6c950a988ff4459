package rollout

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

func errorRate(scope CheckScope) Check {
	return Check{Name: "error-rate", Provider: "prometheus", Query: `sum(rate(errors{cluster="{{ .Cluster.Name }}"}[5m]))`, Condition: "result < 0.01",
		Interval: dur(time.Minute), Scope: scope}
}

// A check never measured turns inconclusive past its pending limit, then fails (R7.5): a gate
// does not wait forever on measurements that do not come.
func TestR7_4_R7_5_JudgeTurnsMeasurementsIntoAVerdict(t *testing.T) {
	c := errorRate(ScopeCluster)
	c.FailureLimit = 1
	c.InconclusiveLimit = dur(5 * time.Minute)
	for _, tc := range []struct {
		name  string
		m     Measurements
		now   time.Time
		want  Verdict
		since time.Time
		says  string
	}{
		{"nothing measured is pending", Measurements{}, t0, VerdictPending, time.Time{}, "not measured"},
		{"a pass passes", Measurements{Passes: 3, Last: MeasuredPass, LastAt: t0}, t0, VerdictPassed, t0, ""},
		{"a failure within the limit holds", Measurements{Passes: 3, Failures: 1, Last: MeasuredFail, LastAt: t0, Message: "result 0.2"}, t0, VerdictFailing, t0, "1 of 1 failures tolerated: result 0.2"},
		{"a pass after a tolerated failure passes", Measurements{Failures: 1, Passes: 1, Last: MeasuredPass, LastAt: t0}, t0, VerdictPassed, t0, ""},
		{"failures over the limit fail, for good", Measurements{Failures: 2, Passes: 9, Last: MeasuredPass, FailedAt: t0.Add(-time.Minute), Message: "result 0.3"}, t0, VerdictFailed, t0.Add(-time.Minute), "2 failed measurements, more than failureLimit 1"},
		{"inconclusive holds, and says when it fails", Measurements{Last: MeasuredInconclusive, InconclusiveSince: t0, Message: "connection refused"}, t0.Add(4 * time.Minute), VerdictInconclusive, t0, "a failure at 2026-03-01T12:05:00Z (R7.5): connection refused"},
		{"inconclusive past its limit fails", Measurements{Last: MeasuredInconclusive, InconclusiveSince: t0, Message: "connection refused"}, t0.Add(5 * time.Minute), VerdictFailed, t0.Add(5 * time.Minute), "inconclusive for 5m0s"},
		{"tracked and not measured yet is pending", Measurements{Since: t0}, t0.Add(time.Minute), VerdictPending, time.Time{}, "not measured"},
		{"not measured past two intervals is inconclusive", Measurements{Since: t0}, t0.Add(2 * time.Minute), VerdictInconclusive, t0.Add(2 * time.Minute), "not measured within 2m0s"},
		{"and an inconclusive limit later, failed", Measurements{Since: t0}, t0.Add(7 * time.Minute), VerdictFailed, t0.Add(7 * time.Minute), "inconclusive 5m0s longer than inconclusiveLimit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := c.Judge(tc.m, tc.now)
			if j.Verdict != tc.want || !j.Since.Equal(tc.since) || !strings.Contains(j.Message, tc.says) || j.Check != "error-rate" {
				t.Fatalf("Judge = %+v; want %s since %s, …%s…", j, tc.want, tc.since, tc.says)
			}
		})
	}
	if at := c.WakeAt(Measurements{Last: MeasuredInconclusive, InconclusiveSince: t0}); !at.Equal(t0.Add(5 * time.Minute)) {
		t.Errorf("WakeAt of an inconclusive run = %s, want its limit", at)
	}
	if at := c.WakeAt(Measurements{Since: t0}); !at.Equal(t0.Add(2 * time.Minute)) {
		t.Errorf("WakeAt of a check not measured yet = %s, want its pending limit", at)
	}
	if at := c.WakeAt(Measurements{Last: MeasuredPass}); !at.IsZero() {
		t.Errorf("WakeAt of a pass = %s, want none", at)
	}
	if w := Worst([]Judgement{{Verdict: VerdictPassed}, {Verdict: VerdictInconclusive, Check: "b"}, {Verdict: VerdictPending}}); w.Check != "b" {
		t.Errorf("Worst = %+v, want the inconclusive one", w)
	}
}

func TestR7_1_R7_2_ChecksAreValidated(t *testing.T) {
	good := errorRate(ScopeGate)
	for _, tc := range []struct {
		name  string
		s     *Strategy
		p     *Placement
		field string
		says  string
	}{
		{"an address for a provider", &Strategy{Analysis: []Check{{Name: "e", Provider: "https://metrics.example/api", Query: "up", Condition: "result > 0"}}}, nil,
			"rolloutStrategy.analysis[0].provider", "never an address"},
		{"no condition", &Strategy{Analysis: []Check{{Name: "e", Provider: "p", Query: "up"}}}, nil, "rolloutStrategy.analysis[0].condition", "is required"},
		{"an interval too short", &Strategy{Analysis: []Check{{Name: "e", Provider: "p", Query: "up", Condition: "true", Interval: dur(time.Second)}}}, nil,
			"rolloutStrategy.analysis[0].interval", "at least 5s"},
		{"two checks of one name", &Strategy{Analysis: []Check{good, good}}, nil, "rolloutStrategy.analysis[1].name", "a second check"},
		{"an unknown scope", &Strategy{Analysis: []Check{{Name: "e", Provider: "p", Query: "up", Condition: "true", Scope: "Fleet"}}}, nil,
			"rolloutStrategy.analysis[0].scope", "not one of Cluster, Gate"},
		{"a Gate check on a rolling update", nil, &Placement{Type: PickAll, RollingUpdate: &RollingUpdate{Analysis: []Check{good}}},
			"placement.rollingUpdate.analysis[0].scope", "a rolling update has none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate(tc.s, tc.p)
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field || !strings.Contains(fe.Message, tc.says) {
				t.Fatalf("Validate = %v; want %s: …%s…", err, tc.field, tc.says)
			}
		})
	}
	if err := Validate(&Strategy{Analysis: []Check{good, errorRate(ScopeCluster)}}, nil); err == nil {
		t.Log("two checks of one name across scopes are refused too")
	}
	staged := StagedStrategy{Stages: []Stage{{Name: "canary", AfterStageTasks: []Task{{Type: TaskAnalysis}}}}}
	if err := ValidateStaged(&staged); err == nil || !strings.Contains(err.Error(), "afterStageTasks[0].analysis: is required for an Analysis task") {
		t.Errorf("an Analysis task without checks: %v", err)
	}
	staged.Stages[0].BeforeStageTasks = []Task{{Type: TaskAnalysis, Analysis: []Check{good}}}
	if err := ValidateStaged(&staged); err == nil || !strings.Contains(err.Error(), "Analysis cannot come before a stage") {
		t.Errorf("an Analysis task before a stage: %v", err)
	}
}

// R7.3, R7.8: the canary partition counts as Ready once its Gate check passed, judged from
// when it is fully released: until then the next partition waits, and the pass lists the
// check for the hub to measure.
func TestR7_3_R7_8_APartitionOpensOnlyOnceItsGateCheckPassed(t *testing.T) {
	ts := fleet(3, false)
	releaseTo(ts, 2, true, "c-000")
	s := Strategy{Partitions: []Partition{{Name: "canary", MaxUnavailable: Int(0), Match: Match{ClusterName: "c-000"}},
		{Name: "rest", MaxUnavailable: Int(0), Match: Match{ClusterSelector: sel("index in (1,2)")}}},
		Analysis: []Check{errorRate(ScopeGate)}}
	in := &Input{Revision: 2, Strategy: s, Targets: ts, Now: t0}
	d := Plan(in)
	if len(d.Release) != 0 || !strings.Contains(d.Paused, "partitions NotReady (canary)") || !strings.Contains(d.Paused, "partition canary: analysis error-rate Pending") {
		t.Fatalf("released %v, paused %q: the canary's check was never measured", d.Release, d.Paused)
	}
	want := AnalysisKey{Check: "error-rate", Revision: 2, Gate: "partition canary"}
	if len(d.Analysis) != 1 || d.Analysis[0].Key != want || !slices.Equal(d.Analysis[0].Clusters, []string{"c-000"}) {
		t.Fatalf("active checks %+v, want %+v over c-000", d.Analysis, want)
	}
	if a := d.Partitions[0].Analysis; a == nil || a.Verdict != VerdictPending {
		t.Errorf("the canary's analysis %+v, want Pending", a)
	}
	in.Analyses = Analyses{want: {Check: "error-rate", Verdict: VerdictInconclusive, Message: "connection refused"}}
	if d := Plan(in); len(d.Release) != 0 || d.Failure != nil {
		t.Fatalf("inconclusive: released %v, failure %+v; want it held (R7.5)", d.Release, d.Failure)
	}
	in.Analyses = Analyses{want: {Check: "error-rate", Verdict: VerdictPassed}}
	d = Plan(in)
	if !slices.Equal(d.Release, []string{"c-001", "c-002"}) {
		t.Fatalf("passed: released %v, want the rest", d.Release)
	}
	// Once every cluster is Ready on it, the rest's own gate holds the completion.
	releaseTo(ts, 2, true, "c-001", "c-002")
	if d := Plan(in); d.Complete || d.Outcome != "" {
		t.Fatalf("complete before the rest's check passed: %+v", d.Partitions)
	}
	in.Analyses[AnalysisKey{Check: "error-rate", Revision: 2, Gate: "partition rest"}] = Judgement{Verdict: VerdictPassed}
	if d := Plan(in); !d.Complete || d.Outcome != OutcomeCompleted {
		t.Fatalf("not complete with every check passed: paused %q", d.Paused)
	}
	in.CompletedAt = t0
	if d := Plan(in); len(d.Analysis) != 0 {
		t.Errorf("checks %v still judged after the rollout completed (no health window)", d.Analysis)
	}
}

// R7.7: a Gate check that fails fails its partition's revision at once, and under Rollback
// the canary gets its last good revision back.
func TestR7_7_AFailedGateCheckRollsThePartitionBack(t *testing.T) {
	ts := fleet(3, false)
	releaseTo(ts, 2, true, "c-000")
	ts[0].Deployment.LastGood = 1
	s := Strategy{Partitions: []Partition{{Name: "canary", MaxUnavailable: Int(1), Match: Match{ClusterName: "c-000"}},
		{Name: "rest", Match: Match{ClusterSelector: sel("index in (1,2)")}}},
		Analysis: []Check{errorRate(ScopeGate)}, FailurePolicy: FailurePolicy{OnFailure: FailureRollback}}
	in := &Input{Revision: 2, Strategy: s, Targets: ts, Now: t0,
		Analyses: Analyses{{Check: "error-rate", Revision: 2, Gate: "partition canary"}: {Check: "error-rate", Verdict: VerdictFailed, Message: "result 0.4"}}}
	d := Plan(in)
	if d.Failure == nil || d.Failure.Rule != RuleGateAnalysis || !slices.Equal(d.Failure.Clusters, []string{"c-000"}) || !strings.Contains(d.Failure.Message, "analysis error-rate Failed: result 0.4") {
		t.Fatalf("failure %+v, want R7.7 on c-000", d.Failure)
	}
	if len(d.Release) != 0 || len(d.Restore) != 1 || d.Restore[0] != (Restore{Cluster: "c-000", To: 1}) {
		t.Fatalf("released %v, restored %v: want c-000 back on 1 and nothing else", d.Release, d.Restore)
	}
}

// R7.6 in a simulation: a canary that stays Ready while its error rate rises fails its
// Cluster check; it is a failure of the cluster, rolled back under Rollback, and the revision
// never reaches the rest.
func TestR7_6_ACanaryReadyAllAlongIsRolledBackByItsCheck(t *testing.T) {
	clusters := simFleet(4)
	s := Strategy{Partitions: []Partition{{Name: "canary", MaxUnavailable: Int(0), Match: Match{ClusterName: "c-000"}},
		{Name: "rest", Match: Match{ClusterSelector: sel("index in (1,2,3)")}}},
		Analysis: []Check{errorRate(ScopeCluster)}, FailurePolicy: FailurePolicy{OnFailure: FailureRollback}}
	var readyWhenFailed bool
	tl := Simulate(Simulation{Clusters: clusters, Strategy: s, CheckFaults: []SimCheckFault{{Check: "error-rate", After: 0, Clusters: []string{"c-000"}}},
		Observe: func(in *Input, d *Decision) {
			if d.Failure != nil {
				readyWhenFailed = in.Targets[0].Deployment.Ready && in.Targets[0].Deployment.WasReady
			}
			for _, c := range d.Release {
				if c != "c-000" {
					t.Fatalf("revision 2 released to %s: the canary's check had not passed for good", c)
				}
			}
		}})
	if tl.Outcome != OutcomeRolledBack || tl.Failure == nil || tl.Failure.Rule != RuleAnalysis || !slices.Equal(tl.Failure.Clusters, []string{"c-000"}) {
		t.Fatalf("outcome %s, failure %+v: want c-000 rolled back under R7.6", tl.Outcome, tl.Failure)
	}
	if !readyWhenFailed {
		t.Error("the canary was not Ready when its check failed it: the test proves nothing about readiness")
	}
	t.Run("a check failing after the rest received the revision rolls back every cluster that did", func(t *testing.T) {
		var restored []string
		watched := s
		watched.HealthWindow = dur(time.Hour) // the check goes on after the rollout completed (R5.1)
		tl := Simulate(Simulation{Clusters: simFleet(4), Strategy: watched, CheckFaults: []SimCheckFault{{Check: "error-rate", After: 10 * time.Minute, Clusters: []string{"c-000"}}},
			Observe: func(_ *Input, d *Decision) {
				for _, r := range d.Restore {
					restored = append(restored, r.Cluster)
				}
			}})
		slices.Sort(restored)
		if tl.Outcome != OutcomeRolledBack || tl.Duration < 10*time.Minute || !slices.Equal(slices.Compact(restored), []string{"c-000", "c-001", "c-002", "c-003"}) {
			t.Fatalf("outcome %s at %s, restored %v", tl.Outcome, tl.Duration, restored)
		}
	})
	t.Run("checks that pass let it complete", func(t *testing.T) {
		tl := Simulate(Simulation{Clusters: simFleet(4), Strategy: s})
		if tl.Outcome != OutcomeCompleted {
			t.Fatalf("outcome %s (%s)", tl.Outcome, tl.Stuck)
		}
	})
}

// R7.5 in a simulation: a provider that does not answer holds the canary (the rollout says
// so), and after inconclusiveLimit that is a failure.
func TestR7_5_AnInconclusiveCheckHoldsThenFails(t *testing.T) {
	s := Strategy{Partitions: []Partition{{Name: "canary", MaxUnavailable: Int(0), Match: Match{ClusterName: "c-000"}},
		{Name: "rest", Match: Match{ClusterSelector: sel("index in (1,2)")}}}}
	check := errorRate(ScopeCluster)
	check.InconclusiveLimit = dur(15 * time.Minute)
	s.Analysis = []Check{check}
	var heldSaying string
	tl := Simulate(Simulation{Clusters: simFleet(3), Strategy: s, CheckFaults: []SimCheckFault{{Check: "error-rate", Inconclusive: true}},
		Observe: func(in *Input, d *Decision) {
			if d.Failure == nil && strings.Contains(d.Paused, "c-000: analysis error-rate Inconclusive") {
				heldSaying = d.Paused
			}
		}})
	if heldSaying == "" {
		t.Error("while held, the rollout never said the canary's check was inconclusive")
	}
	if tl.Outcome != OutcomeFailed || tl.Failure == nil || tl.Failure.Rule != RuleAnalysis || tl.Duration < 15*time.Minute {
		t.Fatalf("outcome %s after %s, failure %+v: want Failed (Pause) by R7.6 after the 15m limit", tl.Outcome, tl.Duration, tl.Failure)
	}
}

// R7.3, R7.7: a staged run's Analysis task after the canary stage holds the next stage until
// its check passed; a failing check fails the run, and production never starts.
func TestR7_3_R7_7_AnAnalysisTaskHoldsTheNextStage(t *testing.T) {
	strategy := StagedStrategy{Stages: []Stage{
		{Name: "canary", LabelSelector: sel("tier=canary"), AfterStageTasks: []Task{{Type: TaskAnalysis, Analysis: []Check{errorRate(ScopeGate), errorRate2()}}}},
		{Name: "prod", LabelSelector: sel("tier=prod")}}}
	clusters := []SimCluster{{Name: "canary-0", Labels: map[string]string{"tier": "canary"}}, {Name: "prod-0", Labels: map[string]string{"tier": "prod"}}, {Name: "prod-1", Labels: map[string]string{"tier": "prod"}}}
	var sawHeld bool
	tl := SimulateRun(RunSimulation{Strategy: strategy, Clusters: clusters, CheckFaults: []SimCheckFault{{Check: "latency", After: 0, Clusters: []string{"canary-0"}}},
		Observe: func(run *Run, fleet []RunCluster, res StepResult, _ time.Time) {
			if task := res.Status.Stages[0].AfterTasks; len(task) == 1 && task[0].State == RunRunning && strings.Contains(task[0].Message, "analysis latency on canary-0 Failing") {
				sawHeld = true
			}
			for _, c := range res.Release {
				if strings.HasPrefix(c, "prod") {
					t.Fatalf("prod released while the canary's analysis holds: %v", res.Release)
				}
			}
		}})
	// The check's failure is the cluster's: it counts against the stage's budget (R7.6, R5.3).
	if tl.Final.State != RunFailed || tl.Failure == nil || tl.Failure.Rule != RuleFailureBudget || !slices.Equal(tl.Failure.Clusters, []string{"canary-0"}) {
		t.Fatalf("run %s %q, failure %+v: want canary-0 failed over the stage's budget", tl.Final.State, tl.Final.Message, tl.Failure)
	}
	if c := tl.Final.Stages[0].Groups[0].Clusters[0]; !strings.Contains(c.Message, "analysis latency failed on revision 2 (R7.6)") {
		t.Errorf("canary-0 says %q", c.Message)
	}
	if !sawHeld {
		t.Error("the Analysis task never said it was held by the failing check")
	}
	t.Run("a Gate check that fails fails the stage by R7.7", func(t *testing.T) {
		tl := SimulateRun(RunSimulation{Strategy: strategy, Clusters: clusters, CheckFaults: []SimCheckFault{{Check: "error-rate", After: 0}}})
		if tl.Failure == nil || tl.Failure.Rule != RuleGateAnalysis || tl.Final.Stages[1].State == RunCompleted {
			t.Fatalf("failure %+v, prod %s", tl.Failure, tl.Final.Stages[1].State)
		}
	})
	t.Run("checks that pass open the gate", func(t *testing.T) {
		tl := SimulateRun(RunSimulation{Strategy: strategy, Clusters: clusters})
		if tl.Final.State != RunCompleted {
			t.Fatalf("run %s %q", tl.Final.State, tl.Final.Message)
		}
	})
}

// errorRate2 is a Cluster check that tolerates two failures.
func errorRate2() Check {
	c := errorRate(ScopeCluster)
	c.Name, c.FailureLimit = "latency", 2
	return c
}

// R7.6, R7.8: a group's soak ends only once its checks passed; a member whose check fails
// during the soak fails the group and, under Rollback, the revision is rolled back before the
// next group sees it.
func TestR7_6_R7_8_ACheckDuringTheSoakFailsTheGroup(t *testing.T) {
	canary := seqGroup("dev", "", time.Hour)
	canary.Analysis = []Check{errorRate(ScopeCluster)}
	seq := Sequence{Groups: []SequenceGroup{canary, seqGroup("prod", "dev", time.Hour)}, FailurePolicy: FailurePolicy{OnFailure: FailureRollback}}
	tl := SimulateSequence(SequenceSimulation{Sequence: seq, Clusters: tierClusters(map[string]int{"dev": 2, "prod": 2}), Revisions: []SimRevision{{Index: 2}},
		CheckFaults: []SimCheckFault{{Check: "error-rate", After: 30 * time.Minute, Clusters: []string{"dev-1"}}},
		Observe: func(_ SequenceStatus, _ []SequenceCluster, res SequenceResult, _ time.Time) {
			for c := range res.Release {
				if strings.HasPrefix(c, "prod") && res.Release[c] == 2 {
					t.Fatalf("prod released revision 2 from a soak whose check failed")
				}
			}
		}})
	if tl.Err != nil {
		t.Fatal(tl.Err)
	}
	if tl.Outcome != OutcomeRolledBack || tl.Failure == nil || tl.Failure.Rule != RuleAnalysis || !slices.Equal(tl.Failure.Clusters, []string{"dev-1"}) {
		t.Fatalf("outcome %s, failure %+v: want dev-1 failing the group by R7.6", tl.Outcome, tl.Failure)
	}
	t.Run("a soak whose check is inconclusive does not end", func(t *testing.T) {
		check := errorRate(ScopeGate)
		check.InconclusiveLimit = dur(48 * time.Hour)
		held := seqGroup("dev", "", time.Hour)
		held.Analysis = []Check{check}
		seq := Sequence{Groups: []SequenceGroup{held, seqGroup("prod", "dev", time.Hour)}}
		var said string
		tl := SimulateSequence(SequenceSimulation{Sequence: seq, Clusters: tierClusters(map[string]int{"dev": 1, "prod": 1}), Revisions: []SimRevision{{Index: 2}},
			Horizon:     3 * time.Hour,
			CheckFaults: []SimCheckFault{{Check: "error-rate", Inconclusive: true}},
			Observe: func(_ SequenceStatus, _ []SequenceCluster, res SequenceResult, _ time.Time) {
				if rs := res.Status.Groups[0].Revisions; len(rs) > 0 && rs[len(rs)-1].State == SeqSoaking {
					said = rs[len(rs)-1].Message
				}
			}})
		if tl.Completed || !strings.Contains(said, "soak time over; soak: analysis error-rate Inconclusive") {
			t.Fatalf("completed %v; the soak said %q", tl.Completed, said)
		}
	})
}

// The randomized §7 tests add random checks, failing and inconclusive at random, to the §5
// simulations, and keep R5.4 and R5.5 at every pass: a quarantined revision is never
// released, a rollback touches only clusters that received it.
func TestR7_RandomizedChecksKeepTheR5Invariants(t *testing.T) {
	rng := rand.New(rand.NewPCG(71, 3))
	outcomes := map[Outcome]int{}
	rules := map[string]int{}
	for i := range simulations(400) {
		clusters, groups := randomFleet(rng, 1+rng.IntN(40), false)
		s := randomStrategy(rng)
		s.FailurePolicy = randomPolicy(rng)
		s.Analysis, _ = randomChecks(rng)
		if err := Validate(&s, nil); err != nil {
			continue
		}
		check := &restoreChecker{t: t, quarantined: map[int64]bool{}}
		tl := Simulate(Simulation{Clusters: clusters, Groups: groups, Strategy: s, CheckFaults: randomFaults(rng, s.Analysis, clusters),
			Observe: func(in *Input, d *Decision) {
				before := snapshot(in.Targets, func(t *Target) string { return t.Cluster }, func(t *Target) *Deployment { return t.Deployment })
				release := map[string]int64{}
				for _, name := range d.Release {
					release[name] = in.Revision
				}
				for _, q := range in.Quarantine {
					check.quarantined[q.Revision] = true
				}
				check.check(before, release, d.Restore, d.Failure)
			}})
		if t.Failed() {
			t.Fatalf("simulation %d: strategy %+v", i, s)
		}
		outcomes[tl.Outcome]++
		if tl.Failure != nil {
			rules[tl.Failure.Rule]++
		}
	}
	requireOutcomes(t, outcomes, OutcomeRolledBack, OutcomeFailed, OutcomeCompleted)
	if rules[RuleAnalysis] == 0 || rules[RuleGateAnalysis] == 0 {
		t.Fatalf("failures by rule %v: the checks never failed a rollout", rules)
	}
	t.Logf("outcomes %v, failures by rule %v", outcomes, rules)
}

func TestR7_RandomizedStagedRunsWithChecksKeepTheR5Invariants(t *testing.T) {
	rng := rand.New(rand.NewPCG(73, 8))
	outcomes := map[Outcome]int{}
	for i := range simulations(300) {
		strategy := randomStagedStrategy(rng, 1+rng.IntN(3))
		strategy.FailurePolicy = randomPolicy(rng)
		strategy.FailureTimeout = nil
		var all []Check
		for si := range strategy.Stages {
			checks, ok := randomChecks(rng)
			if !ok {
				continue
			}
			for j := range checks {
				checks[j].Name = fmt.Sprintf("s%d-%s", si, checks[j].Name)
			}
			all = append(all, checks...)
			st := &strategy.Stages[si]
			if len(st.AfterStageTasks) > 0 && rng.IntN(2) == 0 {
				st.AfterStageTasks[0].Analysis = checks // the timed wait measures them
			} else {
				st.AfterStageTasks = append(st.AfterStageTasks, Task{Type: TaskAnalysis, Analysis: checks})
			}
		}
		if err := ValidateStaged(&strategy); err != nil {
			t.Fatalf("simulation %d: %v", i, err)
		}
		clusters := randomRunFleet(rng, 1+rng.IntN(20), strategy)
		check := &restoreChecker{t: t, quarantined: map[int64]bool{}}
		tl := SimulateRun(RunSimulation{Strategy: strategy, Clusters: clusters, ApproveAfter: time.Duration(rng.IntN(60)) * time.Minute, CheckFaults: randomFaults(rng, all, clusters),
			Observe: check.observeRun})
		if t.Failed() {
			t.Fatalf("simulation %d: strategy %+v", i, strategy)
		}
		outcomes[tl.Outcome]++
	}
	requireOutcomes(t, outcomes, OutcomeRolledBack, OutcomeFailed, OutcomeCompleted)
	t.Logf("outcomes %v", outcomes)
}

func TestR7_RandomizedSequencesWithChecksKeepTheR5Invariants(t *testing.T) {
	rng := rand.New(rand.NewPCG(72, 5))
	tiers := []string{"dev", "staging", "prod"}
	outcomes := map[Outcome]int{}
	for i := range simulations(200) {
		var groups []SequenceGroup
		var all []Check
		for g, tier := range tiers {
			up := ""
			if g > 0 {
				up = tiers[g-1]
			}
			grp := seqGroup(tier, up, time.Duration(1+rng.IntN(4))*time.Hour)
			grp.Analysis, _ = randomChecks(rng)
			for j := range grp.Analysis {
				grp.Analysis[j].Name = tier + "-" + grp.Analysis[j].Name
			}
			all = append(all, grp.Analysis...)
			groups = append(groups, grp)
		}
		seq := Sequence{Groups: groups, FailurePolicy: randomPolicy(rng)}
		clusters := tierClusters(map[string]int{"dev": 1 + rng.IntN(2), "staging": 1 + rng.IntN(2), "prod": 1 + rng.IntN(3)})
		check := &restoreChecker{t: t, quarantined: map[int64]bool{}}
		tl := SimulateSequence(SequenceSimulation{Sequence: seq, Clusters: clusters, Revisions: []SimRevision{{Index: 2}, {Index: 3, At: time.Duration(rng.IntN(24)) * time.Hour}},
			CheckFaults: randomFaults(rng, all, clusters),
			Observe: func(_ SequenceStatus, fleet []SequenceCluster, res SequenceResult, _ time.Time) {
				before := snapshot(fleet, func(c *SequenceCluster) string { return c.Name }, func(c *SequenceCluster) *Deployment { return c.Deployment })
				for j := range res.Failures {
					check.check(nil, nil, nil, &res.Failures[j])
				}
				check.check(before, res.Release, res.Restore, nil)
			}})
		if tl.Err != nil {
			t.Fatal(tl.Err)
		}
		if t.Failed() {
			t.Fatalf("simulation %d: sequence %+v", i, seq)
		}
		outcomes[tl.Outcome]++
	}
	requireOutcomes(t, outcomes, OutcomeRolledBack, OutcomeCompleted)
	t.Logf("outcomes %v", outcomes)
}

// randomChecks are zero to two checks of random scope, interval and limits.
func randomChecks(rng *rand.Rand) ([]Check, bool) {
	var out []Check
	for i := range rng.IntN(3) {
		c := Check{Name: []string{"errors", "latency"}[i], Provider: "prometheus", Query: "q", Condition: "result < 1",
			Interval: dur(time.Duration(1+rng.IntN(5)) * time.Minute), FailureLimit: rng.IntN(3),
			Scope: []CheckScope{"", ScopeCluster, ScopeGate}[rng.IntN(3)]}
		if rng.IntN(2) == 0 {
			c.InconclusiveLimit = dur(time.Duration(1+rng.IntN(30)) * time.Minute)
		}
		out = append(out, c)
	}
	return out, len(out) > 0
}

// randomFaults makes some of the checks fail or go inconclusive at a random moment, on some
// clusters or all.
func randomFaults(rng *rand.Rand, checks []Check, clusters []SimCluster) []SimCheckFault {
	var out []SimCheckFault
	for _, c := range checks {
		if rng.IntN(2) == 0 {
			continue
		}
		f := SimCheckFault{Check: c.Name, After: time.Duration(rng.IntN(120)) * time.Minute, Inconclusive: rng.IntN(3) == 0}
		if rng.IntN(2) == 0 && len(clusters) > 0 {
			f.Clusters = []string{clusters[rng.IntN(len(clusters))].Name}
		}
		out = append(out, f)
	}
	return out
}
