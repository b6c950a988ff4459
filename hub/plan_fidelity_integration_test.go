package hub

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/rollout"
)

// The plan and the hub tell one story (ROLLOUT.md §1): for random fleets and continuous
// strategies, `flotilla plan`'s simulation (rollout.Simulate) and the real hub, its agents
// played by the test on a simulated clock, make the same decisions moment by moment: the same
// clusters released, in the same batches, with the same reason to wait, and the same end.
//
// Each fleet comes from a seed that the test logs; FLOTILLA_FIDELITY_SEED replays one.
func TestR1_10_ThePlanAndTheHubDecideAlikeForRandomFleets(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("FLOTILLA_FIDELITY_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("FLOTILLA_FIDELITY_SEED=%q: %v", s, err)
		}
	}
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
