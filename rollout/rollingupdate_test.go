package rollout

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// settled marks targets ready on rev, applied long enough ago to count as available (R2.5).
func settled(ts []Target, rev int64, names ...string) {
	releaseTo(ts, rev, true, names...)
}

func TestR2_1_Placement(t *testing.T) {
	t.Run("PickAll takes every candidate", func(t *testing.T) {
		d := Plan(&Input{Revision: 1, Placement: &Placement{Type: PickAll}, Targets: fleet(5, true), Now: t0})
		if len(d.Release) != 5 {
			t.Errorf("released %v", d.Release)
		}
	})
	t.Run("PickN prefers clusters that carry the workload, then name order", func(t *testing.T) {
		ts := fleet(6, true)
		settled(ts, 1, "c-004")
		d := Plan(&Input{Revision: 1, Placement: &Placement{Type: PickN, NumberOfClusters: ptr(3)}, Targets: ts, Now: t0})
		if diff := cmp.Diff([]string{"c-000", "c-001"}, d.Release); diff != "" {
			t.Errorf("releases (-want +got):\n%s", diff)
		}
		if !strings.Contains(d.Clusters[5].Wait, "not picked by placement PickN") {
			t.Errorf("unpicked wait = %q", d.Clusters[5].Wait)
		}
	})
	t.Run("PickFixed takes the named clusters and warns about missing ones", func(t *testing.T) {
		d := Plan(&Input{Revision: 1, Placement: &Placement{Type: PickFixed, ClusterNames: []string{"c-002", "c-009"}}, Targets: fleet(5, true), Now: t0})
		if diff := cmp.Diff([]string{"c-002"}, d.Release); diff != "" {
			t.Errorf("releases (-want +got):\n%s", diff)
		}
		if len(d.Warnings) != 1 || !strings.Contains(d.Warnings[0].Message, "c-009") {
			t.Errorf("warnings = %v", d.Warnings)
		}
	})
}

func TestR2_2_And_R2_3_ThresholdsRoundUpWithDefaults(t *testing.T) {
	ts := fleet(10, false)
	d := Plan(&Input{Revision: 2, Placement: &Placement{}, Targets: ts, Now: t0})
	// Defaults 25% of 10, rounded up: 3 and 3.
	if d.MaxUnavailable != 3 || d.MaxSurge != 3 {
		t.Errorf("maxUnavailable %d, maxSurge %d; want 3, 3", d.MaxUnavailable, d.MaxSurge)
	}
	if len(d.Release) != 3 {
		t.Errorf("in-place update released %d, want 3", len(d.Release))
	}
}

// R2.2: N is numberOfClusters (PickN) or the number of names (PickFixed) even when fewer
// clusters match; the budgets are computed against it and the shortfall is a warning.
func TestR2_2_NStaysWhatThePlacementAsksFor(t *testing.T) {
	for _, p := range []*Placement{
		{Type: PickN, NumberOfClusters: ptr(8)},
		{Type: PickFixed, ClusterNames: []string{"c-000", "c-001", "c-002", "c-003", "x-1", "x-2", "x-3", "x-4"}},
	} {
		ts := fleet(4, true)
		settled(ts, 1, names(ts, 0, 4)...)
		p.RollingUpdate = &RollingUpdate{MaxUnavailable: Int(4)}
		d := Plan(&Input{Revision: 2, Placement: p, Targets: ts, Now: t0})
		if d.N != 8 || len(d.Warnings) != 1 || !strings.Contains(d.Warnings[0].Message, "N stays 8 (R2.2)") {
			t.Errorf("%s: N = %d, warnings %v; want 8 and the shortfall named", p.Type, d.N, d.Warnings)
		}
		// 4 available of N = 8 with maxUnavailable 4: none may go down for an update.
		if len(d.Release) != 0 || !strings.Contains(d.Paused, "N−maxUnavailable = 4") {
			t.Errorf("%s: released %v, paused %q; want the update held by R2.4", p.Type, d.Release, d.Paused)
		}
	}
}

func TestR2_3_ZeroIsRejected(t *testing.T) {
	err := Validate(nil, &Placement{RollingUpdate: &RollingUpdate{MaxSurge: Int(0), MaxUnavailable: Percent(0)}})
	for _, field := range []string{"placement.rollingUpdate.maxSurge: must not be 0", "placement.rollingUpdate.maxUnavailable: must not be 0"} {
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("error %v does not contain %q", err, field)
		}
	}
}

