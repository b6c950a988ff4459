package hub

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/e2e/stale"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/contentstore"
	"github.com/flotilla-dev/flotilla/hub/deploy"
	"github.com/flotilla-dev/flotilla/hub/liveness"
	"github.com/flotilla-dev/flotilla/hub/model"
	"github.com/flotilla-dev/flotilla/hub/strategy"
	"github.com/flotilla-dev/flotilla/rollout"
)

// R3.4, R3.8: a step of a run decided on a copy the cache shows a moment late releases nothing.
// Its status write, conditional on that copy, fails and the step is taken again; a release made
// before could not be taken back. Played as a randomized plan comparison once met it on a
// loaded machine: a cluster waiting for its maintenance window (Pending in the late copy) was
// released and reported Ready meanwhile; on the late copy it read "already on revision 2", the
// stage's timed wait counted from the stage's earlier cluster and was long over, and the next
// stage was released five minutes early.
func TestR3_4_R3_8_AStepOnALateCopyOfItsRunReleasesNothing(t *testing.T) {
	const run = "shop-web-r2"
	clock := &simClock{at: rollout.SimStart} // 09:00
	labels := map[string]map[string]string{"first": {"ring": "s0"}, "windowed": {"ring": "s0"}, "next": {"ring": "s1"}}
	noon := v1alpha1.ClusterSpec{MaintenanceWindow: &v1alpha1.CronWindow{Schedule: "0 12 * * *", Duration: metav1.Duration{Duration: time.Hour}}}
	f := newSimFleetOf(t, Options{Clock: clock.now}, "defaultNamespace: web\n", labels, map[string]v1alpha1.ClusterSpec{"windowed": noon})
	f.until("revision 1 is released everywhere", func() bool { return len(f.released(1)) == 3 })
	f.reportApplied(true, rollout.SimStart.Add(-time.Hour), "first", "windowed", "next")
	strategySpec := v1alpha1.StagedUpdateStrategySpec{Stages: []v1alpha1.StageConfig{
		{Name: "s0", Selector: "ring=s0", MaxConcurrency: ptrTo(intstr.FromInt32(1)),
			AfterStageTasks: []v1alpha1.StageTask{{Type: v1alpha1.TaskTimedWait, WaitTime: &metav1.Duration{Duration: 5 * time.Minute}}}},
		{Name: "s1", Selector: "ring=s1"},
	}}
	if err := f.c.Create(context.Background(), &v1alpha1.StagedUpdateStrategy{ObjectMeta: metav1.ObjectMeta{Name: "rings", Namespace: f.ns}, Spec: strategySpec}); err != nil {
		t.Fatal(err)
	}
	f.commit("2", "defaultNamespace: web\nstagedUpdate: {strategy: rings, autoRun: true}\n")
	f.until("stage s0 starts with the cluster outside a window", func() bool { return slices.Equal(f.released(2), []string{"first"}) })

	clock.advance(30 * time.Second)
	f.reportApplied(true, clock.now(), "first")
	f.pokeRun(run)
	f.until("the first cluster completes while the windowed one waits for noon", func() bool {
		return slices.Equal(f.runClustersIn(run, v1alpha1.RunCompleted), []string{"first"}) && slices.Equal(f.runClustersIn(run, v1alpha1.RunPending), []string{"windowed"})
	})
	late := f.run(run)

	clock.advance(3*time.Hour - 30*time.Second) // noon: the window opens
	f.pokeRun(run)
	f.until("the windowed cluster is released at noon", func() bool { return slices.Equal(f.released(2), []string{"first", "windowed"}) })
	clock.advance(30 * time.Second)
	f.reportApplied(true, clock.now(), "windowed")
	f.pokeRun(run)
	f.until("stage s0 completes and waits five minutes", func() bool {
		return slices.Equal(f.runClustersIn(run, v1alpha1.RunCompleted), []string{"first", "windowed"})
	})

	// The hub's run controller, on a cache that shows the fleet as it is and the run as it was
	// before noon.
	live, cached := f.c, indexedClient(t)
	waitUntil(t, "the cache shows the windowed cluster Ready on revision 2", func() bool {
		bd := deploymentsOf(t, cached, f.ns, "shop-web")["windowed"]
		return bd.Spec.Released != nil && bd.Spec.Released.Index == 2 && bd.Status.AppliedDeploymentID == bd.Spec.Released.DeploymentID && bd.Status.ReadyAt != nil
	})
	runs := &strategy.RunReconciler{Client: stale.Reads[v1alpha1.StagedUpdateRun, *v1alpha1.StagedUpdateRun]{Client: cached, Copy: late}, Uncached: live, Live: liveness.New(nil, 0, 0, nil), Released: &deploy.Releases{},
		Revisions: &model.RevisionStore{Content: &contentstore.Store{Client: live}}, Now: clock.now}
	if _, err := runs.Reconciler().Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(late)}); err != nil {
		t.Fatal(err)
	}
	if got := f.released(2); !slices.Equal(got, []string{"first", "windowed"}) {
		t.Errorf("a step on the late copy released %v; want only first and windowed (stage s1 waits until 12:05:30)", got)
	}
	if got := f.runClustersIn(run, v1alpha1.RunNotStarted); !slices.Equal(got, []string{"next"}) {
		t.Errorf("stage s1's clusters not started: %v, want [next]", got)
	}
}

