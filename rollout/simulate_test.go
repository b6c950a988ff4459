package rollout

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// The randomized tests run thousands of simulated rollouts over random fleets, strategies and
// readiness patterns, and check every planning pass against invariants computed independently
// of the planner.

var rings = []string{"canary", "early", "main", "late"}

func randomFleet(rng *rand.Rand, n int, faults bool) ([]SimCluster, []ClusterGroup) {
	cs := make([]SimCluster, n)
	for i := range cs {
		cs[i] = SimCluster{
			Name:       fmt.Sprintf("c-%03d", i),
			Labels:     map[string]string{"ring": rings[rng.IntN(len(rings))], "index": fmt.Sprint(i)},
			Groups:     []string{fmt.Sprintf("g%d", rng.IntN(3))},
			ReadyAfter: time.Duration(1+rng.IntN(120)) * time.Second,
		}
		if faults {
			cs[i].Fail = rng.IntN(25) == 0
			if rng.IntN(30) == 0 {
				cs[i].Offline, cs[i].OfflineAt = true, time.Duration(rng.IntN(300))*time.Second
				if rng.IntN(2) == 0 {
					cs[i].BackAt = cs[i].OfflineAt + time.Duration(1+rng.IntN(3600))*time.Second
				}
			}
		}
	}
	groups := []ClusterGroup{{Name: "g0", Labels: map[string]string{"tier": "a"}}, {Name: "g1", Labels: map[string]string{"tier": "b"}}, {Name: "g2", Labels: map[string]string{"tier": "b"}}}
	return cs, groups
}

func randomIntOrPercent(rng *rand.Rand, maxInt int) IntOrPercent {
	switch rng.IntN(3) {
	case 0:
		return IntOrPercent{}
	case 1:
		return Int(rng.IntN(maxInt + 1))
	}
	return Percent(rng.IntN(101))
}

func randomStrategy(rng *rand.Rand) Strategy {
	s := Strategy{
		MaxUnavailable:           randomIntOrPercent(rng, 20),
		MaxUnavailablePartitions: randomIntOrPercent(rng, 3),
		MaxNew:                   ptr(1 + rng.IntN(60)),
	}
	if rng.IntN(2) == 0 {
		s.AutoPartitionThreshold = ptr([]int{0, 5, 20, 200}[rng.IntN(4)])
		s.AutoPartitionSize = Percent(1 + rng.IntN(100))
	}
	if rng.IntN(2) == 0 {
		for i := range 1 + rng.IntN(4) {
			p := Partition{Name: fmt.Sprintf("p%d", i), MaxUnavailable: randomIntOrPercent(rng, 5)}
			switch rng.IntN(3) {
			case 0:
				p.ClusterSelector = &Selector{MatchLabels: map[string]string{"ring": rings[rng.IntN(len(rings))]}}
			case 1:
				p.ClusterGroup = fmt.Sprintf("g%d", rng.IntN(3))
			default:
				p.ClusterGroupSelector = &Selector{MatchLabels: map[string]string{"tier": []string{"a", "b"}[rng.IntN(2)]}}
			}
			s.Partitions = append(s.Partitions, p)
		}
	}
	return s
}

func isUnavailable(t *Target, rev int64) bool {
	if t.Offline {
		return true
	}
	d := t.Deployment
	return d != nil && d.Released == rev && !(d.Applied == rev && d.Ready && !d.ApplyFailed)
}