func TestR2_4_AvailabilityAndSurgeBounds(t *testing.T) {
	// 8 clusters carry revision 1; the selection moves 4 of them to 4 new clusters.
	ts := fleet(12, true)
	settled(ts, 1, names(ts, 0, 8)...)
	for i := 0; i < 4; i++ {
		ts[i].Excluded = true
	}
	ru := &RollingUpdate{MaxUnavailable: Int(1), MaxSurge: Int(2)}
	in := &Input{Revision: 1, Placement: &Placement{RollingUpdate: ru}, Targets: ts, Now: t0}
	d := Plan(in)
	// N = 8 candidates. Surge: carrying 8, at most 10 → 2 new clusters first.
	if diff := cmp.Diff([]string{"c-008", "c-009"}, d.Release); diff != "" {
		t.Errorf("new clusters (-want +got):\n%s", diff)
	}
	// Availability: 8 available, at least 7 → one deselected cluster may go.
	if diff := cmp.Diff([]string{"c-000"}, d.Remove); diff != "" {
		t.Errorf("removals (-want +got):\n%s", diff)
	}
	if !strings.Contains(d.Clusters[10].Wait, "maxSurge: 10 clusters carry the workload, at most N+maxSurge = 10") {
		t.Errorf("surge wait = %q", d.Clusters[10].Wait)
	}
}

func TestR2_5_ReadyDelay(t *testing.T) {
	ts := fleet(4, false)
	releaseTo(ts, 2, true, "c-000")
	ts[0].Deployment.AppliedAt = t0.Add(-20 * time.Second)
	in := &Input{Revision: 2, Placement: &Placement{RollingUpdate: &RollingUpdate{MaxUnavailable: Int(1), UnavailablePeriodSeconds: ptr(60)}}, Targets: ts, Now: t0}
	d := Plan(in)
	if len(d.Release) != 0 || d.RequeueAfter != 40*time.Second {
		t.Fatalf("20s after apply: released %v, requeue %s; want nothing, 40s", d.Release, d.RequeueAfter)
	}
	in.Now = t0.Add(40 * time.Second)
	if d = Plan(in); len(d.Release) != 1 {
		t.Fatalf("60s after apply: released %v, want one more", d.Release)
	}
}

func TestR2_6_Scenarios(t *testing.T) {
	t.Run("new workload to all selected clusters", func(t *testing.T) {
		d := Plan(&Input{Revision: 1, Placement: &Placement{}, Targets: fleet(20, true), Now: t0})
		if len(d.Release) != 20 {
			t.Errorf("first deployment released %d, want 20", len(d.Release))
		}
	})
	t.Run("in-place update completes in waves", func(t *testing.T) {
		tl := Simulate(Simulation{Clusters: simFleet(10), Placement: &Placement{RollingUpdate: &RollingUpdate{UnavailablePeriodSeconds: ptr(10)}}})
		if !tl.Completed {
			t.Fatalf("stuck: %s", tl.Stuck)
		}
		if got := len(tl.Steps[0].Released); got != 3 {
			t.Errorf("first wave %d, want 3", got)
		}
	})
	t.Run("a cluster no longer selected loses the workload", func(t *testing.T) {
		ts := fleet(4, true)
		settled(ts, 1, names(ts, 0, 4)...)
		ts[2].Excluded = true
		d := Plan(&Input{Revision: 1, Placement: &Placement{}, Targets: ts, Now: t0})
		if diff := cmp.Diff([]string{"c-002"}, d.Remove); diff != "" {
			t.Errorf("removals (-want +got):\n%s", diff)
		}
	})
	t.Run("a newly matching cluster gets the workload", func(t *testing.T) {
		ts := fleet(5, true)
		settled(ts, 1, names(ts, 0, 4)...)
		d := Plan(&Input{Revision: 1, Placement: &Placement{}, Targets: ts, Now: t0})
		if diff := cmp.Diff([]string{"c-004"}, d.Release); diff != "" {
			t.Errorf("releases (-want +got):\n%s", diff)
		}
	})
	t.Run("a failed cluster does not hold the budget", func(t *testing.T) {
		ts := fleet(4, false)
		releaseTo(ts, 2, false, "c-000") // failed on revision 2: not ready
		in := &Input{Revision: 3, Placement: &Placement{RollingUpdate: &RollingUpdate{MaxUnavailable: Int(1)}}, Targets: ts, Now: t0}
		d := Plan(in)
		// c-000 is unavailable anyway: it is updated for free. It already spends the budget
		// (3 of 4 available, at least 3), so the others wait.
		if diff := cmp.Diff([]string{"c-000"}, d.Release); diff != "" {
			t.Errorf("releases (-want +got):\n%s", diff)
		}
		if !strings.Contains(d.Clusters[1].Wait, "3 of 4 clusters available, at least N−maxUnavailable = 3") {
			t.Errorf("wait = %q", d.Clusters[1].Wait)
		}
	})
}

func TestR2_PausedBundleReleasesNothing(t *testing.T) {
	d := Plan(&Input{Revision: 1, Placement: &Placement{}, Targets: fleet(3, true), Paused: true, Now: t0})
	if len(d.Release) != 0 || !strings.Contains(d.Paused, "paused") {
		t.Errorf("released %v, paused %q", d.Release, d.Paused)
	}
}

