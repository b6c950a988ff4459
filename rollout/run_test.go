package rollout

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func sel(s string) *Selector {
	parsed, err := ParseSelector(s)
	if err != nil {
		panic(err)
	}
	return parsed
}

func dur(d time.Duration) *Duration { v := Duration(d); return &v }

// runFleet builds RunClusters on revision 1 from "name:k=v,k=v" specs.
func runFleet(specs ...string) []RunCluster {
	var out []RunCluster
	for _, spec := range specs {
		name, labels, _ := strings.Cut(spec, ":")
		c := RunCluster{Name: name, Labels: map[string]string{}, Deployment: &Deployment{Staged: 1, Released: 1, Applied: 1, Ready: true}}
		if labels != "" {
			for _, kv := range strings.Split(labels, ",") {
				k, v, _ := strings.Cut(kv, "=")
				c.Labels[k] = v
			}
		}
		out = append(out, c)
	}
	return out
}

func clusterStates(st RunStatus) map[string]RunState {
	out := map[string]RunState{}
	for _, s := range st.Stages {
		for _, g := range s.Groups {
			for _, c := range g.Clusters {
				out[c.Name] = c.State
			}
		}
	}
	return out
}

func orderOf(st RunStatus, stage int) []string {
	var out []string
	for _, g := range st.Stages[stage].Groups {
		for _, c := range g.Clusters {
			out = append(out, c.Name)
		}
	}
	return out
}

func simClusters(n int, labels func(i int) map[string]string) []SimCluster {
	cs := make([]SimCluster, n)
	for i := range cs {
		cs[i] = SimCluster{Name: fmt.Sprintf("c-%02d", i), Labels: labels(i)}
	}
	return cs
}

func TestR3_2_OrderInAStage(t *testing.T) {
	fleet := runFleet("b:order=2", "a:order=10", "c:order=2", "z", "y:order=x", "d:order=1")
	run := &Run{Name: "r", Revision: 2, Action: ActionInitialize, Strategy: StagedStrategy{Stages: []Stage{{Name: "all", LabelSelector: &Selector{}, SortingLabelKey: "order"}}}}
	res := Step(run, fleet, nil, t0)
	// Integer order (not string order: 10 after 2), ties by name, then clusters without a usable value.
	if diff := cmp.Diff([]string{"d", "b", "c", "a", "y", "z"}, orderOf(res.Status, 0)); diff != "" {
		t.Errorf("order (-want +got):\n%s", diff)
	}
}

func TestR3_7_InitializeChangesNothing(t *testing.T) {
	run := &Run{Name: "r", Revision: 2, Action: ActionInitialize, Strategy: StagedStrategy{Stages: []Stage{{Name: "all", LabelSelector: &Selector{}}}}}
	res := Step(run, runFleet("a", "b"), nil, t0)
	if res.Status.State != RunNotStarted || len(res.Release) != 0 || !strings.Contains(res.Status.Message, "initialized: 2 clusters in 1 stages") {
		t.Errorf("state %s, release %v, message %q", res.Status.State, res.Release, res.Status.Message)
	}
	run.Status, run.Action = res.Status, ActionRun
	if res = Step(run, runFleet("a", "b"), nil, t0); res.Status.State != RunRunning || len(res.Release) != 1 {
		t.Errorf("after Run: state %s, release %v", res.Status.State, res.Release)
	}
}

func TestR3_7_MembershipErrorsFailInitialization(t *testing.T) {
	strategy := StagedStrategy{Stages: []Stage{{Name: "prod", LabelSelector: sel("env=prod")}, {Name: "eu", LabelSelector: sel("region=eu")}}}
	res := Step(&Run{Name: "r", Revision: 2, Action: ActionRun, Strategy: strategy}, runFleet("p1:env=prod", "both:env=prod,region=eu", "lab:env=lab"), nil, t0)
	if res.Status.State != RunFailed {
		t.Fatalf("state = %s", res.Status.State)
	}
	for _, want := range []string{"clusters in no stage: lab", "clusters in more than one stage: both (prod, eu)"} {
		if !strings.Contains(res.Status.Message, want) {
			t.Errorf("message %q lacks %q", res.Status.Message, want)
		}
	}
}

func TestR3_7_MembershipChangesMidRun(t *testing.T) {
	strategy := StagedStrategy{Stages: []Stage{{Name: "all", LabelSelector: &Selector{}}}}
	run := &Run{Name: "r", Revision: 2, Action: ActionRun, Strategy: strategy}
	res := Step(run, runFleet("a", "b", "c"), nil, t0)
	run.Status = res.Status
	// b leaves, n joins: b is skipped, n is reported and never released.
	res = Step(run, runFleet("a", "c", "n"), nil, t0)
	if got := clusterStates(res.Status)["b"]; got != RunSkipped {
		t.Errorf("removed cluster state %s, want Skipped", got)
	}
	if diff := cmp.Diff([]string{"n"}, res.Status.Unstaged); diff != "" {
		t.Errorf("unstaged (-want +got):\n%s", diff)
	}
	if _, ok := clusterStates(res.Status)["n"]; ok {
		t.Errorf("new cluster pulled into the run")
	}
}

func TestR3_7_StrategyIsFrozen(t *testing.T) {
	run := &Run{Name: "r", Revision: 2, Action: ActionRun, Strategy: StagedStrategy{Stages: []Stage{{Name: "all", LabelSelector: &Selector{}, MaxConcurrency: Int(1)}}}}
	fleet := runFleet("a", "b", "c")
	res := Step(run, fleet, nil, t0)
	run.Status = res.Status
	run.Strategy.Stages[0].MaxConcurrency = Int(3) // edited after the start
	fleet[0].Deployment = &Deployment{Staged: 2, Released: 2, Applied: 2}
	if res = Step(run, fleet, nil, t0); len(res.Release) != 0 {
		t.Errorf("edited strategy took effect: released %v", res.Release)
	}
}

