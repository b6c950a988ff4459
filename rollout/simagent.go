package rollout

import (
	"slices"
	"time"
)

// simAgents play the agents of a simulated fleet for every simulation: a release is applied at
// once and Ready ReadyAfter later, unless the cluster is told to fail the new revision (never
// Ready, an apply failing FailAfter after its release, or Ready and then NotReady RegressAfter
// after it). A rollback's restore of an earlier revision always succeeds: that revision was
// good there. They keep each deployment's record as the hub and agents would: the release's
// time, whether the revision was Ready since, when it stopped, and the last good revision.
type simAgents struct {
	clusters   []SimCluster
	readyAfter time.Duration
	deps       []*Deployment
	// pending events per cluster, -1 for none: Ready, NotReady again, apply failure.
	readyAt, regressAt, failAt []time.Duration
}

func newSimAgents(clusters []SimCluster, readyAfter time.Duration, first bool) *simAgents {
	a := &simAgents{clusters: clusters, readyAfter: readyAfter, deps: make([]*Deployment, len(clusters)),
		readyAt: make([]time.Duration, len(clusters)), regressAt: make([]time.Duration, len(clusters)), failAt: make([]time.Duration, len(clusters))}
	for i := range clusters {
		a.readyAt[i], a.regressAt[i], a.failAt[i] = -1, -1, -1
		if !first {
			a.deps[i] = &Deployment{Staged: 1, Released: 1, Applied: 1, Ready: true, WasReady: true, AppliedAt: SimStart.Add(-24 * time.Hour), ReleasedAt: SimStart.Add(-24 * time.Hour)}
		}
	}
	return a
}

// release applies rev on cluster i at now: a restore of its last good revision when restore
// is set. rev 0 removes the bundle.
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
	a.readyAt[i], a.regressAt[i], a.failAt[i] = -1, -1, -1
	if rev == 0 {
		a.deps[i] = &Deployment{Staged: staged, Rollback: true}
		return
	}
	a.deps[i] = &Deployment{Staged: staged, Released: rev, Applied: rev, AppliedAt: at, ReleasedAt: at, LastGood: lastGood, Rollback: restore}
	c := &a.clusters[i]
	if c.Offline && c.OfflineAt <= now {
		a.deps[i].Applied = 0 // an offline agent applies nothing
		return
	}
	wait := a.readyAfter
	if c.ReadyAfter > 0 {
		wait = c.ReadyAfter
	}
	switch {
	case restore:
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

// advance applies what happened on the clusters by now.
func (a *simAgents) advance(now time.Duration) {
	for i, d := range a.deps {
		if d == nil {
			continue
		}
		if at := a.readyAt[i]; at >= 0 && at <= now {
			d.Ready, d.WasReady, a.readyAt[i] = true, true, -1
		}
		if at := a.regressAt[i]; at >= 0 && at <= now {
			d.Ready, d.NotReadyAt, a.regressAt[i] = false, SimStart.Add(at), -1
		}
		if at := a.failAt[i]; at >= 0 && at <= now {
			d.ApplyFailed, a.failAt[i] = true, -1
		}
	}
}

// next is the earliest moment after now at which a cluster changes, and whether there is one.
func (a *simAgents) next(now time.Duration) (time.Duration, bool) {
	var times []time.Duration
	for i := range a.deps {
		for _, at := range []time.Duration{a.readyAt[i], a.regressAt[i], a.failAt[i]} {
			if at > now {
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
