package hub

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/operate"
)

// run reads a StagedUpdateRun of the fleet's namespace; a zero run while it does not exist.
func (f *simFleet) run(name string) *v1alpha1.StagedUpdateRun {
	var r v1alpha1.StagedUpdateRun
	if err := f.c.Get(context.Background(), types.NamespacedName{Namespace: f.ns, Name: name}, &r); err != nil {
		return &v1alpha1.StagedUpdateRun{}
	}
	return &r
}

// failApply reports what an agent reports when it could not apply the release.
func (f *simFleet) failApply(clusters ...string) {
	f.t.Helper()
	bds := f.deployments()
	for _, name := range clusters {
		bd := bds[name]
		orig := bd.DeepCopy()
		meta.SetStatusCondition(&bd.Status.Conditions, metav1.Condition{Type: v1alpha1.AppliedCondition, Status: metav1.ConditionFalse, Reason: "ApplyFailed", Message: "admission webhook denied the request"})
		if err := f.c.Status().Patch(context.Background(), &bd, client.MergeFrom(orig)); err != nil {
			f.t.Fatal(err)
		}
	}
}

// A staged run through the real hub, with each part of §3 in play: the strategy referenced by
// name (R3.1); the canary stage's clusters in the order of their sorting label, one at a time
// (R3.2, R3.3); a timed wait after it (R3.4); the next stage selected in string form (R3.6),
// held by a ScheduledStart gate that a person completes early (R3.12), while the run says it
// is Pending (R3.11); its two groups in parallel (R3.5), each one cluster at a time; a failed
// cluster within its group's budget of 50% of 2 (rounded up: 1) does not stop the group, and
// the run completes counting it (R3.10); stages strictly one after the other (R3.8). A cluster
// that joins afterwards is not pulled into the run but gets what its stage reached (R3.7).
func TestR3_1_R3_2_R3_3_R3_4_R3_5_R3_6_R3_7_R3_8_R3_10_R3_12_StagedRunThroughTheHub(t *testing.T) {
	fleet := "defaultNamespace: web\nstagedUpdate: {strategy: stages, autoRun: true}\n"
	clusters := map[string]map[string]string{
		"c-1": {"ring": "canary", "order": "2"}, "c-2": {"ring": "canary", "order": "1"},
		"m-1": {"ring": "main", "zone": "eu"}, "m-2": {"ring": "main", "zone": "eu"}, "m-3": {"ring": "main", "zone": "us"},
	}
	f := newSimFleet(t, Options{}, fleet, clusters)
	ctx := context.Background()
	one := intstr.FromInt32(1)
	strategy := &v1alpha1.StagedUpdateStrategy{ObjectMeta: metav1.ObjectMeta{Name: "stages", Namespace: f.ns}, Spec: v1alpha1.StagedUpdateStrategySpec{Stages: []v1alpha1.StageConfig{
		{Name: "canary", LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"ring": "canary"}}, SortingLabelKey: "order", MaxConcurrency: &one,
			AfterStageTasks: []v1alpha1.StageTask{{Type: v1alpha1.TaskTimedWait, WaitTime: &metav1.Duration{Duration: time.Second}}}},
		{Name: "main", Selector: "ring=main,zone in (eu, us)",
			BeforeStageTasks: []v1alpha1.StageTask{{Type: v1alpha1.TaskScheduledStart, ScheduledStart: &v1alpha1.ScheduledStart{At: &metav1.Time{Time: time.Now().Add(time.Hour)}}}},
			Groups: []v1alpha1.StageGroup{
				{Name: "eu", Selector: "zone=eu", MaxAllowedFailures: ptrTo(intstr.FromString("50%"))},
				{Name: "us", LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"zone": "us"}}},
			}},
	}}}
	if err := f.c.Create(ctx, strategy); err != nil {
		t.Fatal(err)
	}
	const run = "shop-web-r1"

	f.until("the canary with the lowest order is released first, alone", func() bool { return len(f.released(1)) > 0 })
	if got := f.released(1); !slices.Equal(got, []string{"c-2"}) {
		t.Fatalf("first release %v, want c-2 alone (order 1, maxConcurrency 1)\n%s", got, f.dump())
	}
	f.ready("c-2")
	f.until("c-1 follows", func() bool { return slices.Equal(f.released(1), []string{"c-1", "c-2"}) })
	f.ready("c-1")
	f.until("the run waits for the scheduled start of stage main, Pending", func() bool {
		st := f.run(run).Status
		return st.State == v1alpha1.RunPending && strings.Contains(st.Message, "stage main: scheduled to start at")
	})
	st := f.run(run).Status
	if canary := st.Stages[0]; canary.State != v1alpha1.RunCompleted || len(canary.AfterTasks) != 1 || canary.AfterTasks[0].State != v1alpha1.RunCompleted {
		t.Errorf("the canary stage and its timed wait must be done before stage main is reached: %+v", canary)
	}
	if got := f.released(1); len(got) != 2 {
		t.Fatalf("stage main released before its gate opened: %v", got)
	}
	// A person completes the gate early.
	r := f.run(run)
	orig := r.DeepCopy()
	r.Spec.Skips = append(r.Spec.Skips, v1alpha1.RunSkip{Stage: "main", Gate: "Before"})
	if err := f.c.Patch(ctx, r, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	f.until("both groups of stage main start, one cluster each", func() bool {
		got := f.released(1)
		return slices.Contains(got, "m-1") && slices.Contains(got, "m-3")
	})
	if slices.Contains(f.released(1), "m-2") {
		t.Fatalf("group eu released two clusters at once:\n%s", f.dump())
	}
	f.failApply("m-1")
	f.until("m-2 follows the failed m-1 within the group's budget", func() bool { return slices.Contains(f.released(1), "m-2") })
	f.ready("m-2", "m-3")
	f.until("the run completes, counting the failure", func() bool {
		st := f.run(run).Status
		return st.State == v1alpha1.RunCompleted && st.FailureCount == 1
	})

	// A canary cluster joining now gets what its stage reached, without a new revision or run.
	registerCluster(t, f.c, f.ns, "c-3", map[string]string{"ring": "canary", "order": "3"})
	f.until("the joining canary receives revision 1", func() bool { return slices.Contains(f.released(1), "c-3") })
	if b := f.getBundle(); b.Spec.LatestRevision != 1 || f.run("shop-web-r2").Name != "" {
		t.Errorf("a joining cluster made revision %d and run %q: it must take the latest revision as it is", b.Spec.LatestRevision, f.run("shop-web-r2").Name)
	}
	// The release and the run's status are two writes: wait for the second.
	f.until("the run reports the cluster that joined after it started", func() bool {
		return slices.Equal(f.run(run).Status.UnstagedClusters, []string{"c-3"})
	})
}

