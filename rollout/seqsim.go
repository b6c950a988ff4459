package rollout

import (
	"fmt"
	"slices"
	"sort"
	"time"
)

// SequenceSimulation is a sequence over a simulated fleet: every cluster starts Ready on
// revision 1, and the listed revisions appear at their times.
type SequenceSimulation struct {
	Sequence   Sequence
	Clusters   []SimCluster
	Revisions  []SimRevision
	ReadyAfter time.Duration
	Horizon    time.Duration
	// CheckFaults make analysis checks fail or go inconclusive (§7).
	CheckFaults []SimCheckFault
	// Observe, if set, sees every step's inputs and result.
	Observe func(prev SequenceStatus, fleet []SequenceCluster, res SequenceResult, now time.Time)
}

// SimRevision is a revision that appears at At.
type SimRevision struct {
	Index int64
	At    time.Duration
}

// SequenceMoment is a moment at which revisions were released, or a group changed state.
type SequenceMoment struct {
	At       time.Duration `json:"at"`
	Started  []string      `json:"started,omitempty"`
	Complete []string      `json:"completed,omitempty"`
	// RolledBack are the clusters a rollback released their last good revision (R5.4).
	RolledBack []string `json:"rolledBack,omitempty"`
	Gate       string   `json:"gate"`
}

// SequenceTimeline is a sequence simulation's result.
type SequenceTimeline struct {
	Order []string
	Steps []SequenceMoment
	Final SequenceStatus
	// SimEnd is how the newest revision's rollout ended.
	SimEnd
	Err error
}

// SimulateSequence steps the sequence as the controller would until the newest revision is
// complete in the last group, or nothing more can happen.
func SimulateSequence(sim SequenceSimulation) SequenceTimeline {
	var tl SequenceTimeline
	order, err := sim.Sequence.ChainOrder()
	if err != nil {
		tl.Err = err
		return tl
	}
	for _, i := range order {
		tl.Order = append(tl.Order, sim.Sequence.Groups[i].Name)
	}
	readyAfter := sim.ReadyAfter
	if readyAfter == 0 {
		readyAfter = 30 * time.Second
	}
	horizon := sim.Horizon
	if horizon == 0 {
		horizon = 2 * 365 * 24 * time.Hour
	}
	agents := newSimAgents(sim.Clusters, readyAfter, false)
	checks := newSimChecks(sim.CheckFaults)
	fleet := make([]SequenceCluster, len(sim.Clusters))
	index := map[string]int{}
	for i, c := range sim.Clusters {
		fleet[i] = SequenceCluster{Name: c.Name, Labels: c.Labels, Groups: c.Groups, Availability: &sim.Clusters[i].Availability}
		index[c.Name] = i
	}
	seq := sim.Sequence
	var last int64
	for _, r := range sim.Revisions {
		last = max(last, r.Index)
	}
	var status SequenceStatus
	var now time.Duration
	for steps := 0; now <= horizon && steps < 100000; steps++ {
		agents.advance(now)
		for i := range fleet {
			fleet[i].Deployment = agents.deps[i]
			// An agent gone offline is held as the hub holds it (R1.11).
			fleet[i].Offline = sim.Clusters[i].offlineAt(now)
		}
		var revs []int64
		for _, r := range sim.Revisions {
			if r.At <= now {
				revs = append(revs, r.Index)
			}
		}
		checks.measure(now)
		seq.Analyses = checks.judgements(now, func(c string) *Deployment { return agents.deps[index[c]] })
		res, err := StepSequence(&seq, status, revs, fleet, SimStart.Add(now))
		checks.track(res.Analysis, now)
		if err != nil {
			tl.Err = err
			return tl
		}
		if sim.Observe != nil {
			sim.Observe(status, fleet, res, SimStart.Add(now))
		}
		m := SequenceMoment{At: now}
		for _, name := range sortedKeys(res.Release) {
			agents.release(index[name], res.Release[name], now, false)
			m.Started = append(m.Started, fmt.Sprintf("%s@%d", name, res.Release[name]))
		}
		m.RolledBack = agents.restore(res.Restore, index, now)
		for _, f := range res.Failures {
			seq.Quarantine = quarantine(seq.Quarantine, &f)
			if tl.Failure == nil {
				tl.Failure = &f
			}
		}
		m.Complete, m.Gate = sequenceChanges(status, res.Status)
		status = res.Status
		// The last group completing is not the end while a cluster of the sequence does not run
		// the revision yet (one its group's forced soak passed by, say): the hub's catch-up may
		// still bring it, and a plan says which one, and why, if nothing will.
		lastDone := len(status.Groups) > 0 && last > 0 && revisionState(status.Groups[len(status.Groups)-1], last) == SeqComplete
		var behind []string
		if lastDone {
			if behind = clustersBehind(&seq, fleet, last, now, sim.Clusters); len(behind) > 0 {
				m.Gate = fmt.Sprintf("%d clusters do not run revision %d: %s", len(behind), last, abbreviate(behind, 5))
			}
		}
		if len(m.Started)+len(m.Complete)+len(m.RolledBack) > 0 || (len(tl.Steps) > 0 && tl.Steps[len(tl.Steps)-1].Gate != m.Gate) || len(tl.Steps) == 0 {
			tl.Steps = append(tl.Steps, m)
		}
		tl.Final, tl.Duration, tl.Outcome = status, now, res.Outcome
		switch {
		case res.Outcome == OutcomeRolledBack:
			return tl
		case lastDone && len(behind) == 0:
			tl.Completed = true
			return tl
		}
		if len(res.Release) > 0 || len(m.Complete) > 0 || len(m.RolledBack) > 0 {
			continue
		}
		var next []time.Duration
		if at, ok := agents.next(now); ok {
			next = append(next, at)
		}
		if at, ok := checks.next(now); ok {
			next = append(next, at)
		}
		for _, r := range sim.Revisions {
			if r.At > now {
				next = append(next, r.At)
			}
		}
		if !res.WakeAt.IsZero() {
			next = append(next, res.WakeAt.Sub(SimStart))
		}
		next = append(next, goesOffline(sim.Clusters, now)...)
		if len(next) == 0 {
			tl.Stuck = m.Gate
			if tl.Stuck == "" {
				tl.Stuck = "nothing left to wait for"
			}
			return tl
		}
		now = slices.Min(next)
	}
	tl.Stuck = "simulation horizon reached"
	return tl
}