func TestR3_3_DefaultConcurrencyIsOne(t *testing.T) {
	var maxInFlight int
	tl := SimulateRun(RunSimulation{
		Strategy: StagedStrategy{Stages: []Stage{{Name: "all", LabelSelector: &Selector{}}}},
		Clusters: simClusters(6, func(int) map[string]string { return nil }),
		Observe: func(_ *Run, _ []RunCluster, res StepResult, _ time.Time) {
			maxInFlight = max(maxInFlight, countRunning(res.Status))
		},
	})
	if !tl.Completed || maxInFlight != 1 {
		t.Errorf("completed %v, max in flight %d; want sequential", tl.Completed, maxInFlight)
	}
	if tl.Duration != 3*time.Minute {
		t.Errorf("6 clusters one at a time, 30s each: %s, want 3m", tl.Duration)
	}
}

func countRunning(st RunStatus) int {
	n := 0
	for _, s := range clusterStates(st) {
		if s == RunRunning {
			n++
		}
	}
	return n
}

func TestR3_5_StageAndGroupConcurrency(t *testing.T) {
	// 20 clusters: stage 25% → 5; group A (8) at 50% → 4; group B (12) at 25% → 3.
	strategy := StagedStrategy{Stages: []Stage{{Name: "prod", LabelSelector: &Selector{}, MaxConcurrency: Percent(25), Groups: []StageGroup{
		{Name: "a", LabelSelector: sel("group=a"), MaxConcurrency: Percent(50)},
		{Name: "b", LabelSelector: sel("group=b"), MaxConcurrency: Percent(25)},
	}}}}
	clusters := simClusters(20, func(i int) map[string]string {
		if i < 8 {
			return map[string]string{"group": "a"}
		}
		return map[string]string{"group": "b"}
	})
	var maxTotal, maxA, maxB int
	var first []GroupStatus
	tl := SimulateRun(RunSimulation{Strategy: strategy, Clusters: clusters, Observe: func(_ *Run, _ []RunCluster, res StepResult, _ time.Time) {
		g := res.Status.Stages[0].Groups
		a, b := countState(g[0].Clusters, RunRunning), countState(g[1].Clusters, RunRunning)
		maxA, maxB, maxTotal = max(maxA, a), max(maxB, b), max(maxTotal, a+b)
		if first == nil {
			first = slices.Clone(g)
		}
	}})
	// A waiting cluster names the limit that holds it: group a is full at its own 4; group b,
	// with room for 3, is held by the stage's 5 (4 of a and 1 of b in flight).
	for gi, want := range []string{"waiting for a slot: 4 in flight in group a, its maxConcurrency 4", "waiting for a slot: 5 in flight in stage prod, its maxConcurrency 5"} {
		waiting := 0
		for _, c := range first[gi].Clusters {
			if c.State == RunPending {
				waiting++
				if c.Message != want {
					t.Errorf("group %s: cluster %s waits with %q, want %q", first[gi].Name, c.Name, c.Message, want)
				}
			}
		}
		if waiting == 0 {
			t.Errorf("group %s: no cluster waits after the first step", first[gi].Name)
		}
	}
	if !tl.Completed {
		t.Fatalf("stuck: %s", tl.Stuck)
	}
	if maxTotal != 5 || maxA > 4 || maxB > 3 {
		t.Errorf("max in flight: total %d (want 5), a %d (≤4), b %d (≤3)", maxTotal, maxA, maxB)
	}
	if first := tl.Steps[0].Started; len(first) != 5 {
		t.Errorf("first wave %v, want 5 clusters (4 of a would exceed the stage cap with 3 of b)", first)
	}
}

func TestR3_4_TimedWaitAndApprovalAfterAStage(t *testing.T) {
	strategy := StagedStrategy{Stages: []Stage{
		{Name: "staging", LabelSelector: sel("env=staging"), AfterStageTasks: []Task{{Type: TaskTimedWait, WaitTime: dur(time.Hour)}, {Type: TaskApproval}}},
		{Name: "prod", LabelSelector: sel("env=prod")},
	}}
	fleet := runFleet("s1:env=staging", "p1:env=prod")
	run := &Run{Name: "web-7", Revision: 2, Action: ActionRun, Strategy: strategy}
	res := Step(run, fleet, nil, t0)
	run.Status = res.Status
	fleet[0].Deployment = &Deployment{Staged: 2, Released: 2, Applied: 2, Ready: true}
	done := t0.Add(5 * time.Minute)
	res = Step(run, fleet, nil, done)
	run.Status = res.Status
	gate := ApprovalName("web-7", "After", "staging", "")
	if len(res.Approvals) != 1 || res.Approvals[0].Name != gate || !res.WakeAt.Equal(done.Add(time.Hour)) {
		t.Fatalf("approvals %v, wake %s; want %s and the wait's end", res.Approvals, res.WakeAt, gate)
	}
	// Approved early: the timed wait still holds the stage.
	approved := map[string]Approval{gate: {Approvers: []string{"alice"}}}
	res = Step(run, fleet, approved, done.Add(30*time.Minute))
	run.Status = res.Status
	if len(res.Release) != 0 || !strings.Contains(res.Status.Message, "timed wait until") {
		t.Fatalf("released %v during the wait; message %q", res.Release, res.Status.Message)
	}
	res = Step(run, fleet, approved, done.Add(time.Hour))
	if diff := cmp.Diff([]string{"p1"}, res.Release); diff != "" {
		t.Fatalf("after wait and approval (-want +got):\n%s", diff)
	}
}

