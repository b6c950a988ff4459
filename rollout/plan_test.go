package rollout

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// apply writes a decision's releases into the targets, as the hub and agents would: each
// released cluster applied the revision and is ready or not.
func apply(ts []Target, d *Decision, rev int64, ready bool) {
	releaseTo(ts, rev, ready, d.Release...)
}

func TestR1_1_DefaultsReleaseEverything(t *testing.T) {
	ts := fleet(200, false)
	d := Plan(&Input{Revision: 2, Targets: ts})
	if d.MaxUnavailable != 200 || d.MaxUnavailablePartitions != 0 {
		t.Errorf("resolved defaults: maxUnavailable %d, maxUnavailablePartitions %d; want 200, 0", d.MaxUnavailable, d.MaxUnavailablePartitions)
	}
	if diff := cmp.Diff([]int{50, 50, 50, 50}, partitionSizes(d)); diff != "" {
		t.Errorf("default partitions (-want +got):\n%s", diff)
	}
	if len(d.Release) != 200 {
		t.Errorf("released %d, want all 200 (maxNew 50 per partition, 100%% thresholds)", len(d.Release))
	}
}

func TestR1_5_PartitionThresholds(t *testing.T) {
	ts := fleet(30, false)
	s := Strategy{MaxUnavailable: Percent(50), Partitions: []Partition{
		{Name: "own", MaxUnavailable: Percent(10), Match: Match{ClusterSelector: &Selector{MatchExpressions: []Requirement{{Key: "index", Operator: OpIn, Values: []string{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}}}}}},
		{Name: "global", Match: Match{ClusterSelector: &Selector{}}},
	}}
	d := Plan(&Input{Revision: 2, Strategy: s, Targets: ts})
	// own: 10% of its 10 clusters → 1; global: 50% of its 20 clusters → 10.
	if got := []int{d.Partitions[0].MaxUnavailable, d.Partitions[1].MaxUnavailable}; !cmp.Equal(got, []int{1, 10}) {
		t.Errorf("thresholds = %v, want [1 10]", got)
	}
}

func TestR1_6_PartitionReadiness(t *testing.T) {
	s := Strategy{MaxUnavailable: Int(2)}
	for _, c := range []struct {
		notReady int
		ready    bool
	}{{0, true}, {2, true}, {3, false}} {
		ts := fleet(10, false)
		releaseTo(ts, 2, true, names(ts, 0, 10)...)
		releaseTo(ts, 2, false, names(ts, 0, c.notReady)...)
		d := Plan(&Input{Revision: 2, Strategy: s, Targets: ts})
		p := d.Partitions[0]
		if p.Ready != c.ready || p.Unavailable != c.notReady {
			t.Errorf("%d not ready of threshold 2: ready=%v unavailable=%d, want ready=%v", c.notReady, p.Ready, p.Unavailable, c.ready)
		}
	}
}

func TestR1_7_PartitionGate(t *testing.T) {
	mk := func(maxParts int) (*Decision, []Target) {
		ts := fleet(30, false)
		// Partition thresholds 0, global budget unlimited: only R1.7 decides.
		s := Strategy{MaxUnavailablePartitions: Int(maxParts), Partitions: []Partition{
			{Name: "a", Match: Match{ClusterSelector: &Selector{MatchExpressions: []Requirement{{Key: "index", Operator: OpIn, Values: []string{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}}}}}},
			{Name: "b", Match: Match{ClusterSelector: &Selector{MatchExpressions: []Requirement{{Key: "index", Operator: OpIn, Values: []string{"10", "11", "12", "13", "14", "15", "16", "17", "18", "19"}}}}}},
			{Name: "c", Match: Match{ClusterSelector: &Selector{}}},
		}}
		for i := range s.Partitions {
			s.Partitions[i].MaxUnavailable = Int(0)
		}
		return Plan(&Input{Revision: 2, Strategy: s, Targets: ts}), ts
	}
	d, _ := mk(0)
	if len(d.Release) != 10 || d.Release[0] != "c-000" {
		t.Fatalf("maxUnavailablePartitions 0: released %v, want partition a only", d.Release)
	}
	if !strings.Contains(d.Paused, "1 partitions NotReady (a), more than maxUnavailablePartitions 0") {
		t.Errorf("pause reason = %q", d.Paused)
	}
	d, _ = mk(1)
	if len(d.Release) != 20 {
		t.Errorf("maxUnavailablePartitions 1: released %d clusters, want partitions a and b (20)", len(d.Release))
	}
	if !strings.Contains(d.Paused, "2 partitions NotReady (a, b)") {
		t.Errorf("pause reason = %q", d.Paused)
	}
}

