package rollout

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// canaryFleet is five clusters in a canary partition (c-000, maxUnavailable 0) and the rest
// (maxUnavailable 1), all Ready on revision 2 after revision 1, released at t0.
func canaryFleet(policy FailurePolicy) *Input {
	ts := fleet(5, false)
	for i := range ts {
		ts[i].Deployment = readyOn(2, 1, t0)
	}
	s := Strategy{MaxUnavailable: Int(1), Partitions: []Partition{
		{Name: "canary", MaxUnavailable: Int(0), Match: Match{ClusterName: "c-000"}},
		{Name: "rest", Match: Match{ClusterSelector: sel("index in (1,2,3,4)")}},
	}, FailurePolicy: policy}
	return &Input{Revision: 2, Strategy: s, Targets: ts, Now: t0.Add(time.Hour)}
}

func TestR5_1_R5_3_APartitionFailsAfterFailureTimeout(t *testing.T) {
	in := canaryFleet(FailurePolicy{})
	regressedAt := t0.Add(time.Hour)
	in.Targets[0].Deployment = regressedOn(2, 1, t0, regressedAt)
	in.Now = regressedAt.Add(4 * time.Minute)
	d := Plan(in)
	if d.Failure != nil || d.RequeueAfter != 6*time.Minute || d.Outcome != "" {
		t.Fatalf("failure %+v, requeue %s, outcome %q: want none yet, a wake-up when failureTimeout (10m) passed", d.Failure, d.RequeueAfter, d.Outcome)
	}
	in.Now = regressedAt.Add(10 * time.Minute)
	d = Plan(in)
	if d.Failure == nil || d.Failure.Rule != RuleRegression || d.Outcome != OutcomeFailed || len(d.Restore) != 0 {
		t.Fatalf("failure %+v, outcome %q, restore %v: want Failed by R5.2, held (Pause is the default)", d.Failure, d.Outcome, d.Restore)
	}
	if !strings.Contains(d.Paused, "partition canary: 1 failing, more than its maxUnavailable 0") || !strings.Contains(d.Paused, "onFailure: Pause") {
		t.Errorf("paused %q: want the partition, its budget and the policy named", d.Paused)
	}
	t.Run("one failing cluster within a partition's budget is tolerated", func(t *testing.T) {
		in := canaryFleet(FailurePolicy{})
		in.Targets[2].Deployment = regressedOn(2, 1, t0, regressedAt)
		in.Now = regressedAt.Add(time.Hour)
		if d := Plan(in); d.Failure != nil {
			t.Errorf("failure %+v: the rest partition tolerates one unavailable cluster", d.Failure)
		}
	})
	t.Run("onRegression Ignore never fails on a regression", func(t *testing.T) {
		in := canaryFleet(FailurePolicy{OnRegression: RegressionIgnore})
		in.Targets[0].Deployment = regressedOn(2, 1, t0, regressedAt)
		in.Now = regressedAt.Add(time.Hour)
		if d := Plan(in); d.Failure != nil || d.RequeueAfter != 0 {
			t.Errorf("failure %+v, requeue %s", d.Failure, d.RequeueAfter)
		}
	})
	t.Run("a cluster never Ready fails failureTimeout after its release", func(t *testing.T) {
		in := canaryFleet(FailurePolicy{FailureTimeout: dur(5 * time.Minute)})
		in.Targets[0].Deployment = &Deployment{Staged: 2, Released: 2, Applied: 2, ReleasedAt: t0, LastGood: 1}
		in.Now = t0.Add(5 * time.Minute)
		if d := Plan(in); d.Failure == nil || d.Failure.Rule != RuleFailureBudget {
			t.Errorf("failure %+v, want R5.3", d.Failure)
		}
	})
	t.Run("after the health window a regression is not judged", func(t *testing.T) {
		in := canaryFleet(FailurePolicy{HealthWindow: dur(30 * time.Minute)})
		in.CompletedAt = t0.Add(time.Minute)
		in.Targets[0].Deployment = regressedOn(2, 1, t0, regressedAt)
		in.Now = regressedAt.Add(time.Hour)
		if d := Plan(in); d.Failure != nil || d.Outcome != OutcomeCompleted {
			t.Errorf("failure %+v, outcome %q after the window: want the rollout to stay Completed", d.Failure, d.Outcome)
		}
	})
	t.Run("within the health window a regression after completion fails", func(t *testing.T) {
		in := canaryFleet(FailurePolicy{HealthWindow: dur(30 * time.Minute)})
		in.CompletedAt = regressedAt.Add(-time.Minute)
		in.Targets[0].Deployment = regressedOn(2, 1, t0, regressedAt)
		in.Now = regressedAt.Add(20 * time.Minute)
		if d := Plan(in); d.Failure == nil || d.Failure.Rule != RuleRegression || d.Outcome != OutcomeFailed {
			t.Errorf("failure %+v, outcome %q: want the regression to fail the revision", d.Failure, d.Outcome)
		}
	})
	t.Run("R5.6: a completed rollout stays Completed when a cluster turns NotReady", func(t *testing.T) {
		in := canaryFleet(FailurePolicy{})
		in.CompletedAt = regressedAt.Add(-time.Minute)
		in.Targets[0].Deployment = regressedOn(2, 1, t0, regressedAt)
		in.Now = regressedAt.Add(time.Second)
		if d := Plan(in); d.Failure != nil || d.Outcome != OutcomeCompleted || d.RequeueAfter != 0 {
			t.Errorf("failure %+v, outcome %q, requeue %s: want Completed, nothing judged, nothing to wait for", d.Failure, d.Outcome, d.RequeueAfter)
		}
	})
}

