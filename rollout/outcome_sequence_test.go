package rollout

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// seqMember is a cluster of tier (the group of that name) with a deployment.
func seqMember(name, tier string, d *Deployment) SequenceCluster {
	return SequenceCluster{Name: name, Labels: map[string]string{"tier": tier}, Deployment: d}
}

// readyOn is a deployment released rev at releasedAt, Ready on it, that ran lastGood before.
func readyOn(rev, lastGood int64, releasedAt time.Time) *Deployment {
	return &Deployment{Staged: rev, Released: rev, Applied: rev, Ready: true, WasReady: true, ReleasedAt: releasedAt, LastGood: lastGood}
}

// regressedOn is readyOn, then NotReady from at.
func regressedOn(rev, lastGood int64, releasedAt, at time.Time) *Deployment {
	d := readyOn(rev, lastGood, releasedAt)
	d.Ready, d.NotReadyAt = false, at
	return d
}

// soakingStatus is a sequence status in which group dev soaks rev since finished, for soak.
func soakingStatus(rev int64, finished time.Time, soak time.Duration) SequenceStatus {
	return SequenceStatus{Groups: []SequenceGroupStatus{
		{Name: "dev", Revisions: []SequenceRevisionStatus{{Index: rev, State: SeqSoaking, StartedAt: finished.Add(-time.Minute), FinishedAt: finished, SoakUntil: finished.Add(soak)}}},
		{Name: "prod", Revisions: []SequenceRevisionStatus{{Index: rev, State: SeqIneligible}}},
	}}
}

func TestR5_1_R5_2_ARegressionDuringASoakFailsTheGroupUnderFail(t *testing.T) {
	at := t0.Add(time.Hour)
	for _, c := range []struct {
		policy    RegressionAction
		wantState SequenceState
		failure   bool
	}{
		{"", SeqFailed, true}, // Fail is the default
		{RegressionFail, SeqFailed, true},
		{RegressionRestart, SeqInProgress, false},
		{RegressionIgnore, SeqSoaking, false},
	} {
		t.Run("onRegression "+string(c.policy), func(t *testing.T) {
			seq := Sequence{Groups: []SequenceGroup{seqGroup("dev", "", day), seqGroup("prod", "dev", 0)}}
			seq.OnRegression = c.policy
			fleet := []SequenceCluster{
				seqMember("d1", "dev", regressedOn(2, 1, t0, at.Add(-time.Minute))),
				seqMember("d2", "dev", readyOn(2, 1, t0)),
				seqMember("p1", "prod", readyOn(1, 0, t0.Add(-day))),
			}
			res, err := StepSequence(&seq, soakingStatus(2, t0.Add(time.Minute), day), []int64{2}, fleet, at)
			if err != nil {
				t.Fatal(err)
			}
			dev := res.Status.Groups[0].Revisions[0]
			if dev.State != c.wantState {
				t.Errorf("dev: %s %q, want %s", dev.State, dev.Message, c.wantState)
			}
			if got := len(res.Failures) == 1; got != c.failure {
				t.Fatalf("failures %+v, want one: %v", res.Failures, c.failure)
			}
			if c.failure {
				f := res.Failures[0]
				want := Failure{Revision: 2, Rule: RuleRegression, Action: FailurePause, Clusters: []string{"d1"}, Message: f.Message, At: at}
				if diff := cmp.Diff(want, f); diff != "" || !strings.Contains(f.Message, "group dev failed revision 2: d1 (R5.2)") {
					t.Errorf("failure (-want +got):\n%s\n%s", diff, f.Message)
				}
				if res.Outcome != OutcomeFailed || len(res.Release) != 0 || len(res.Restore) != 0 {
					t.Errorf("outcome %q, release %v, restore %v: want Failed, prod not released, nothing rolled back (Pause)", res.Outcome, res.Release, res.Restore)
				}
			}
			if c.policy == RegressionRestart && !strings.Contains(dev.Message, "soak starts over once d1") {
				t.Errorf("restart message %q", dev.Message)
			}
		})
	}
}

// R5.2 Restart: the soak starts over from the moment every member is Ready again.
func TestR5_2_RestartStartsTheSoakOverWhenReadyAgain(t *testing.T) {
	seq := Sequence{Groups: []SequenceGroup{seqGroup("dev", "", time.Hour), seqGroup("prod", "dev", 0)}}
	seq.OnRegression = RegressionRestart
	prod := seqMember("p1", "prod", readyOn(1, 0, t0.Add(-day)))
	res, _ := StepSequence(&seq, soakingStatus(2, t0, time.Hour), []int64{2},
		[]SequenceCluster{seqMember("d1", "dev", regressedOn(2, 1, t0, t0.Add(50*time.Minute))), prod}, t0.Add(50*time.Minute))
	again := t0.Add(2 * time.Hour)
	res, _ = StepSequence(&seq, res.Status, []int64{2}, []SequenceCluster{seqMember("d1", "dev", readyOn(2, 1, t0)), prod}, again)
	dev := res.Status.Groups[0].Revisions[0]
	if dev.State != SeqSoaking || !dev.SoakUntil.Equal(again.Add(time.Hour)) || len(res.Release) != 0 {
		t.Errorf("dev %s until %s, release %v: want a new hour of soak from %s and prod waiting", dev.State, dev.SoakUntil, res.Release, again)
	}
}

