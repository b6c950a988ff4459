package rollout

import (
	"fmt"
	"time"
)

// §5 for staged runs: regressions of finished clusters (R5.1, R5.2), the failure policy once
// a budget is exceeded (R5.3) and the rollback (R5.4).

// recordFailure records the run's failure over its budgets the first time: a run fails once.
func (s *stepper) recordFailure(why string) { s.recordFailureBy(RuleFailureBudget, why) }

// recordFailureBy records the run's failure the first time, under the rule that fired.
func (s *stepper) recordFailureBy(rule, why string) {
	if s.st.Failure != nil {
		return
	}
	var failed []string
	for _, stage := range s.st.Stages {
		for _, g := range stage.Groups {
			for _, c := range g.Clusters {
				if c.State == RunFailed {
					failed = append(failed, c.Name)
				}
			}
		}
	}
	p := s.st.Strategy.FailurePolicy
	action := p.action()
	f := &Failure{Revision: s.st.RevisionIndex, Rule: rule, Action: action, Clusters: sortedNames(failed), At: s.now}
	f.Message = failureMessage(rule, action, why+"; failed", f.Clusters)
	s.st.Failure = f
	s.failure = f
}

// watchedStage reports whether a regression in stage si still counts (R5.1): while the stage
// runs (its clusters, then its after-stage gates), and within the health window after it
// finished.
func (s *stepper) watchedStage(si int) bool {
	stage := &s.st.Stages[si]
	switch stage.State {
	case RunRunning, RunPending:
		return !stage.StartedAt.IsZero()
	case RunCompleted:
		window := s.st.Strategy.window()
		if window == 0 || stage.FinishedAt.IsZero() {
			return false
		}
		end := stage.FinishedAt.Add(window)
		s.wakeAt(end)
		return s.now.Before(end)
	}
	return false
}

// watchRegressions applies R5.2 to the clusters that completed the run's revision and are no
// longer Ready on it, in the stages still watched: under Fail each counts as a failure of its
// group and stage (a finished stage over its budget fails again); under Restart it is back in
// flight, and the timed waits after its group and stage count again from when it is Ready.
func (s *stepper) watchRegressions() {
	p := s.st.Strategy.FailurePolicy
	rev := s.st.RevisionIndex
	for si := range s.st.Stages {
		if !s.watchedStage(si) {
			continue
		}
		stage := &s.st.Stages[si]
		failedNow := false
		for gi := range stage.Groups {
			g := &stage.Groups[gi]
			for ci := range g.Clusters {
				c := &g.Clusters[ci]
				fc, ok := s.fleet[c.Name]
				if c.State != RunCompleted || !ok {
					continue
				}
				f, _ := faultOf(fc.Deployment, rev, fc.Offline)
				action := p.regression()
				switch {
				case f == faultAnalysis:
					action = RegressionFail // the check's limits were its tolerance (R7.6)
				case f != faultRegression || action == RegressionIgnore:
					continue
				}
				switch action {
				case RegressionFail:
					failedNow = true
					c.State, c.FinishedAt = RunFailed, s.now
					c.Message = fmt.Sprintf("regressed: Ready on revision %d, then not (R5.1)", rev)
					if f == faultAnalysis {
						c.Message = fmt.Sprintf("analysis %s failed on revision %d (R7.6): %s", fc.Deployment.Analysis.Check, rev, fc.Deployment.Analysis.Message)
					}
					g.FailureCount++
					stage.FailureCount++
				case RegressionRestart:
					if stage.State == RunCompleted {
						continue // its gates are behind it: nothing to start over
					}
					c.State, c.StartedAt, c.FinishedAt = RunRunning, s.now, time.Time{}
					c.Message = "regressed: back in flight until Ready again; the timed waits after it start over (R5.2)"
					if g.State == RunCompleted {
						g.State = RunRunning
					}
					rearmTimedWaits(g.AfterTasks)
					rearmTimedWaits(stage.AfterTasks)
				}
			}
		}
		if failedNow && stage.State == RunCompleted {
			if why := s.overBudget(si); why != "" {
				stage.State, stage.Message = RunFailed, why
			}
		}
	}
}

// rearmTimedWaits makes the timed waits of a gate that has not opened yet count again from
// the work they follow.
func rearmTimedWaits(tasks []TaskStatus) {
	for i := range tasks {
		if t := &tasks[i]; t.Type == TaskTimedWait && t.State == RunRunning {
			t.State, t.WaitUntil = RunNotStarted, time.Time{}
		}
	}
}

// failedRun settles a run that failed its budgets: under Rollback it rolls back at once (the
// clusters in flight are on the failing revision too), under Pause it stops as R3.10 says.
func (s *stepper) failedRun() {
	st := &s.st
	if st.Failure == nil || st.Failure.Action != FailureRollback || st.State == RunRollingBack || st.State == RunRolledBack {
		return
	}
	st.State = RunRollingBack
	s.release = nil // nothing of the failing revision goes out any more
	s.rollBack()
}

// rollBack restores every cluster that received the run's revision (R5.4): the failed ones at
// once, the others stage by stage under the stage's maxConcurrency; clusters that joined after
// the run started and received the revision are restored at once.
func (s *stepper) rollBack() {
	st := &s.st
	q := st.Failure
	failed := map[string]bool{}
	for _, c := range q.Clusters {
		failed[c] = true
	}
	cand := func(name string) (restoreCandidate, bool) {
		fc, ok := s.fleet[name]
		if !ok {
			return restoreCandidate{}, false
		}
		held := s.holds(fc) != "" || !fc.Availability.OpenAt(s.now)
		return restoreCandidate{name: name, d: fc.Deployment, failed: failed[name], held: held}, true
	}
	left := 0
	restoredTo := map[string]int64{}
	for si := range st.Stages {
		var cands []restoreCandidate
		for _, g := range st.Stages[si].Groups {
			for _, c := range g.Clusters {
				if rc, ok := cand(c.Name); ok {
					cands = append(cands, rc)
				}
			}
		}
		limit := s.stageCap(si)
		restores, l := planRestores(q.Revision, s.run.Quarantine, cands, func(busy int) int { return limit - busy })
		s.restore = append(s.restore, restores...)
		left += l
		for _, r := range restores {
			restoredTo[r.Cluster] = r.To
		}
	}
	var joiners []restoreCandidate
	for _, name := range st.Unstaged {
		if rc, ok := cand(name); ok {
			joiners = append(joiners, rc)
		}
	}
	restores, l := planRestores(q.Revision, s.run.Quarantine, joiners, noLimit)
	s.restore = append(s.restore, restores...)
	left += l
	for si := range st.Stages {
		for gi := range st.Stages[si].Groups {
			for ci := range st.Stages[si].Groups[gi].Clusters {
				c := &st.Stages[si].Groups[gi].Clusters[ci]
				if to, ok := restoredTo[c.Name]; ok {
					c.Message = restoreMessage(to)
				}
			}
		}
	}
	if left == 0 {
		st.State, st.Message = RunRolledBack, fmt.Sprintf("rolled back: revision %d failed (%s); every cluster that received it runs its last good revision again", q.Revision, q.Rule)
		return
	}
	st.Message = fmt.Sprintf("rolling back revision %d: %d clusters still to restore or becoming ready (R5.4)", q.Revision, left)
}

// restoreMessage says what a rollback released a cluster.
func restoreMessage(to int64) string {
	if to == 0 {
		return "rolled back: the bundle is removed, the cluster had no earlier revision (R5.4)"
	}
	return fmt.Sprintf("rolled back to revision %d (R5.4)", to)
}