// R1.12, R1.13, R3.2: a staged run's update writes each cluster's deployment once. The bundler leaves
// the clusters that have a deployment as they are (each OutOfSync, its older revision staged),
// and a stage stages and releases the revision from its record in one write when it reaches
// them; staging every cluster at the commit and releasing it later was two.
func TestR1_12_R1_13_R3_2_AStagedUpdateWritesEachDeploymentOnce(t *testing.T) {
	const run = "shop-web-r2"
	clock := &simClock{at: rollout.SimStart}
	labels := map[string]map[string]string{"a": {"ring": "s0"}, "b": {"ring": "s1"}, "c": {"ring": "s1"}}
	f := newSimFleet(t, Options{Clock: clock.now}, "defaultNamespace: web\n", labels)
	f.until("revision 1 is released everywhere", func() bool { return len(f.released(1)) == 3 })
	f.reportApplied(true, clock.now(), "a", "b", "c")
	before := f.deployments()
	strategySpec := v1alpha1.StagedUpdateStrategySpec{Stages: []v1alpha1.StageConfig{
		{Name: "s0", Selector: "ring=s0", AfterStageTasks: []v1alpha1.StageTask{{Type: v1alpha1.TaskTimedWait, WaitTime: &metav1.Duration{Duration: 5 * time.Minute}}}},
		{Name: "s1", Selector: "ring=s1", MaxConcurrency: ptrTo(intstr.FromString("100%"))},
	}}
	if err := f.c.Create(context.Background(), &v1alpha1.StagedUpdateStrategy{ObjectMeta: metav1.ObjectMeta{Name: "rings", Namespace: f.ns}, Spec: strategySpec}); err != nil {
		t.Fatal(err)
	}
	f.commit("2", "defaultNamespace: web\nstagedUpdate: {strategy: rings, autoRun: true}\n")
	f.until("stage s0 releases revision 2 to a", func() bool { return slices.Equal(f.released(2), []string{"a"}) })
	f.until("the bundle counts b and c OutOfSync", func() bool { return f.getBundle().Status.Summary.OutOfSync == 2 })
	for name, bd := range f.deployments() {
		if name != "a" && (bd.Spec.Staged.Index != 1 || bd.Generation != before[name].Generation) {
			t.Errorf("%s was written before its stage reached it: generation %d → %d, staged %d", name, before[name].Generation, bd.Generation, bd.Spec.Staged.Index)
		}
	}

	clock.advance(30 * time.Second)
	f.reportApplied(true, clock.now(), "a")
	f.pokeRun(run)
	f.until("a completes", func() bool { return slices.Equal(f.runClustersIn(run, v1alpha1.RunCompleted), []string{"a"}) })
	clock.advance(5 * time.Minute)
	f.pokeRun(run)
	f.until("stage s1 releases revision 2 to b and c", func() bool { return len(f.released(2)) == 3 })
	for name, bd := range f.deployments() {
		if rel := bd.Spec.Released; rel == nil || *rel != bd.Spec.Staged || bd.Spec.Staged.Index != 2 || bd.Generation != before[name].Generation+1 {
			t.Errorf("%s: revision 2 must be staged and released in one write: generation %d → %d, %+v", name, before[name].Generation, bd.Generation, bd.Spec)
		}
	}

	// R1.13: a paused staged bundle still receives its revisions, staged on every cluster.
	f.commit("3", "paused: true\ndefaultNamespace: web\nstagedUpdate: {strategy: rings, autoRun: true}\n")
	f.until("revision 3 is staged on a, b and c, released nowhere", func() bool {
		bds := f.deployments()
		for _, bd := range bds {
			if bd.Spec.Staged.Index != 3 {
				return false
			}
		}
		return len(bds) == 3
	})
	if got := f.released(3); len(got) != 0 {
		t.Errorf("a paused bundle released revision 3 to %v", got)
	}
}