// R5.1: a cluster that moved on to a newer revision cannot regress on the older one.
func TestR5_1_AClusterOnANewerRevisionDoesNotRegressTheOlder(t *testing.T) {
	seq := Sequence{Groups: []SequenceGroup{seqGroup("dev", "", day), seqGroup("prod", "dev", 0)}}
	moved := regressedOn(3, 2, t0, t0.Add(time.Minute))
	res, _ := StepSequence(&seq, soakingStatus(2, t0, day), []int64{2}, []SequenceCluster{seqMember("d1", "dev", moved), seqMember("d2", "dev", readyOn(2, 1, t0))}, t0.Add(time.Hour))
	if len(res.Failures) != 0 || res.Status.Groups[0].Revisions[0].State != SeqSoaking {
		t.Errorf("failures %+v, dev %s: a cluster on revision 3 failed revision 2", res.Failures, res.Status.Groups[0].Revisions[0].State)
	}
}

// R5.3: a member that is not Ready failureTimeout after its release fails the group; until
// then it is progressing and the step asks to be woken at the deadline.
func TestR5_3_AMemberNotReadyPastFailureTimeoutFailsTheGroup(t *testing.T) {
	seq := Sequence{Groups: []SequenceGroup{seqGroup("dev", "", day), seqGroup("prod", "dev", 0)}}
	seq.FailureTimeout = dur(5 * time.Minute)
	slow := &Deployment{Staged: 2, Released: 2, Applied: 2, ReleasedAt: t0, LastGood: 1}
	fleet := []SequenceCluster{seqMember("d1", "dev", slow), seqMember("p1", "prod", readyOn(1, 0, t0.Add(-day)))}
	prev := SequenceStatus{Groups: []SequenceGroupStatus{{Name: "dev", Revisions: []SequenceRevisionStatus{{Index: 2, State: SeqInProgress, StartedAt: t0}}}}}
	res, _ := StepSequence(&seq, prev, []int64{2}, fleet, t0.Add(2*time.Minute))
	if dev := res.Status.Groups[0].Revisions[0]; dev.State != SeqInProgress || len(res.Failures) != 0 || !res.WakeAt.Equal(t0.Add(5*time.Minute)) {
		t.Fatalf("dev %s, failures %v, wake %s: want IN_PROGRESS, woken at the timeout", dev.State, res.Failures, res.WakeAt)
	}
	res, _ = StepSequence(&seq, res.Status, []int64{2}, fleet, t0.Add(5*time.Minute))
	if len(res.Failures) != 1 || res.Failures[0].Rule != RuleFailureBudget || res.Status.Groups[0].Revisions[0].State != SeqFailed {
		t.Errorf("failures %+v, dev %s: want FAILED by R5.3", res.Failures, res.Status.Groups[0].Revisions[0].State)
	}
	// Under Pause the group goes on once the member recovers, its soak from then.
	fleet[0].Deployment = readyOn(2, 1, t0)
	res, _ = StepSequence(&seq, res.Status, []int64{2}, fleet, t0.Add(8*time.Minute))
	if dev := res.Status.Groups[0].Revisions[0]; dev.State != SeqSoaking || !dev.FinishedAt.Equal(t0.Add(8*time.Minute)) || res.Outcome != "" {
		t.Errorf("dev %s finished %s, outcome %q: want soaking from the recovery", dev.State, dev.FinishedAt, res.Outcome)
	}
}