// R2.1 with the seed's affinity: PickN of 2 takes only clusters in westus (required), the one
// its preferred term weighs first, then by name; a cluster that carries the workload keeps it
// over a newcomer the preference weighs more (a stable fleet does not move); a cluster that no
// longer matches the required terms leaves the pick (Flotilla applies them during execution
// too, as it does the bundle's targets). PickAll takes every cluster the required terms admit.
func TestR2_1_PickNAffinityRequiredAndPreferred(t *testing.T) {
	affinity := &Affinity{ClusterAffinity: &ClusterAffinity{
		Required:  &ClusterSelector{ClusterSelectorTerms: []ClusterSelectorTerm{{LabelSelector: sel("location=westus")}, {LabelSelector: sel("location=westus2")}}},
		Preferred: []PreferredClusterTerm{{Weight: 50, Preference: ClusterSelectorTerm{LabelSelector: sel("tier=gold")}}, {Weight: -20, Preference: ClusterSelectorTerm{LabelSelector: sel("legacy")}}},
	}}
	targets := func(labels map[string]string) []Target {
		var ts []Target
		for _, name := range slices.Sorted(maps.Keys(labels)) {
			l := map[string]string{}
			for _, kv := range strings.Split(labels[name], ",") {
				k, v, _ := strings.Cut(kv, "=")
				l[k] = v
			}
			ts = append(ts, Target{Cluster: name, Labels: l})
		}
		return ts
	}
	fleetLabels := map[string]string{"a": "location=westus,legacy=yes", "b": "location=eastus,tier=gold", "c": "location=westus2,tier=gold", "d": "location=westus"}
	pickN := &Placement{Type: PickN, NumberOfClusters: ptr(2), Affinity: affinity}
	d := Plan(&Input{Revision: 1, Placement: pickN, Targets: targets(fleetLabels), Now: t0})
	if diff := cmp.Diff([]string{"c", "d"}, d.Release); diff != "" {
		t.Errorf("first pick (-want +got):\n%s", diff)
	}

	// c and d carry revision 1; a new gold cluster in westus does not displace them.
	fleetLabels["e"] = "location=westus,tier=gold"
	ts := targets(fleetLabels)
	settled(ts, 1, "c", "d")
	d = Plan(&Input{Revision: 1, Placement: pickN, Targets: ts, Now: t0})
	if len(d.Release) != 0 || len(d.Remove) != 0 {
		t.Errorf("a stable pick moved: released %v, removed %v", d.Release, d.Remove)
	}

	// d moves to eastus: it leaves the pick, and e, weighed first, takes its place.
	fleetLabels["d"] = "location=eastus"
	ts = targets(fleetLabels)
	settled(ts, 1, "c", "d")
	d = Plan(&Input{Revision: 1, Placement: pickN, Targets: ts, Now: t0})
	if diff := cmp.Diff([]string{"e"}, d.Release); diff != "" {
		t.Errorf("after d left the required terms (-want +got):\n%s", diff)
	}

	pickAll := &Placement{Type: PickAll, Affinity: &Affinity{ClusterAffinity: &ClusterAffinity{Required: affinity.ClusterAffinity.Required}}}
	d = Plan(&Input{Revision: 1, Placement: pickAll, Targets: targets(fleetLabels), Now: t0})
	if diff := cmp.Diff([]string{"a", "c", "e"}, d.Release); diff != "" {
		t.Errorf("PickAll with required terms (-want +got):\n%s", diff)
	}
}

func TestR2_1_AffinityIsValidated(t *testing.T) {
	cases := []struct {
		name string
		p    Placement
		want string
	}{
		{"PickFixed", Placement{Type: PickFixed, ClusterNames: []string{"a"}, Affinity: &Affinity{ClusterAffinity: &ClusterAffinity{Required: &ClusterSelector{ClusterSelectorTerms: []ClusterSelectorTerm{{}}}}}},
			"placement.affinity: is not valid with type PickFixed"},
		{"no required term", Placement{Type: PickN, NumberOfClusters: ptr(1), Affinity: &Affinity{ClusterAffinity: &ClusterAffinity{Required: &ClusterSelector{}}}},
			"placement.affinity.clusterAffinity.requiredDuringSchedulingIgnoredDuringExecution.clusterSelectorTerms: needs at least one term"},
		{"weight out of range", Placement{Type: PickN, NumberOfClusters: ptr(1), Affinity: &Affinity{ClusterAffinity: &ClusterAffinity{Preferred: []PreferredClusterTerm{{Weight: 101}}}}},
			"placement.affinity.clusterAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight: 101 is not within -100 and 100"},
		{"preferred with PickAll", Placement{Type: PickAll, Affinity: &Affinity{ClusterAffinity: &ClusterAffinity{Preferred: []PreferredClusterTerm{{Weight: 1}}}}},
			"only valid with type PickN"},
		{"bad selector", Placement{Type: PickN, NumberOfClusters: ptr(1), Affinity: &Affinity{ClusterAffinity: &ClusterAffinity{Required: &ClusterSelector{ClusterSelectorTerms: []ClusterSelectorTerm{{LabelSelector: &Selector{MatchExpressions: []Requirement{{Key: "a", Operator: "Near"}}}}}}}}},
			"clusterSelectorTerms[0].labelSelector"},
	}
	for _, c := range cases {
		if err := Validate(nil, &c.p); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}
