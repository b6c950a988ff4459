package rollout

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"
)

// advance runs the current stage of a Running run, and the next ones as far as they can go.
func (s *stepper) advance() {
	st := &s.st
	for si := range st.Stages {
		stage := &st.Stages[si]
		if stage.State == RunFailed {
			s.stopAfter(stage, stage.Message) // its clusters in flight were still finishing
			return
		}
		if stage.State.Terminal() {
			continue
		}
		spec := &st.Strategy.Stages[si]
		done, rejected := s.gate(stage.BeforeTasks, spec.BeforeStageTasks, stage.Name, "", "Before", nil)
		if rejected != "" {
			s.stopAfter(stage, rejected)
			return
		}
		if !done {
			stage.State = RunPending
			stage.Message = s.waitingMessage(stage.BeforeTasks)
			st.Message = "stage " + stage.Name + ": " + stage.Message
			return
		}
		if stage.State != RunRunning {
			if stage.StartedAt.IsZero() {
				stage.StartedAt = s.now
			}
			stage.State, stage.Message = RunRunning, ""
		}
		if failed := s.runGroups(si); failed != "" {
			s.stopAfter(stage, failed)
			return
		}
		if !groupsDone(stage.Groups) {
			if groupsPending(stage.Groups) {
				stage.State = RunPending // every group waits (R3.11); so does the run
			}
			st.Message = "stage " + stage.Name + ": " + s.stageProgress(stage)
			return
		}
		done, rejected = s.gate(stage.AfterTasks, spec.AfterStageTasks, stage.Name, "", "After", stage.Groups)
		if rejected != "" {
			s.stopAfter(stage, rejected)
			return
		}
		if !done {
			stage.Message = s.waitingMessage(stage.AfterTasks)
			st.Message = "stage " + stage.Name + ": " + stage.Message
			return
		}
		stage.State, stage.FinishedAt, stage.Message = RunCompleted, s.now, ""
		if allSkipped(stage.Groups) {
			stage.State = RunSkipped
		}
	}
	st.State = RunCompleted
	done, failed, skipped := s.clusterCounts()
	st.Message = fmt.Sprintf("completed: %d clusters updated, %d failed, %d skipped", done, failed, skipped)
	if done == 0 && failed == 0 {
		// Nothing needed the revision, or a person skipped all of it (R3.11).
		st.State, st.Message = RunSkipped, fmt.Sprintf("skipped: no cluster needed revision %d (%d skipped)", st.RevisionIndex, skipped)
	}
}

// stopAfter stops the run after stage failed (why): at once when no cluster is in flight, else
// once they finish (the steps until then come back here).
func (s *stepper) stopAfter(stage *StageStatus, why string) {
	stage.State, stage.Message = RunFailed, why
	if s.inFlight() > 0 {
		s.st.Message = "stopping after a failure: " + why + "; clusters in flight finish"
		return
	}
	stage.FinishedAt = s.now
	s.st.State, s.st.Message = RunFailed, "stopped: "+why
}

// stageSize is how many clusters stage si has.
func (s *stepper) stageSize(si int) int {
	size := 0
	for _, g := range s.st.Stages[si].Groups {
		size += len(g.Clusters)
	}
	return size
}

// stageCap is how many clusters of stage si may be in flight at once (R3.5).
func (s *stepper) stageCap(si int) int {
	spec := &s.st.Strategy.Stages[si]
	size := s.stageSize(si)
	if len(spec.Groups) == 0 || spec.MaxConcurrency.IsSet() {
		return spec.MaxConcurrency.Or(Int(1)).ScaleDown(size)
	}
	return size // R3.5 Decision: with groups, an unset stage value adds no cap
}

// runGroups advances the groups of stage si in parallel and returns why the stage failed, or "".
func (s *stepper) runGroups(si int) string {
	if failure := s.overBudget(si); failure != "" {
		return failure
	}
	inFlight := 0
	for _, g := range s.st.Stages[si].Groups {
		inFlight += countState(g.Clusters, RunRunning)
	}
	return s.runGroupsUnder(si, s.stageCap(si), inFlight)
}