// R5.3–R5.5 under onFailure Rollback: every cluster that received the revision gets its last
// good one back at once (a sequence has no budget), the failed one too; clusters that never
// received it are untouched; the revision is quarantined and no group releases it again.
func TestR5_4_R5_5_ASequenceRollsBackAndQuarantines(t *testing.T) {
	seq := Sequence{Groups: []SequenceGroup{seqGroup("dev", "", day), seqGroup("staging", "dev", day), seqGroup("prod", "staging", 0)}}
	seq.OnFailure = FailureRollback
	prev := SequenceStatus{Groups: []SequenceGroupStatus{
		{Name: "dev", Revisions: []SequenceRevisionStatus{{Index: 2, State: SeqComplete, SoakUntil: t0}, {Index: 3, State: SeqComplete, SoakUntil: t0.Add(time.Hour)}}},
		{Name: "staging", Revisions: []SequenceRevisionStatus{{Index: 2, State: SeqComplete, SoakUntil: t0}, {Index: 3, State: SeqSoaking, StartedAt: t0.Add(time.Hour), FinishedAt: t0.Add(2 * time.Hour), SoakUntil: t0.Add(26 * time.Hour)}}},
		{Name: "prod", Revisions: []SequenceRevisionStatus{{Index: 2, State: SeqComplete, SoakUntil: t0}, {Index: 3, State: SeqIneligible}}},
	}}
	now := t0.Add(3 * time.Hour)
	fleet := []SequenceCluster{
		seqMember("d1", "dev", readyOn(3, 2, t0)),
		seqMember("new-dev", "dev", readyOn(3, 0, t0)), // its first revision: removed on rollback
		seqMember("s1", "staging", regressedOn(3, 2, t0.Add(time.Hour), now.Add(-time.Minute))),
		seqMember("s2", "staging", readyOn(3, 2, t0.Add(time.Hour))),
		seqMember("p1", "prod", readyOn(2, 1, t0)),
	}
	res, err := StepSequence(&seq, prev, []int64{2, 3}, fleet, now)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Failures) != 1 || res.Failures[0].Action != FailureRollback || res.Failures[0].Revision != 3 {
		t.Fatalf("failures %+v, want revision 3 failed with Rollback", res.Failures)
	}
	want := []Restore{{"d1", 2}, {"new-dev", 0}, {"s1", 2}, {"s2", 2}}
	if diff := cmp.Diff(want, res.Restore); diff != "" {
		t.Errorf("restore (-want +got):\n%s", diff)
	}
	if len(res.Release) != 0 {
		t.Errorf("released %v during a rollback: prod never got revision 3 and keeps 2", res.Release)
	}
	states := map[string]SequenceState{}
	for _, g := range res.Status.Groups {
		states[g.Name] = g.Revisions[1].State
	}
	if diff := cmp.Diff(map[string]SequenceState{"dev": SeqRolledBack, "staging": SeqFailed, "prod": SeqIneligible}, states); diff != "" {
		t.Errorf("revision 3 per group (-want +got):\n%s", diff)
	}
	// The restores written, the rollback is done; nothing releases revision 3 again, not even
	// to a cluster that joins dev, which had completed it.
	quarantine := seq
	quarantine.Quarantine = res.Failures
	restored := []SequenceCluster{
		seqMember("d1", "dev", &Deployment{Staged: 3, Released: 2, Applied: 2, Ready: true, WasReady: true, Rollback: true, LastGood: 2}),
		seqMember("new-dev", "dev", &Deployment{Staged: 3, Rollback: true}),
		seqMember("s1", "staging", &Deployment{Staged: 3, Released: 2, Applied: 2, Rollback: true, LastGood: 2}),
		seqMember("s2", "staging", &Deployment{Staged: 3, Released: 2, Applied: 2, Ready: true, Rollback: true, LastGood: 2}),
		seqMember("p1", "prod", readyOn(2, 1, t0)),
		seqMember("joiner", "dev", nil),
	}
	res, _ = StepSequence(&quarantine, res.Status, []int64{2, 3}, restored, now.Add(time.Minute))
	for c, r := range res.Release {
		if r == 3 {
			t.Errorf("quarantined revision 3 released to %s (R5.5)", c)
		}
	}
	if res.Release["joiner"] != 2 || len(res.Restore) != 0 || res.Outcome != OutcomeRolledBack {
		t.Errorf("release %v, restore %v, outcome %q: want the joiner on 2, nothing more to restore, RolledBack", res.Release, res.Restore, res.Outcome)
	}
	// A new commit's revision is not quarantined: dev takes it.
	res, _ = StepSequence(&quarantine, res.Status, []int64{2, 3, 4}, restored[:5], now.Add(2*time.Minute))
	if res.Release["d1"] != 4 || res.Outcome != "" {
		t.Errorf("release %v, outcome %q: want revision 4 rolling out in dev", res.Release, res.Outcome)
	}
}

// R5.1: with a health window, a regression after the soak still fails the group; after the
// window it does not.
func TestR5_1_HealthWindowAfterTheSoak(t *testing.T) {
	seq := Sequence{Groups: []SequenceGroup{seqGroup("dev", "", time.Hour), seqGroup("prod", "dev", 0)}}
	seq.HealthWindow = dur(time.Hour)
	prev := SequenceStatus{Groups: []SequenceGroupStatus{{Name: "dev", Revisions: []SequenceRevisionStatus{{Index: 2, State: SeqComplete, FinishedAt: t0, SoakUntil: t0.Add(time.Hour)}}}}}
	for _, c := range []struct {
		after time.Duration
		fails bool
	}{{90 * time.Minute, true}, {2*time.Hour + time.Second, false}} {
		now := t0.Add(c.after)
		fleet := []SequenceCluster{seqMember("d1", "dev", regressedOn(2, 1, t0, now.Add(-time.Second))), seqMember("p1", "prod", readyOn(2, 1, t0))}
		res, _ := StepSequence(&seq, prev, []int64{2}, fleet, now)
		if got := len(res.Failures) == 1 && res.Status.Groups[0].Revisions[0].State == SeqFailed; got != c.fails {
			t.Errorf("%s after the soak began: failures %+v, dev %s; want failed: %v", c.after, res.Failures, res.Status.Groups[0].Revisions[0].State, c.fails)
		}
	}
}
