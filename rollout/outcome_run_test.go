package rollout

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// waitingRun is a run of revision 2 over one stage "all" (maxConcurrency conc, no failure
// allowed, an hour's TimedWait after it) whose clusters all completed at t0+1m: the stage waits
// for its timed wait. It returns the run and its fleet, every cluster Ready on 2 after 1.
func waitingRun(t *testing.T, policy FailurePolicy, conc int, names ...string) (*Run, []RunCluster) {
	t.Helper()
	strategy := StagedStrategy{Stages: []Stage{{Name: "all", LabelSelector: &Selector{}, MaxConcurrency: Int(conc),
		AfterStageTasks: []Task{{Type: TaskTimedWait, WaitTime: dur(time.Hour)}}}}, FailurePolicy: policy}
	run := &Run{Name: "r", Revision: 2, Action: ActionRun, Strategy: strategy, Current: true}
	fleet := runFleet(names...)
	now := t0
	for range names {
		res := Step(run, fleet, nil, now)
		run.Status = res.Status
		for i := range fleet {
			if fleet[i].Deployment.Released == 2 || contains(res.Release, fleet[i].Name) {
				fleet[i].Deployment = readyOn(2, 1, now)
			}
		}
		now = now.Add(time.Minute)
	}
	res := Step(run, fleet, nil, now)
	run.Status = res.Status
	if st := run.Status.Stages[0]; st.State != RunRunning || !strings.Contains(st.Message, "timed wait") {
		t.Fatalf("setup: stage %s %q, want it waiting after its clusters", st.State, st.Message)
	}
	return run, fleet
}

func TestR5_2_R5_3_ARegressionDuringATimedWaitFailsTheStage(t *testing.T) {
	run, fleet := waitingRun(t, FailurePolicy{}, 1, "a")
	fleet[0].Deployment = regressedOn(2, 1, t0, t0.Add(10*time.Minute))
	res := Step(run, fleet, nil, t0.Add(10*time.Minute))
	if res.Status.State != RunFailed || res.Failure == nil || res.Failure.Action != FailurePause {
		t.Fatalf("state %s %q, failure %+v: want Failed, held (Pause)", res.Status.State, res.Status.Message, res.Failure)
	}
	if diff := cmp.Diff([]string{"a"}, res.Failure.Clusters); diff != "" || res.Failure.Rule != RuleFailureBudget || len(res.Restore) != 0 {
		t.Errorf("failure %+v, restore %v", res.Failure, res.Restore)
	}
	if c := res.Status.Stages[0].Groups[0].Clusters[0]; c.State != RunFailed || !strings.Contains(c.Message, "regressed") {
		t.Errorf("cluster %s %q", c.State, c.Message)
	}
	t.Run("Ignore keeps the wait", func(t *testing.T) {
		run, fleet := waitingRun(t, FailurePolicy{OnRegression: RegressionIgnore}, 1, "a")
		fleet[0].Deployment = regressedOn(2, 1, t0, t0.Add(10*time.Minute))
		if res := Step(run, fleet, nil, t0.Add(10*time.Minute)); res.Status.State == RunFailed || res.Failure != nil || res.Status.Stages[0].State != RunRunning {
			t.Errorf("state %s, failure %+v", res.Status.State, res.Failure)
		}
	})
}

// R5.2 Restart: the regressed cluster is back in flight and the timed wait after its stage
// counts again from when it is Ready.
func TestR5_2_RestartRearmsTheTimedWait(t *testing.T) {
	run, fleet := waitingRun(t, FailurePolicy{OnRegression: RegressionRestart}, 1, "a")
	fleet[0].Deployment = regressedOn(2, 1, t0, t0.Add(10*time.Minute))
	res := Step(run, fleet, nil, t0.Add(10*time.Minute))
	run.Status = res.Status
	if c := res.Status.Stages[0].Groups[0].Clusters[0]; c.State != RunRunning || res.Failure != nil {
		t.Fatalf("cluster %s, failure %+v: want it back in flight", c.State, res.Failure)
	}
	fleet[0].Deployment = readyOn(2, 1, t0)
	again := t0.Add(20 * time.Minute)
	res = Step(run, fleet, nil, again)
	if w := res.Status.Stages[0].AfterTasks[0]; !w.WaitUntil.Equal(again.Add(time.Hour)) {
		t.Errorf("timed wait until %s, want an hour from %s", w.WaitUntil, again)
	}
}