// R5.4: a rollback restores the failed cluster at once and the others partition by partition,
// each batch at most maxNew, the next once the restored clusters are available again.
func TestR5_4_APartitionedRollbackRunsUnderTheBudgets(t *testing.T) {
	in := canaryFleet(FailurePolicy{OnFailure: FailureRollback})
	in.Strategy.MaxNew = ptr(2)
	in.Targets[0].Deployment = regressedOn(2, 1, t0, t0.Add(time.Minute))
	in.Targets[4].Deployment.LastGood = 0 // revision 2 was its first
	in.Now = t0.Add(time.Hour)
	d := Plan(in)
	if d.Failure == nil || d.Failure.Action != FailureRollback {
		t.Fatalf("failure %+v", d.Failure)
	}
	if diff := cmp.Diff([]Restore{{"c-000", 1}, {"c-001", 1}, {"c-002", 1}}, d.Restore); diff != "" {
		t.Errorf("first pass (-want +got):\n%s", diff)
	}
	if len(d.Release) != 0 || d.Outcome != "" {
		t.Errorf("release %v, outcome %q during a rollback", d.Release, d.Outcome)
	}
	// The next pass sees the restores written, not yet ready: the rest partition is over its
	// budget and waits.
	in.Quarantine = []Failure{*d.Failure}
	for _, i := range []int{0, 1, 2} {
		in.Targets[i].Deployment = &Deployment{Staged: 2, Released: 1, Applied: 1, Rollback: true, LastGood: 1}
	}
	if d := Plan(in); len(d.Restore) != 0 || !strings.Contains(d.Paused, "partition rest restores its clusters first") {
		t.Errorf("restore %v, paused %q: want the rest to wait for two restoring clusters", d.Restore, d.Paused)
	}
	for _, i := range []int{1, 2} {
		in.Targets[i].Deployment.Ready = true
	}
	d = Plan(in)
	if diff := cmp.Diff([]Restore{{"c-003", 1}, {"c-004", 0}}, d.Restore); diff != "" {
		t.Errorf("once they are ready (-want +got):\n%s", diff)
	}
	in.Targets[3].Deployment = &Deployment{Staged: 2, Released: 1, Applied: 1, Ready: true, Rollback: true, LastGood: 1}
	in.Targets[4].Deployment = &Deployment{Staged: 2, Rollback: true}
	if d := Plan(in); d.Outcome != OutcomeRolledBack || len(d.Restore) != 0 || len(d.Release) != 0 {
		t.Errorf("outcome %q, restore %v, release %v: want RolledBack, the failed canary not waited for, revision 2 never released again", d.Outcome, d.Restore, d.Release)
	}
}

// R5.4: clusters that never received the failing revision are untouched.
func TestR5_4_ARollbackTouchesOnlyClustersThatReceivedTheRevision(t *testing.T) {
	in := canaryFleet(FailurePolicy{OnFailure: FailureRollback})
	for i := 1; i < 5; i++ {
		in.Targets[i].Deployment = readyOn(1, 0, t0.Add(-day))
	}
	in.Targets[0].Deployment = regressedOn(2, 1, t0, t0.Add(time.Minute))
	d := Plan(in)
	if diff := cmp.Diff([]Restore{{"c-000", 1}}, d.Restore); diff != "" || len(d.Release) != 0 {
		t.Errorf("restore (-want +got):\n%s\nrelease %v", diff, d.Release)
	}
}

// R5.3, R5.4 for a rolling update (§2): the policy sits with the placement's budgets; failing
// clusters beyond maxUnavailable fail the revision, and the rollback restores the clusters that
// received it.
func TestR5_3_R5_4_ARollingUpdateRollsBackUnderItsPolicy(t *testing.T) {
	ts := fleet(3, false)
	for i := range ts {
		ts[i].Deployment = readyOn(2, 1, t0)
	}
	ts[0].Deployment = regressedOn(2, 1, t0, t0.Add(time.Minute))
	ts[1].Deployment = regressedOn(2, 1, t0, t0.Add(time.Minute))
	placement := &Placement{Type: PickAll, RollingUpdate: &RollingUpdate{MaxUnavailable: Int(1), FailurePolicy: FailurePolicy{OnFailure: FailureRollback, FailureTimeout: dur(time.Minute)}}}
	in := &Input{Revision: 2, Placement: placement, Targets: ts, Now: t0.Add(90 * time.Second)}
	if d := Plan(in); d.Failure != nil {
		t.Fatalf("failure %+v before failureTimeout passed", d.Failure)
	}
	in.Now = t0.Add(2 * time.Minute)
	d := Plan(in)
	if d.Failure == nil || d.Failure.Action != FailureRollback || !strings.Contains(d.Failure.Message, "placement: 2 failing, more than its maxUnavailable 1") {
		t.Fatalf("failure %+v", d.Failure)
	}
	if diff := cmp.Diff([]Restore{{"c-000", 1}, {"c-001", 1}, {"c-002", 1}}, d.Restore); diff != "" || len(d.Release) != 0 || len(d.Remove) != 0 {
		t.Errorf("restore (-want +got):\n%s\nrelease %v remove %v", diff, d.Release, d.Remove)
	}
	// A policy under rolloutStrategy would be ignored beside a rolling update: it is refused.
	err := Validate(&Strategy{FailurePolicy: FailurePolicy{OnFailure: FailureRollback}}, placement)
	if err == nil || !strings.Contains(err.Error(), "belongs under placement.rollingUpdate") {
		t.Errorf("validation: %v", err)
	}
}
