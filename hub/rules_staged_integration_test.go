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
	if st := f.run(run).Status; !slices.Equal(st.UnstagedClusters, []string{"c-3"}) {
		t.Errorf("the run must report the cluster that joined after it started: %v", st.UnstagedClusters)
	}
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
