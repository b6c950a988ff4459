package rollout

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestR1_4_AutomaticPartitions(t *testing.T) {
	cases := []struct {
		name     string
		n        int
		strategy Strategy
		want     []int
	}{
		{"200 clusters, defaults → 4 × 50", 200, Strategy{}, []int{50, 50, 50, 50}},
		{"230 clusters, 25% → 57, 57, 57, 57, 2", 230, Strategy{AutoPartitionSize: Percent(25)}, []int{57, 57, 57, 57, 2}},
		{"50 clusters, threshold 50, size 50% → 2 × 25", 50, Strategy{AutoPartitionThreshold: ptr(50), AutoPartitionSize: Percent(50)}, []int{25, 25}},
		{"50 clusters, default threshold → 1 × 50", 50, Strategy{}, []int{50}},
		{"200 clusters, size 10% → 10 × 20", 200, Strategy{AutoPartitionSize: Percent(10), MaxUnavailablePartitions: Int(1)}, []int{20, 20, 20, 20, 20, 20, 20, 20, 20, 20}},
		{"threshold 0 disables partitioning", 500, Strategy{AutoPartitionThreshold: ptr(0)}, []int{500}},
		{"199 clusters stay below the default threshold", 199, Strategy{}, []int{199}},
		{"absolute size 30 of 100 with threshold 10", 100, Strategy{AutoPartitionThreshold: ptr(10), AutoPartitionSize: Int(30)}, []int{30, 30, 30, 10}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := Plan(&Input{Revision: 2, Strategy: c.strategy, Targets: fleet(c.n, false)})
			if diff := cmp.Diff(c.want, partitionSizes(d)); diff != "" {
				t.Errorf("partition sizes (-want +got):\n%s", diff)
			}
		})
	}
}

func TestR1_4_AutomaticPartitionsTakeClustersByName(t *testing.T) {
	ts := fleet(230, false)
	// Reverse the input: partitions must not depend on input order.
	for i, j := 0, len(ts)-1; i < j; i, j = i+1, j-1 {
		ts[i], ts[j] = ts[j], ts[i]
	}
	d := Plan(&Input{Revision: 2, Strategy: Strategy{AutoPartitionSize: Percent(25)}, Targets: ts})
	if got := d.Partitions[0].Clusters[0]; got != "c-000" {
		t.Errorf("first cluster of first partition = %s, want c-000", got)
	}
	if diff := cmp.Diff([]string{"c-228", "c-229"}, d.Partitions[4].Clusters); diff != "" {
		t.Errorf("remainder partition (-want +got):\n%s", diff)
	}
}

