package hub

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/rollout"
)

// The plan and the hub tell one story (ROLLOUT.md §1): for random fleets and continuous
// strategies, `flotilla plan`'s simulation (rollout.Simulate) and the real hub, its agents
// played by the test on a simulated clock, make the same decisions moment by moment: the same
// clusters released, in the same batches, with the same reason to wait, and the same end.
//
// Each fleet comes from a seed that the test logs; FLOTILLA_FIDELITY_SEED replays one.
func TestR1_10_ThePlanAndTheHubDecideAlikeForRandomFleets(t *testing.T) {
	seed := fidelitySeed(t)
	const fleets = 6
	for i := range fleets {
		fleetSeed := seed + uint64(i)
		t.Run(fmt.Sprintf("seed-%d", fleetSeed), func(t *testing.T) {
			compareWithPlan(t, randomContinuousFleet(rand.New(rand.NewPCG(fleetSeed, 0))))
		})
	}
}

// fidelityCase is a fleet to play: its clusters (labels, and whether the revision fails on
// them) and a continuous strategy.
type fidelityCase struct {
	clusters []rollout.SimCluster
	strategy rollout.Strategy
}

// randomContinuousFleet draws 3 to 9 clusters in three rings and a strategy: manual partitions
// by ring or automatic ones, a global and per-partition maxUnavailable as counts or
// percentages, maxUnavailablePartitions, maxNew, and sometimes a cluster on which the revision
// never becomes Ready (the default failure policy then holds the rollout, R5.3).
func randomContinuousFleet(r *rand.Rand) fidelityCase {
	rings := []string{"canary", "main", "edge"}
	var c fidelityCase
	n := 3 + r.IntN(7)
	failing := -1
	if r.IntN(3) == 0 {
		failing = r.IntN(n)
	}
	for i := range n {
		c.clusters = append(c.clusters, rollout.SimCluster{Name: fmt.Sprintf("c%02d", i), Labels: map[string]string{"ring": rings[r.IntN(len(rings))]}, Fail: i == failing})
	}
	count := func(maxN int) rollout.IntOrPercent {
		if r.IntN(2) == 0 {
			return rollout.Int(r.IntN(maxN + 1))
		}
		return rollout.Percent(10 * (1 + r.IntN(6)))
	}
	s := &c.strategy
	s.MaxUnavailable = count(2)
	s.MaxUnavailablePartitions = rollout.Int(r.IntN(2))
	if r.IntN(2) == 0 {
		s.MaxNew = ptrTo(1 + r.IntN(3))
	}
	if r.IntN(2) == 0 {
		for _, ring := range rings {
			p := rollout.Partition{Name: ring, Match: rollout.Match{ClusterSelector: &rollout.Selector{MatchLabels: map[string]string{"ring": ring}}}}
			if r.IntN(2) == 0 {
				p.MaxUnavailable = count(1)
			}
			s.Partitions = append(s.Partitions, p)
		}
	} else {
		s.AutoPartitionThreshold, s.AutoPartitionSize = ptrTo(2+r.IntN(3)), rollout.Percent(25*(1+r.IntN(2)))
	}
	return c
}

