package rollout

import "time"

// State is the per-cluster rollout state of ROLLOUT.md §0. ClusterState computes it; every
// status view (Bundle, GitRepo, Cluster, runs, CLI, dashboard) shows that value.
type State string

const (
	Pending     State = "Pending"
	OutOfSync   State = "OutOfSync"
	WaitApplied State = "WaitApplied"
	ErrApplied  State = "ErrApplied"
	NotReady    State = "NotReady"
	Modified    State = "Modified"
	Ready       State = "Ready"
)

// States lists every state in rollout order, for counts and tables.
var States = []State{Pending, OutOfSync, WaitApplied, ErrApplied, NotReady, Modified, Ready}

// ClusterState is the one state function (§0):
//
//	no BundleDeployment, or nothing released yet   → Pending
//	released ≠ revision                            → OutOfSync
//	released = revision, apply failed or ineligible → ErrApplied
//	released = revision, not applied yet           → WaitApplied
//	applied = revision, resources not ready        → NotReady
//	applied = revision, ready, live objects drifted → Modified
//	applied = revision, ready                      → Ready
func ClusterState(d *Deployment, revision int64) State {
	switch {
	case d == nil || d.Released == 0:
		return Pending
	case d.Released != revision:
		return OutOfSync
	case d.ApplyFailed || d.Ineligible():
		return ErrApplied
	case d.Applied != revision:
		return WaitApplied
	case !d.Ready:
		return NotReady
	case d.Modified:
		return Modified
	}
	return Ready
}

// Available reports whether a state counts as available: Ready or Modified (§0).
func (s State) Available() bool { return s == Ready || s == Modified }

// unavailable applies §0's definition: a cluster that is not Ready or Modified on the revision
// released to it, this one or an older one (R1.6's decision: its capacity is lost all the
// same), or any offline cluster (R1.11). A cluster not reached yet (no release) is not, and
// an ineligible one is judged on the revision it still runs, if any (R1.15).
func unavailable(t *Target, revision int64) bool {
	if t.Offline {
		return true
	}
	d := t.Deployment
	switch {
	case d == nil || d.Released == 0:
		return false
	case d.Ineligible():
		return d.Applied != 0 && !d.Ready
	}
	return !ClusterState(d, d.Released).Available()
}

// finished reports whether the cluster is done with revision r: available on it, or
// ineligible for it (R1.15), and online.
func finished(t *Target, r int64) bool {
	if t.Offline {
		return false
	}
	return ClusterState(t.Deployment, r).Available() || t.Deployment.ineligibleFor(r)
}

// settledAt is when a ready cluster counts as available under a ready delay (R2.5): the apply
// time plus the delay. Zero when it is not ready.
func settledAt(d *Deployment, delay time.Duration) time.Time {
	if d == nil || !d.Ready || d.ApplyFailed || d.Applied == 0 {
		return time.Time{}
	}
	return d.AppliedAt.Add(delay)
}

// Counts counts clusters per state.
type Counts map[State]int

// add counts one cluster.
func (c Counts) add(s State) { c[s]++ }