// overBudget says why stage si is over its failure budgets (R3.10), or "": a group over its
// own is marked failed. The first time, the run's Failure records it (R5.3).
func (s *stepper) overBudget(si int) string {
	stage := &s.st.Stages[si]
	spec := &s.st.Strategy.Stages[si]
	stageBudget := spec.MaxAllowedFailures.ScaleUp(s.stageSize(si))
	var failure string
	if stage.FailureCount > stageBudget && (len(spec.Groups) == 0 || spec.MaxAllowedFailures.IsSet()) {
		failure = fmt.Sprintf("stage %s: %d failures, more than maxAllowedFailures %d (%s)", stage.Name, stage.FailureCount, stageBudget, spec.MaxAllowedFailures.Or(Int(0)))
	}
	for gi := range stage.Groups {
		g := &stage.Groups[gi]
		gspec := StageGroup{MaxConcurrency: spec.MaxConcurrency, MaxAllowedFailures: spec.MaxAllowedFailures}
		if len(spec.Groups) > 0 {
			gspec = spec.Groups[gi]
		}
		budget := gspec.MaxAllowedFailures.ScaleUp(len(g.Clusters))
		if len(spec.Groups) > 0 && spec.MaxAllowedFailures.IsSet() {
			budget = min(budget, stageBudget) // the stage budget caps the groups' (R3.10)
		}
		if g.FailureCount > budget {
			// The group says so even when its stage failed first: the cap is visible there.
			g.State, g.Message = RunFailed, fmt.Sprintf("group %s of stage %s: %d failures, more than maxAllowedFailures %d (%s)", g.Name, stage.Name, g.FailureCount, budget, gspec.MaxAllowedFailures.Or(Int(0)))
			if failure == "" {
				failure = g.Message
			}
		}
	}
	if failure != "" {
		s.recordFailure(failure)
	}
	return failure
}

// runGroupsUnder starts and finishes the groups of stage si, at most stageCap clusters of the
// stage in flight (inFlight are now).
func (s *stepper) runGroupsUnder(si, stageCap, inFlight int) string {
	stage := &s.st.Stages[si]
	spec := &s.st.Strategy.Stages[si]
	for gi := range stage.Groups {
		g := &stage.Groups[gi]
		if g.State.Terminal() {
			continue
		}
		var before, after []Task
		groupCap := len(g.Clusters)
		if len(spec.Groups) > 0 {
			gspec := spec.Groups[gi]
			before, after = gspec.BeforeGroupTasks, gspec.AfterGroupTasks
			groupCap = gspec.MaxConcurrency.Or(Int(1)).ScaleDown(len(g.Clusters))
		}
		done, rejected := s.gate(g.BeforeTasks, before, stage.Name, g.Name, "Before", nil)
		if rejected != "" {
			g.State, g.Message = RunFailed, rejected
			return rejected
		}
		if !done {
			g.State, g.Message = RunPending, s.waitingMessage(g.BeforeTasks)
			continue
		}
		g.State, g.Message = RunRunning, ""
		inFlight += s.startClusters(g, min(groupCap, len(g.Clusters)), slots{stage: stage.Name, limit: stageCap, inFlight: inFlight})
		if !clustersDone(g.Clusters) {
			if why, pending := allPending(g.Clusters); pending {
				// As in Azure's runs, Pending propagates up: a group none of whose clusters
				// started or finished waits, and says for what (R3.11).
				g.State, g.Message = RunPending, why
			}
			continue
		}
		done, rejected = s.gate(g.AfterTasks, after, stage.Name, g.Name, "After", []GroupStatus{*g})
		if rejected != "" {
			g.State, g.Message = RunFailed, rejected
			return rejected
		}
		if !done {
			g.Message = s.waitingMessage(g.AfterTasks)
			continue
		}
		g.State = RunCompleted
		if countState(g.Clusters, RunSkipped) == len(g.Clusters) {
			g.State = RunSkipped
		}
	}
	return ""
}

// slots are a stage's clusters in flight and its limit (R3.5).
type slots struct {
	stage           string
	limit, inFlight int
}