func TestR1_8_MaxNewBatches(t *testing.T) {
	t.Run("25 clusters with maxUnavailable 5: all released, then checked", func(t *testing.T) {
		d := Plan(&Input{Revision: 2, Strategy: Strategy{MaxUnavailable: Int(5)}, Targets: fleet(25, false)})
		if len(d.Release) != 25 || d.Partitions[0].Ready {
			t.Errorf("released %d (want 25), partition ready=%v (want NotReady after the batch)", len(d.Release), d.Partitions[0].Ready)
		}
	})
	t.Run("100 clusters: 50 released, checked, then the other 50 only if the threshold holds", func(t *testing.T) {
		ts := fleet(100, false)
		in := &Input{Revision: 2, Strategy: Strategy{MaxUnavailable: Percent(10)}, Targets: ts}
		d := Plan(in)
		if diff := cmp.Diff(names(ts, 0, 50), d.Release); diff != "" {
			t.Fatalf("first batch (-want +got):\n%s", diff)
		}
		if !d.More {
			t.Errorf("a batch cut by maxNew must ask to plan again")
		}
		apply(ts, d, 2, false)
		d = Plan(in)
		if len(d.Release) != 0 || !strings.Contains(d.Paused, "50 clusters unavailable, more than its maxUnavailable 10") {
			t.Fatalf("with 50 unavailable: released %d, paused %q", len(d.Release), d.Paused)
		}
		releaseTo(ts, 2, true, names(ts, 0, 39)...) // 11 still unavailable: more than 10
		if d = Plan(in); len(d.Release) != 0 {
			t.Fatalf("11 unavailable > 10: released %d", len(d.Release))
		}
		releaseTo(ts, 2, true, "c-039") // exactly 10: the threshold holds (R1.6 "exceeds")
		d = Plan(in)
		if diff := cmp.Diff(names(ts, 50, 100), d.Release); diff != "" {
			t.Fatalf("second batch (-want +got):\n%s", diff)
		}
	})
}

