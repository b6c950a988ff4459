package rollout

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Step advances a staged update run by one decision (ROLLOUT.md §3). It is pure: the caller
// writes the returned status, releases the listed clusters, makes sure the listed approval
// requests exist, and calls Step again on the next event or at WakeAt.
//
//	NotStarted ──Run──▶ Running ──Stop──▶ Stopping ──(in-flight done)──▶ Stopped ──Run──▶ Running
//	                       │
//	                       ├─ every stage done ─────────────▶ Completed
//	                       └─ a budget exceeded, in-flight done ▶ Failed
//
// Within Running, stages go one at a time: before-stage gate → groups in parallel (each: gate →
// clusters in order, at most maxConcurrency in flight → gate) → after-stage gates → next stage.
func Step(run *Run, fleet []RunCluster, approvals map[string]Approval, now time.Time) StepResult {
	s := &stepper{run: run, now: now, approvals: approvals, st: run.Status.clone()}
	s.fleet = make(map[string]*RunCluster, len(fleet))
	for i := range fleet {
		s.fleet[fleet[i].Name] = &fleet[i]
	}
	st := &s.st
	switch {
	case st.State == RunRollingBack:
		s.trackMembership(fleet)
		s.rollBack()
		return s.result()
	case st.State == RunCompleted:
		// A regression within the health window fails a finished stage after all (R5.1).
		s.watchRegressions()
		for i := range st.Stages {
			if st.Stages[i].State == RunFailed {
				st.State, st.Message = RunFailed, "stopped: "+st.Stages[i].Message
				s.failedRun()
				return s.result()
			}
		}
	}
	if st.State.Terminal() {
		s.trackMembership(fleet)
		s.releaseToJoiners()
		return s.result()
	}
	if st.State == "" {
		if err := s.initialize(fleet); err != nil {
			st.State, st.Message = RunFailed, "initialization failed: "+err.Error()
			return s.result()
		}
	}
	if q := quarantined(run.Quarantine, run.Revision); q != nil {
		st.State, st.Message = RunFailed, fmt.Sprintf("revision %d is quarantined: it failed (%s) and was rolled back; a new revision, or a retry of this one, lifts it (R5.5)", run.Revision, q.Rule)
		return s.result()
	}
	s.trackMembership(fleet)
	s.applyAction()
	s.applySkips()
	s.progressInFlight()
	s.watchRegressions()
	switch st.State {
	case RunStopping:
		if s.inFlight() == 0 {
			st.State = RunStopped
			st.Message = "stopped"
			if st.SupersededBy != "" {
				st.Message = "superseded by run " + st.SupersededBy
			}
		}
	case RunRunning, RunPending:
		st.State = RunRunning
		s.advance()
		if st.State == RunRunning && len(s.release) == 0 && s.inFlight() == 0 {
			// Nothing is being updated: the run waits for a gate, a window or a pause, and
			// says which in its message (R3.11).
			st.State = RunPending
		}
	}
	st.FailureCount = 0
	for i := range st.Stages {
		st.FailureCount += st.Stages[i].FailureCount
	}
	s.failedRun()
	s.releaseToJoiners()
	return s.result()
}

type stepper struct {
	run *Run
	now time.Time
	// approvals is what people said on the gates' requests, by request name.
	approvals map[string]Approval
	fleet     map[string]*RunCluster
	st        RunStatus

	release []string
	waiting []ApprovalGate
	wake    time.Time
	// failure is the run's failure when this step found it; restore, the rollback's releases.
	failure *Failure
	restore []Restore
	// analysis are the checks the gates judge in this step (§7).
	analysis []ActiveCheck
}

func (s *stepper) result() StepResult {
	return StepResult{Status: s.st, Release: s.release, Approvals: s.waiting, WakeAt: s.wake, Failure: s.failure, Restore: s.restore, Analysis: s.analysis}
}

func (s *stepper) wakeAt(t time.Time) {
	if t.After(s.now) && (s.wake.IsZero() || t.Before(s.wake)) {
		s.wake = t
	}
}