func ptrTo[T any](v T) *T { return &v }

// R3.14 for every run: one rollout per bundle, the newest intent holding. A person's run
// supersedes the automatic run in flight, which stops and releases nothing more; the next
// commit's automatic run then supersedes the person's run in flight, which lets go of the
// cluster the new run took over.
func TestR3_14_OnePersonsRunGivesWayToTheNextCommit(t *testing.T) {
	f := newSimFleet(t, Options{}, "defaultNamespace: web\nstagedUpdate: {strategy: one-by-one, autoRun: true}\n", clustersNamed(nil, "a", "b"))
	ctx := context.Background()
	strategy := &v1alpha1.StagedUpdateStrategy{ObjectMeta: metav1.ObjectMeta{Name: "one-by-one", Namespace: f.ns}, Spec: v1alpha1.StagedUpdateStrategySpec{
		Stages: []v1alpha1.StageConfig{{Name: "all", LabelSelector: &metav1.LabelSelector{}}}}}
	if err := f.c.Create(ctx, strategy); err != nil {
		t.Fatal(err)
	}
	f.until("a receives revision 1", func() bool { return f.onRevision(1, "a") })
	f.ready("a")
	f.until("b receives revision 1", func() bool { return f.onRevision(1, "b") })
	f.ready("b")
	f.until("run shop-web-r1 completes", func() bool { return f.run("shop-web-r1").Status.State == v1alpha1.RunCompleted })

	// Revision 2 is on its way to a when a person starts a run of their own.
	f.commit("2", "")
	f.until("a receives revision 2", func() bool { return f.onRevision(2, "a") })
	two := int64(2)
	mine := &v1alpha1.StagedUpdateRun{ObjectMeta: metav1.ObjectMeta{Name: "mine", Namespace: f.ns},
		Spec: v1alpha1.StagedUpdateRunSpec{Bundle: "shop-web", Strategy: "one-by-one", RevisionIndex: &two, State: v1alpha1.RunRun}}
	if err := f.c.Create(ctx, mine); err != nil {
		t.Fatal(err)
	}
	f.until("the automatic run says the person's run superseded it", func() bool {
		st := f.run("shop-web-r2").Status
		return st.SupersededBy == "mine" && meta.IsStatusConditionTrue(st.Conditions, v1alpha1.SupersededCondition) && st.State == v1alpha1.RunStopping
	})
	f.until("the person's run works on a", func() bool {
		st := f.run("mine").Status
		return st.State == v1alpha1.RunRunning && len(st.Stages) == 1 && st.Stages[0].Groups[0].Clusters[0].State == v1alpha1.RunRunning
	})

	// The next commit's run supersedes the person's run, still waiting for a.
	f.commit("3", "")
	f.until("the person's run says the next commit's run superseded it", func() bool {
		return f.run("mine").Status.SupersededBy == "shop-web-r3"
	})
	f.until("a receives revision 3", func() bool { return f.onRevision(3, "a") })
	f.until("both superseded runs let go of a and stop", func() bool {
		return f.run("mine").Status.State == v1alpha1.RunStopped && f.run("shop-web-r2").Status.State == v1alpha1.RunStopped
	})
	if f.onRevision(2, "a") || f.onRevision(2, "b") {
		t.Fatalf("a superseded run released revision 2 again:\n%s", f.dump())
	}
	f.ready("a")
	f.until("b receives revision 3", func() bool { return f.onRevision(3, "b") })
	f.ready("b")
	f.until("run shop-web-r3 completes", func() bool { return f.run("shop-web-r3").Status.State == v1alpha1.RunCompleted })
}