// compareWithPlan plays the case through rollout.Simulate and through the hub, moment by
// moment: at each of the plan's moments the test moves the hub's clock there, reports what the
// simulated agents report by then (Ready 30 s after a release, or applied and not Ready on a
// failing cluster), wakes the hub and waits until its releases and its reason to wait are the
// plan's.
func compareWithPlan(t *testing.T, c fidelityCase) {
	const readyAfter = 30 * time.Second
	plan := rollout.Simulate(rollout.Simulation{Clusters: c.clusters, Strategy: c.strategy, FirstDeployment: true, ReadyAfter: readyAfter})
	strategy, err := yaml.Marshal(c.strategy)
	if err != nil {
		t.Fatal(err)
	}
	fleetYAML := "defaultNamespace: web\nrolloutStrategy:\n" + indent(string(strategy))
	labels := map[string]map[string]string{}
	failing := map[string]bool{}
	for _, cl := range c.clusters {
		labels[cl.Name], failing[cl.Name] = cl.Labels, cl.Fail
	}
	t.Logf("fleet.yaml:\n%s\nclusters %v, failing %v\nplan: %d moments, completed %v, stuck %q", fleetYAML, labels, failing, len(plan.Steps), plan.Completed, plan.Stuck)

	clock := &simClock{at: rollout.SimStart}
	f := newSimFleet(t, Options{Clock: clock.now}, fleetYAML, labels)
	releasedAt := map[string]time.Duration{}
	reported := map[string]bool{}
	var want []string
	var now time.Duration
	for i, m := range plan.Steps {
		if m.At > now {
			clock.advance(m.At - now)
			now = m.At
		}
		for name, at := range releasedAt {
			switch {
			case reported[name]:
			case failing[name]:
				f.reportApplied(false, rollout.SimStart.Add(at), name)
				reported[name] = true
			case at+readyAfter <= now:
				f.reportApplied(true, rollout.SimStart.Add(at+readyAfter), name)
				reported[name] = true
			}
		}
		if i > 0 {
			f.poke()
		}
		want = append(want, m.Released...)
		slices.Sort(want)
		f.until(fmt.Sprintf("moment %d at %s: the hub releases %v and waits for %q, as the plan does", i, m.At, want, m.Paused), func() bool {
			return slices.Equal(f.released(1), want) && f.pausedFor() == m.Paused
		})
		for _, name := range m.Released {
			releasedAt[name] = m.At
		}
	}
	if plan.Completed {
		// The reports after the last release, up to the plan's end, complete the rollout.
		clock.advance(plan.Duration - now)
		for name, at := range releasedAt {
			if !reported[name] && !failing[name] {
				f.reportApplied(true, rollout.SimStart.Add(at+readyAfter), name)
			}
		}
		f.until("the hub completes the rollout, as the plan does", func() bool {
			o := f.getBundle().Status.Outcome
			return o != nil && o.Outcome == "Completed"
		})
	}
}

// indent indents YAML by two spaces.
func indent(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i := range lines {
		lines[i] = "  " + lines[i]
	}
	return strings.Join(lines, "\n") + "\n"
}

// The same for staged runs (ROLLOUT.md §3): random stages over a fleet on revision 1, with
// sorting labels, concurrency, groups, failure budgets, timed waits, maintenance windows and a
// cluster that never becomes Ready; rollout.SimulateRun and the hub's run of revision 2 start,
// complete and fail the same clusters at the same moments, and end alike.
func TestR3_8_R3_13_ThePlanAndTheHubRunStagesAlikeForRandomFleets(t *testing.T) {
	seed := fidelitySeed(t)
	const fleets = 5
	for i := range fleets {
		fleetSeed := seed + uint64(i)
		t.Run(fmt.Sprintf("seed-%d", fleetSeed), func(t *testing.T) {
			compareRunWithPlan(t, randomStagedFleet(rand.New(rand.NewPCG(fleetSeed, 1))))
		})
	}
}

// fidelitySeed is the seed of a randomized comparison: FLOTILLA_FIDELITY_SEED, or the clock.
func fidelitySeed(t *testing.T) uint64 {
	t.Helper()
	s := os.Getenv("FLOTILLA_FIDELITY_SEED")
	if s == "" {
		return uint64(time.Now().UnixNano())
	}
	seed, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("FLOTILLA_FIDELITY_SEED=%q: %v", s, err)
	}
	return seed
}

// stagedCase is a fleet and a staged strategy.
type stagedCase struct {
	clusters []rollout.SimCluster
	strategy rollout.StagedStrategy
}

