package rollout

import (
	"fmt"
	"testing"
)

// BenchmarkPlan10000Clusters5Partitions is the performance target: one pass over
// 10,000 clusters in 5 manual partitions, mid-rollout. Figures are in doc.go.
func BenchmarkPlan10000Clusters5Partitions(b *testing.B) {
	in := benchInput(10000)
	b.ReportAllocs()
	for b.Loop() {
		Plan(in)
	}
}

// BenchmarkPlanScaling shows the allocations grow linearly with the fleet.
func BenchmarkPlanScaling(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			in := benchInput(n)
			b.ReportAllocs()
			for b.Loop() {
				Plan(in)
			}
		})
	}
}

func benchInput(n int) *Input {
	ts := fleet(n, false)
	var parts []Partition
	for p := range 5 {
		ts := ts
		for i := range ts {
			if i%5 == p {
				ts[i].Labels["ring"] = fmt.Sprint(p)
			}
		}
		parts = append(parts, Partition{Name: fmt.Sprintf("ring-%d", p), Match: Match{ClusterSelector: &Selector{MatchLabels: map[string]string{"ring": fmt.Sprint(p)}}}})
	}
	// Mid-rollout: the first partition is released and a few of its clusters are not ready yet.
	for i := 0; i < n; i += 5 {
		ts[i].Deployment = &Deployment{Staged: 2, Released: 2, Applied: 2, Ready: i%50 != 0}
	}
	return &Input{Revision: 2, Strategy: Strategy{MaxUnavailable: Percent(10), MaxNew: ptr(500), Partitions: parts}, Targets: ts}
}
