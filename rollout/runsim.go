package rollout

import (
	"slices"
	"time"
)

// RunSimulation is a staged run over a simulated fleet, for previews and tests.
type RunSimulation struct {
	// Name of the run; approval requests are named after it. Default "run".
	Name     string
	Strategy StagedStrategy
	// Clusters start Ready on revision 1; the run rolls out revision 2. Their Availability must
	// be compiled.
	Clusters   []SimCluster
	ReadyAfter time.Duration
	// ApproveAfter is how long a person takes to approve a gate; negative: nobody approves, the
	// simulation stops at the first approval gate.
	ApproveAfter time.Duration
	Skips        []Skip
	// Horizon stops the simulation; default 400 days.
	Horizon time.Duration
	// CheckFaults make analysis checks fail or go inconclusive (§7).
	CheckFaults []SimCheckFault
	// Observe, if set, sees every Step's inputs and result.
	Observe func(run *Run, fleet []RunCluster, res StepResult, now time.Time)
}

// RunMoment is a moment at which the run started or finished clusters, or reached a gate.
type RunMoment struct {
	At        time.Duration `json:"at"`
	Started   []string      `json:"started,omitempty"`
	Completed []string      `json:"completed,omitempty"`
	Failed    []string      `json:"failed,omitempty"`
	// RolledBack are the clusters a rollback released their last good revision (R5.4).
	RolledBack []string `json:"rolledBack,omitempty"`
	Gate       string   `json:"gate"`
}

// RunTimeline is a run simulation's result.
type RunTimeline struct {
	// Plan is the initialized run: stages, groups and their ordered clusters.
	Plan  RunStatus
	Steps []RunMoment
	Final RunStatus
	SimEnd
}

// SimulateRun steps a run the way the controller would: on every change it causes, when a
// cluster becomes ready, when a person approves, and at each WakeAt.
func SimulateRun(sim RunSimulation) RunTimeline {
	name := sim.Name
	if name == "" {
		name = "run"
	}
	readyAfter := sim.ReadyAfter
	if readyAfter == 0 {
		readyAfter = 30 * time.Second
	}
	horizon := sim.Horizon
	if horizon == 0 {
		horizon = 400 * 24 * time.Hour
	}
	agents := newSimAgents(sim.Clusters, readyAfter, false)
	checks := newSimChecks(sim.CheckFaults)
	fleet := make([]RunCluster, len(sim.Clusters))
	index := map[string]int{}
	for i, c := range sim.Clusters {
		fleet[i] = RunCluster{Name: c.Name, Labels: c.Labels, Availability: &sim.Clusters[i].Availability}
		index[c.Name] = i
	}
	run := &Run{Name: name, Strategy: sim.Strategy, Revision: 2, Action: ActionRun, Skips: sim.Skips}
	approvedAt := map[string]time.Duration{}
	var tl RunTimeline
	var now time.Duration
	for steps := 0; now <= horizon && steps < 100000; steps++ {
		agents.advance(now)
		for i := range fleet {
			fleet[i].Deployment = agents.deps[i]
			// An agent gone offline is held as the hub holds it (R1.11).
			fleet[i].Offline = sim.Clusters[i].offlineAt(now)
		}
		approvals := map[string]Approval{}
		for n, at := range approvedAt {
			if at <= now {
				approvals[n] = Approval{Approvers: []string{"plan"}}
			}
		}
		prev := run.Status
		checks.measure(now)
		run.Analyses = checks.judgements(now, func(c string) *Deployment { return agents.deps[index[c]] })
		res := Step(run, fleet, approvals, SimStart.Add(now))
		checks.track(res.Analysis, now)
		if sim.Observe != nil {
			sim.Observe(run, fleet, res, SimStart.Add(now))
		}
		run.Status = res.Status
		if tl.Plan.State == "" && res.Status.State != "" {
			tl.Plan = res.Status.clone()
		}
		for _, n := range res.Release {
			if i := index[n]; fleet[i].Deployment.Released != 2 {
				agents.release(i, 2, now, false)
			}
		}
		rolledBack := agents.restore(res.Restore, index, now)
		if res.Failure != nil && tl.Failure == nil {
			tl.Failure = res.Failure
		}
		gate := ""
		approvedNow := false
		for _, a := range res.Approvals {
			if _, seen := approvedAt[a.Name]; !seen && sim.ApproveAfter >= 0 {
				approvedAt[a.Name] = now + sim.ApproveAfter
				approvedNow = approvedNow || sim.ApproveAfter == 0
			}
			if gate == "" {
				gate = "approval " + a.Name
			}
		}
		if gate == "" && (res.Status.State == RunRunning || res.Status.State == RunPending) {
			gate = res.Status.Message
		}
		tl.record(now, prev, res.Status, gate, rolledBack)
		tl.Final, tl.Duration = res.Status, now
		switch res.Status.State {
		case RunCompleted:
			tl.Completed, tl.Outcome = true, OutcomeCompleted
		case RunFailed, RunStopped, RunRolledBack:
			tl.Completed, tl.Stuck, tl.Outcome = false, res.Status.Message, res.Status.Outcome()
			return tl
		}
		if approvedNow || len(rolledBack) > 0 || len(res.Release) > 0 && changed(prev, res.Status) {
			continue
		}
		var next []time.Duration
		if at, ok := agents.next(now); ok {
			next = append(next, at)
		}
		if at, ok := checks.next(now); ok {
			next = append(next, at)
		}
		for _, at := range approvedAt {
			if at > now {
				next = append(next, at)
			}
		}
		if !res.WakeAt.IsZero() {
			next = append(next, res.WakeAt.Sub(SimStart))
		}
		next = append(next, goesOffline(sim.Clusters, now)...)
		if tl.Completed && (len(next) == 0 || slices.Min(next) > now+sim.Strategy.window()) {
			return tl // nothing more can happen within the health window after completion
		}
		if len(next) == 0 {
			tl.Stuck = res.Status.Message
			if len(res.Approvals) > 0 {
				tl.Stuck = "waiting for approval " + res.Approvals[0].Name + ""
			}
			if held := heldClusters(res.Status); len(held) > 0 {
				tl.Stuck += "; " + abbreviate(held, 5)
			}
			return tl
		}
		now = slices.Min(next)
	}
	tl.Stuck = "simulation horizon reached"
	return tl
}

