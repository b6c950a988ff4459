package rollout

import (
	"slices"
	"time"
)

// simAgents play the agents of a simulated fleet for every simulation: a release is applied at
// once and Ready ReadyAfter later, unless the cluster is told to fail the new revision (never
// Ready, an apply failing FailAfter after its release, or Ready and then NotReady RegressAfter
// after it). A rollback's restore of an earlier revision always succeeds: that revision was
// good there. An agent that is offline does nothing: what it would have applied or reported
// while it was gone, it does when it is back. They keep each deployment's record as the hub and
// agents would: the release's time, whether the revision was Ready since, when it stopped, and
// the last good revision.
type simAgents struct {
	clusters   []SimCluster
	readyAfter time.Duration
	deps       []*Deployment
	// pending events per cluster, -1 for none: the apply of a release made while the agent was
	// offline, Ready, NotReady again, apply failure.
	applyAt, readyAt, regressAt, failAt []time.Duration
}

func newSimAgents(clusters []SimCluster, readyAfter time.Duration, first bool) *simAgents {
	n := len(clusters)
	a := &simAgents{clusters: clusters, readyAfter: readyAfter, deps: make([]*Deployment, n),
		applyAt: make([]time.Duration, n), readyAt: make([]time.Duration, n), regressAt: make([]time.Duration, n), failAt: make([]time.Duration, n)}
	for i := range clusters {
		a.applyAt[i], a.readyAt[i], a.regressAt[i], a.failAt[i] = -1, -1, -1, -1
		if !first {
			a.deps[i] = &Deployment{Staged: 1, Released: 1, Applied: 1, Ready: true, WasReady: true, AppliedAt: SimStart.Add(-24 * time.Hour), ReleasedAt: SimStart.Add(-24 * time.Hour)}
		}
	}
	return a
}

// release records rev released on cluster i at now, a restore of its last good revision when
// restore is set, and applies it unless the agent is offline. rev 0 removes the bundle.
func (a *simAgents) release(i int, rev int64, now time.Duration, restore bool) {
	at := SimStart.Add(now)
	lastGood := int64(0)
	staged := rev
	if d := a.deps[i]; d != nil {
		lastGood, staged = d.LastGood, max(d.Staged, rev)
		if !restore && d.Released != 0 && d.Applied == d.Released && d.WasReady {
			lastGood = d.Released
		}
	}
	a.applyAt[i], a.readyAt[i], a.regressAt[i], a.failAt[i] = -1, -1, -1, -1
	if rev == 0 {
		a.deps[i] = &Deployment{Staged: staged, Rollback: true}
		return
	}
	prev := a.deps[i]
	a.deps[i] = &Deployment{Staged: staged, Released: rev, AppliedAt: at, ReleasedAt: at, LastGood: lastGood, Rollback: restore}
	if a.clusters[i].Ineligible && !restore && prev != nil {
		// What it runs until it can run rev (R1.15).
		d := a.deps[i]
		d.Applied, d.AppliedAt, d.Ready, d.WasReady = prev.Applied, prev.AppliedAt, prev.Ready, prev.WasReady
	}
	if c := &a.clusters[i]; c.offlineAt(now) {
		a.applyAt[i], _ = a.effective(i, now)
		return
	}
	a.apply(i, now)
}

// SimUnservedAPI is what an ineligible simulated cluster does not serve.
const SimUnservedAPI = "an API of the revision"

// remove takes the bundle off cluster i (it leaves the targets).
func (a *simAgents) remove(i int) {
	a.deps[i] = nil
	a.applyAt[i], a.readyAt[i], a.regressAt[i], a.failAt[i] = -1, -1, -1, -1
}

// apply applies cluster i's release at now and schedules what follows.
func (a *simAgents) apply(i int, now time.Duration) {
	d, c := a.deps[i], &a.clusters[i]
	if c.Ineligible && !d.Rollback {
		// The agent finds APIs the cluster does not serve and applies nothing (R1.15).
		d.Unserved = []string{SimUnservedAPI}
		return
	}
	d.Applied, d.AppliedAt = d.Released, SimStart.Add(now)
	wait := a.readyAfter
	if c.ReadyAfter > 0 {
		wait = c.ReadyAfter
	}
	switch {
	case d.Rollback:
		a.readyAt[i] = now + wait
	case c.FailAfter > 0:
		a.failAt[i] = now + c.FailAfter
	case c.Fail:
	default:
		a.readyAt[i] = now + wait
		if c.RegressAfter > 0 {
			a.regressAt[i] = now + max(c.RegressAfter, wait)
		}
	}
}

// effective is when an event due at at on cluster i happens: then, or when the agent is back
// if it is offline then; false if it never comes back.
func (a *simAgents) effective(i int, at time.Duration) (time.Duration, bool) {
	c := &a.clusters[i]
	switch {
	case !c.offlineAt(at):
		return at, true
	case c.BackAt > 0:
		return c.BackAt, true
	}
	return -1, false
}

// advance applies what happened on the clusters by now, in order.
func (a *simAgents) advance(now time.Duration) {
	for i := range a.deps {
		for {
			ev, at := a.due(i, now)
			if ev == nil {
				break
			}
			*ev = -1
			d := a.deps[i]
			switch ev {
			case &a.applyAt[i]:
				a.apply(i, at)
			case &a.readyAt[i]:
				d.Ready, d.WasReady = true, true
			case &a.regressAt[i]:
				d.Ready, d.NotReadyAt = false, SimStart.Add(at)
			case &a.failAt[i]:
				d.ApplyFailed = true
			}
		}
	}
}

// due is cluster i's earliest pending event that happens by now, and when it happens.
func (a *simAgents) due(i int, now time.Duration) (*time.Duration, time.Duration) {
	var first *time.Duration
	var firstAt time.Duration
	for _, ev := range []*time.Duration{&a.applyAt[i], &a.readyAt[i], &a.regressAt[i], &a.failAt[i]} {
		if *ev < 0 {
			continue
		}
		if at, ok := a.effective(i, *ev); ok && at <= now && (first == nil || at < firstAt) {
			first, firstAt = ev, at
		}
	}
	return first, firstAt
}

// next is the earliest moment after now at which a cluster changes, and whether there is one.
func (a *simAgents) next(now time.Duration) (time.Duration, bool) {
	var times []time.Duration
	for i := range a.deps {
		for _, ev := range []time.Duration{a.applyAt[i], a.readyAt[i], a.regressAt[i], a.failAt[i]} {
			if ev < 0 {
				continue
			}
			if at, ok := a.effective(i, ev); ok && at > now {
				times = append(times, at)
			}
		}
	}
	if len(times) == 0 {
		return 0, false
	}
	return slices.Min(times), true
}

// restore applies a rollback's restores and returns the names it restored.
func (a *simAgents) restore(restores []Restore, index map[string]int, now time.Duration) []string {
	var names []string
	for _, r := range restores {
		a.release(index[r.Cluster], r.To, now, true)
		names = append(names, r.Cluster)
	}
	return names
}

// quarantine adds a failure under onFailure Rollback to the recorded quarantine, as the hub
// records it.
func quarantine(q []Failure, f *Failure) []Failure {
	if f == nil || f.Action != FailureRollback || quarantined(q, f.Revision) != nil {
		return q
	}
	return append(q, *f)
}