// startClusters starts the group's next clusters, at most groupCap in flight in the group and
// the stage's limit in the stage; it returns how many it started. Clusters whose maintenance
// window is closed wait as Pending; among the others, open windows go first (R3.13). A cluster
// left waiting says whose limit holds it: the group's or the stage's.
func (s *stepper) startClusters(g *GroupStatus, groupCap int, stage slots) int {
	inGroup := countState(g.Clusters, RunRunning)
	var candidates []int
	for ci := range g.Clusters {
		c := &g.Clusters[ci]
		if c.State != RunNotStarted && c.State != RunPending {
			continue
		}
		fc := s.fleet[c.Name]
		if d := fc.Deployment; d != nil && d.Released == s.st.RevisionIndex && d.Applied == s.st.RevisionIndex && d.Ready {
			c.State, c.Message = RunSkipped, fmt.Sprintf("already on revision %d", s.st.RevisionIndex)
			continue
		}
		if fc.Since > s.st.RevisionIndex {
			c.State, c.Message = RunSkipped, fmt.Sprintf("joined the targets after revision %d was rendered: nothing to deploy", s.st.RevisionIndex)
			continue
		}
		if held := s.holds(fc); held != "" {
			c.State, c.Message = RunPending, held
			continue
		}
		if !fc.Availability.OpenAt(s.now) {
			c.State, c.Message = RunPending, fc.Availability.closedMessage(s.now)
			if next, ok := fc.Availability.NextOpening(s.now); ok {
				s.wakeAt(next)
			}
			continue
		}
		candidates = append(candidates, ci)
	}
	sortByWindow(candidates, func(ci int) int { return s.fleet[g.Clusters[ci].Name].Availability.windowRank(s.now) })
	started := 0
	for _, ci := range candidates {
		c := &g.Clusters[ci]
		switch {
		case inGroup >= groupCap:
			if c.State != RunPending {
				c.State, c.Message = RunPending, fmt.Sprintf("waiting for a slot: %d in flight in group %s, its maxConcurrency %d", inGroup, g.Name, groupCap)
			}
			continue
		case stage.inFlight+started >= stage.limit:
			if c.State != RunPending {
				c.State, c.Message = RunPending, fmt.Sprintf("waiting for a slot: %d in flight in stage %s, its maxConcurrency %d", stage.inFlight+started, stage.stage, stage.limit)
			}
			continue
		}
		c.State, c.Message, c.StartedAt = RunRunning, "", s.now
		s.release = append(s.release, c.Name)
		s.wakeAt(s.now.Add(s.st.Strategy.clusterTimeout()))
		inGroup++
		started++
	}
	return started
}

// holds says why a cluster may not start now, or "": the bundle or the cluster is paused
// (R1.13), or its agent is offline (R1.11).
func (s *stepper) holds(c *RunCluster) string {
	switch {
	case s.run.Paused:
		return "bundle paused: nothing new starts (R1.13)"
	case c.Paused:
		return "cluster paused (R1.13)"
	case c.Offline:
		return "agent offline: starts when it is back (R1.11)"
	}
	return ""
}

// gate runs a set of tasks (before or after a stage or group) and reports whether all are done,
// or why the gate is closed for good (a person rejected its approval, a check failed it). work
// is the groups the tasks follow: a TimedWait counts from when they finished (R3.4), and the
// checks of an Analysis task or a TimedWait judge their completed clusters (§7).
func (s *stepper) gate(tasks []TaskStatus, specs []Task, stage, group, when string, work []GroupStatus) (done bool, rejected string) {
	after := lastFinish(work)
	done = true
	for i := range tasks {
		t := &tasks[i]
		if t.State.Terminal() {
			continue
		}
		spec := specs[i]
		t.State = RunRunning
		switch spec.Type {
		case TaskApproval:
			if t.ApprovalRequest == "" { // a gate reached before keeps the name it was given then
				t.ApprovalRequest = ApprovalName(s.run.Name, when, stage, group)
			}
			a := s.approvals[t.ApprovalRequest]
			if a.RejectedBy != "" {
				t.State = RunFailed
				return false, fmt.Sprintf("approval %s rejected by %s: %s", t.ApprovalRequest, a.RejectedBy, a.Reason)
			}
			if a.approvedBy(spec.Quorum) {
				t.State = RunCompleted
				continue
			}
			s.waiting = append(s.waiting, ApprovalGate{Name: t.ApprovalRequest, Stage: stage, Group: group, Gate: when, Quorum: max(spec.Quorum, 1), Approvers: spec.Approvers})
		case TaskTimedWait:
			if t.WaitUntil.IsZero() {
				from := after
				if from.IsZero() { // no cluster ran (all skipped): the wait counts from now
					from = s.now
				}
				t.WaitUntil = from.Add(time.Duration(*spec.WaitTime))
			}
		case TaskScheduledStart:
			if t.WaitUntil.IsZero() {
				t.WaitUntil, _ = spec.ScheduledStart.opensAt(s.now)
			}
		}
		checked := true
		if len(spec.Analysis) > 0 {
			var failed string
			if checked, failed = s.judgeTask(t, spec.Analysis, stage, group, work); failed != "" {
				t.State = RunFailed
				s.recordFailureBy(RuleGateAnalysis, failed)
				return false, failed
			}
		}
		switch spec.Type {
		case TaskAnalysis:
			if checked {
				t.State = RunCompleted
				continue
			}
		case TaskTimedWait, TaskScheduledStart:
			if !s.now.Before(t.WaitUntil) && checked {
				t.State = RunCompleted
				continue
			}
			if s.now.Before(t.WaitUntil) {
				s.wakeAt(t.WaitUntil)
			}
		}
		done = false
	}
	return done, ""
}