// Approval requests are named for people (run, gate, stage, group) and never collide: stage
// prod-eu and stage prod's group eu are two gates with two requests (the names, not
// R3.9's <run>-before-<stage>-<group>, which collided).
func TestR3_9_ApprovalNamesDoNotCollide(t *testing.T) {
	gates := []struct{ run, when, stage, group, prefix string }{
		{"web-7", "Before", "canary", "", "web-7-before-canary-"},
		{"web-7", "After", "prod", "", "web-7-after-prod-"},
		{"web-7", "Before", "prod", "eu", "web-7-before-prod-eu-"},
		{"web-7", "Before", "prod-eu", "", "web-7-before-prod-eu-"},
		{"web-7-before", "Before", "prod", "", "web-7-before-before-prod-"},
		{"web-7", "Before", "before-prod", "", "web-7-before-before-prod-"},
	}
	seen := map[string]string{}
	for _, g := range gates {
		name := ApprovalName(g.run, g.when, g.stage, g.group)
		if !strings.HasPrefix(name, g.prefix) || len(name) != len(g.prefix)+8 {
			t.Errorf("ApprovalName(%s, %s, %s, %s) = %s, want %s and a hash", g.run, g.when, g.stage, g.group, name, g.prefix)
		}
		if other, ok := seen[name]; ok {
			t.Errorf("%+v and %s share the request %s", g, other, name)
		}
		seen[name] = fmt.Sprintf("%+v", g)
		if again := ApprovalName(g.run, g.when, g.stage, g.group); again != name {
			t.Errorf("ApprovalName is not stable: %s, then %s", name, again)
		}
	}
	if long := ApprovalName(strings.Repeat("r", 250), "Before", "prod", "eu"); len(long) > 253 {
		t.Errorf("a long run's request name has %d characters, more than a name may", len(long))
	}
}

// R3.9: a gate with a quorum opens once that many distinct people approved; one person
// approving twice counts once. The gate's request carries who may approve it. A rejected gate stops the run with who rejected it and why.
func TestR3_9_ApprovalQuorumAndRejection(t *testing.T) {
	strategy := StagedStrategy{Stages: []Stage{
		{Name: "canary", LabelSelector: sel("env=canary")},
		{Name: "prod", LabelSelector: sel("env=prod"), BeforeStageTasks: []Task{{Type: TaskApproval, Quorum: 2, Approvers: []Approver{{User: "alice"}, {Group: "sre"}}}}},
	}}
	start := func() (*Run, []RunCluster, StepResult) {
		fleet := runFleet("c1:env=canary", "p1:env=prod")
		run := &Run{Name: "web-8", Revision: 2, Action: ActionRun, Strategy: strategy}
		res := Step(run, fleet, nil, t0)
		run.Status = res.Status
		fleet[0].Deployment = &Deployment{Staged: 2, Released: 2, Applied: 2, Ready: true}
		res = Step(run, fleet, nil, t0.Add(time.Minute))
		run.Status = res.Status
		return run, fleet, res
	}
	gate := ApprovalName("web-8", "Before", "prod", "")
	run, fleet, res := start()
	if len(res.Approvals) != 1 || res.Approvals[0].Name != gate || res.Approvals[0].Quorum != 2 ||
		!slices.Equal(res.Approvals[0].Approvers, []Approver{{User: "alice"}, {Group: "sre"}}) {
		t.Fatalf("waiting gates %+v, want %s with a quorum of 2 for alice and the group sre", res.Approvals, gate)
	}
	for _, tc := range []struct {
		name      string
		approvers []string
		release   bool
	}{
		{"one approver", []string{"alice"}, false},
		{"the same approver twice", []string{"alice", "alice"}, false},
		{"two approvers", []string{"alice", "bob"}, true},
	} {
		res := Step(run, fleet, map[string]Approval{gate: {Approvers: tc.approvers}}, t0.Add(2*time.Minute))
		if released := slices.Contains(res.Release, "p1"); released != tc.release {
			t.Errorf("%s: released p1 %v, want %v", tc.name, released, tc.release)
		}
	}

	run, fleet, _ = start()
	res = Step(run, fleet, map[string]Approval{gate: {Approvers: []string{"alice"}, RejectedBy: "carol", Reason: "error budget spent"}}, t0.Add(2*time.Minute))
	if res.Status.State != RunFailed || len(res.Release) != 0 || !strings.Contains(res.Status.Message, "rejected by carol: error budget spent") {
		t.Errorf("a rejected gate: state %s, message %q, released %v; want Failed with who and why, nothing released", res.Status.State, res.Status.Message, res.Release)
	}
	if prod := res.Status.Stages[1]; prod.State != RunFailed || prod.BeforeTasks[0].State != RunFailed {
		t.Errorf("the rejected stage: %s, its gate %s; want both Failed", prod.State, prod.BeforeTasks[0].State)
	}
}

