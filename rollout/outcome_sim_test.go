package rollout

import (
	"math/rand/v2"
	"testing"
	"time"
)

// The randomized §5 tests run random fleets whose clusters fail in every way (never Ready, an
// apply failing, Ready and then not) under random failure policies, and check the invariants
// of R5.4 and R5.5 at every pass, independently of the planner.

func randomPolicy(rng *rand.Rand) FailurePolicy {
	p := FailurePolicy{
		OnRegression: []RegressionAction{"", RegressionFail, RegressionRestart, RegressionIgnore}[rng.IntN(4)],
		OnFailure:    []FailureAction{"", FailurePause, FailureRollback, FailureRollback}[rng.IntN(4)],
	}
	if rng.IntN(2) == 0 {
		p.FailureTimeout = dur(time.Duration(1+rng.IntN(20)) * time.Minute)
	}
	if rng.IntN(3) == 0 {
		p.HealthWindow = dur(time.Duration(rng.IntN(120)) * time.Minute)
	}
	return p
}

// addFailures makes some clusters fail the new revision.
func addFailures(rng *rand.Rand, cs []SimCluster) {
	for i := range cs {
		switch rng.IntN(12) {
		case 0:
			cs[i].Fail = true
		case 1:
			cs[i].FailAfter = time.Duration(1+rng.IntN(600)) * time.Second
		case 2, 3:
			cs[i].RegressAfter = time.Duration(1+rng.IntN(3600)) * time.Second
		}
	}
}

// restoreChecker checks R5.4 and R5.5 for the passes of one simulation.
type restoreChecker struct {
	t           *testing.T
	quarantined map[int64]bool
}

// check sees one pass: what each cluster ran before it (released revision and last good
// one), the releases (cluster → revision), the restores, and a failure it found.
func (c *restoreChecker) check(before map[string]*Deployment, release map[string]int64, restores []Restore, failure *Failure) {
	c.t.Helper()
	if failure != nil && failure.Action == FailureRollback {
		c.quarantined[failure.Revision] = true
	}
	for name, r := range release {
		if c.quarantined[r] {
			c.t.Fatalf("R5.5: quarantined revision %d released to %s", r, name)
		}
	}
	for _, r := range restores {
		d := before[r.Cluster]
		if d == nil || !c.quarantined[d.Released] {
			c.t.Fatalf("R5.4: %s restored but it did not run a failed revision (%+v)", r.Cluster, d)
		}
		// Its last good revision, or none (removal) when that is the failing one itself.
		if want := d.LastGood; r.To != want && !((want >= d.Released || c.quarantined[want]) && r.To == 0) {
			c.t.Fatalf("R5.4: %s restored to %d, its last good revision is %d", r.Cluster, r.To, d.LastGood)
		}
		if c.quarantined[r.To] {
			c.t.Fatalf("R5.5: %s restored to the quarantined revision %d", r.Cluster, r.To)
		}
		if _, released := release[r.Cluster]; released {
			c.t.Fatalf("%s both released and restored in one pass", r.Cluster)
		}
	}
}

func snapshot[T any](items []T, name func(*T) string, dep func(*T) *Deployment) map[string]*Deployment {
	out := make(map[string]*Deployment, len(items))
	for i := range items {
		if d := dep(&items[i]); d != nil {
			copied := *d
			out[name(&items[i])] = &copied
		}
	}
	return out
}

func TestR5_RandomizedContinuousRolloutsRollBackOnlyWhatFailed(t *testing.T) {
	rng := rand.New(rand.NewPCG(51, 4))
	sims := simulations(600)
	outcomes := map[Outcome]int{}
	for i := range sims {
		clusters, groups := randomFleet(rng, 1+rng.IntN(60), false)
		addFailures(rng, clusters)
		s := randomStrategy(rng)
		s.FailurePolicy = randomPolicy(rng)
		if err := Validate(&s, nil); err != nil {
			continue
		}
		check := &restoreChecker{t: t, quarantined: map[int64]bool{}}
		sim := Simulation{Clusters: clusters, Groups: groups, Strategy: s, FirstDeployment: rng.IntN(4) == 0}
		sim.Observe = func(in *Input, d *Decision) {
			before := snapshot(in.Targets, func(t *Target) string { return t.Cluster }, func(t *Target) *Deployment { return t.Deployment })
			release := map[string]int64{}
			for _, name := range d.Release {
				release[name] = in.Revision
			}
			for _, q := range in.Quarantine {
				check.quarantined[q.Revision] = true
			}
			check.check(before, release, d.Restore, d.Failure)
		}
		tl := Simulate(sim)
		if t.Failed() {
			t.Fatalf("simulation %d: strategy %+v", i, s)
		}
		outcomes[tl.Outcome]++
		if tl.Outcome == OutcomeRolledBack && s.action() != FailureRollback {
			t.Fatalf("simulation %d rolled back under onFailure %q", i, s.OnFailure)
		}
	}
	requireOutcomes(t, outcomes, OutcomeRolledBack, OutcomeFailed, OutcomeCompleted)
}