// randomStagedFleet draws 1 to 3 stages (one ring each) over 3 to 8 clusters in two zones, half
// of them with a sorting label, some with a daily one-hour window opening between 09:00 (the
// simulation's start: open) and 12:00, and sometimes one on which the revision never becomes
// Ready.
func randomStagedFleet(r *rand.Rand) stagedCase {
	var c stagedCase
	stages := 1 + r.IntN(3)
	n := 3 + r.IntN(6)
	failing := -1
	if r.IntN(3) == 0 {
		failing = r.IntN(n)
	}
	for i := range n {
		cl := rollout.SimCluster{Name: fmt.Sprintf("c%02d", i), Fail: i == failing,
			Labels: map[string]string{"ring": fmt.Sprintf("s%d", min(i, r.IntN(stages))), "zone": []string{"eu", "us"}[r.IntN(2)]}}
		if r.IntN(2) == 0 {
			cl.Labels["order"] = strconv.Itoa(r.IntN(5))
		}
		if r.IntN(4) == 0 {
			cl.Window = &rollout.Window{Schedule: fmt.Sprintf("0 %d * * *", 9+r.IntN(4)), Duration: rollout.Duration(time.Hour)}
		}
		if err := cl.Availability.Compile(); err != nil {
			panic(err)
		}
		c.clusters = append(c.clusters, cl)
	}
	for s := range stages {
		st := rollout.Stage{Name: fmt.Sprintf("s%d", s), Selector: fmt.Sprintf("ring=s%d", s)}
		if r.IntN(2) == 0 {
			st.SortingLabelKey = "order"
		}
		switch r.IntN(3) {
		case 0:
			st.MaxConcurrency = rollout.Int(1 + r.IntN(3))
		case 1:
			st.MaxConcurrency = rollout.Percent(25 * (1 + r.IntN(4)))
		}
		if r.IntN(2) == 0 {
			st.MaxAllowedFailures = rollout.Int(r.IntN(2))
		}
		if r.IntN(3) == 0 {
			st.AfterStageTasks = []rollout.Task{{Type: rollout.TaskTimedWait, WaitTime: ptrTo(rollout.Duration(5 * time.Minute))}}
		}
		if r.IntN(3) == 0 {
			for _, zone := range []string{"eu", "us"} {
				st.Groups = append(st.Groups, rollout.StageGroup{Name: zone, Selector: "zone=" + zone, MaxConcurrency: rollout.Int(1 + r.IntN(2))})
			}
		}
		c.strategy.Stages = append(c.strategy.Stages, st)
	}
	return c
}

// compareRunWithPlan deploys revision 1 everywhere at once, then plays the run of revision 2
// through rollout.SimulateRun and through the hub, moment by moment, as compareWithPlan does.
func compareRunWithPlan(t *testing.T, c stagedCase) {
	const readyAfter = 30 * time.Second
	const run = "shop-web-r2"
	plan := rollout.SimulateRun(rollout.RunSimulation{Name: run, Strategy: c.strategy, Clusters: c.clusters, ReadyAfter: readyAfter, ApproveAfter: -1})
	labels := map[string]map[string]string{}
	specs := map[string]v1alpha1.ClusterSpec{}
	failing := map[string]bool{}
	windows := map[string]string{}
	for _, cl := range c.clusters {
		labels[cl.Name], failing[cl.Name] = cl.Labels, cl.Fail
		if w := cl.Window; w != nil {
			windows[cl.Name] = w.Schedule
			specs[cl.Name] = v1alpha1.ClusterSpec{MaintenanceWindow: &v1alpha1.CronWindow{Schedule: w.Schedule, Duration: metav1.Duration{Duration: time.Duration(w.Duration)}}}
		}
	}
	data, err := json.Marshal(c.strategy)
	if err != nil {
		t.Fatal(err)
	}
	var spec v1alpha1.StagedUpdateStrategySpec
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatalf("the API cannot read the planner's strategy: %v\n%s", err, data)
	}
	t.Logf("strategy %s\nclusters %v, windows %v, failing %v\nplan: %d moments, state %s, completed %v, stuck %q",
		data, labels, windows, failing, len(plan.Steps), plan.Final.State, plan.Completed, plan.Stuck)

	clock := &simClock{at: rollout.SimStart}
	f := newSimFleetOf(t, Options{Clock: clock.now}, "defaultNamespace: web\n", labels, specs)
	f.until("revision 1 is released everywhere", func() bool { return len(f.released(1)) == len(c.clusters) })
	f.reportApplied(true, rollout.SimStart.Add(-time.Hour), slices.Collect(maps.Keys(labels))...)
	if err := f.c.Create(context.Background(), &v1alpha1.StagedUpdateStrategy{ObjectMeta: metav1.ObjectMeta{Name: "random", Namespace: f.ns}, Spec: spec}); err != nil {
		t.Fatal(err)
	}
	f.commit("2", "defaultNamespace: web\nstagedUpdate: {strategy: random, autoRun: true}\n")
	f.until("the run of revision 2 starts", func() bool { return f.run(run).Status.State != "" })

	startedAt := map[string]time.Duration{}
	reported := map[string]bool{}
	var started, completed, failed []string
	var now time.Duration
	for i, m := range plan.Steps {
		if m.At > now {
			clock.advance(m.At - now)
			now = m.At
		}
		for name, at := range startedAt {
			switch {
			case reported[name]:
			case failing[name]:
				f.reportApplied(false, rollout.SimStart.Add(at), name)
				reported[name] = true
			case at+readyAfter <= now:
				f.reportApplied(true, rollout.SimStart.Add(at+readyAfter), name)
				reported[name] = true
			}
		}
		if i > 0 {
			f.pokeRun(run)
		}
		started, completed, failed = sortedUnion(started, m.Started), sortedUnion(completed, m.Completed), sortedUnion(failed, m.Failed)
		f.until(fmt.Sprintf("moment %d at %s: the run started %v, completed %v, failed %v, as the plan (%q)", i, m.At, started, completed, failed, m.Gate), func() bool {
			return slices.Equal(f.released(2), started) && slices.Equal(f.runClustersIn(run, v1alpha1.RunCompleted), completed) &&
				slices.Equal(f.runClustersIn(run, v1alpha1.RunFailed), failed)
		})
		for _, name := range m.Started {
			startedAt[name] = m.At
		}
	}
	if plan.Final.State.Terminal() {
		clock.advance(plan.Duration - now) // to the plan's end: a last timed wait ends there
		f.pokeRun(run)
		f.until(fmt.Sprintf("the run ends %s, as the plan does", plan.Final.State), func() bool {
			return string(f.run(run).Status.State) == string(plan.Final.State)
		})
	}
}