func TestR3_10_FailureBudgets(t *testing.T) {
	all := func(n int) []SimCluster { return simClusters(n, func(int) map[string]string { return nil }) }
	failing := func(cs []SimCluster, idx ...int) []SimCluster {
		for _, i := range idx {
			cs[i].Fail = true
		}
		return cs
	}
	stage := func(conc, budget IntOrPercent) StagedStrategy {
		return StagedStrategy{ClusterTimeout: dur(5 * time.Minute), Stages: []Stage{{Name: "s", LabelSelector: &Selector{}, MaxConcurrency: conc, MaxAllowedFailures: budget}}}
	}
	t.Run(`"25%" of 5 is 2: two failures complete`, func(t *testing.T) {
		tl := SimulateRun(RunSimulation{Strategy: stage(Int(1), Percent(25)), Clusters: failing(all(5), 0, 1)})
		if tl.Final.State != RunCompleted || tl.Final.FailureCount != 2 {
			t.Errorf("state %s, failures %d", tl.Final.State, tl.Final.FailureCount)
		}
	})
	t.Run(`"25%" of 5 is 2: a third failure fails the run`, func(t *testing.T) {
		tl := SimulateRun(RunSimulation{Strategy: stage(Int(1), Percent(25)), Clusters: failing(all(5), 0, 1, 2)})
		if tl.Final.State != RunFailed || !strings.Contains(tl.Final.Message, "3 failures, more than maxAllowedFailures 2 (25%)") {
			t.Errorf("state %s, message %q", tl.Final.State, tl.Final.Message)
		}
		if got := clusterStates(tl.Final)["c-03"]; got == RunRunning || got == RunCompleted {
			t.Errorf("a cluster started after the budget was exceeded: %s", got)
		}
	})
	t.Run(`a group of 4 with "4" whose members all fail is Completed`, func(t *testing.T) {
		tl := SimulateRun(RunSimulation{Strategy: stage(Int(4), Int(4)), Clusters: failing(all(4), 0, 1, 2, 3)})
		if tl.Final.State != RunCompleted || tl.Final.FailureCount != 4 {
			t.Errorf("state %s, failures %d", tl.Final.State, tl.Final.FailureCount)
		}
	})
	t.Run("0 fails fast", func(t *testing.T) {
		tl := SimulateRun(RunSimulation{Strategy: stage(Int(1), IntOrPercent{}), Clusters: failing(all(5), 0)})
		if next := clusterStates(tl.Final)["c-01"]; tl.Final.State != RunFailed || tl.Final.FailureCount != 1 || next != RunNotStarted && next != RunPending {
			t.Errorf("state %s, failures %d, next cluster %s", tl.Final.State, tl.Final.FailureCount, clusterStates(tl.Final)["c-01"])
		}
	})
	t.Run("failureCount may exceed the budget when clusters run concurrently", func(t *testing.T) {
		tl := SimulateRun(RunSimulation{Strategy: stage(Int(3), Int(1)), Clusters: failing(all(6), 0, 1, 2)})
		if tl.Final.State != RunFailed || tl.Final.FailureCount != 3 {
			t.Errorf("state %s, failures %d; want Failed with 3", tl.Final.State, tl.Final.FailureCount)
		}
	})
}

func TestR3_11_SkipsAndClustersAlreadyOnRevision(t *testing.T) {
	strategy := StagedStrategy{Stages: []Stage{
		{Name: "a", LabelSelector: sel("s=a"), BeforeStageTasks: []Task{{Type: TaskApproval}}},
		{Name: "b", LabelSelector: sel("s=b"), MaxConcurrency: Int(5)},
	}}
	fleet := runFleet("a1:s=a", "b1:s=b", "b2:s=b", "b3:s=b")
	fleet[3].Deployment = &Deployment{Staged: 2, Released: 2, Applied: 2, Ready: true}
	run := &Run{Name: "r", Revision: 2, Action: ActionRun, Strategy: strategy, Skips: []Skip{{Stage: "a"}, {Stage: "b", Cluster: "b2"}}}
	res := Step(run, fleet, nil, t0)
	states := clusterStates(res.Status)
	want := map[string]RunState{"a1": RunSkipped, "b1": RunRunning, "b2": RunSkipped, "b3": RunSkipped}
	if diff := cmp.Diff(want, states); diff != "" {
		t.Errorf("states (-want +got):\n%s", diff)
	}
	if res.Status.Stages[0].State != RunSkipped || len(res.Approvals) != 0 {
		t.Errorf("skipped stage: state %s, approvals %v", res.Status.Stages[0].State, res.Approvals)
	}
}

// R3.11: the run itself is Pending while nothing is being updated and it waits (here for an
// approval), Running while clusters update, and Skipped when no cluster needed the revision.
func TestR3_11_RunPendingAndSkipped(t *testing.T) {
	strategy := StagedStrategy{Stages: []Stage{{Name: "prod", LabelSelector: sel("s=a"), BeforeStageTasks: []Task{{Type: TaskApproval}}}}}
	run := &Run{Name: "r", Revision: 2, Action: ActionRun, Strategy: strategy}
	res := Step(run, runFleet("a1:s=a"), nil, t0)
	if res.Status.State != RunPending || !strings.Contains(res.Status.Message, "waiting for approval") {
		t.Fatalf("run waiting for its gate: %s %q, want Pending with the gate named", res.Status.State, res.Status.Message)
	}
	run.Status = res.Status
	res = Step(run, runFleet("a1:s=a"), map[string]Approval{res.Approvals[0].Name: {Approvers: []string{"alice"}}}, t0)
	if res.Status.State != RunRunning || len(res.Release) != 1 {
		t.Fatalf("approved run: %s, released %v; want Running with a1 released", res.Status.State, res.Release)
	}
	run.Status = res.Status
	if res = Step(run, runFleet("a1:s=a"), nil, t0); res.Status.State != RunRunning {
		t.Errorf("run with a cluster in flight: %s, want Running", res.Status.State)
	}

	current := runFleet("a1:s=a", "a2:s=a")
	for i := range current {
		current[i].Deployment = &Deployment{Staged: 2, Released: 2, Applied: 2, Ready: true}
	}
	skipped := &Run{Name: "s", Revision: 2, Action: ActionRun, Strategy: StagedStrategy{Stages: []Stage{{Name: "prod", LabelSelector: sel("s=a")}}}}
	res = Step(skipped, current, nil, t0)
	if res.Status.State != RunSkipped || !strings.Contains(res.Status.Message, "no cluster needed revision 2 (2 skipped)") {
		t.Errorf("run with every cluster on its revision: %s %q, want Skipped", res.Status.State, res.Status.Message)
	}
	if err := ValidateTransition(ActionRun, ActionStop, RunSkipped); err == nil {
		t.Error("a Skipped run is finished and cannot be stopped or restarted (R3.7)")
	}
}