// runCluster is a cluster's entry in a run's status; zero while the run has none.
func (f *simFleet) runCluster(run, cluster string) v1alpha1.ClusterRunStatus {
	for _, st := range f.run(run).Status.Stages {
		for _, g := range st.Groups {
			for _, c := range g.Clusters {
				if c.Name == cluster {
					return c
				}
			}
		}
	}
	return v1alpha1.ClusterRunStatus{}
}

// runGroup is a group's entry in a run's status (a stage without groups has one, named after
// the stage); zero while the run has none.
func (f *simFleet) runGroup(run, stage, group string) v1alpha1.GroupRunStatus {
	for _, st := range f.run(run).Status.Stages {
		for _, g := range st.Groups {
			if st.Name == stage && g.Name == group {
				return g
			}
		}
	}
	return v1alpha1.GroupRunStatus{}
}

// createStrategy creates a StagedUpdateStrategy of the fleet's namespace.
func (f *simFleet) createStrategy(name string, stages ...v1alpha1.StageConfig) {
	f.t.Helper()
	s := &v1alpha1.StagedUpdateStrategy{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns}, Spec: v1alpha1.StagedUpdateStrategySpec{Stages: stages}}
	if err := f.c.Create(context.Background(), s); err != nil {
		f.t.Fatal(err)
	}
}