// R1.12, R3.7, §0: a staged run's first deployment writes each cluster's deployment once. The
// bundler creates none; the run's members are its revision's record from its first step (its
// stages name every cluster, none left out to join later); the clusters its stages have not
// reached have no deployment and the bundle counts them Pending; a stage creates each one
// staged and released in one write.
func TestR1_12_R3_7_AStagedFirstDeploymentCreatesEachDeploymentReleased(t *testing.T) {
	const run = "shop-web-r1"
	labels := map[string]map[string]string{"a": {"ring": "s0"}, "b": {"ring": "s1"}, "c": {"ring": "s1"}}
	f := newSimFleet(t, Options{}, "defaultNamespace: web\nstagedUpdate: {strategy: rings, autoRun: true}\n", labels)
	f.createStrategy("rings",
		v1alpha1.StageConfig{Name: "s0", Selector: "ring=s0"},
		v1alpha1.StageConfig{Name: "s1", Selector: "ring=s1", MaxConcurrency: ptrTo(intstr.FromString("100%")),
			BeforeStageTasks: []v1alpha1.StageTask{{Type: v1alpha1.TaskApproval}}})
	f.until("stage s0 releases revision 1 to a", func() bool { return slices.Equal(f.released(1), []string{"a"}) })
	f.ready("a")
	f.until("stage s1 waits for its approval", func() bool {
		st := f.run(run).Status
		return len(st.Stages) == 2 && st.Stages[0].State == v1alpha1.RunCompleted
	})
	if got := f.runClustersIn(run, v1alpha1.RunNotStarted); !slices.Equal(got, []string{"b", "c"}) {
		t.Errorf("clusters of the run not started: %v, want b and c (the run's members are its revision's record)", got)
	}
	f.until("the bundle counts b and c Pending", func() bool {
		s := f.getBundle().Status.Summary
		return s.Pending == 2 && s.Ready == 1 && s.DesiredReady == 3
	})
	if bds := f.deployments(); len(bds) != 1 {
		t.Errorf("deployments before stage s1 reached its clusters: %v, want a's alone", slices.Sorted(maps.Keys(bds)))
	}

	r := f.run(run)
	orig := r.DeepCopy()
	r.Spec.Skips = append(r.Spec.Skips, v1alpha1.RunSkip{Stage: "s1", Gate: "Before"})
	if err := f.c.Patch(context.Background(), r, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	f.until("stage s1 releases revision 1 to b and c", func() bool { return len(f.released(1)) == 3 })
	for name, bd := range f.deployments() {
		if rel := bd.Spec.Released; rel == nil || *rel != bd.Spec.Staged || bd.Spec.Staged.Index != 1 || bd.Generation != 1 {
			t.Errorf("%s: revision 1 must be created staged and released in one write: generation %d, %+v", name, bd.Generation, bd.Spec)
		}
	}
}

// R1.12, R4.1, §0: a sequence's first deployment writes each cluster's deployment once: a group
// the sequence has not reached has no deployment (its clusters Pending), and reaching it
// creates each one staged and released.
func TestR1_12_R4_1_ASequenceFirstDeploymentCreatesEachDeploymentReleased(t *testing.T) {
	labels := map[string]map[string]string{"d1": {"tier": "dev"}, "p1": {"tier": "prod"}, "p2": {"tier": "prod"}}
	f := newSimFleet(t, Options{}, "defaultNamespace: web\nsequence: {name: chain}\n", labels)
	f.createSequence("chain", v1alpha1.RolloutSequenceSpec{Groups: []v1alpha1.SequenceGroup{
		{Name: "dev", Selector: "tier=dev", Soak: &metav1.Duration{}},
		{Name: "prod", Upstream: "dev", Selector: "tier=prod", Soak: &metav1.Duration{}},
	}})
	f.until("dev receives revision 1", func() bool { return f.onRevision(1, "d1") })
	f.until("the bundle counts p1 and p2 Pending", func() bool {
		s := f.getBundle().Status.Summary
		return s.Pending == 2 && s.DesiredReady == 3
	})
	if bds := f.deployments(); len(bds) != 1 {
		t.Errorf("deployments before the sequence reached prod: %v, want d1's alone", slices.Sorted(maps.Keys(bds)))
	}
	f.ready("d1")
	f.until("prod receives revision 1", func() bool { return f.onRevision(1, "p1", "p2") })
	for name, bd := range f.deployments() {
		if rel := bd.Spec.Released; rel == nil || *rel != bd.Spec.Staged || bd.Spec.Staged.Index != 1 || bd.Generation != 1 {
			t.Errorf("%s: revision 1 must be created staged and released in one write: generation %d, %+v", name, bd.Generation, bd.Spec)
		}
	}
}
