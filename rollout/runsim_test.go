package rollout

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

func randomStagedStrategy(rng *rand.Rand, stages int) StagedStrategy {
	s := StagedStrategy{ClusterTimeout: dur(time.Duration(5+rng.IntN(20)) * time.Minute)}
	for i := range stages {
		st := Stage{Name: fmt.Sprintf("s%d", i), LabelSelector: sel(fmt.Sprintf("stage=s%d", i)), SortingLabelKey: "order",
			MaxConcurrency: []IntOrPercent{{}, Int(1 + rng.IntN(4)), Percent(1 + rng.IntN(100))}[rng.IntN(3)]}
		if rng.IntN(2) == 0 {
			st.MaxAllowedFailures = []IntOrPercent{Int(rng.IntN(3)), Percent(rng.IntN(60))}[rng.IntN(2)]
		}
		if rng.IntN(3) == 0 {
			st.AfterStageTasks = append(st.AfterStageTasks, Task{Type: TaskTimedWait, WaitTime: dur(time.Duration(1+rng.IntN(90)) * time.Minute)})
		}
		if rng.IntN(3) == 0 {
			st.BeforeStageTasks = []Task{{Type: TaskApproval}}
		}
		if rng.IntN(2) == 0 {
			for g := range 1 + rng.IntN(3) {
				st.Groups = append(st.Groups, StageGroup{Name: fmt.Sprintf("g%d", g), LabelSelector: sel(fmt.Sprintf("grp=g%d", g)),
					MaxConcurrency: []IntOrPercent{{}, Int(1 + rng.IntN(3)), Percent(1 + rng.IntN(100))}[rng.IntN(3)]})
			}
		}
		s.Stages = append(s.Stages, st)
	}
	return s
}

func randomRunFleet(rng *rand.Rand, n int, s StagedStrategy) []SimCluster {
	cs := make([]SimCluster, n)
	for i := range cs {
		si := rng.IntN(len(s.Stages))
		labels := map[string]string{"stage": s.Stages[si].Name, "order": fmt.Sprint(rng.IntN(5))}
		if g := s.Stages[si].Groups; len(g) > 0 {
			labels["grp"] = g[rng.IntN(len(g))].Name
		}
		cs[i] = SimCluster{Name: fmt.Sprintf("c-%03d", i), Labels: labels, ReadyAfter: time.Duration(10+rng.IntN(600)) * time.Second, Fail: rng.IntN(20) == 0}
		if rng.IntN(4) == 0 {
			cs[i].Availability = Availability{Window: &Window{Schedule: fmt.Sprintf("%d %d * * *", rng.IntN(60), rng.IntN(24)), Duration: Duration(time.Duration(1+rng.IntN(6)) * time.Hour), TimeZone: []string{"UTC", "Europe/Paris", "America/New_York", "Asia/Tokyo"}[rng.IntN(4)]}}
		}
		if rng.IntN(10) == 0 {
			start := SimStart.Add(time.Duration(rng.IntN(48)) * time.Hour)
			cs[i].Exclusions = []TimeRange{{Start: start, End: start.Add(time.Duration(1+rng.IntN(72)) * time.Hour)}}
		}
		if err := cs[i].Availability.Compile(); err != nil {
			panic(err)
		}
	}
	return cs
}

// TestRandomizedStagedRuns checks, at every Step of thousands of random runs: the caps of R3.3
// and R3.5, the stage order of R3.8, and that no cluster starts outside its window (R3.13).
func TestRandomizedStagedRuns(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 11))
	sims := simulations(600)
	for i := range sims {
		strategy := randomStagedStrategy(rng, 1+rng.IntN(4))
		clusters := randomRunFleet(rng, 1+rng.IntN(40), strategy)
		avail := map[string]*Availability{}
		for j := range clusters {
			avail[clusters[j].Name] = &clusters[j].Availability
		}
		var prev map[string]RunState
		tl := SimulateRun(RunSimulation{Strategy: strategy, Clusters: clusters, ApproveAfter: time.Duration(rng.IntN(120)) * time.Minute,
			Observe: func(_ *Run, _ []RunCluster, res StepResult, now time.Time) {
				checkRunStep(t, strategy, res.Status, prev, avail, now)
				prev = clusterStates(res.Status)
			}})
		if t.Failed() {
			t.Fatalf("simulation %d: strategy %+v", i, strategy)
		}
		if tl.Final.State != RunCompleted && tl.Final.State != RunFailed {
			t.Fatalf("simulation %d ended %s: %s", i, tl.Final.State, tl.Stuck)
		}
	}
}

