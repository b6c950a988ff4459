package rollout

import (
	"fmt"
	"testing"
	"time"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// fleet builds n targets named c-000, c-001 …, all Ready on revision 1 (an update to 2 is
// pending), unless first is true, in which case none has a BundleDeployment.
func fleet(n int, first bool) []Target {
	ts := make([]Target, n)
	for i := range ts {
		ts[i] = Target{Cluster: fmt.Sprintf("c-%03d", i), Labels: map[string]string{"index": fmt.Sprint(i)}}
		if !first {
			ts[i].Deployment = &Deployment{Staged: 2, Released: 1, Applied: 1, Ready: true, AppliedAt: t0.Add(-time.Hour)}
		}
	}
	return ts
}

// releaseTo marks targets as released revision rev with the given readiness.
func releaseTo(ts []Target, rev int64, ready bool, names ...string) {
	set := map[string]bool{}
	for _, n := range names {
		set[n] = true
	}
	for i := range ts {
		if set[ts[i].Cluster] {
			ts[i].Deployment = &Deployment{Staged: rev, Released: rev, Applied: rev, Ready: ready, AppliedAt: t0.Add(-time.Hour)}
		}
	}
}

func names(ts []Target, from, to int) []string {
	out := make([]string, 0, to-from)
	for i := from; i < to; i++ {
		out = append(out, ts[i].Cluster)
	}
	return out
}

func ptr[T any](v T) *T { return &v }

func partitionSizes(d *Decision) []int {
	var sizes []int
	for _, p := range d.Partitions {
		sizes = append(sizes, len(p.Clusters))
	}
	return sizes
}

// simFleet builds n simulated clusters named like fleet's.
func simFleet(n int) []SimCluster {
	cs := make([]SimCluster, n)
	for i := range cs {
		cs[i] = SimCluster{Name: fmt.Sprintf("c-%03d", i), Labels: map[string]string{"index": fmt.Sprint(i)}}
	}
	return cs
}

// simulations is how many random simulations a randomized test runs: a tenth with -short.
func simulations(n int) int {
	if testing.Short() {
		return n / 10
	}
	return n
}

// requireOutcomes fails the test unless every outcome named occurred: an invariant checked
// only over completed rollouts would mean nothing about failures.
func requireOutcomes(t *testing.T, got map[Outcome]int, want ...Outcome) {
	t.Helper()
	for _, o := range want {
		if got[o] == 0 {
			t.Fatalf("outcomes %v: %s never occurred, so the invariants say nothing about it", got, o)
		}
	}
}