// R3.7 keeps a cluster that joins mid-run out of the run; it then receives what its stage has
// reached: the revision once that stage is done, nothing while the stage is still to come,
// and nothing from a run that is not the bundle's current one.
func TestR3_7_JoiningClusterGetsWhatItsStageReached(t *testing.T) {
	strategy := StagedStrategy{Stages: []Stage{
		{Name: "canary", LabelSelector: sel("ring=canary")},
		{Name: "rest", LabelSelector: sel("ring=main"), BeforeStageTasks: []Task{{Type: TaskApproval}}},
	}}
	run := &Run{Name: "r", Revision: 2, Action: ActionRun, Strategy: strategy, Current: true}
	fleet := runFleet("c1:ring=canary", "m1:ring=main")
	res := Step(run, fleet, nil, t0)
	run.Status = res.Status
	fleet[0].Deployment = &Deployment{Staged: 2, Released: 2, Applied: 2, Ready: true}
	res = Step(run, fleet, nil, t0) // canary done; rest waits at its gate
	if res.Status.Stages[0].State != RunCompleted || res.Status.State != RunPending {
		t.Fatalf("canary %s, run %s; want the canary done and the run at the gate", res.Status.Stages[0].State, res.Status.State)
	}
	run.Status = res.Status
	joined := append(fleet, runFleet("c2:ring=canary", "m2:ring=main")...)
	joined[2].Deployment, joined[3].Deployment = nil, nil
	res = Step(run, joined, nil, t0)
	if !cmp.Equal(res.Release, []string{"c2"}) || !cmp.Equal(res.Status.Unstaged, []string{"c2", "m2"}) {
		t.Errorf("released %v, unstaged %v; want the canary joiner released (its stage is done) and both reported", res.Release, res.Status.Unstaged)
	}
	other := *run
	other.Current = false
	if res := Step(&other, joined, nil, t0); len(res.Release) != 0 {
		t.Errorf("a run that is not the bundle's current one released %v to joiners", res.Release)
	}
	unrendered := append([]RunCluster(nil), joined...)
	unrendered[2].Since = 3
	if res := Step(run, unrendered, nil, t0); len(res.Release) != 0 {
		t.Errorf("a joiner that revision 2 was not rendered for was released %v", res.Release)
	}
	paused := joined[:3:3]
	paused[2].Paused = true
	if res := Step(run, paused, nil, t0); len(res.Release) != 0 {
		t.Errorf("a paused joiner was released %v (R1.13)", res.Release)
	}
}

func TestR3_12_ScheduledStart(t *testing.T) {
	// Tuesday 09:00 at UTC−05:00, reached on Wednesday 2026-03-04 10:00 UTC → Tuesday 2026-03-10 14:00 UTC.
	s := &ScheduledStart{Weekday: "Tuesday", TimeOfDay: "09:00", UTCOffset: "-05:00"}
	reached := time.Date(2026, 3, 4, 10, 0, 0, 0, time.UTC)
	got, err := s.opensAt(reached)
	if err != nil || !got.Equal(time.Date(2026, 3, 10, 14, 0, 0, 0, time.UTC)) {
		t.Fatalf("opensAt = %s, %v", got.UTC(), err)
	}
	strategy := StagedStrategy{Stages: []Stage{{Name: "prod", LabelSelector: &Selector{}, BeforeStageTasks: []Task{{Type: TaskScheduledStart, ScheduledStart: s}}}}}
	run := &Run{Name: "r", Revision: 2, Action: ActionRun, Strategy: strategy}
	res := Step(run, runFleet("a"), nil, reached)
	if len(res.Release) != 0 || !res.WakeAt.Equal(got) || !strings.Contains(res.Status.Message, "scheduled to start at 2026-03-10T14:00:00Z") {
		t.Fatalf("release %v, wake %s, message %q", res.Release, res.WakeAt, res.Status.Message)
	}
	run.Status = res.Status
	if res = Step(run, runFleet("a"), nil, got); len(res.Release) != 1 {
		t.Errorf("at the scheduled time: release %v", res.Release)
	}
	// Completed early by hand: a skip of the gate.
	run2 := &Run{Name: "r2", Revision: 2, Action: ActionRun, Strategy: strategy, Skips: []Skip{{Stage: "prod", Gate: "Before"}}}
	if res = Step(run2, runFleet("a"), nil, reached); len(res.Release) != 1 {
		t.Errorf("skipped gate: release %v", res.Release)
	}
}

func TestR3_13_ClosedWindowKeepsClusterPending(t *testing.T) {
	a := &Availability{Window: &Window{Schedule: "0 2 * * *", Duration: Duration(2 * time.Hour)}}
	if err := a.Compile(); err != nil {
		t.Fatal(err)
	}
	fleet := runFleet("w", "x")
	fleet[0].Availability = a
	strategy := StagedStrategy{Stages: []Stage{{Name: "all", LabelSelector: &Selector{}, MaxConcurrency: Int(2)}}}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	res := Step(&Run{Name: "r", Revision: 2, Action: ActionRun, Strategy: strategy}, fleet, nil, now)
	if diff := cmp.Diff([]string{"x"}, res.Release); diff != "" {
		t.Fatalf("release (-want +got):\n%s", diff)
	}
	c := res.Status.Stages[0].Groups[0].Clusters[0]
	if c.State != RunPending || !strings.Contains(c.Message, "next opening 2026-03-02T02:00:00Z") {
		t.Errorf("closed-window cluster: %s %q", c.State, c.Message)
	}
	if !res.WakeAt.Equal(time.Date(2026, 3, 2, 2, 0, 0, 0, time.UTC)) && !res.WakeAt.Before(time.Date(2026, 3, 2, 2, 0, 0, 0, time.UTC)) {
		t.Errorf("wake %s does not cover the window opening", res.WakeAt)
	}
}