// heldClusters are the run's clusters that wait for something no simulated event brings (a
// paused cluster, an agent offline), each with its reason.
func heldClusters(st RunStatus) []string {
	var out []string
	for _, stage := range st.Stages {
		for _, g := range stage.Groups {
			for _, c := range g.Clusters {
				if (c.State == RunPending || c.State == RunNotStarted) && c.Message != "" {
					out = append(out, c.Name+": "+c.Message)
				}
			}
		}
	}
	return out
}

// record notes the clusters that started, completed or failed between two statuses, and the
// gate the run waits at.
func (tl *RunTimeline) record(at time.Duration, prev, cur RunStatus, gate string, rolledBack []string) {
	before := map[string]RunState{}
	for _, s := range prev.Stages {
		for _, g := range s.Groups {
			for _, c := range g.Clusters {
				before[c.Name] = c.State
			}
		}
	}
	m := RunMoment{At: at, Gate: gate, RolledBack: rolledBack}
	for _, s := range cur.Stages {
		for _, g := range s.Groups {
			for _, c := range g.Clusters {
				if before[c.Name] == c.State {
					continue
				}
				switch c.State {
				case RunRunning:
					m.Started = append(m.Started, c.Name)
				case RunCompleted:
					m.Completed = append(m.Completed, c.Name)
				case RunFailed:
					m.Failed = append(m.Failed, c.Name)
				}
			}
		}
	}
	if len(m.Started)+len(m.Completed)+len(m.Failed)+len(m.RolledBack) == 0 && (len(tl.Steps) > 0 && tl.Steps[len(tl.Steps)-1].Gate == gate) {
		return
	}
	if n := len(tl.Steps); n > 0 && tl.Steps[n-1].At == at {
		last := &tl.Steps[n-1]
		last.Started = append(last.Started, m.Started...)
		last.Completed = append(last.Completed, m.Completed...)
		last.Failed = append(last.Failed, m.Failed...)
		last.RolledBack = append(last.RolledBack, m.RolledBack...)
		last.Gate = gate
		return
	}
	tl.Steps = append(tl.Steps, m)
}

// changed reports whether any cluster changed state.
func changed(a, b RunStatus) bool {
	if len(a.Stages) != len(b.Stages) {
		return true
	}
	for i := range a.Stages {
		for j := range a.Stages[i].Groups {
			for k := range a.Stages[i].Groups[j].Clusters {
				if a.Stages[i].Groups[j].Clusters[k].State != b.Stages[i].Groups[j].Clusters[k].State {
					return true
				}
			}
		}
	}
	return false
}