// R3.13 through the hub, on a simulated clock at 01:59:58 UTC: in a stage going one cluster at
// a time by the label order, the cluster whose window is open goes first although its order
// is last, then the one without a window; the one whose window opens at 02:00 waits, named
// with its opening, and the hub starts it by itself once the clock gets there; a cluster in an
// exclusion and one whose window does not compile are held, each saying why (fail closed).
func TestR3_13_WindowsOrderAndHoldClustersThroughTheHub(t *testing.T) {
	clock := &simClock{at: time.Date(2026, 3, 2, 1, 59, 58, 0, time.UTC)}
	hour := metav1.Duration{Duration: time.Hour}
	specs := map[string]v1alpha1.ClusterSpec{
		"b-open":   {MaintenanceWindow: &v1alpha1.CronWindow{Schedule: "0 1 * * *", Duration: metav1.Duration{Duration: 2 * time.Hour}}},
		"c-soon":   {MaintenanceWindow: &v1alpha1.CronWindow{Schedule: "0 2 * * *", Duration: hour}},
		"d-bad":    {MaintenanceWindow: &v1alpha1.CronWindow{Schedule: "0 25 * * *", Duration: hour}},
		"e-frozen": {Exclusions: []v1alpha1.TimeRange{{Name: "freeze", Start: metav1.NewTime(clock.at.Add(-time.Hour)), End: metav1.NewTime(clock.at.Add(240 * time.Hour))}}},
	}
	clusters := map[string]map[string]string{
		"a-none": {"order": "1"}, "b-open": {"order": "4"}, "c-soon": {"order": "2"}, "d-bad": {"order": "3"}, "e-frozen": {"order": "0"},
	}
	f := newSimFleetOf(t, Options{Clock: clock.now}, "defaultNamespace: web\nstagedUpdate: {strategy: windows, autoRun: true}\n", clusters, specs)
	one := intstr.FromInt32(1)
	f.createStrategy("windows", v1alpha1.StageConfig{Name: "all", LabelSelector: &metav1.LabelSelector{}, SortingLabelKey: "order", MaxConcurrency: &one})
	const run = "shop-web-r1"

	f.until("the cluster whose window is open goes first", func() bool { return len(f.released(1)) > 0 })
	if got := f.released(1); !slices.Equal(got, []string{"b-open"}) {
		t.Fatalf("first release %v, want b-open: a window open now goes before a cluster without one (R3.13)\n%s", got, f.dump())
	}
	f.ready("b-open")
	f.until("then the cluster without a window", func() bool { return slices.Equal(f.released(1), []string{"a-none", "b-open"}) })
	f.ready("a-none")
	f.until("the hub has seen a-none Ready and holds the rest", func() bool { return f.runCluster(run, "a-none").State == v1alpha1.RunCompleted })
	for cluster, why := range map[string]string{
		"c-soon":   "2026-03-02T02:00:00Z",
		"d-bad":    "Cluster " + f.ns + "/d-bad spec.maintenanceWindow.schedule",
		"e-frozen": "exclusion",
	} {
		if c := f.runCluster(run, cluster); c.State != v1alpha1.RunPending || !strings.Contains(c.Message, why) {
			t.Errorf("%s: %s %q, want Pending saying %q", cluster, c.State, c.Message, why)
		}
	}
	if got := f.released(1); len(got) != 2 {
		t.Fatalf("released %v while the others' windows are closed\n%s", got, f.dump())
	}

	clock.resume()
	f.until("the hub starts c-soon when its window opens, by itself", func() bool { return slices.Contains(f.released(1), "c-soon") })
	f.ready("c-soon")
	f.until("the hub has seen c-soon Ready", func() bool { return f.runCluster(run, "c-soon").State == v1alpha1.RunCompleted })
	if got := f.released(1); slices.Contains(got, "d-bad") || slices.Contains(got, "e-frozen") {
		t.Fatalf("a cluster in an exclusion or with a broken window was started: %v\n%s", got, f.dump())
	}
}