// judgeTask judges the checks of a task that is open on the completed clusters of work
// (R7.3): it lists them as active, and reports whether they all passed, or why the task fails
// (a Gate check failed: R7.7). A Cluster check that fails a cluster fails that cluster
// (watchRegressions, R7.6): the task judges the clusters still completed.
func (s *stepper) judgeTask(t *TaskStatus, checks []Check, stage, group string, work []GroupStatus) (passed bool, failed string) {
	gate := "stage " + stage
	if group != "" {
		gate += " group " + group
	}
	var clusters []string
	for _, g := range work {
		for _, c := range g.Clusters {
			if c.State == RunCompleted {
				clusters = append(clusters, c.Name)
			}
		}
	}
	rev := s.st.RevisionIndex
	s.analysis = activate(s.analysis, checks, rev, gate, clusters)
	var js []Judgement
	if j, ok := gateJudgement(checks, s.run.Analyses, rev, gate); ok {
		if j.Verdict == VerdictFailed {
			t.Message = analysisMessage(gate, j)
			return false, t.Message
		}
		js = append(js, j)
	}
	if len(clusterOnly(checks)) > 0 {
		for _, name := range clusters {
			var d *Deployment
			if fc := s.fleet[name]; fc != nil {
				d = fc.Deployment
			}
			if analysisHolds(d, true) {
				j := Judgement{Check: clusterOnly(checks)[0].Name, Verdict: VerdictPending, Message: "not measured yet"}
				if d != nil && d.Analysis != nil {
					j = *d.Analysis
				}
				j.Check = j.Check + " on " + name // for the message: which cluster holds
				js = append(js, j)
			}
		}
	}
	w := Worst(js)
	if len(js) == 0 || w.Verdict == VerdictPassed {
		t.Message = ""
		return true, ""
	}
	t.Message = analysisHolding(gate, w)
	return false, ""
}

// ApprovalName is the name of the ApprovalRequest of a gate (R3.9):
// <run>-before-<stage>[-<group>]-<hash> (or -after-), the hash of all four parts making it
// unique: stage prod-eu and stage prod's group eu get different requests, so one approval
// never opens another gate.
func ApprovalName(run, when, stage, group string) string {
	readable := run + "-" + strings.ToLower(when) + "-" + stage
	if group != "" {
		readable += "-" + group
	}
	sum := sha256.Sum256([]byte(strings.Join([]string{run, when, stage, group}, "\x00")))
	const maxName, hashLen = 253, 8
	if len(readable) > maxName-hashLen-1 {
		readable = strings.TrimRight(readable[:maxName-hashLen-1], "-.")
	}
	return readable + "-" + hex.EncodeToString(sum[:])[:hashLen]
}

func (s *stepper) waitingMessage(tasks []TaskStatus) string {
	for _, t := range tasks {
		if t.State != RunRunning {
			continue
		}
		switch t.Type {
		case TaskApproval:
			return "waiting for approval " + t.ApprovalRequest
		case TaskTimedWait:
			if t.Message != "" && !s.now.Before(t.WaitUntil) {
				return "timed wait over; " + t.Message
			}
			return "timed wait until " + t.WaitUntil.UTC().Format(time.RFC3339)
		case TaskScheduledStart:
			return "scheduled to start at " + t.WaitUntil.UTC().Format(time.RFC3339)
		case TaskAnalysis:
			return t.Message
		}
	}
	return ""
}