// initialize freezes the strategy and places every targeted cluster in exactly one stage and
// group, in update order (R3.2, R3.7).
func (s *stepper) initialize(fleet []RunCluster) error {
	strategy := s.run.Strategy.clone()
	if err := ValidateStaged(&strategy); err != nil {
		return err
	}
	st := &s.st
	st.Strategy = &strategy
	st.RevisionIndex = s.run.Revision
	st.Stages = make([]StageStatus, len(strategy.Stages))
	stageOf := make(map[string][]string, len(fleet))
	compiled := make([]*compiledSelector, len(strategy.Stages))
	for i := range strategy.Stages {
		compiled[i] = selectorOf(strategy.Stages[i].LabelSelector, strategy.Stages[i].Selector).compile()
	}
	members := make([][]*RunCluster, len(strategy.Stages))
	for i := range fleet {
		c := &fleet[i]
		for si := range compiled {
			if compiled[si].matches(c.Labels) {
				stageOf[c.Name] = append(stageOf[c.Name], strategy.Stages[si].Name)
				members[si] = append(members[si], c)
			}
		}
	}
	var none, twice []string
	for i := range fleet {
		switch n := len(stageOf[fleet[i].Name]); {
		case n == 0:
			none = append(none, fleet[i].Name)
		case n > 1:
			twice = append(twice, fmt.Sprintf("%s (%s)", fleet[i].Name, strings.Join(stageOf[fleet[i].Name], ", ")))
		}
	}
	var problems []string
	if len(none) > 0 {
		sort.Strings(none)
		problems = append(problems, "clusters in no stage: "+abbreviate(none, 10))
	}
	if len(twice) > 0 {
		sort.Strings(twice)
		problems = append(problems, "clusters in more than one stage: "+abbreviate(twice, 10))
	}
	for si, stage := range strategy.Stages {
		sortClusters(members[si], stage.SortingLabelKey)
		groups, err := s.groupMembers(stage, members[si])
		if err != nil {
			problems = append(problems, err.Error())
		}
		ss := StageStatus{Name: stage.Name, State: RunNotStarted, BeforeTasks: newTasks(stage.BeforeStageTasks), AfterTasks: newTasks(stage.AfterStageTasks)}
		for gi, g := range groups {
			gs := GroupStatus{Name: g.name, State: RunNotStarted, BeforeTasks: newTasks(g.before), AfterTasks: newTasks(g.after)}
			gs.Clusters = make([]ClusterRunStatus, len(g.clusters))
			for ci, c := range g.clusters {
				gs.Clusters[ci] = ClusterRunStatus{Name: c.Name, State: RunNotStarted}
				if d := c.Deployment; d != nil && d.Released == s.run.Revision && d.Applied == s.run.Revision && d.Ready {
					gs.Clusters[ci].State, gs.Clusters[ci].Message = RunSkipped, fmt.Sprintf("already on revision %d", s.run.Revision)
				}
			}
			ss.Groups = append(ss.Groups, gs)
			_ = gi
		}
		st.Stages[si] = ss
	}
	if len(problems) > 0 {
		st.Stages = nil
		return fmt.Errorf("%s", strings.Join(problems, "; "))
	}
	st.State = RunNotStarted
	total := 0
	for _, m := range members {
		total += len(m)
	}
	st.Message = fmt.Sprintf("initialized: %d clusters in %d stages; set the run's state to Run to start", total, len(strategy.Stages))
	return nil
}

type groupPlan struct {
	name          string
	clusters      []*RunCluster
	before, after []Task
}

// groupMembers splits a stage's clusters into its groups (R3.5); a stage without groups is one
// implicit group named after the stage.
func (s *stepper) groupMembers(stage Stage, members []*RunCluster) ([]groupPlan, error) {
	if len(stage.Groups) == 0 {
		return []groupPlan{{name: stage.Name, clusters: members}}, nil
	}
	out := make([]groupPlan, len(stage.Groups))
	compiled := make([]*compiledSelector, len(stage.Groups))
	for i, g := range stage.Groups {
		out[i] = groupPlan{name: g.Name, before: g.BeforeGroupTasks, after: g.AfterGroupTasks}
		compiled[i] = selectorOf(g.LabelSelector, g.Selector).compile()
	}
	var none, twice []string
	for _, c := range members {
		n := 0
		for i := range compiled {
			if compiled[i].matches(c.Labels) {
				out[i].clusters = append(out[i].clusters, c)
				n++
			}
		}
		switch {
		case n == 0:
			none = append(none, c.Name)
		case n > 1:
			twice = append(twice, c.Name)
		}
	}
	switch {
	case len(none) > 0:
		return nil, fmt.Errorf("stage %s: clusters in no group: %s", stage.Name, abbreviate(none, 10))
	case len(twice) > 0:
		return nil, fmt.Errorf("stage %s: clusters in more than one group: %s", stage.Name, abbreviate(twice, 10))
	}
	return out, nil
}