func TestR3_7_StopAndResume(t *testing.T) {
	strategy := StagedStrategy{Stages: []Stage{{Name: "all", LabelSelector: &Selector{}}}}
	fleet := runFleet("a", "b")
	run := &Run{Name: "r", Revision: 2, Action: ActionRun, Strategy: strategy}
	res := Step(run, fleet, nil, t0)
	run.Status, run.Action = res.Status, ActionStop
	res = Step(run, fleet, nil, t0)
	if res.Status.State != RunStopping {
		t.Fatalf("with a cluster in flight: %s, want Stopping", res.Status.State)
	}
	fleet[0].Deployment = &Deployment{Staged: 2, Released: 2, Applied: 2, Ready: true}
	run.Status = res.Status
	res = Step(run, fleet, nil, t0)
	if res.Status.State != RunStopped || len(res.Release) != 0 {
		t.Fatalf("in-flight done: %s, release %v; want Stopped, nothing new", res.Status.State, res.Release)
	}
	run.Status, run.Action = res.Status, ActionRun
	if res = Step(run, fleet, nil, t0); res.Status.State != RunRunning || len(res.Release) != 1 || res.Release[0] != "b" {
		t.Errorf("resumed: %s, release %v", res.Status.State, res.Release)
	}
}

func TestR3_14_SupersededRunStops(t *testing.T) {
	strategy := StagedStrategy{Stages: []Stage{{Name: "all", LabelSelector: &Selector{}}}}
	run := &Run{Name: "r7", Revision: 2, Action: ActionRun, Strategy: strategy}
	res := Step(run, runFleet("a", "b"), nil, t0)
	run.Status, run.SupersededBy = res.Status, "r8"
	fleet := runFleet("a", "b")
	fleet[0].Deployment = &Deployment{Staged: 2, Released: 2, Applied: 2, Ready: true}
	res = Step(run, fleet, nil, t0)
	if res.Status.State != RunStopped || res.Status.SupersededBy != "r8" || res.Status.Message != "superseded by run r8" {
		t.Errorf("state %s, supersededBy %q, message %q", res.Status.State, res.Status.SupersededBy, res.Status.Message)
	}
	t.Run("a cluster the newer run took over is not released again", func(t *testing.T) {
		run := &Run{Name: "r7", Revision: 2, Action: ActionRun, Strategy: strategy}
		res := Step(run, runFleet("a", "b"), nil, t0)
		run.Status, run.SupersededBy = res.Status, "r8"
		fleet := runFleet("a", "b")
		fleet[0].Deployment = &Deployment{Staged: 3, Released: 3} // r8 released revision 3 to a
		res = Step(run, fleet, nil, t0)
		if len(res.Release) != 0 || res.Status.State != RunStopped || clusterStates(res.Status)["a"] != RunSkipped {
			t.Errorf("release %v, run %s, a %s: want nothing released, a skipped and the run stopped", res.Release, res.Status.State, clusterStates(res.Status)["a"])
		}
	})
}

func TestRollbackToAnOlderRevision(t *testing.T) {
	fleet := runFleet("a", "b")
	for i := range fleet {
		fleet[i].Deployment = &Deployment{Staged: 3, Released: 3, Applied: 3, Ready: true}
	}
	run := &Run{Name: "r", Revision: 2, Action: ActionRun, Strategy: StagedStrategy{Stages: []Stage{{Name: "all", LabelSelector: &Selector{}, MaxConcurrency: Int(2)}}}}
	res := Step(run, fleet, nil, t0)
	if diff := cmp.Diff([]string{"a", "b"}, res.Release); diff != "" {
		t.Errorf("rollback releases (-want +got):\n%s", diff)
	}
}

// The staging / canary / production example of the seeds: staging, a one-hour wait, canary
// behind an approval, then production in two groups.
func TestR3_8_Scenario_StagingCanaryProduction(t *testing.T) {
	strategy := StagedStrategy{Stages: []Stage{
		{Name: "staging", LabelSelector: sel("env=staging"), MaxConcurrency: Int(2), AfterStageTasks: []Task{{Type: TaskTimedWait, WaitTime: dur(time.Hour)}}},
		{Name: "canary", LabelSelector: sel("env=prod,ring=canary"), BeforeStageTasks: []Task{{Type: TaskApproval}}},
		{Name: "production", LabelSelector: sel("env=prod,ring!=canary"), MaxConcurrency: Percent(50), AfterStageTasks: []Task{{Type: TaskApproval}}},
	}}
	clusters := []SimCluster{
		{Name: "stg-1", Labels: map[string]string{"env": "staging"}}, {Name: "stg-2", Labels: map[string]string{"env": "staging"}},
		{Name: "can-1", Labels: map[string]string{"env": "prod", "ring": "canary"}},
		{Name: "prd-1", Labels: map[string]string{"env": "prod"}}, {Name: "prd-2", Labels: map[string]string{"env": "prod"}},
	}
	t.Run("without approvals the run stops at the canary gate", func(t *testing.T) {
		tl := SimulateRun(RunSimulation{Name: "web-7", Strategy: strategy, Clusters: clusters, ApproveAfter: -1})
		if tl.Completed || !strings.Contains(tl.Stuck, "web-7-before-canary") || tl.Duration != time.Hour+30*time.Second {
			t.Errorf("completed %v after %s, stuck %q", tl.Completed, tl.Duration, tl.Stuck)
		}
	})
	t.Run("with a person approving after 10 minutes", func(t *testing.T) {
		tl := SimulateRun(RunSimulation{Name: "web-7", Strategy: strategy, Clusters: clusters, ApproveAfter: 10 * time.Minute})
		if !tl.Completed {
			t.Fatalf("stuck: %s", tl.Stuck)
		}
		// 30s staging (2 at once), 1h wait, 10m approval, 30s canary, 2 × 30s production (50% of 2
		// is 1 at a time), 10m approval.
		if want := 30*time.Second + time.Hour + 10*time.Minute + 30*time.Second + time.Minute + 10*time.Minute; tl.Duration != want {
			t.Errorf("duration %s, want %s", tl.Duration, want)
		}
		var order []string
		for _, s := range tl.Steps {
			order = append(order, s.Started...)
		}
		if diff := cmp.Diff([]string{"stg-1", "stg-2", "can-1", "prd-1", "prd-2"}, order); diff != "" {
			t.Errorf("R3.8 start order (-want +got):\n%s", diff)
		}
	})
}