// clustersBehind are the clusters of the sequence's groups that do not run revision r (or a
// newer one) available, each with why when the simulation knows: its agent is offline.
func clustersBehind(seq *Sequence, fleet []SequenceCluster, r int64, now time.Duration, sims []SimCluster) []string {
	offline := map[string]bool{}
	for _, c := range sims {
		offline[c.Name] = c.offlineAt(now)
	}
	seen := map[string]bool{}
	var out []string
	for _, g := range seq.Groups {
		for _, c := range groupClusters(g, fleet) {
			if seen[c.Name] || c.lacks(r) {
				continue
			}
			seen[c.Name] = true
			d := c.Deployment
			if d != nil && (d.Released > r || d.Released == r && ClusterState(d, r).Available()) || d.ineligibleFor(r) {
				continue // ineligible: it runs r once it serves r's APIs (R1.15)
			}
			name := c.Name
			if offline[c.Name] {
				name += " (agent offline)"
			}
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

func revisionState(g SequenceGroupStatus, r int64) SequenceState {
	for _, rs := range g.Revisions {
		if rs.Index == r {
			return rs.State
		}
	}
	return ""
}

// sequenceChanges lists the group revisions that became COMPLETE, and describes what the
// sequence waits for now.
func sequenceChanges(prev, cur SequenceStatus) (complete []string, gate string) {
	before := map[string]SequenceState{}
	for _, g := range prev.Groups {
		for _, r := range g.Revisions {
			before[fmt.Sprintf("%s@%d", g.Name, r.Index)] = r.State
		}
	}
	for _, g := range cur.Groups {
		for _, r := range g.Revisions {
			key := fmt.Sprintf("%s@%d", g.Name, r.Index)
			if r.State == SeqComplete && before[key] != SeqComplete {
				complete = append(complete, key)
			}
			if gate == "" {
				switch r.State {
				case SeqSoaking:
					gate = fmt.Sprintf("%s soaks revision %d until %s", g.Name, r.Index, r.SoakUntil.UTC().Format(time.RFC3339))
				case SeqForcedSoaking:
					// As the hub shows it (R4.5, R4.6): a forced soak, and what still holds.
					gate = fmt.Sprintf("%s FORCED_SOAKING revision %d until %s: %s", g.Name, r.Index, r.SoakUntil.UTC().Format(time.RFC3339), r.Message)
				case SeqFailed:
					gate = fmt.Sprintf("%s, revision %d: %s", g.Name, r.Index, r.Message)
				case SeqInProgress, SeqPending:
					if r.Message != "" {
						gate = fmt.Sprintf("%s, revision %d: %s", g.Name, r.Index, r.Message)
					}
				}
			}
		}
	}
	return complete, gate
}

func sortedKeys(m map[string]int64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