// runClustersIn lists, sorted, the clusters of a run in a state.
func (f *simFleet) runClustersIn(run string, state v1alpha1.RunState) []string {
	var out []string
	for _, st := range f.run(run).Status.Stages {
		for _, g := range st.Groups {
			for _, c := range g.Clusters {
				if c.State == state {
					out = append(out, c.Name)
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

func sortedUnion(a, b []string) []string {
	out := slices.Concat(a, b)
	slices.Sort(out)
	return slices.Compact(out)
}

// The same for sequences (ROLLOUT.md §4): a random chain of two or three groups with soaks,
// over clusters with windows and sometimes one that never becomes Ready (its group soaks
// anyway after 30 days, R4.5); rollout.SimulateSequence and the hub release the same clusters
// and complete the same groups at the same moments.
func TestR4_1_R4_5_ThePlanAndTheHubRunSequencesAlikeForRandomFleets(t *testing.T) {
	seed := fidelitySeed(t)
	const fleets = 4
	for i := range fleets {
		fleetSeed := seed + uint64(i)
		t.Run(fmt.Sprintf("seed-%d", fleetSeed), func(t *testing.T) {
			compareSequenceWithPlan(t, randomSequenceFleet(rand.New(rand.NewPCG(fleetSeed, 2))))
		})
	}
}

// sequenceCase is a fleet and a sequence.
type sequenceCase struct {
	clusters []rollout.SimCluster
	sequence rollout.Sequence
}

func randomSequenceFleet(r *rand.Rand) sequenceCase {
	var c sequenceCase
	tiers := []string{"dev", "stage", "prod"}[:2+r.IntN(2)]
	for i, tier := range tiers {
		g := rollout.SequenceGroup{Name: tier, Selector: "tier=" + tier, Soak: ptrTo(rollout.Duration(time.Duration(r.IntN(3)) * time.Hour))}
		if i > 0 {
			g.Upstream = tiers[i-1]
		}
		c.sequence.Groups = append(c.sequence.Groups, g)
	}
	n := 2 + r.IntN(6)
	failing := -1
	if r.IntN(4) == 0 {
		failing = r.IntN(n)
	}
	for i := range n {
		cl := rollout.SimCluster{Name: fmt.Sprintf("c%02d", i), Labels: map[string]string{"tier": tiers[min(i, r.IntN(len(tiers)))]}, Fail: i == failing}
		if r.IntN(4) == 0 {
			cl.Window = &rollout.Window{Schedule: fmt.Sprintf("0 %d * * *", 9+r.IntN(12)), Duration: rollout.Duration(time.Hour)}
		}
		if err := cl.Availability.Compile(); err != nil {
			panic(err)
		}
		c.clusters = append(c.clusters, cl)
	}
	return c
}

// compareSequenceWithPlan deploys revision 1 everywhere at once, then plays revision 2 through
// the sequence in rollout.SimulateSequence and in the hub, moment by moment.
func compareSequenceWithPlan(t *testing.T, c sequenceCase) {
	const readyAfter = 30 * time.Second
	// The hub's sequence sees revision 1 too: the plan does as well.
	plan := rollout.SimulateSequence(rollout.SequenceSimulation{Sequence: c.sequence, Clusters: c.clusters, ReadyAfter: readyAfter,
		Revisions: []rollout.SimRevision{{Index: 1}, {Index: 2}}})
	if plan.Err != nil {
		t.Fatal(plan.Err)
	}
	labels := map[string]map[string]string{}
	specs := map[string]v1alpha1.ClusterSpec{}
	failing := map[string]bool{}
	windows := map[string]string{}
	for _, cl := range c.clusters {
		labels[cl.Name], failing[cl.Name] = cl.Labels, cl.Fail
		if w := cl.Window; w != nil {
			windows[cl.Name] = w.Schedule
			specs[cl.Name] = v1alpha1.ClusterSpec{MaintenanceWindow: &v1alpha1.CronWindow{Schedule: w.Schedule, Duration: metav1.Duration{Duration: time.Duration(w.Duration)}}}
		}
	}
	data, err := json.Marshal(c.sequence)
	if err != nil {
		t.Fatal(err)
	}
	var spec v1alpha1.RolloutSequenceSpec
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatalf("the API cannot read the planner's sequence: %v\n%s", err, data)
	}
	t.Logf("sequence %s\nclusters %v, windows %v, failing %v\nplan: %d moments, completed %v, stuck %q", data, labels, windows, failing, len(plan.Steps), plan.Completed, plan.Stuck)

	clock := &simClock{at: rollout.SimStart}
	f := newSimFleetOf(t, Options{Clock: clock.now}, "defaultNamespace: web\n", labels, specs)
	f.until("revision 1 is released everywhere", func() bool { return len(f.released(1)) == len(c.clusters) })
	f.reportApplied(true, rollout.SimStart.Add(-time.Hour), slices.Collect(maps.Keys(labels))...)
	f.createSequence("random", spec)
	f.commit("2", "defaultNamespace: web\nsequence: {name: random}\n")
	f.until("the sequence sees revision 2", func() bool { return f.groupState(c.sequence.Groups[0].Name, 2).State != "" })

	startedAt := map[string]time.Duration{}
	reported := map[string]bool{}
	readyOn2 := 0
	var started, complete []string
	var now time.Duration
	report := func() { // what the simulated agents report by now
		for name, at := range startedAt {
			switch {
			case reported[name]:
			case failing[name]:
				f.reportApplied(false, rollout.SimStart.Add(at), name)
				reported[name] = true
			case at+readyAfter <= now:
				f.reportApplied(true, rollout.SimStart.Add(at+readyAfter), name)
				reported[name], readyOn2 = true, readyOn2+1
			}
		}
	}
	// The hub starts a soak when it sees the group Ready, at its own clock: it must have seen
	// every report before the clock moves on.
	hubCountsReady := func() {
		f.until(fmt.Sprintf("at %s the hub counts %d clusters Ready on revision 2", now, readyOn2), func() bool {
			return int(f.getBundle().Status.Summary.Ready) == readyOn2
		})
	}
	for i := 0; i < len(plan.Steps); {
		m := plan.Steps[i]
		// A report between two moments starts a soak at its own time: the hub must see it
		// then, before the clock moves on, though the plan records no moment for it.
		nextReady := m.At
		for name, at := range startedAt {
			if !reported[name] && !failing[name] && at+readyAfter < nextReady {
				nextReady = at + readyAfter
			}
		}
		if nextReady < m.At {
			clock.advance(nextReady - now)
			now = nextReady
			report()
			hubCountsReady()
			continue
		}
		if m.At > now {
			clock.advance(m.At - now)
			now = m.At
		}
		report()
		hubCountsReady() // a report at a moment starts its soak at that moment too
		if i > 0 {
			f.poke()
		}
		var newly []string
		for _, s := range m.Started {
			name, rev, _ := strings.Cut(s, "@")
			if rev != "2" {
				t.Fatalf("the plan released %s: only revision 2 is new", s)
			}
			newly = append(newly, name)
		}
		started, complete = sortedUnion(started, newly), sortedUnion(complete, m.Complete)
		f.until(fmt.Sprintf("moment %d at %s: revision 2 released to %v, groups complete %v, as the plan (%q)", i, m.At, started, complete, m.Gate), func() bool {
			if !slices.Equal(f.released(2), started) {
				return false
			}
			for _, gr := range complete {
				g, rev, _ := strings.Cut(gr, "@")
				r, _ := strconv.ParseInt(rev, 10, 64)
				if f.groupState(g, r).State != v1alpha1.SequenceComplete {
					return false
				}
			}
			return true
		})
		for _, name := range newly {
			startedAt[name] = m.At
		}
		i++
	}
}