func TestR3_1_ValidateStaged(t *testing.T) {
	cases := []struct {
		s    StagedStrategy
		want string
	}{
		{StagedStrategy{}, "stages: at least one stage"},
		{StagedStrategy{Stages: []Stage{{Name: "a"}}}, "stages[0].labelSelector: is required"},
		{StagedStrategy{Stages: []Stage{{Name: "a", LabelSelector: &Selector{}}, {Name: "a", LabelSelector: &Selector{}}}}, `stages[1].name: "a" is used twice`},
		{StagedStrategy{Stages: []Stage{{Name: "a", LabelSelector: &Selector{}, BeforeStageTasks: []Task{{Type: TaskApproval}, {Type: TaskApproval}}}}}, "stages[0].beforeStageTasks: at most one task"},
		{StagedStrategy{Stages: []Stage{{Name: "a", LabelSelector: &Selector{}, AfterStageTasks: []Task{{Type: TaskTimedWait}}}}}, "stages[0].afterStageTasks[0].waitTime: is required for TimedWait"},
		{StagedStrategy{Stages: []Stage{{Name: "a", LabelSelector: &Selector{}, AfterStageTasks: []Task{{Type: TaskApproval}, {Type: TaskApproval}}}}}, "stages[0].afterStageTasks[1].type: a second Approval task"},
		{StagedStrategy{Stages: []Stage{{Name: "a", LabelSelector: &Selector{}, MaxConcurrency: Int(0)}}}, "stages[0].maxConcurrency: must be at least 1"},
		{StagedStrategy{Stages: []Stage{{Name: "a", LabelSelector: &Selector{}, BeforeStageTasks: []Task{{Type: TaskScheduledStart, ScheduledStart: &ScheduledStart{TimeOfDay: "25:00"}}}}}}, "scheduledStart: invalid time of day"},
	}
	for _, c := range cases {
		err := ValidateStaged(&c.s)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want %q", err, c.want)
		}
	}
}

func TestR3_7_StateTransitions(t *testing.T) {
	cases := []struct {
		from, to RunAction
		state    RunState
		ok       bool
	}{
		{ActionInitialize, ActionRun, RunNotStarted, true},
		{ActionRun, ActionStop, RunRunning, true},
		{ActionStop, ActionRun, RunStopped, true},
		{ActionRun, ActionRun, RunRunning, true},
		{ActionInitialize, ActionStop, RunNotStarted, false},
		{ActionRun, ActionInitialize, RunRunning, false},
		{ActionStop, ActionInitialize, RunStopped, false},
		{ActionRun, ActionStop, RunCompleted, false},
		{ActionStop, ActionRun, RunFailed, false},
	}
	for _, c := range cases {
		if err := ValidateTransition(c.from, c.to, c.state); (err == nil) != c.ok {
			t.Errorf("%s→%s in %s: %v, want ok=%v", c.from, c.to, c.state, err, c.ok)
		}
	}
}

// R3.13, failing closed: a cluster whose maintenance window does not compile gets no work (a
// typo never lifts a freeze), and the message says what is invalid; the other clusters go on.
func TestR3_13_InvalidWindowHoldsTheCluster(t *testing.T) {
	fleet := runFleet("w", "x")
	fleet[0].Availability = InvalidAvailability(errors.New("Cluster fleet/w spec.maintenanceWindow.timeZone: unknown time zone \"Mars/Olympus\""))
	strategy := StagedStrategy{Stages: []Stage{{Name: "all", LabelSelector: &Selector{}, MaxConcurrency: Int(2)}}}
	res := Step(&Run{Name: "r", Revision: 2, Action: ActionRun, Strategy: strategy}, fleet, nil, t0)
	if diff := cmp.Diff([]string{"x"}, res.Release); diff != "" {
		t.Fatalf("release (-want +got):\n%s", diff)
	}
	c := res.Status.Stages[0].Groups[0].Clusters[0]
	if c.State != RunPending || !strings.Contains(c.Message, "no work starts while the maintenance window is invalid: Cluster fleet/w spec.maintenanceWindow.timeZone") {
		t.Errorf("invalid-window cluster: %s %q", c.State, c.Message)
	}
	if a := InvalidAvailability(errors.New("x")); a.OpenAt(t0) || a.windowRank(t0) != 3 {
		t.Error("an invalid availability is open, or ranked as opening")
	}
	if _, ok := InvalidAvailability(errors.New("x")).NextOpening(t0); ok {
		t.Error("an invalid availability has a next opening")
	}
}