// R5.4: a failed run under Rollback restores the failed cluster at once and the others under
// the stage's maxConcurrency, then ends RolledBack; it releases nothing of its revision again.
func TestR5_4_AStagedRunRollsBackUnderMaxConcurrency(t *testing.T) {
	run, fleet := waitingRun(t, FailurePolicy{OnFailure: FailureRollback}, 1, "a", "b", "c")
	fleet[0].Deployment = regressedOn(2, 1, t0, t0.Add(10*time.Minute))
	fleet[2].Deployment.LastGood = 0
	now := t0.Add(10 * time.Minute)
	res := Step(run, fleet, nil, now)
	if res.Status.State != RunRollingBack || res.Failure == nil || res.Failure.Action != FailureRollback {
		t.Fatalf("state %s, failure %+v", res.Status.State, res.Failure)
	}
	if diff := cmp.Diff([]Restore{{"a", 1}, {"b", 1}}, res.Restore); diff != "" || len(res.Release) != 0 {
		t.Errorf("restore (-want +got):\n%s\nrelease %v", diff, res.Release)
	}
	run.Status = res.Status
	fleet[0].Deployment = &Deployment{Staged: 2, Released: 1, Applied: 1, Rollback: true, LastGood: 1}
	fleet[1].Deployment = &Deployment{Staged: 2, Released: 1, Applied: 1, Rollback: true, LastGood: 1}
	if res = Step(run, fleet, nil, now.Add(time.Minute)); len(res.Restore) != 0 {
		t.Errorf("restored %v while b is not ready again (maxConcurrency 1)", res.Restore)
	}
	fleet[1].Deployment.Ready = true
	res = Step(run, fleet, nil, now.Add(2*time.Minute))
	if diff := cmp.Diff([]Restore{{"c", 0}}, res.Restore); diff != "" {
		t.Errorf("restore (-want +got):\n%s", diff)
	}
	run.Status = res.Status
	fleet[2].Deployment = &Deployment{Staged: 2, Rollback: true}
	res = Step(run, fleet, nil, now.Add(3*time.Minute))
	if res.Status.State != RunRolledBack || len(res.Release) != 0 || len(res.Restore) != 0 {
		t.Errorf("state %s %q, release %v, restore %v: want RolledBack, the failed a not waited for", res.Status.State, res.Status.Message, res.Release, res.Restore)
	}
}

// R5.1: within the health window after a stage finished, a regression fails the run it
// completed; after the window it does not.
func TestR5_1_HealthWindowAfterTheRun(t *testing.T) {
	run, fleet := waitingRun(t, FailurePolicy{HealthWindow: dur(30 * time.Minute)}, 1, "a")
	done := t0.Add(2 * time.Hour)
	res := Step(run, fleet, nil, done)
	if res.Status.State != RunCompleted {
		t.Fatalf("state %s", res.Status.State)
	}
	run.Status = res.Status
	fleet[0].Deployment = regressedOn(2, 1, t0, done.Add(10*time.Minute))
	if res := Step(run, fleet, nil, done.Add(40*time.Minute)); res.Status.State != RunCompleted || res.Failure != nil {
		t.Errorf("after the window: state %s, failure %+v", res.Status.State, res.Failure)
	}
	if res := Step(run, fleet, nil, done.Add(10*time.Minute)); res.Status.State != RunFailed || res.Failure == nil {
		t.Errorf("within the window: state %s, failure %+v", res.Status.State, res.Failure)
	}
}

// R5.5: a run of a quarantined revision fails at once and releases nothing.
func TestR5_5_ARunOfAQuarantinedRevisionReleasesNothing(t *testing.T) {
	run := &Run{Name: "again", Revision: 2, Action: ActionRun, Strategy: StagedStrategy{Stages: []Stage{{Name: "all", LabelSelector: &Selector{}}}},
		Quarantine: []Failure{{Revision: 2, Rule: RuleRegression, Action: FailureRollback, Clusters: []string{"a"}}}}
	res := Step(run, runFleet("a", "b"), nil, t0)
	if res.Status.State != RunFailed || len(res.Release) != 0 || !strings.Contains(res.Status.Message, "quarantined") {
		t.Errorf("state %s %q, release %v", res.Status.State, res.Status.Message, res.Release)
	}
}