func checkRunStep(t *testing.T, strategy StagedStrategy, st RunStatus, prev map[string]RunState, avail map[string]*Availability, now time.Time) {
	t.Helper()
	activeSeen := false
	for si, stage := range st.Stages {
		spec := strategy.Stages[si]
		total, size := 0, 0
		for gi, g := range stage.Groups {
			running := countState(g.Clusters, RunRunning)
			total += running
			size += len(g.Clusters)
			if len(spec.Groups) > 0 {
				if limit := spec.Groups[gi].MaxConcurrency.Or(Int(1)).ScaleDown(len(g.Clusters)); running > limit {
					t.Fatalf("R3.5: group %s/%s has %d in flight, cap %d", stage.Name, g.Name, running, limit)
				}
			}
			for _, c := range g.Clusters {
				if c.State == RunRunning && prev[c.Name] != RunRunning && !avail[c.Name].OpenAt(now) {
					t.Fatalf("R3.13: %s started at %s outside its window", c.Name, now)
				}
			}
		}
		if len(spec.Groups) == 0 || spec.MaxConcurrency.IsSet() {
			if limit := spec.MaxConcurrency.Or(Int(1)).ScaleDown(size); total > limit {
				t.Fatalf("R3.3: stage %s has %d in flight, cap %d", stage.Name, total, limit)
			}
		}
		if total > 0 || stage.State == RunRunning || stage.State == RunPending {
			if activeSeen {
				t.Fatalf("R3.8: stage %s active while an earlier stage is not finished", stage.Name)
			}
		}
		if !stage.State.Terminal() {
			activeSeen = true
		}
	}
}

// BenchmarkStep5Stages2000Clusters is the target: one Step over a running run of 5
// stages × 2,000 clusters. Figures in doc.go.
func BenchmarkStep5Stages2000Clusters(b *testing.B) {
	var stages []Stage
	var fleet []RunCluster
	for s := range 5 {
		stages = append(stages, Stage{Name: fmt.Sprintf("s%d", s), LabelSelector: sel(fmt.Sprintf("stage=s%d", s)), MaxConcurrency: Percent(10), MaxAllowedFailures: Percent(5),
			Groups: []StageGroup{{Name: "a", LabelSelector: sel("grp=a"), MaxConcurrency: Percent(10)}, {Name: "b", LabelSelector: sel("grp=b"), MaxConcurrency: Percent(10)}}})
		for i := range 2000 {
			fleet = append(fleet, RunCluster{Name: fmt.Sprintf("s%d-c%04d", s, i), Labels: map[string]string{"stage": fmt.Sprintf("s%d", s), "grp": []string{"a", "b"}[i%2]},
				Deployment: &Deployment{Staged: 1, Released: 1, Applied: 1, Ready: true}})
		}
	}
	run := &Run{Name: "bench", Revision: 2, Action: ActionRun, Strategy: StagedStrategy{Stages: stages}}
	// Bring the run mid-way through its first stage.
	res := Step(run, fleet, nil, t0)
	run.Status = res.Status
	for i := range 1000 {
		fleet[i].Deployment = &Deployment{Staged: 2, Released: 2, Applied: 2, Ready: true}
	}
	res = Step(run, fleet, nil, t0.Add(time.Minute))
	run.Status = res.Status
	b.ReportAllocs()
	for b.Loop() {
		Step(run, fleet, nil, t0.Add(2*time.Minute))
	}
}