// checkContinuousPass checks one §1 pass.
func checkContinuousPass(t *testing.T, in *Input, d *Decision) {
	t.Helper()
	s := in.Strategy
	byName := map[string]*Target{}
	for i := range in.Targets {
		byName[in.Targets[i].Cluster] = &in.Targets[i]
	}
	released := map[string]bool{}
	for _, name := range d.Release {
		released[name] = true
	}
	for _, name := range d.Unpartitioned {
		if released[name] {
			t.Fatalf("R1.3: unpartitioned cluster %s released", name)
		}
	}
	if in.Paused && len(d.Release) > 0 {
		t.Fatalf("R1.13: paused bundle released %v", d.Release)
	}
	maxNew := DefaultMaxNew
	if s.MaxNew != nil {
		maxNew = *s.MaxNew
	}
	n := len(in.Targets)
	globalMax := s.MaxUnavailable.Or(DefaultMaxUnavailable).ScaleDown(n)
	maxParts := s.MaxUnavailablePartitions.Or(DefaultMaxUnavailablePartitions).ScaleDown(len(d.Partitions))
	global := 0
	for i := range in.Targets {
		if isUnavailable(&in.Targets[i], in.Revision) {
			global++
		}
	}
	notReadyBefore := 0
	for k, p := range d.Partitions {
		spec := s.MaxUnavailable.Or(DefaultMaxUnavailable)
		if len(s.Partitions) > 0 && s.Partitions[k].MaxUnavailable.IsSet() {
			spec = s.Partitions[k].MaxUnavailable
		}
		threshold := spec.ScaleDown(len(p.Clusters))
		pre, newly, inBatch, pending := 0, 0, 0, 0
		for _, name := range p.Clusters {
			tg := byName[name]
			if isUnavailable(tg, in.Revision) {
				pre++
			} else if released[name] {
				newly++
			}
			if released[name] {
				inBatch++
			} else if !tg.Paused && (tg.Deployment == nil || tg.Deployment.Released != in.Revision) {
				pending++
			}
		}
		if inBatch > maxNew {
			t.Fatalf("R1.8: partition %s released %d in one pass, maxNew %d", p.Name, inBatch, maxNew)
		}
		if inBatch > 0 {
			if pre > threshold {
				t.Fatalf("R1.6: partition %s released into while %d unavailable > %d", p.Name, pre, threshold)
			}
			if global > globalMax {
				t.Fatalf("R1.9: partition %s released into while %d unavailable > global %d", p.Name, global, globalMax)
			}
			if notReadyBefore > maxParts {
				t.Fatalf("R1.7: partition %s entered with %d NotReady partitions before it > %d", p.Name, notReadyBefore, maxParts)
			}
		}
		if pending > 0 && k+1 < len(d.Partitions) {
			for _, later := range d.Partitions[k+1:] {
				for _, name := range later.Clusters {
					if released[name] {
						t.Fatalf("R1.7: partition %s released before %s was fully released", later.Name, p.Name)
					}
				}
			}
		}
		global += newly
		if pre+newly > threshold {
			notReadyBefore++
		}
		if got := p.Unavailable; got != pre+newly {
			t.Fatalf("partition %s reports %d unavailable, independent count %d", p.Name, got, pre+newly)
		}
	}
}

func TestRandomizedContinuousRollouts(t *testing.T) {
	rng := rand.New(rand.NewPCG(42, 7))
	sims := simulations(2000)
	completed := 0
	for i := range sims {
		faults := i%3 == 0
		clusters, groups := randomFleet(rng, 1+rng.IntN(90), faults)
		s := randomStrategy(rng)
		if err := Validate(&s, nil); err != nil {
			continue
		}
		sim := Simulation{Clusters: clusters, Groups: groups, Strategy: s, FirstDeployment: rng.IntN(2) == 0}
		var last *Decision
		sim.Observe = func(in *Input, d *Decision) {
			checkContinuousPass(t, in, d)
			last = d
		}
		tl := Simulate(sim)
		if t.Failed() {
			t.Fatalf("simulation %d failed: strategy %+v", i, s)
		}
		if !faults {
			if !tl.Completed {
				t.Fatalf("simulation %d: no faults but stuck (%s); strategy %+v", i, tl.Stuck, s)
			}
			// Everything partitioned was released and is Ready.
			for _, c := range last.Clusters {
				if c.Partition != "" && c.State != Ready {
					t.Fatalf("simulation %d: %s is %s at completion", i, c.Name, c.State)
				}
			}
			completed++
		}
	}
	if completed == 0 {
		t.Fatal("no simulation without faults ran")
	}
}

