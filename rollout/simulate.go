package rollout

import (
	"slices"
	"time"
)

// SimCluster is one cluster of a simulated fleet.
type SimCluster struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels,omitempty"`
	Groups []string          `json:"groups,omitempty"`
	// ReadyAfter is how long the cluster takes from release to Ready; 0 uses the simulation's.
	ReadyAfter time.Duration `json:"-"`
	// Fail: the cluster applies the new revision but never becomes Ready; with FailAfter, its
	// apply fails that long after the release. RegressAfter: Ready first, NotReady that long
	// after its release (R5.1).
	Fail         bool          `json:"-"`
	FailAfter    time.Duration `json:"-"`
	RegressAfter time.Duration `json:"-"`
	// Offline: the agent is gone from OfflineAt on, and back at BackAt if that is set; while it
	// is gone it applies and reports nothing and counts as unavailable (R1.11).
	Offline   bool          `json:"-"`
	OfflineAt time.Duration `json:"-"`
	BackAt    time.Duration `json:"-"`
	// Ineligible: the cluster does not serve an API the new revision uses; its agent applies
	// nothing of it and it runs what it ran before (R1.15).
	Ineligible bool `json:"-"`
	// Excluded: the cluster leaves the bundle's targets at ExcludedAt (a placement removes it).
	Excluded   bool          `json:"-"`
	ExcludedAt time.Duration `json:"-"`
	// Availability is the cluster's maintenance window and exclusions (staged runs, R3.13).
	Availability `json:",inline"`
}

// Simulation is a fleet, a strategy and how clusters behave.
type Simulation struct {
	Clusters  []SimCluster
	Groups    []ClusterGroup
	Strategy  Strategy
	Placement *Placement
	// FirstDeployment: no cluster runs an earlier revision. Otherwise every cluster starts Ready
	// on revision 1 and revision 2 rolls out.
	FirstDeployment bool
	// ReadyAfter is the default time from release to Ready. Default 30s.
	ReadyAfter time.Duration
	// Horizon stops the simulation; default 90 days of simulated time.
	Horizon time.Duration
	// CheckFaults make analysis checks fail or go inconclusive (§7); without any, every
	// check passes at its first measurement.
	CheckFaults []SimCheckFault
	// Observe, if set, sees every pass's input and decision (tests check invariants with it).
	Observe func(in *Input, d *Decision)
}

// Moment is one moment of the timeline at which the rollout did something or changed its reason
// to wait.
type Moment struct {
	At       time.Duration `json:"at"`
	Released []string      `json:"released,omitempty"`
	Removed  []string      `json:"removed,omitempty"`
	// RolledBack are the clusters a rollback released their last good revision (R5.4).
	RolledBack []string `json:"rolledBack,omitempty"`
	Paused     string   `json:"paused"`
	// Ready is the number of clusters Ready on the revision after this step.
	Ready int `json:"ready"`
}

// SimEnd is how a simulated rollout ended, whatever its strategy.
type SimEnd struct {
	// Completed: every cluster runs the revision, Ready.
	Completed bool
	// Duration is the simulated time until completion, or until the rollout got stuck.
	Duration time.Duration
	// Stuck says why an incomplete rollout cannot move on (for example an approval nobody
	// gives).
	Stuck string
	// Outcome is how the rollout ended (R5.6), and Failure the failure that fired, if any.
	Outcome Outcome
	Failure *Failure
}

// Timeline is a simulation's result.
type Timeline struct {
	// First is the decision of the first pass: partitions, thresholds and warnings.
	First *Decision
	// Last is the decision of the last pass: what the rollout ended with (R1.15's ineligible
	// clusters, say).
	Last  *Decision
	Steps []Moment
	SimEnd
	// Passes is the number of planning passes.
	Passes int
}

// SimStart is the simulated clock's origin: any fixed instant would do; a test that plays the
// same fleet through the hub starts the hub's clock here, so that times read alike.
var SimStart = time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC)