// sortClusters applies R3.2: ascending integer value of the sorting label, then name; clusters
// without the label (or with a non-integer value) come after, by name.
func sortClusters(cs []*RunCluster, key string) {
	value := func(c *RunCluster) (int, bool) {
		if key == "" {
			return 0, false
		}
		v, err := strconv.Atoi(c.Labels[key])
		return v, err == nil
	}
	slices.SortStableFunc(cs, func(a, b *RunCluster) int {
		va, oka := value(a)
		vb, okb := value(b)
		switch {
		case oka && okb && va != vb:
			return va - vb
		case oka != okb:
			if oka {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})
}

func newTasks(tasks []Task) []TaskStatus {
	if len(tasks) == 0 {
		return nil
	}
	out := make([]TaskStatus, len(tasks))
	for i, t := range tasks {
		out[i] = TaskStatus{Type: t.Type, State: RunNotStarted}
	}
	return out
}

// trackMembership applies R3.7's membership rules: a cluster that left the fleet is skipped; a
// cluster that joined is reported, never pulled into the run.
func (s *stepper) trackMembership(fleet []RunCluster) {
	inRun := map[string]bool{}
	for si := range s.st.Stages {
		for gi := range s.st.Stages[si].Groups {
			for ci := range s.st.Stages[si].Groups[gi].Clusters {
				c := &s.st.Stages[si].Groups[gi].Clusters[ci]
				inRun[c.Name] = true
				if _, ok := s.fleet[c.Name]; !ok && !c.State.Terminal() {
					c.State, c.Message = RunSkipped, "cluster left the fleet"
				}
			}
		}
	}
	s.st.Unstaged = nil
	for i := range fleet {
		if !inRun[fleet[i].Name] {
			s.st.Unstaged = append(s.st.Unstaged, fleet[i].Name)
		}
	}
	sort.Strings(s.st.Unstaged)
}

// releaseToJoiners gives a cluster that joined after the run started (R3.7 keeps it out of the
// run) what its stage has reached: the run's revision once that stage is done, unless the
// cluster is paused, offline or outside its maintenance window. A stage still to come brings it
// nothing yet: the joiner follows once the stage is done.
func (s *stepper) releaseToJoiners() {
	st := &s.st
	if !s.run.Current || s.run.Paused || st.Strategy == nil || len(st.Unstaged) == 0 || st.Failure != nil {
		return
	}
	for _, name := range st.Unstaged {
		c := s.fleet[name]
		if c.Deployment != nil && c.Deployment.Released == st.RevisionIndex || c.Since > st.RevisionIndex || c.Paused || c.Offline || !c.Availability.OpenAt(s.now) {
			continue
		}
		for si, stage := range st.Strategy.Stages {
			if !selectorOf(stage.LabelSelector, stage.Selector).compile().matches(c.Labels) {
				continue
			}
			if done := st.Stages[si].State; done == RunCompleted || done == RunSkipped {
				s.release = append(s.release, name)
			}
			break
		}
	}
}

// applyAction moves the run between NotStarted, Running, Stopping and Stopped (R3.7).
func (s *stepper) applyAction() {
	st := &s.st
	stop := s.run.Action == ActionStop || s.run.SupersededBy != ""
	if s.run.SupersededBy != "" {
		st.SupersededBy = s.run.SupersededBy
	}
	switch {
	case stop && (st.State == RunRunning || st.State == RunPending || st.State == RunNotStarted):
		st.State, st.Message = RunStopping, "stopping: clusters in flight finish, nothing new starts"
	case !stop && s.run.Action == ActionRun && (st.State == RunNotStarted || st.State == RunStopped || st.State == RunStopping):
		st.State, st.Message, st.StartedAt = RunRunning, "running", MicroTime{s.now}
	}
}

// applySkips marks what a person chose to skip (R3.11). Clusters in flight are never pulled
// back; only what has not started is skipped.
func (s *stepper) applySkips() {
	for _, sk := range s.run.Skips {
		for si := range s.st.Stages {
			stage := &s.st.Stages[si]
			if stage.Name != sk.Stage {
				continue
			}
			switch {
			case sk.Gate != "" && sk.Group == "":
				skipTasks(stage.BeforeTasks, stage.AfterTasks, sk.Gate)
			case sk.Gate != "":
				for gi := range stage.Groups {
					if stage.Groups[gi].Name == sk.Group {
						skipTasks(stage.Groups[gi].BeforeTasks, stage.Groups[gi].AfterTasks, sk.Gate)
					}
				}
			case sk.Cluster != "":
				for gi := range stage.Groups {
					for ci := range stage.Groups[gi].Clusters {
						c := &stage.Groups[gi].Clusters[ci]
						if c.Name == sk.Cluster && (c.State == RunNotStarted || c.State == RunPending) {
							c.State, c.Message = RunSkipped, "skipped by request"
						}
					}
				}
			default:
				for gi := range stage.Groups {
					if sk.Group == "" || stage.Groups[gi].Name == sk.Group {
						skipGroup(&stage.Groups[gi])
					}
				}
				if sk.Group == "" && !stage.State.Terminal() {
					skipTasks(stage.BeforeTasks, stage.AfterTasks, "")
					if stage.State == RunNotStarted || stage.State == RunPending && stage.StartedAt.IsZero() {
						stage.State, stage.Message = RunSkipped, "skipped by request"
					}
				}
			}
		}
	}
}

func skipGroup(g *GroupStatus) {
	if g.State.Terminal() {
		return
	}
	started := false
	for ci := range g.Clusters {
		c := &g.Clusters[ci]
		switch c.State {
		case RunNotStarted, RunPending:
			c.State, c.Message = RunSkipped, "skipped by request"
		case RunRunning, RunCompleted, RunFailed:
			started = true
		}
	}
	skipTasks(g.BeforeTasks, g.AfterTasks, "")
	if !started {
		g.State, g.Message = RunSkipped, "skipped by request"
	}
}

// skipTasks completes gates by request: gate "Before", "After", or "" for both.
func skipTasks(before, after []TaskStatus, gate string) {
	for _, set := range []struct {
		tasks []TaskStatus
		gate  string
	}{{before, "Before"}, {after, "After"}} {
		if gate != "" && gate != set.gate {
			continue
		}
		for i := range set.tasks {
			if !set.tasks[i].State.Terminal() {
				set.tasks[i].State = RunSkipped
			}
		}
	}
}

// progressInFlight moves running clusters to Completed or Failed from what the fleet reports.
func (s *stepper) progressInFlight() {
	rev := s.st.RevisionIndex
	timeout := s.st.Strategy.clusterTimeout()
	for si := range s.st.Stages {
		for gi := range s.st.Stages[si].Groups {
			g := &s.st.Stages[si].Groups[gi]
			for ci := range g.Clusters {
				c := &g.Clusters[ci]
				if c.State != RunRunning {
					continue
				}
				fc, ok := s.fleet[c.Name]
				if !ok {
					continue // left the fleet: trackMembership already skipped it
				}
				d := fc.Deployment
				switch {
				case d != nil && d.Released == rev && d.Applied == rev && d.Ready && !d.ApplyFailed && !fc.Offline:
					c.State, c.Message, c.FinishedAt = RunCompleted, "", s.now
				case d.ineligibleFor(rev):
					// It runs what it ran before and may run rev once it serves its APIs: the
					// run goes on without it (R1.15).
					c.State, c.Message, c.FinishedAt = RunSkipped, "ineligible: "+d.IneligibleReason(), s.now
				case d != nil && d.Released == rev && d.ApplyFailed:
					c.State, c.Message, c.FinishedAt = RunFailed, "apply failed", s.now
				case !s.now.Before(c.StartedAt.Add(timeout)):
					c.State, c.Message, c.FinishedAt = RunFailed, fmt.Sprintf("not ready within %s", timeout), s.now
					if fc.Offline {
						c.Message += ": agent offline (R1.11)"
					}
				case (d == nil || d.Released != rev) && s.st.SupersededBy != "":
					// The run that replaced this one took the cluster over: releasing this
					// run's revision again would undo it (one rollout per bundle, R3.14).
					c.State, c.Message, c.FinishedAt = RunSkipped, "taken over by run "+s.st.SupersededBy, s.now
				default:
					if d == nil || d.Released != rev {
						s.release = append(s.release, c.Name) // a write the cache does not show yet
					}
					s.wakeAt(c.StartedAt.Add(timeout))
					if fc.Offline {
						c.Message = "agent offline"
					}
				}
				if c.State == RunFailed {
					g.FailureCount++
					s.st.Stages[si].FailureCount++
				}
			}
		}
	}
}

func (s *stepper) inFlight() int {
	n := 0
	for si := range s.st.Stages {
		for gi := range s.st.Stages[si].Groups {
			for _, c := range s.st.Stages[si].Groups[gi].Clusters {
				if c.State == RunRunning {
					n++
				}
			}
		}
	}
	return n
}