func TestR5_RandomizedStagedRunsRollBackOnlyWhatFailed(t *testing.T) {
	rng := rand.New(rand.NewPCG(52, 9))
	sims := simulations(400)
	outcomes := map[Outcome]int{}
	for i := range sims {
		strategy := randomStagedStrategy(rng, 1+rng.IntN(4))
		strategy.FailurePolicy = randomPolicy(rng)
		strategy.FailureTimeout = nil
		clusters := randomRunFleet(rng, 1+rng.IntN(30), strategy)
		for j := range clusters {
			clusters[j].Fail = false
		}
		addFailures(rng, clusters)
		check := &restoreChecker{t: t, quarantined: map[int64]bool{}}
		tl := SimulateRun(RunSimulation{Strategy: strategy, Clusters: clusters, ApproveAfter: time.Duration(rng.IntN(60)) * time.Minute,
			Observe: check.observeRun})
		if t.Failed() {
			t.Fatalf("simulation %d: strategy %+v", i, strategy)
		}
		outcomes[tl.Outcome]++
	}
	requireOutcomes(t, outcomes, OutcomeRolledBack, OutcomeFailed, OutcomeCompleted)
}

// Besides R5.4 and R5.5, sequences keep R5.2's promise: under Fail, no group receives a
// revision from an upstream whose soak of it saw a member regress.
func TestR5_RandomizedSequencesNeverPassARegressedSoak(t *testing.T) {
	rng := rand.New(rand.NewPCG(53, 2))
	tiers := []string{"dev", "staging", "prod", "edge"}
	outcomes := map[Outcome]int{}
	taints := 0
	for i := range 400 {
		n := 2 + rng.IntN(3)
		var groups []SequenceGroup
		for g := range n {
			up := ""
			if g > 0 {
				up = tiers[g-1]
			}
			groups = append(groups, seqGroup(tiers[g], up, time.Duration(1+rng.IntN(6))*time.Hour))
		}
		seq := Sequence{Groups: groups, FailurePolicy: randomPolicy(rng)}
		spec := map[string]int{}
		for _, tier := range tiers[:n] {
			spec[tier] = 1 + rng.IntN(3)
		}
		clusters := tierClusters(spec)
		for j := range clusters {
			clusters[j].ReadyAfter = time.Duration(1+rng.IntN(600)) * time.Second
		}
		addFailures(rng, clusters)
		groupOf := map[string]int{}
		for j := range clusters {
			for k := range n {
				if groups[k].ClusterSelector.Matches(clusters[j].Labels) {
					groupOf[clusters[j].Name] = k
				}
			}
		}
		// tainted[k][r]: the start of group k's soak of revision r during which a member regressed.
		tainted := make([]map[int64]time.Time, n)
		for k := range tainted {
			tainted[k] = map[int64]time.Time{}
		}
		check := &restoreChecker{t: t, quarantined: map[int64]bool{}}
		tl := SimulateSequence(SequenceSimulation{Sequence: seq, Clusters: clusters, Revisions: []SimRevision{{Index: 2}, {Index: 3, At: time.Duration(rng.IntN(48)) * time.Hour}},
			Observe: func(prev SequenceStatus, fleet []SequenceCluster, res SequenceResult, now time.Time) {
				before := snapshot(fleet, func(c *SequenceCluster) string { return c.Name }, func(c *SequenceCluster) *Deployment { return c.Deployment })
				var failure *Failure
				for j := range res.Failures {
					failure = &res.Failures[j]
					check.check(nil, nil, nil, failure)
				}
				check.check(before, res.Release, res.Restore, nil)
				for _, c := range fleet {
					d := c.Deployment
					if d == nil || !d.WasReady || d.Ready || len(prev.Groups) == 0 {
						continue
					}
					k := groupOf[c.Name]
					for _, rs := range prev.Groups[k].Revisions {
						if rs.Index == d.Released && rs.State == SeqSoaking && !d.NotReadyAt.Before(rs.FinishedAt) {
							tainted[k][rs.Index] = rs.FinishedAt
							taints++
						}
					}
				}
				if seq.regression() != RegressionFail {
					return
				}
				for name, r := range res.Release {
					k := groupOf[name]
					if k == 0 {
						continue
					}
					for _, rs := range res.Status.Groups[k-1].Revisions {
						if at, ok := tainted[k-1][r]; ok && rs.Index == r && rs.FinishedAt.Equal(at) {
							t.Fatalf("R5.2: %s (group %s) released revision %d from a soak that saw a regression (since %s)", name, tiers[k], r, at)
						}
					}
				}
			}})
		if tl.Err != nil {
			t.Fatal(tl.Err)
		}
		if t.Failed() {
			t.Fatalf("simulation %d: policy %+v", i, seq.FailurePolicy)
		}
		outcomes[tl.Outcome]++
	}
	requireOutcomes(t, outcomes, OutcomeRolledBack, OutcomeCompleted)
	if taints == 0 {
		t.Fatal("no soak saw a regression: the R5.2 invariant was never exercised")
	}
	t.Logf("outcomes %v, soaks that saw a regression %d", outcomes, taints)
}

// observeRun checks one Step of a staged run simulation.
func (c *restoreChecker) observeRun(run *Run, fleet []RunCluster, res StepResult, _ time.Time) {
	before := snapshot(fleet, func(c *RunCluster) string { return c.Name }, func(c *RunCluster) *Deployment { return c.Deployment })
	release := map[string]int64{}
	for _, name := range res.Release {
		release[name] = run.Revision
	}
	if run.Status.Failure != nil && run.Status.Failure.Action == FailureRollback {
		c.quarantined[run.Revision] = true
	}
	c.check(before, release, res.Restore, res.Failure)
}