// Simulate runs the planner as the hub would: a pass at start, right after every pass that
// wrote something, whenever a cluster becomes ready, fails, goes offline or leaves the targets,
// and when a decision asks to be woken (R2.5, R5.3). Clusters apply a release at once and
// become Ready ReadyAfter later. A failure under onFailure Rollback is recorded as the hub
// records it, and the rollback plays out.
func Simulate(sim Simulation) Timeline {
	readyAfter := sim.ReadyAfter
	if readyAfter == 0 {
		readyAfter = 30 * time.Second
	}
	horizon := sim.Horizon
	if horizon == 0 {
		horizon = 90 * 24 * time.Hour
	}
	rev := int64(2)
	if sim.FirstDeployment {
		rev = 1
	}
	agents := newSimAgents(sim.Clusters, readyAfter, sim.FirstDeployment)
	checks := newSimChecks(sim.CheckFaults)
	targets := make([]Target, len(sim.Clusters))
	index := make(map[string]int, len(sim.Clusters))
	for i, c := range sim.Clusters {
		targets[i] = Target{Cluster: c.Name, Labels: c.Labels, Groups: c.Groups}
		index[c.Name] = i
	}
	var tl Timeline
	var now time.Duration
	var q []Failure
	var completedAt time.Time
	lastPaused := ""
	for now <= horizon {
		agents.advance(now)
		for i, c := range sim.Clusters {
			targets[i].Offline = c.offlineAt(now)
			targets[i].Excluded = c.Excluded && c.ExcludedAt <= now
			targets[i].Deployment = agents.deps[i]
		}
		checks.measure(now)
		gates := checks.judgements(now, func(c string) *Deployment { return agents.deps[index[c]] })
		in := &Input{Revision: rev, Strategy: sim.Strategy, Placement: sim.Placement, Targets: targets, Groups: sim.Groups, Now: SimStart.Add(now),
			CompletedAt: completedAt, Quarantine: q, Analyses: gates}
		d := Plan(in)
		checks.track(d.Analysis, now)
		tl.Passes++
		tl.Last = d
		if tl.First == nil {
			tl.First = d
		}
		if sim.Observe != nil {
			sim.Observe(in, d)
		}
		for _, name := range d.Release {
			agents.release(index[name], rev, now, false)
		}
		for _, name := range d.Remove {
			agents.remove(index[name])
		}
		rolledBack := agents.restore(d.Restore, index, now)
		q = quarantine(q, d.Failure)
		if d.Failure != nil && tl.Failure == nil {
			tl.Failure = d.Failure
		}
		changed := len(d.Release) > 0 || len(d.Remove) > 0 || len(rolledBack) > 0
		if changed || d.Paused != lastPaused {
			tl.record(Moment{At: now, Released: d.Release, Removed: d.Remove, RolledBack: rolledBack, Paused: d.Paused, Ready: countReady(targets, rev)})
			lastPaused = d.Paused
		}
		tl.Duration = now
		tl.Outcome = d.Outcome
		switch {
		case d.Outcome == OutcomeRolledBack:
			tl.Completed, tl.Stuck = false, d.Paused
			return tl
		case d.Complete && completedAt.IsZero():
			tl.Completed, completedAt = true, SimStart.Add(now)
		}
		if changed {
			// The writes of this pass are events: the hub plans again at once.
			continue
		}
		next, ok := nextEvent(sim.Clusters, agents, checks, now, d.RequeueAfter)
		if !completedAt.IsZero() && (!ok || SimStart.Add(next).After(completedAt.Add(in.policy().window()))) {
			return tl // nothing more can happen within the health window after completion
		}
		if !ok {
			tl.Stuck = stuckReason(d)
			return tl
		}
		now = next
	}
	tl.Stuck = "simulation horizon reached"
	return tl
}

// record appends a step, merging it into the previous one when both happen at the same moment.
func (tl *Timeline) record(s Moment) {
	if n := len(tl.Steps); n > 0 && tl.Steps[n-1].At == s.At {
		last := &tl.Steps[n-1]
		last.Released = append(last.Released, s.Released...)
		last.Removed = append(last.Removed, s.Removed...)
		last.RolledBack = append(last.RolledBack, s.RolledBack...)
		last.Paused, last.Ready = s.Paused, s.Ready
		return
	}
	tl.Steps = append(tl.Steps, s)
}

// goesOffline are the moments after now at which a cluster's agent goes offline or comes back:
// events of every simulation, as the hub notices them at the heartbeat deadline or the next
// heartbeat.
func goesOffline(clusters []SimCluster, now time.Duration) []time.Duration {
	var out []time.Duration
	for _, c := range clusters {
		if !c.Offline {
			continue
		}
		for _, at := range []time.Duration{c.OfflineAt, c.BackAt} {
			if at > now {
				out = append(out, at)
			}
		}
	}
	return out
}

// offlineAt says whether the cluster's agent is gone at now.
func (c *SimCluster) offlineAt(now time.Duration) bool {
	return c.Offline && c.OfflineAt <= now && (c.BackAt == 0 || now < c.BackAt)
}

// nextEvent is the earliest future moment at which something changes.
func nextEvent(clusters []SimCluster, agents *simAgents, checks *simChecks, now, requeue time.Duration) (time.Duration, bool) {
	var times []time.Duration
	if at, ok := agents.next(now); ok {
		times = append(times, at)
	}
	if at, ok := checks.next(now); ok {
		times = append(times, at)
	}
	times = append(times, goesOffline(clusters, now)...)
	for _, c := range clusters {
		if c.Excluded && c.ExcludedAt > now {
			times = append(times, c.ExcludedAt)
		}
	}
	if requeue > 0 {
		times = append(times, now+requeue)
	}
	if len(times) == 0 {
		return 0, false
	}
	return slices.Min(times), true
}

func countReady(targets []Target, rev int64) int {
	n := 0
	for i := range targets {
		if !targets[i].Offline && ClusterState(targets[i].Deployment, rev).Available() {
			n++
		}
	}
	return n
}

// stuckReason says why a rollout with nothing left to wait for did not complete.
func stuckReason(d *Decision) string {
	if d.Paused != "" {
		return d.Paused
	}
	var notReady []string
	for _, c := range d.Clusters {
		if c.Unavailable && c.Wait == "" {
			notReady = append(notReady, c.Name+" "+string(c.State))
		}
	}
	if len(notReady) > 0 {
		return "clusters never became ready: " + abbreviate(notReady, 5)
	}
	return firstWait(d.Clusters)
}