// allPending reports whether no cluster of a group has started or finished (each NotStarted or
// Pending), and the first pending cluster's reason.
func allPending(clusters []ClusterRunStatus) (string, bool) {
	why := ""
	for _, c := range clusters {
		switch c.State {
		case RunPending:
			if why == "" {
				why = c.Name + ": " + c.Message
			}
		case RunNotStarted:
		default:
			return "", false
		}
	}
	return why, true
}

// groupsPending reports whether every group of a stage is Pending or not started.
func groupsPending(groups []GroupStatus) bool {
	for _, g := range groups {
		if g.State != RunPending && g.State != RunNotStarted {
			return false
		}
	}
	return len(groups) > 0
}

func (s *stepper) stageProgress(stage *StageStatus) string {
	var done, running, pending, total int
	var held []string
	for _, g := range stage.Groups {
		total += len(g.Clusters)
		done += countState(g.Clusters, RunCompleted) + countState(g.Clusters, RunSkipped) + countState(g.Clusters, RunFailed)
		running += countState(g.Clusters, RunRunning)
		pending += countState(g.Clusters, RunPending)
		for _, c := range g.Clusters {
			if c.State == RunPending && c.Message != "" {
				held = append(held, c.Name+": "+c.Message)
			}
		}
	}
	msg := fmt.Sprintf("%d/%d clusters done, %d updating", done, total, running)
	if pending > 0 {
		msg += fmt.Sprintf(", %d pending", pending)
	}
	if len(held) > 0 {
		msg += " (" + abbreviate(held, 3) + ")"
	}
	return msg
}

func (s *stepper) clusterCounts() (done, failed, skipped int) {
	for _, stage := range s.st.Stages {
		for _, g := range stage.Groups {
			done += countState(g.Clusters, RunCompleted)
			failed += countState(g.Clusters, RunFailed)
			skipped += countState(g.Clusters, RunSkipped)
		}
	}
	return done, failed, skipped
}

func countState(cs []ClusterRunStatus, state RunState) int {
	n := 0
	for _, c := range cs {
		if c.State == state {
			n++
		}
	}
	return n
}

func clustersDone(cs []ClusterRunStatus) bool {
	for _, c := range cs {
		if !c.State.Terminal() {
			return false
		}
	}
	return true
}

func groupsDone(gs []GroupStatus) bool {
	for _, g := range gs {
		if !g.State.Terminal() {
			return false
		}
	}
	return true
}

func allSkipped(gs []GroupStatus) bool {
	for _, g := range gs {
		if g.State != RunSkipped {
			return false
		}
	}
	return len(gs) > 0
}

// lastFinish is when the last cluster of the groups finished (R3.4's TimedWait starts then).
func lastFinish(gs []GroupStatus) time.Time {
	var last time.Time
	for _, g := range gs {
		for _, c := range g.Clusters {
			if c.FinishedAt.After(last) {
				last = c.FinishedAt
			}
		}
	}
	return last
}

// clone deep-copies a run status so Step never modifies its input.
func (st RunStatus) clone() RunStatus {
	out := st
	if st.Strategy != nil {
		s := st.Strategy.clone()
		out.Strategy = &s
	}
	out.Unstaged = append([]string(nil), st.Unstaged...)
	out.Stages = make([]StageStatus, len(st.Stages))
	for i, stage := range st.Stages {
		stage.BeforeTasks = append([]TaskStatus(nil), stage.BeforeTasks...)
		stage.AfterTasks = append([]TaskStatus(nil), stage.AfterTasks...)
		groups := make([]GroupStatus, len(stage.Groups))
		for j, g := range stage.Groups {
			g.BeforeTasks = append([]TaskStatus(nil), g.BeforeTasks...)
			g.AfterTasks = append([]TaskStatus(nil), g.AfterTasks...)
			g.Clusters = append([]ClusterRunStatus(nil), g.Clusters...)
			groups[j] = g
		}
		stage.Groups = groups
		out.Stages[i] = stage
	}
	return out
}

// clone copies the strategy's slices; selectors and tasks are never modified, so they are shared.
func (s StagedStrategy) clone() StagedStrategy {
	out := s
	out.Stages = append([]Stage(nil), s.Stages...)
	return out
}