func TestR1_9_GlobalBudgetCapsAcrossPartitions(t *testing.T) {
	// Partitions tolerate everything; only the global budget (10 of 100) holds partition p2.
	s := Strategy{MaxUnavailable: Int(10), MaxUnavailablePartitions: Int(5), Partitions: []Partition{
		{Name: "p1", MaxUnavailable: Percent(100), Match: Match{ClusterSelector: &Selector{MatchExpressions: []Requirement{{Key: "index", Operator: OpIn, Values: []string{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11"}}}}}},
		{Name: "p2", MaxUnavailable: Percent(100), Match: Match{ClusterSelector: &Selector{}}},
	}}
	ts := fleet(100, false)
	in := &Input{Revision: 2, Strategy: s, Targets: ts}
	d := Plan(in)
	if len(d.Release) != 12 || !strings.Contains(d.Paused, "12 clusters unavailable, more than maxUnavailable 10 (10) (R1.9)") {
		t.Fatalf("released %d, paused %q", len(d.Release), d.Paused)
	}
	apply(ts, d, 2, false)
	releaseTo(ts, 2, true, "c-000", "c-001") // 10 unavailable: not more than the budget
	if d = Plan(in); len(d.Release) != 50 {
		t.Fatalf("within the global budget: released %d, want a batch of 50", len(d.Release))
	}
}

// R1.10, with R5.3: progress comes from readiness events only; the one timed wake-up a §1
// decision asks for is the failure timeout of a cluster not Ready yet.
func TestR1_10_NoArtificialDelay(t *testing.T) {
	tl := Simulate(Simulation{Clusters: simFleet(300), Strategy: Strategy{MaxUnavailable: Percent(10), AutoPartitionSize: Percent(10)}, Observe: func(in *Input, d *Decision) {
		var deadline time.Duration
		for _, tg := range in.Targets {
			if dep := tg.Deployment; dep != nil && dep.Released == in.Revision && !dep.Ready {
				deadline = requeueAt(deadline, in.Now, dep.ReleasedAt.Add(DefaultFailureTimeout))
			}
		}
		if d.RequeueAfter != deadline {
			t.Fatalf("§1 decision asks for a timed wake-up (%s), not the next failure timeout (%s): progress must come from events", d.RequeueAfter, deadline)
		}
	}})
	if !tl.Completed {
		t.Fatalf("rollout did not complete: %s", tl.Stuck)
	}
}

func TestR1_11_OfflineClustersCountAsUnavailable(t *testing.T) {
	ts := fleet(10, false)
	ts[3].Offline = true
	in := &Input{Revision: 2, Strategy: Strategy{MaxUnavailable: Int(0)}, Targets: ts}
	d := Plan(in)
	if len(d.Release) != 0 || !strings.Contains(d.Paused, "1 clusters unavailable") {
		t.Fatalf("offline cluster with maxUnavailable 0: released %v, paused %q", d.Release, d.Paused)
	}
	// Back online, on the old revision: no longer unavailable (it holds an older revision).
	ts[3].Offline = false
	if d = Plan(in); len(d.Release) != 10 {
		t.Fatalf("back online: released %d, want 10", len(d.Release))
	}
	// Offline after applying: unavailable until back and applied successfully.
	releaseTo(ts, 2, true, names(ts, 0, 10)...)
	ts[5].Offline = true
	if d = Plan(in); d.Partitions[0].Unavailable != 1 || d.Complete {
		t.Fatalf("offline ready cluster: unavailable %d, complete %v", d.Partitions[0].Unavailable, d.Complete)
	}
}

func TestR1_12_PendingOnFirstDeploymentOutOfSyncOnUpdate(t *testing.T) {
	s := Strategy{MaxUnavailable: Int(0), Partitions: []Partition{
		{Name: "first", Match: Match{ClusterName: "c-000"}},
		{Name: "rest", Match: Match{ClusterSelector: &Selector{}}},
	}}
	for _, c := range []struct {
		first bool
		want  State
	}{{true, Pending}, {false, OutOfSync}} {
		d := Plan(&Input{Revision: 2, Strategy: s, Targets: fleet(5, c.first)})
		if d.Clusters[0].State != WaitApplied {
			t.Errorf("released cluster state = %s, want WaitApplied", d.Clusters[0].State)
		}
		if got := d.Clusters[3].State; got != c.want {
			t.Errorf("first deployment=%v: not-yet-reached state = %s, want %s", c.first, got, c.want)
		}
		if got := d.Partitions[1].Counts[c.want]; got != 4 {
			t.Errorf("partition counts %v, want 4 × %s", d.Partitions[1].Counts, c.want)
		}
	}
}

func TestR1_13_Pause(t *testing.T) {
	ts := fleet(10, false)
	d := Plan(&Input{Revision: 2, Targets: ts, Paused: true})
	if len(d.Release) != 0 || !strings.Contains(d.Paused, "bundle is paused") {
		t.Errorf("paused bundle: released %v, paused %q", d.Release, d.Paused)
	}
	ts[2].Paused = true
	d = Plan(&Input{Revision: 2, Targets: ts})
	if len(d.Release) != 9 || d.Clusters[2].Wait != "cluster is paused" {
		t.Errorf("paused cluster: released %d, wait %q", len(d.Release), d.Clusters[2].Wait)
	}
}

// A cluster whose dependencies are not ready there (dependsOn) waits with the reason, in both
// rollout kinds; the others go on.
func TestBlockedClustersWaitWithTheirReason(t *testing.T) {
	const why = "depends on bundle db, not ready on this cluster"
	for _, placement := range []*Placement{nil, {RollingUpdate: &RollingUpdate{MaxUnavailable: Percent(100)}}} {
		ts := fleet(4, false)
		ts[1].Blocked = why
		d := Plan(&Input{Revision: 2, Targets: ts, Placement: placement})
		if len(d.Release) != 3 || slices.Contains(d.Release, ts[1].Cluster) || d.Clusters[1].Wait != why {
			t.Errorf("placement %v: released %v, wait %q", placement != nil, d.Release, d.Clusters[1].Wait)
		}
	}
}

func TestR1_14_UnsafeDefaultsAreVisible(t *testing.T) {
	d := Plan(&Input{Revision: 2, Targets: fleet(20, false)})
	if len(d.Warnings) == 0 || !strings.Contains(d.Warnings[0].Message, "R1.14") {
		t.Errorf("no R1.14 warning: %v", d.Warnings)
	}
	d = Plan(&Input{Revision: 2, Strategy: Strategy{MaxUnavailable: Percent(10)}, Targets: fleet(20, false)})
	if len(d.Warnings) != 0 {
		t.Errorf("warning without unsafe defaults: %v", d.Warnings)
	}
}

// Worked scenarios of ROLLOUT.md §1.

func TestScenario_50Clusters10Percent_OnePartitionAllAtOnce(t *testing.T) {
	d := Plan(&Input{Revision: 2, Strategy: Strategy{MaxUnavailable: Percent(10)}, Targets: fleet(50, false)})
	if len(d.Partitions) != 1 || len(d.Release) != 50 || d.Partitions[0].Ready {
		t.Errorf("partitions %v, released %d, ready %v: want one partition, all 50 at once, evaluated after", partitionSizes(d), len(d.Release), d.Partitions[0].Ready)
	}
}

func TestScenario_200Clusters10PercentSize_PausesAtTwoNotReadyPartitions(t *testing.T) {
	ts := fleet(200, false)
	in := &Input{Revision: 2, Strategy: Strategy{MaxUnavailable: Percent(10), AutoPartitionSize: Percent(10), MaxUnavailablePartitions: Int(1)}, Targets: ts}
	d := Plan(in)
	if diff := cmp.Diff(names(ts, 0, 40), d.Release); diff != "" {
		t.Fatalf("releases (-want +got):\n%s", diff)
	}
	if !strings.Contains(d.Paused, "2 partitions NotReady (auto-0, auto-1), more than maxUnavailablePartitions 1") {
		t.Errorf("pause = %q", d.Paused)
	}
	// Partition auto-0 recovers: one NotReady partition is allowed, the rollout moves on, but the
	// global budget (20 of 200) still has 20 unavailable: not more than 20, so auto-2 starts.
	apply(ts, d, 2, false)
	releaseTo(ts, 2, true, names(ts, 0, 20)...)
	d = Plan(in)
	if diff := cmp.Diff(names(ts, 40, 60), d.Release); diff != "" {
		t.Fatalf("after recovery (-want +got):\n%s", diff)
	}
}

func TestScenario_200ManualDemoRolloutStable_StrictOrder(t *testing.T) {
	ts := fleet(200, false)
	for i := range 10 {
		ts[i].Labels["stage"] = "demo"
	}
	s := Strategy{MaxUnavailable: Int(0), MaxUnavailablePartitions: Int(0), Partitions: []Partition{
		{Name: "demoRollout", Match: Match{ClusterSelector: &Selector{MatchLabels: map[string]string{"stage": "demo"}}}},
		{Name: "stable", Match: Match{ClusterSelector: &Selector{MatchExpressions: []Requirement{{Key: "stage", Operator: OpDoesNotExist}}}}},
	}}
	in := &Input{Revision: 2, Strategy: s, Targets: ts}
	d := Plan(in)
	if diff := cmp.Diff(names(ts, 0, 10), d.Release); diff != "" {
		t.Fatalf("demoRollout first (-want +got):\n%s", diff)
	}
	apply(ts, d, 2, true)
	ts[4].Deployment.Ready = false // any unready cluster pauses
	if d = Plan(in); len(d.Release) != 0 || !strings.Contains(d.Paused, "demoRollout") {
		t.Fatalf("unready demo cluster: released %d, paused %q", len(d.Release), d.Paused)
	}
	ts[4].Deployment.Ready = true
	d = Plan(in)
	if len(d.Release) != 50 || d.Release[0] != "c-010" {
		t.Fatalf("stable first batch: %d from %v", len(d.Release), d.Release[:1])
	}
	apply(ts, d, 2, true)
	ts[30].Deployment.Ready = false
	if d = Plan(in); len(d.Release) != 0 {
		t.Fatalf("unready stable cluster must pause the next batch; released %d", len(d.Release))
	}
}

func TestScenario_200In40ClusterPartitions_PauseWhileMoreThan4Unavailable(t *testing.T) {
	ts := fleet(200, false)
	var parts []Partition
	for p := range 5 {
		var vals []string
		for i := p * 40; i < (p+1)*40; i++ {
			vals = append(vals, ts[i].Labels["index"])
		}
		parts = append(parts, Partition{Name: string(rune('a' + p)), Match: Match{ClusterSelector: &Selector{MatchExpressions: []Requirement{{Key: "index", Operator: OpIn, Values: vals}}}}})
	}
	in := &Input{Revision: 2, Strategy: Strategy{MaxUnavailable: Percent(10), MaxUnavailablePartitions: Int(0), Partitions: parts}, Targets: ts}
	d := Plan(in)
	if diff := cmp.Diff(names(ts, 0, 40), d.Release); diff != "" {
		t.Fatalf("40 at once (-want +got):\n%s", diff)
	}
	apply(ts, d, 2, false)
	releaseTo(ts, 2, true, names(ts, 0, 35)...) // 5 unavailable > 4
	if d = Plan(in); len(d.Release) != 0 || !strings.Contains(d.Paused, "partition a") && !strings.Contains(d.Paused, "(a)") {
		t.Fatalf("5 unavailable: released %d, paused %q", len(d.Release), d.Paused)
	}
	releaseTo(ts, 2, true, "c-035") // 4 unavailable: not more than 4
	if d = Plan(in); len(d.Release) != 40 || d.Release[0] != "c-040" {
		t.Fatalf("4 unavailable: released %d", len(d.Release))
	}
}

// TestPlanIsDeterministic: equal input gives equal output, whatever the target order.
func TestPlanIsDeterministic(t *testing.T) {
	ts := fleet(120, false)
	releaseTo(ts, 2, false, "c-003", "c-077")
	in := &Input{Revision: 2, Strategy: Strategy{MaxUnavailable: Percent(20), AutoPartitionThreshold: ptr(50), MaxNew: ptr(7)}, Targets: ts}
	want := Plan(in)
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		shuffled := append([]Target(nil), ts...)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		in2 := *in
		in2.Targets = shuffled
		if diff := cmp.Diff(want, Plan(&in2)); diff != "" {
			t.Fatalf("plan depends on target order (-want +got):\n%s", diff)
		}
	}
}

// R1.6's decision, as the seed counts: a cluster that is not available on the older revision it
// runs counts against the budgets like one that is not available on the new revision. It holds
// the rollout from entering a partition when the global budget is spent, and says which cluster
// it is; but it does not hold its own partition, to which the new revision may bring its fix.
func TestR1_6_R1_9_AClusterBrokenOnTheOlderRevisionCountsAgainstTheBudget(t *testing.T) {
	ring := func(r string) *Selector { return sel("ring=" + r) }
	targets := func(brokenOnOld ...string) []Target {
		var ts []Target
		for _, c := range []struct{ name, ring string }{{"c1", "canary"}, {"m1", "main"}, {"m2", "main"}, {"l1", "last"}} {
			ts = append(ts, Target{Cluster: c.name, Labels: map[string]string{"ring": c.ring}, Deployment: &Deployment{Staged: 2, Released: 1, Applied: 1, Ready: !slices.Contains(brokenOnOld, c.name)}})
		}
		releaseTo(ts, 2, true, "c1") // the canary runs revision 2, Ready
		return ts
	}
	s := Strategy{MaxUnavailable: Int(0), Partitions: []Partition{
		{Name: "canary", Match: Match{ClusterSelector: ring("canary")}},
		{Name: "main", Match: Match{ClusterSelector: ring("main")}},
		{Name: "last", Match: Match{ClusterSelector: ring("last")}},
	}}
	cases := []struct {
		name        string
		broken      []string
		wantRelease []string
		wantPaused  string
	}{
		{"nothing broken", nil, []string{"m1", "m2"}, "1 partitions NotReady (main), more than maxUnavailablePartitions 0 (R1.7)"},
		{"broken in the partition entered: it gets the new revision", []string{"m1"}, []string{"m1", "m2"}, "1 partitions NotReady (main), more than maxUnavailablePartitions 0 (R1.7)"},
		{"broken further on: the budget holds", []string{"l1"}, nil,
			"1 clusters unavailable, more than maxUnavailable 0 (0) (R1.9); unavailable on an older revision: l1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := Plan(&Input{Revision: 2, Strategy: s, Targets: targets(c.broken...)})
			if !slices.Equal(d.Release, c.wantRelease) {
				t.Errorf("released %v, want %v", d.Release, c.wantRelease)
			}
			if d.Paused != c.wantPaused {
				t.Errorf("paused %q, want it to contain %q", d.Paused, c.wantPaused)
			}
		})
	}
}

// R1.7's decisions. The seed says the rollout goes on only while fewer partitions than
// maxUnavailablePartitions are NotReady, which with its default 0 would never let a rollout
// start; its own examples go on with exactly maxUnavailablePartitions NotReady. Flotilla takes
// "not more than" (like R1.6). A percentage is of the number of partitions, rounded as R1.2:
// down, but at least 1 above zero.
func TestR1_7_MaxUnavailablePartitionsIsNotMoreThanAndAPercentOfThePartitions(t *testing.T) {
	parts := func(n int) []Partition {
		var ps []Partition
		for i := range n {
			ps = append(ps, Partition{Name: fmt.Sprintf("p%d", i), MaxUnavailable: Int(0), Match: Match{ClusterSelector: sel(fmt.Sprintf("index=%d", i))}})
		}
		return ps
	}
	cases := []struct {
		name       string
		partitions int
		max        IntOrPercent
		wantMax    int
		wantParts  int // partitions released in one pass, each NotReady after it (nothing reported yet)
	}{
		{"0: one NotReady partition stops it", 4, Int(0), 0, 1},
		{"1: goes on with exactly one NotReady", 4, Int(1), 1, 2},
		{"25% of 4 is 1", 4, Percent(25), 1, 2},
		{"25% of 3 rounds down to 0, but is at least 1", 3, Percent(25), 1, 2},
		{"50% of 5 rounds down to 2", 5, Percent(50), 2, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := Plan(&Input{Revision: 2, Strategy: Strategy{MaxUnavailablePartitions: c.max, Partitions: parts(c.partitions)}, Targets: fleet(c.partitions, false)})
			if d.MaxUnavailablePartitions != c.wantMax {
				t.Errorf("maxUnavailablePartitions %d, want %d", d.MaxUnavailablePartitions, c.wantMax)
			}
			if len(d.Release) != c.wantParts {
				t.Errorf("released %v: want the first %d partitions", d.Release, c.wantParts)
			}
		})
	}
}