func TestR1_3_ManualPartitions(t *testing.T) {
	ts := []Target{
		{Cluster: "canary-1", Labels: map[string]string{"ring": "canary", "env": "prod"}},
		{Cluster: "prod-1", Labels: map[string]string{"env": "prod"}, Groups: []string{"eu"}},
		{Cluster: "prod-2", Labels: map[string]string{"env": "prod"}, Groups: []string{"us"}},
		{Cluster: "dev-1", Labels: map[string]string{"env": "dev"}},
		{Cluster: "lab-1", Labels: map[string]string{"env": "lab"}},
	}
	s := Strategy{Partitions: []Partition{
		{Name: "canary", Match: Match{ClusterSelector: &Selector{MatchLabels: map[string]string{"ring": "canary"}}}},
		// canary-1 also matches env=prod: it stays in the first partition that matched it.
		{Name: "eu", Match: Match{ClusterGroupSelector: &Selector{MatchLabels: map[string]string{"region": "eu"}}}},
		{Name: "prod", Match: Match{ClusterSelector: &Selector{MatchLabels: map[string]string{"env": "prod"}}}},
		{Name: "dev", Match: Match{ClusterName: "dev-1"}},
		// Every field that is set must match: group us AND env=dev matches nobody.
		{Name: "nobody", Match: Match{ClusterGroup: "us", ClusterSelector: &Selector{MatchLabels: map[string]string{"env": "dev"}}}},
	}}
	groups := []ClusterGroup{{Name: "eu", Labels: map[string]string{"region": "eu"}}, {Name: "us", Labels: map[string]string{"region": "us"}}}
	d := Plan(&Input{Revision: 1, Strategy: s, Targets: ts, Groups: groups})
	got := map[string][]string{}
	for _, p := range d.Partitions {
		got[p.Name] = p.Clusters
	}
	want := map[string][]string{"canary": {"canary-1"}, "eu": {"prod-1"}, "prod": {"prod-2"}, "dev": {"dev-1"}, "nobody": {}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("partitions (-want +got):\n%s", diff)
	}
	var order []string
	for _, p := range d.Partitions {
		order = append(order, p.Name)
	}
	if diff := cmp.Diff([]string{"canary", "eu", "prod", "dev", "nobody"}, order); diff != "" {
		t.Errorf("R1.3 partitions keep fleet.yaml order (-want +got):\n%s", diff)
	}
	// Unpartitioned clusters are visible, with a warning, and never released.
	if diff := cmp.Diff([]string{"lab-1"}, d.Unpartitioned); diff != "" {
		t.Errorf("unpartitioned (-want +got):\n%s", diff)
	}
	if len(d.Warnings) == 0 || !strings.Contains(d.Warnings[0].Message, "lab-1") {
		t.Errorf("no warning names the unpartitioned cluster: %v", d.Warnings)
	}
	for _, r := range d.Release {
		if r == "lab-1" {
			t.Errorf("unpartitioned cluster released")
		}
	}
	for _, c := range d.Clusters {
		if c.Name == "lab-1" && !strings.Contains(c.Wait, "no partition") {
			t.Errorf("lab-1 wait reason = %q", c.Wait)
		}
	}
}

// The lanes a view draws are the partitions Plan forms, for manual and automatic partitions,
// whatever the input order (R1.3, R1.4).
func TestR1_3_R1_4_AssignPartitionsIsWhatPlanForms(t *testing.T) {
	manual := Strategy{Partitions: []Partition{
		{Name: "canary", Match: Match{ClusterSelector: &Selector{MatchLabels: map[string]string{"ring": "canary"}}}},
		{Name: "eu", Match: Match{ClusterGroup: "eu"}},
		{Name: "rest", Match: Match{ClusterSelector: &Selector{MatchLabels: map[string]string{"env": "prod"}}}},
	}}
	groups := []ClusterGroup{{Name: "eu"}}
	cases := []struct {
		name     string
		targets  []Target
		strategy Strategy
	}{
		{"230 clusters in 25% partitions", fleet(230, false), Strategy{AutoPartitionSize: Percent(25)}},
		{"one partition below the threshold", fleet(40, false), Strategy{}},
		{"manual partitions and an unpartitioned cluster", []Target{
			{Cluster: "z-canary", Labels: map[string]string{"ring": "canary", "env": "prod"}},
			{Cluster: "b-eu", Labels: map[string]string{"env": "prod"}, Groups: []string{"eu"}},
			{Cluster: "a-us", Labels: map[string]string{"env": "prod"}},
			{Cluster: "lab", Labels: map[string]string{"env": "lab"}},
		}, manual},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			reversed := slices.Clone(c.targets)
			slices.Reverse(reversed)
			got, none := AssignPartitions(reversed, &c.strategy, groups)
			d := Plan(&Input{Revision: 2, Strategy: c.strategy, Targets: c.targets, Groups: groups})
			var want []Members
			for _, p := range d.Partitions {
				want = append(want, Members{Name: p.Name, Clusters: p.Clusters})
			}
			if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("partitions (-plan +assigned):\n%s", diff)
			}
			if diff := cmp.Diff(d.Unpartitioned, none, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("unpartitioned (-plan +assigned):\n%s", diff)
			}
		})
	}
}