// R1.13 and R1.11 in staged runs: a paused bundle starts no cluster, a paused cluster and one
// whose agent is offline wait Pending with the reason, the others go on; a cluster in flight
// whose agent goes offline fails at the cluster timeout saying so.
func TestR1_13_R1_11_RunsHoldPausedAndOfflineClusters(t *testing.T) {
	strategy := StagedStrategy{Stages: []Stage{{Name: "all", LabelSelector: sel("env=prod"), MaxConcurrency: Int(3)}}}
	start := func(paused bool, change func(fleet []RunCluster)) (*Run, []RunCluster, StepResult) {
		fleet := runFleet("a:env=prod", "b:env=prod", "c:env=prod")
		change(fleet)
		run := &Run{Name: "web-9", Revision: 2, Action: ActionRun, Strategy: strategy, Paused: paused}
		res := Step(run, fleet, nil, t0)
		run.Status = res.Status
		return run, fleet, res
	}
	clusterState := func(res StepResult, name string) (RunState, string) {
		for _, c := range res.Status.Stages[0].Groups[0].Clusters {
			if c.Name == name {
				return c.State, c.Message
			}
		}
		return "", ""
	}

	run, fleet, res := start(false, func(f []RunCluster) { f[0].Paused, f[1].Offline = true, true })
	if diff := cmp.Diff([]string{"c"}, res.Release); diff != "" {
		t.Errorf("a paused and an offline cluster beside a ready one (-want +got released):\n%s", diff)
	}
	for name, want := range map[string]string{"a": "cluster paused (R1.13)", "b": "agent offline: starts when it is back (R1.11)"} {
		if state, msg := clusterState(res, name); state != RunPending || msg != want {
			t.Errorf("cluster %s: %s %q, want Pending %q", name, state, msg, want)
		}
	}
	fleet[0].Paused, fleet[1].Offline = false, false
	res = Step(run, fleet, nil, t0.Add(time.Minute))
	if !slices.Contains(res.Release, "a") || !slices.Contains(res.Release, "b") {
		t.Errorf("unpaused and back online, released %v; want a and b too", res.Release)
	}

	_, _, res = start(true, func([]RunCluster) {})
	if len(res.Release) != 0 {
		t.Errorf("a paused bundle's run released %v", res.Release)
	}
	if state, msg := clusterState(res, "c"); state != RunPending || msg != "bundle paused: nothing new starts (R1.13)" {
		t.Errorf("a paused bundle's cluster: %s %q", state, msg)
	}

	run, fleet, _ = start(false, func([]RunCluster) {})
	fleet[2].Offline = true
	timeout := strategy.clusterTimeout()
	res = Step(run, fleet, nil, t0.Add(timeout))
	if state, msg := clusterState(res, "c"); state != RunFailed || !strings.Contains(msg, "agent offline (R1.11)") {
		t.Errorf("a cluster in flight whose agent went offline, at the timeout: %s %q", state, msg)
	}
}

// R3.4: a TimedWait after a stage whose clusters were all skipped (already on the revision)
// waits its full time from the stage's end, instead of ending at once.
func TestR3_4_TimedWaitAfterAnAllSkippedStage(t *testing.T) {
	strategy := StagedStrategy{Stages: []Stage{
		{Name: "staging", LabelSelector: sel("env=staging"), AfterStageTasks: []Task{{Type: TaskTimedWait, WaitTime: dur(time.Hour)}}},
		{Name: "prod", LabelSelector: sel("env=prod")},
	}}
	fleet := runFleet("s1:env=staging", "p1:env=prod")
	fleet[0].Deployment = &Deployment{Staged: 2, Released: 2, Applied: 2, Ready: true} // already on revision 2
	run := &Run{Name: "web-10", Revision: 2, Action: ActionRun, Strategy: strategy}
	res := Step(run, fleet, nil, t0)
	run.Status = res.Status
	if len(res.Release) != 0 || !res.WakeAt.Equal(t0.Add(time.Hour)) {
		t.Fatalf("right after the skipped stage: released %v, wake at %s; want nothing before the hour's wait", res.Release, res.WakeAt)
	}
	if res = Step(run, fleet, nil, t0.Add(time.Hour)); !slices.Contains(res.Release, "p1") {
		t.Errorf("after the wait: released %v, want p1", res.Release)
	}
}

// R3.11, Pending propagating up as in Azure's runs: a group none of whose clusters started
// (their windows are closed) is Pending with the first one's reason, a stage whose groups all
// are is Pending, and so is the run. Once one group's cluster starts, that group and its stage
// run again, and the stage's start is the first one.
func TestR3_11_PendingPropagatesFromClustersToTheRun(t *testing.T) {
	strategy := StagedStrategy{Stages: []Stage{{Name: "prod", LabelSelector: sel("env=prod"), Groups: []StageGroup{
		{Name: "eu", Selector: "zone=eu"}, {Name: "us", Selector: "zone=us"},
	}}}}
	fleet := runFleet("eu-1:env=prod,zone=eu", "us-1:env=prod,zone=us")
	// eu opens at 13:00 (in an hour), us at 14:00.
	fleet[0].Availability = mustAvailability(t, &Availability{Window: &Window{Schedule: "0 13 * * *", Duration: Duration(time.Hour)}})
	fleet[1].Availability = mustAvailability(t, &Availability{Window: &Window{Schedule: "0 14 * * *", Duration: Duration(time.Hour)}})
	run := &Run{Name: "r", Revision: 2, Action: ActionRun, Strategy: strategy}
	res := Step(run, fleet, nil, t0)
	stage := res.Status.Stages[0]
	if res.Status.State != RunPending || stage.State != RunPending {
		t.Fatalf("run %s, stage %s: want both Pending while every group waits", res.Status.State, stage.State)
	}
	for _, g := range stage.Groups {
		if g.State != RunPending || !strings.Contains(g.Message, g.Name+"-1: maintenance window closed") {
			t.Errorf("group %s: %s %q, want Pending naming its cluster's window", g.Name, g.State, g.Message)
		}
	}
	run.Status = res.Status
	res = Step(run, fleet, nil, t0.Add(time.Hour+time.Minute))
	stage = res.Status.Stages[0]
	if res.Status.State != RunRunning || stage.State != RunRunning || stage.Groups[0].State != RunRunning || stage.Groups[1].State != RunPending {
		t.Errorf("at 13:01: run %s, stage %s, eu %s, us %s; want Running, Running, Running, Pending",
			res.Status.State, stage.State, stage.Groups[0].State, stage.Groups[1].State)
	}
	if !stage.StartedAt.Equal(t0) {
		t.Errorf("the stage's start moved to %s: it started at %s", stage.StartedAt, t0)
	}
}