// R3.7 through the hub: a run follows the strategy as it was when the run started. Two bundles
// share a strategy whose canary stage ends with an approval; while both runs wait there, the
// strategy is edited to drop that approval and ask for one before stage main instead. The next
// run of the second bundle follows the edit (so the hub has seen it); the first bundle's run,
// approved, goes on to main as frozen, asking nothing more.
func TestR3_7_AStrategyEditedMidRunChangesOnlyTheRunsAfter(t *testing.T) {
	fleet := "defaultNamespace: web\nstagedUpdate: {strategy: shared, autoRun: true}\n"
	f := newSimFleet(t, Options{}, fleet, map[string]map[string]string{"c1": {"ring": "canary"}, "m1": {"ring": "main"}})
	f.up.Commit("main", map[string]string{"api/fleet.yaml": strings.ReplaceAll(fleet, "web", "api"), "api/cm.yaml": configMap("1")})
	ctx := context.Background()
	canary := func(after ...v1alpha1.StageTask) v1alpha1.StageConfig {
		return v1alpha1.StageConfig{Name: "canary", Selector: "ring=canary", AfterStageTasks: after}
	}
	main := func(before ...v1alpha1.StageTask) v1alpha1.StageConfig {
		return v1alpha1.StageConfig{Name: "main", Selector: "ring=main", BeforeStageTasks: before}
	}
	approval := v1alpha1.StageTask{Type: v1alpha1.TaskApproval}
	f.createStrategy("shared", canary(approval), main())
	api := &simFleet{t: t, c: f.c, ns: f.ns, up: f.up, bundle: types.NamespacedName{Namespace: f.ns, Name: "shop-api"}}

	for _, b := range []*simFleet{f, api} {
		b.until(b.bundle.Name+" releases revision 1 to the canary", func() bool { return b.onRevision(1, "c1") })
		b.ready("c1")
	}
	waitingAfterCanary := func(run string) func() bool {
		return func() bool {
			st := f.run(run).Status
			return len(st.Stages) == 2 && len(st.Stages[0].AfterTasks) == 1 && st.Stages[0].AfterTasks[0].ApprovalRequest != ""
		}
	}
	f.until("both runs wait for the approval after the canary", func() bool {
		return waitingAfterCanary("shop-web-r1")() && waitingAfterCanary("shop-api-r1")()
	})

	var s v1alpha1.StagedUpdateStrategy
	if err := f.c.Get(ctx, types.NamespacedName{Namespace: f.ns, Name: "shared"}, &s); err != nil {
		t.Fatal(err)
	}
	orig := s.DeepCopy()
	s.Spec.Stages = []v1alpha1.StageConfig{canary(), main(approval)}
	if err := f.c.Patch(ctx, &s, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	// The second bundle's next revision starts a run on the edited strategy.
	f.up.Commit("main", map[string]string{"api/cm.yaml": configMap("2")})
	api.until("shop-api's revision 2 reaches the canary", func() bool { return api.onRevision(2, "c1") })
	api.ready("c1")
	api.until("shop-api-r2 follows the edit: it asks before stage main", func() bool {
		st := f.run("shop-api-r2").Status
		return len(st.Stages) == 2 && len(st.Stages[1].BeforeTasks) == 1 && st.Stages[1].BeforeTasks[0].ApprovalRequest != "" &&
			len(st.Stages[0].AfterTasks) == 0
	})

	if _, _, err := operate.Approve(ctx, f.c, f.ns, "shop-web-r1", operate.Gate{Stage: "canary", After: true}, "canary looks good"); err != nil {
		t.Fatal(err)
	}
	f.until("shop-web-r1 goes on to main as frozen", func() bool { return f.onRevision(1, "m1") })
	f.ready("m1")
	f.until("shop-web-r1 completes without the approval added later", func() bool {
		return f.run("shop-web-r1").Status.State == v1alpha1.RunCompleted
	})
	if st := f.run("shop-web-r1").Status; len(st.Stages[1].BeforeTasks) != 0 || len(st.Strategy.Stages[0].AfterStageTasks) != 1 {
		t.Errorf("shop-web-r1 changed its frozen strategy: %+v", st.Strategy)
	}
	if api.onRevision(2, "m1") {
		t.Errorf("shop-api-r2 went on to main without its approval:\n%s", api.dump())
	}
}

// R3.9, R3.12 on groups through the hub: group eu waits for its approval, group us for its
// scheduled start two seconds ahead on a simulated clock, and the stage and run say Pending
// (R3.11); an approval opens eu only, and us opens by itself when the clock reaches its time.
func TestR3_9_R3_11_R3_12_GroupGatesThroughTheHub(t *testing.T) {
	clock := &simClock{at: time.Date(2026, 4, 1, 9, 0, 0, 0, time.UTC)}
	f := newSimFleet(t, Options{Clock: clock.now}, "defaultNamespace: web\nstagedUpdate: {strategy: gated, autoRun: true}\n",
		map[string]map[string]string{"m-eu": {"zone": "eu"}, "m-us": {"zone": "us"}})
	at := metav1.NewTime(clock.at.Add(2 * time.Second))
	f.createStrategy("gated", v1alpha1.StageConfig{Name: "main", LabelSelector: &metav1.LabelSelector{}, Groups: []v1alpha1.StageGroup{
		{Name: "eu", Selector: "zone=eu", BeforeGroupTasks: []v1alpha1.StageTask{{Type: v1alpha1.TaskApproval}}},
		{Name: "us", Selector: "zone=us", BeforeGroupTasks: []v1alpha1.StageTask{{Type: v1alpha1.TaskScheduledStart, ScheduledStart: &v1alpha1.ScheduledStart{At: &at}}}},
	}})
	const run = "shop-web-r1"
	f.until("both groups wait at their gates", func() bool {
		eu, us := f.runGroup(run, "main", "eu"), f.runGroup(run, "main", "us")
		return len(eu.BeforeTasks) == 1 && strings.HasPrefix(eu.BeforeTasks[0].ApprovalRequest, run+"-before-main-eu-") &&
			us.State == v1alpha1.RunPending && us.Message == "scheduled to start at 2026-04-01T09:00:02Z"
	})
	if got := f.released(1); len(got) != 0 {
		t.Fatalf("released %v before any gate opened", got)
	}
	// Pending propagates up (R3.11): both groups wait, so do the stage and the run.
	if st := f.run(run).Status; st.State != v1alpha1.RunPending || st.Stages[0].State != v1alpha1.RunPending {
		t.Errorf("run %s, stage %s while every group waits at its gate: want both Pending", st.State, st.Stages[0].State)
	}
	// The gate asks for people once, with the command that opens it (what a notification says).
	asks := "StagedUpdateRun/" + run + " ApprovalRequested: group eu of stage main, before it needs 1 approval(s): flotilla approve " + run + " -n " + f.ns + " --stage main --group eu"
	f.until("the run tells that its gate needs an approval, and how to give it", func() bool { return f.story().Tells(asks) })
	if _, _, err := operate.Approve(context.Background(), f.c, f.ns, run, operate.Gate{Stage: "main", Group: "eu"}, ""); err != nil {
		t.Fatal(err)
	}
	f.until("the approval opens group eu", func() bool { return f.onRevision(1, "m-eu") })
	f.ready("m-eu")
	f.until("the hub has seen m-eu Ready", func() bool { return f.runCluster(run, "m-eu").State == v1alpha1.RunCompleted })
	if f.onRevision(1, "m-us") {
		t.Fatalf("group us started before its scheduled time:\n%s", f.dump())
	}
	clock.resume()
	f.until("group us opens by itself at its time", func() bool { return f.onRevision(1, "m-us") })
	f.ready("m-us")
	f.until("the run completes", func() bool { return f.run(run).Status.State == v1alpha1.RunCompleted })
}

// R3.10 through the hub: a stage's budget, when set, caps its groups'. Group eu tolerates
// 100% of its three clusters, but its stage tolerates one failure: the second failure in eu
// fails the stage and the group, at the stage's budget, and group us starts no new cluster.
func TestR3_10_AStageBudgetCapsItsGroups(t *testing.T) {
	f := newSimFleet(t, Options{}, "defaultNamespace: web\nstagedUpdate: {strategy: capped, autoRun: true}\n", map[string]map[string]string{
		"eu-1": {"zone": "eu"}, "eu-2": {"zone": "eu"}, "eu-3": {"zone": "eu"}, "us-1": {"zone": "us"}, "us-2": {"zone": "us"},
	})
	three, one := intstr.FromInt32(3), intstr.FromInt32(1)
	f.createStrategy("capped", v1alpha1.StageConfig{Name: "main", LabelSelector: &metav1.LabelSelector{}, MaxAllowedFailures: &one, Groups: []v1alpha1.StageGroup{
		{Name: "eu", Selector: "zone=eu", MaxConcurrency: &three, MaxAllowedFailures: ptrTo(intstr.FromString("100%"))},
		{Name: "us", Selector: "zone=us", MaxConcurrency: &one},
	}})
	const run = "shop-web-r1"
	f.until("eu starts its three clusters and us one", func() bool { return len(f.released(1)) == 4 })
	f.failApply("eu-1", "eu-2")
	f.until("the stage fails at its budget, and so does group eu, capped by it", func() bool {
		st := f.run(run).Status
		eu := f.runGroup(run, "main", "eu")
		return len(st.Stages) == 1 && st.Stages[0].State == v1alpha1.RunFailed && strings.Contains(st.Message, "stage main: 2 failures, more than maxAllowedFailures 1") &&
			eu.State == v1alpha1.RunFailed && strings.Contains(eu.Message, "group eu of stage main: 2 failures, more than maxAllowedFailures 1 (100%)")
	})
	f.ready("eu-3", "us-1")
	f.until("the hub has seen us-1 Ready", func() bool { return f.runCluster(run, "us-1").State == v1alpha1.RunCompleted })
	if f.onRevision(1, "us-2") {
		t.Fatalf("group us started a cluster after the stage failed:\n%s", f.dump())
	}
	if st := f.run(run).Status; st.FailureCount != 2 {
		t.Errorf("failureCount %d, want 2", st.FailureCount)
	}
}