// checkRollingPass checks R2.4's bounds for one §2 pass.
func checkRollingPass(t *testing.T, in *Input, d *Decision) {
	t.Helper()
	p := in.Placement
	candidates := 0
	for _, tg := range in.Targets {
		if !tg.Excluded {
			candidates++
		}
	}
	n := candidates
	if placementType(p) == PickN {
		n = *p.NumberOfClusters // R2.2: even when fewer match
	}
	ru := *p.RollingUpdate
	maxU := ru.MaxUnavailable.Or(DefaultRollingMaxUnavailable).ScaleUp(n)
	maxS := ru.MaxSurge.Or(DefaultRollingMaxSurge).ScaleUp(n)
	period := time.Duration(*ru.UnavailablePeriodSeconds) * time.Second
	changed := map[string]bool{}
	for _, name := range append(append([]string{}, d.Release...), d.Remove...) {
		changed[name] = true
	}
	available, carrying, takenDown, added := 0, 0, 0, 0
	for _, tg := range in.Targets {
		dep := tg.Deployment
		carries := dep != nil && dep.Released != 0
		if !carries {
			if changed[tg.Cluster] {
				added++
			}
			continue
		}
		carrying++
		if !tg.Offline && dep.Applied == dep.Released && dep.Ready && !dep.ApplyFailed && !dep.AppliedAt.Add(period).After(in.Now) {
			available++
			if changed[tg.Cluster] {
				takenDown++
			}
		}
	}
	if takenDown > 0 && available-takenDown < n-maxU {
		t.Fatalf("R2.4: %d of %d available, %d taken down, below N−maxUnavailable = %d", available, n, takenDown, n-maxU)
	}
	if after := carrying - len(d.Remove) + added; added > 0 && after > n+maxS {
		t.Fatalf("R2.4: %d clusters carry the workload after adding %d, above N+maxSurge = %d", after, added, n+maxS)
	}
}

// remaining counts the clusters the selection keeps to the end.
func remaining(clusters []SimCluster) int {
	n := 0
	for _, c := range clusters {
		if !c.Excluded {
			n++
		}
	}
	return n
}

func TestRandomizedRollingUpdates(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 3))
	sims := simulations(1000)
	for i := range sims {
		faults := i%3 == 0
		clusters, _ := randomFleet(rng, 1+rng.IntN(60), faults)
		// Some clusters leave the selection mid-rollout.
		for j := range clusters {
			if rng.IntN(8) == 0 {
				clusters[j].Excluded, clusters[j].ExcludedAt = true, time.Duration(rng.IntN(200))*time.Second
			}
		}
		p := &Placement{RollingUpdate: &RollingUpdate{
			MaxUnavailable:           []IntOrPercent{Int(1 + rng.IntN(5)), Percent(1 + rng.IntN(100))}[rng.IntN(2)],
			MaxSurge:                 []IntOrPercent{Int(1 + rng.IntN(5)), Percent(1 + rng.IntN(100))}[rng.IntN(2)],
			UnavailablePeriodSeconds: ptr(rng.IntN(90)),
		}}
		if rng.IntN(3) == 0 {
			p.Type, p.NumberOfClusters = PickN, ptr(rng.IntN(len(clusters)+1))
		}
		sim := Simulation{Clusters: clusters, Placement: p, FirstDeployment: rng.IntN(2) == 0, Observe: func(in *Input, d *Decision) { checkRollingPass(t, in, d) }}
		tl := Simulate(sim)
		if t.Failed() {
			t.Fatalf("simulation %d failed: placement %+v %+v", i, p, *p.RollingUpdate)
		}
		// PickN keeps N when fewer clusters match (R2.2): then N − maxUnavailable may be out
		// of reach, and the rollout rightly waits for more clusters.
		shortfall := p.Type == PickN && *p.NumberOfClusters > remaining(clusters)
		if !faults && !tl.Completed && !(shortfall && strings.Contains(tl.Stuck, "R2.4")) {
			t.Fatalf("simulation %d: no faults but stuck (%s)", i, tl.Stuck)
		}
	}
}
