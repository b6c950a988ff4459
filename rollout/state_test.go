package rollout

import "testing"

// TestClusterState covers the one state function of ROLLOUT.md §0.
func TestClusterState(t *testing.T) {
	cases := []struct {
		name string
		d    *Deployment
		want State
	}{
		{"no bundle deployment", nil, Pending},
		{"staged but nothing released", &Deployment{Staged: 2}, Pending},
		{"holds an older revision", &Deployment{Staged: 2, Released: 1, Applied: 1, Ready: true}, OutOfSync},
		{"holds a newer revision (rollback pending)", &Deployment{Staged: 1, Released: 3, Applied: 3, Ready: true}, OutOfSync},
		{"released, not applied", &Deployment{Staged: 2, Released: 2, Applied: 1, Ready: true}, WaitApplied},
		{"released, apply failed", &Deployment{Staged: 2, Released: 2, Applied: 1, ApplyFailed: true}, ErrApplied},
		{"applied, not ready", &Deployment{Staged: 2, Released: 2, Applied: 2}, NotReady},
		{"applied, ready, drifted", &Deployment{Staged: 2, Released: 2, Applied: 2, Ready: true, Modified: true}, Modified},
		{"applied, ready", &Deployment{Staged: 2, Released: 2, Applied: 2, Ready: true}, Ready},
	}
	for _, c := range cases {
		if got := ClusterState(c.d, 2); got != c.want {
			t.Errorf("%s: state = %s, want %s", c.name, got, c.want)
		}
	}
}

// TestR1_6_UnavailableDefinition checks §0 and R1.6's decision: a cluster not available on
// what was released to it counts, whichever revision that is, and so does an offline one; a
// cluster not reached yet does not.
func TestR1_6_UnavailableDefinition(t *testing.T) {
	cases := []struct {
		name string
		t    Target
		want bool
	}{
		{"out of sync, old revision ready", Target{Deployment: &Deployment{Released: 1, Applied: 1, Ready: true}}, false},
		{"out of sync, old revision not ready", Target{Deployment: &Deployment{Released: 1, Applied: 1}}, true},
		{"out of sync, old revision failed to apply", Target{Deployment: &Deployment{Released: 1, ApplyFailed: true}}, true},
		{"out of sync, old revision modified", Target{Deployment: &Deployment{Released: 1, Applied: 1, Ready: true, Modified: true}}, false},
		{"staged, nothing released yet", Target{Deployment: &Deployment{Staged: 2}}, false},
		{"pending", Target{}, false},
		{"released, waiting for apply", Target{Deployment: &Deployment{Released: 2, Applied: 1}}, true},
		{"released, not ready", Target{Deployment: &Deployment{Released: 2, Applied: 2}}, true},
		{"modified counts as available", Target{Deployment: &Deployment{Released: 2, Applied: 2, Ready: true, Modified: true}}, false},
		{"R1.11 offline and ready", Target{Offline: true, Deployment: &Deployment{Released: 2, Applied: 2, Ready: true}}, true},
		{"R1.11 offline, never deployed", Target{Offline: true}, true},
	}
	for _, c := range cases {
		if got := unavailable(&c.t, 2); got != c.want {
			t.Errorf("%s: unavailable = %v, want %v", c.name, got, c.want)
		}
	}
}