// R1.11 in the staged and sequence simulations: a cluster whose agent is offline is held as the
// hub holds it, never started, and the plan says the rollout cannot finish, instead of letting
// it time out or soak as if it were there.
func TestR1_11_StagedAndSequencePlansHoldAnOfflineCluster(t *testing.T) {
	strategy := StagedStrategy{Stages: []Stage{{Name: "canary", LabelSelector: sel("tier=canary")}, {Name: "prod", LabelSelector: sel("tier=prod"), MaxConcurrency: Int(2)}}}
	clusters := []SimCluster{{Name: "canary-0", Labels: map[string]string{"tier": "canary"}},
		{Name: "prod-0", Labels: map[string]string{"tier": "prod"}}, {Name: "prod-1", Labels: map[string]string{"tier": "prod"}, Offline: true, OfflineAt: 10 * time.Second}}
	tl := SimulateRun(RunSimulation{Strategy: strategy, Clusters: clusters})
	if tl.Completed || tl.Final.State == RunCompleted {
		t.Fatalf("the run completed with prod-1 offline: %s %q", tl.Final.State, tl.Final.Message)
	}
	for _, s := range tl.Steps {
		for _, c := range s.Started {
			if c == "prod-1" {
				t.Fatalf("prod-1 was started at %s while its agent was offline", s.At)
			}
		}
	}
	if !strings.Contains(tl.Stuck, "prod-1") {
		t.Errorf("the plan's reason %q does not name the offline cluster", tl.Stuck)
	}

	seq := Sequence{Groups: []SequenceGroup{seqGroup("dev", "", time.Hour), seqGroup("prod", "dev", 0)}}
	st := SimulateSequence(SequenceSimulation{Sequence: seq, Clusters: []SimCluster{{Name: "dev-0", Labels: map[string]string{"tier": "dev"}},
		{Name: "dev-1", Labels: map[string]string{"tier": "dev"}, Offline: true}, {Name: "prod-0", Labels: map[string]string{"tier": "prod"}}},
		Revisions: []SimRevision{{Index: 2}}})
	if st.Err != nil {
		t.Fatal(st.Err)
	}
	if st.Completed {
		t.Fatalf("the sequence completed with dev-1 offline (%s)", st.Stuck)
	}
	if !strings.Contains(st.Stuck, "dev-1") {
		t.Errorf("the plan's reason %q does not name the offline cluster", st.Stuck)
	}
}

// R1.11: an agent that comes back is a moment of every simulation. Offline from the start and
// back after two hours, prod-1 gets its release only then (staged runs, sequences) or applies
// the one it was given then (continuous), is Ready 30 s later, and the rollout ends there:
// not sooner, and not never.
func TestR1_11_AClusterComingBackIsAMomentOfEveryPlan(t *testing.T) {
	const back = 2 * time.Hour
	clusters := []SimCluster{{Name: "prod-0", Labels: map[string]string{"tier": "prod"}},
		{Name: "prod-1", Labels: map[string]string{"tier": "prod"}, Offline: true, BackAt: back}}
	end := back + 30*time.Second

	tl := Simulate(Simulation{Clusters: clusters, Strategy: Strategy{MaxUnavailable: Int(2)}})
	if !tl.Completed || tl.Duration != end {
		t.Errorf("continuous: completed %v after %s (%q), want completed after %s", tl.Completed, tl.Duration, tl.Stuck, end)
	}

	run := SimulateRun(RunSimulation{Strategy: StagedStrategy{Stages: []Stage{{Name: "prod", LabelSelector: sel("tier=prod")}}}, Clusters: clusters})
	if run.Final.State != RunCompleted || run.Duration != end {
		t.Errorf("staged: %s after %s (%q), want Completed after %s", run.Final.State, run.Duration, run.Final.Message, end)
	}
	startedAt := map[string]time.Duration{}
	for _, m := range run.Steps {
		for _, c := range m.Started {
			startedAt[c] = m.At
		}
	}
	if at, ok := startedAt["prod-1"]; !ok || at != back {
		t.Errorf("staged: prod-1 started at %s (%v), want when its agent is back, %s", at, ok, back)
	}

	seq := SimulateSequence(SequenceSimulation{Sequence: Sequence{Groups: []SequenceGroup{seqGroup("prod", "", 0)}}, Clusters: clusters,
		Revisions: []SimRevision{{Index: 2}}})
	if seq.Err != nil {
		t.Fatal(seq.Err)
	}
	var seqStarted time.Duration = -1
	for _, m := range seq.Steps {
		if slices.Contains(m.Started, "prod-1@2") {
			seqStarted = m.At
		}
	}
	if !seq.Completed || seq.Duration != end || seqStarted != back {
		t.Errorf("sequence: completed %v after %s (%q), prod-1 started at %s; want completed after %s, prod-1 started at %s",
			seq.Completed, seq.Duration, seq.Stuck, seqStarted, end, back)
	}
}
