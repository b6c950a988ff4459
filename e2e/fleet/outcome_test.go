package fleet

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/agent"
	"github.com/flotilla-dev/flotilla/e2e/controlplane"
	"github.com/flotilla-dev/flotilla/e2e/gitserver"
	"github.com/flotilla-dev/flotilla/hub"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/events"
	"github.com/flotilla-dev/flotilla/hub/report"
)

// Outcome-gated rollouts (ROLLOUT.md §5) on workload clusters with real agents: a revision that
// fails is rolled back on exactly the clusters that received it, stays quarantined, and a fixing
// commit rolls out as any other.

// regressAfter is how long after becoming Ready the pods of a failing revision turn unready.
const regressAfter = "30s"

// labelledManifest is webManifest with a label on the pods, as the kwok stages read it.
func labelledManifest(image, label, value string) string {
	return strings.Replace(webManifest(image), "labels: {app: web}}", fmt.Sprintf("labels: {app: web, %s: %q}}", label, value), 1)
}

// releasesOf records, per cluster, each revision its deployment was released and when.
type releasesOf map[string]v1alpha1.BundleDeployment

func snapshotDeployments(t *testing.T, f *fleetEnv) releasesOf {
	t.Helper()
	out := releasesOf{}
	for _, w := range workloads {
		out[w.Name] = deploymentOn(t, f, w.Name)
	}
	return out
}

// unchangedSince reports whether a cluster's release is the one it had in before: neither
// released anew nor restored (its release time would have moved).
func (before releasesOf) unchangedSince(t *testing.T, f *fleetEnv, cluster string) bool {
	now := deploymentOn(t, f, cluster)
	b := before[cluster]
	return released(now) == released(b) && now.Spec.ReleasedAt.Equal(b.Spec.ReleasedAt)
}

// showDeployments dumps every workload cluster's deployment of the bundle, for a wait that
// timed out.
func showDeployments(t *testing.T, f *fleetEnv) func() string {
	return func() string {
		var b strings.Builder
		for _, w := range workloads {
			bd := deploymentOn(t, f, w.Name)
			fmt.Fprintf(&b, "%s: spec %+v\n  status applied %d ready %v readyAt %v conditions %+v\n", w.Name, bd.Spec, bd.Status.AppliedRevision, bd.Status.Ready, bd.Status.ReadyAt, bd.Status.Conditions)
		}
		return b.String()
	}
}

// bundleStory is what `kubectl get events -n <fleet namespace>` tells of the hub.
func bundleStory(t *testing.T, f *fleetEnv) events.Story {
	return eventsOf(t, f, f.ns, hub.EventsController)
}

// expectRolledBack waits until the bundle's revision rev is rolled back, quarantined, and said
// so on the Bundle, the GitRepo and in the Events (R5.5, R5.6); the failing clusters are named.
func expectRolledBack(t *testing.T, f *fleetEnv, rev int64, failing ...string) {
	t.Helper()
	eventually(t, fmt.Sprintf("revision %d is rolled back and quarantined", rev), 2*time.Minute, func() bool {
		b := bundleOf(t, f, "shop-web")
		o := b.Status.Outcome
		return o != nil && o.Revision == rev && o.Outcome == v1alpha1.OutcomeRolledBack && len(b.Status.Quarantined) == 1 && b.Status.Quarantined[0].Revision == rev
	}, func() string { return fmt.Sprintf("bundle status: %+v", bundleOf(t, f, "shop-web").Status) })
	o := bundleOf(t, f, "shop-web").Status.Outcome
	for _, c := range failing {
		if !strings.Contains(strings.Join(o.Failure.Clusters, ","), c) {
			t.Errorf("the outcome's failure %+v does not name %s", o.Failure, c)
		}
	}
	waitRepo(t, f, "the GitRepo shows the rollback", func(r *v1alpha1.GitRepo) bool {
		return r.Status.Display.State == "RolledBack" && strings.Contains(r.Status.Display.Message, fmt.Sprintf("revision %d failed and was rolled back", rev))
	})
	var out strings.Builder
	if err := report.Write(context.Background(), &out, f.hub, f.ns, "shop"); err != nil {
		t.Fatal(err)
	}
	if !lineWith(out.String(), "outcome:", fmt.Sprintf("revision %d rolled back", rev)) || !lineWith(out.String(), "quarantined:", fmt.Sprintf("--revision %d", rev)) {
		t.Errorf("flotilla status does not show the outcome:\n%s", out.String())
	}
	eventually(t, "the Events tell the rollback", 30*time.Second, func() bool {
		return bundleStory(t, f).Tells(fmt.Sprintf("RollbackStarted: revision %d failed", rev), fmt.Sprintf("RolledBack: revision %d rolled back", rev))
	}, func() string { return bundleStory(t, f).String() })
}

// A revision whose pods turn unready 30 s after becoming Ready, during the canary group's soak:
// the group fails (R5.2), the rollback restores revision 1 on the canary and touches no other
// cluster (R5.4), revision 2 is quarantined (R5.5): no step of the sequence releases it. A fixing
// commit then goes through both groups.
func TestR5_1_R5_2_R5_4_R5_5_R5_6_SequenceSoakRegressionRollsBack(t *testing.T) {
	noSoak := &metav1.Duration{}
	up, f, seq := sequenceFleet(t, "seq-fail",
		v1alpha1.SequenceGroup{Name: "canary", ClusterSelector: canaryClusters, Soak: &metav1.Duration{Duration: 3 * time.Minute}},
		v1alpha1.SequenceGroup{Name: "rest", Upstream: "canary", Selector: restClusters, Soak: noSoak})
	patchSequence(t, f, seq, func(s *v1alpha1.RolloutSequenceSpec) {
		s.OnFailure = v1alpha1.FailureActionRollback
		// Revisions 1 and 3 are good: no need to soak them.
		s.Revisions = []v1alpha1.SequenceRevisionControl{
			{Index: 1, SoakOverrides: []v1alpha1.SoakOverride{{Group: "canary", Soak: *noSoak}}},
			{Index: 3, SoakOverrides: []v1alpha1.SoakOverride{{Group: "canary", Soak: *noSoak}}}}
	})
	eventually(t, "revision 1 runs everywhere", 2*time.Minute, func() bool { return availableEverywhere(t, "seq-fail", "web", "example.invalid/web:1") })
	waitRepo(t, f, "all ready", func(r *v1alpha1.GitRepo) bool { return r.Status.Display.ReadyClusters == allReady() })
	before := snapshotDeployments(t, f)

	up.Commit("main", map[string]string{"web/deployment.yaml": labelledManifest("example.invalid/web:2", controlplane.UnreadyAfterLabel, regressAfter)})
	eventually(t, "the canary soaks revision 2", 2*time.Minute, func() bool {
		return deploymentAvailable(t, workloads[0], "seq-fail", "web", "example.invalid/web:2") && groupOf(t, f, "canary", 2).State == v1alpha1.SequenceSoaking
	})
	expectRolledBack(t, f, 2, workloads[0].Name)
	eventually(t, "the canary runs revision 1 again", time.Minute, func() bool { return deploymentAvailable(t, workloads[0], "seq-fail", "web", "example.invalid/web:1") }, showDeployments(t, f))
	if st := groupOf(t, f, "canary", 2); st.State != v1alpha1.SequenceFailed || !strings.Contains(st.Message, "R5.2") {
		t.Errorf("canary group on revision 2: %s %q, want FAILED by R5.2", st.State, st.Message)
	}
	for _, w := range workloads[1:] {
		if !before.unchangedSince(t, f, w.Name) || !deploymentAvailable(t, w, "seq-fail", "web", "example.invalid/web:1") {
			t.Errorf("%s, which never received revision 2, was touched by the rollback: %+v", w.Name, deploymentOn(t, f, w.Name).Spec)
		}
	}
	if bd := deploymentOn(t, f, workloads[0].Name); released(bd) != 1 || !bd.Spec.Rollback {
		t.Errorf("the canary's deployment: released %d, rollback %v", released(bd), bd.Spec.Rollback)
	}

	up.Commit("main", map[string]string{"web/deployment.yaml": webManifest("example.invalid/web:3")})
	eventually(t, "the fix reaches every cluster", 2*time.Minute, func() bool { return availableEverywhere(t, "seq-fail", "web", "example.invalid/web:3") })
	eventually(t, "revision 3 completes", time.Minute, func() bool {
		o := bundleOf(t, f, "shop-web").Status.Outcome
		return o != nil && o.Revision == 3 && o.Outcome == v1alpha1.OutcomeCompleted
	})
}

// patchSequence changes a sequence's spec as an operator does.
func patchSequence(t *testing.T, f *fleetEnv, seq *v1alpha1.RolloutSequence, change func(*v1alpha1.RolloutSequenceSpec)) {
	t.Helper()
	ctx := context.Background()
	var s v1alpha1.RolloutSequence
	if err := f.hub.Get(ctx, client.ObjectKeyFromObject(seq), &s); err != nil {
		t.Fatal(err)
	}
	orig := s.DeepCopy()
	change(&s.Spec)
	if err := f.hub.Patch(ctx, &s, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
}

// groupOf is a sequence group's state for one revision.
func groupOf(t *testing.T, f *fleetEnv, group string, rev int64) v1alpha1.SequenceRevisionStatus {
	for _, g := range bundleOf(t, f, "shop-web").Status.Sequence {
		for _, r := range g.Revisions {
			if g.Name == group && r.Index == rev {
				return r
			}
		}
	}
	return v1alpha1.SequenceRevisionStatus{}
}

// A staged run whose canary stage regresses during its timed wait is over the stage's failure
// budget (R5.3): the run rolls back the canary, leaves the rest, which never got the revision
// (R5.4), and ends RolledBack; a person's new run of the quarantined revision releases nothing
// (R5.5), and a fixing commit's run completes.
func TestR5_3_R5_4_R5_5_StagedRunOverItsBudgetRollsBack(t *testing.T) {
	up, f, runOf := stagedFleet(t, "staged-fail",
		v1alpha1.StageConfig{Name: "canary", LabelSelector: canaryClusters,
			AfterStageTasks: []v1alpha1.StageTask{{Type: v1alpha1.TaskTimedWait, WaitTime: &metav1.Duration{Duration: 50 * time.Second}}}},
		v1alpha1.StageConfig{Name: "rest", Selector: restClusters})
	ctx := context.Background()
	var strategy v1alpha1.StagedUpdateStrategy
	if err := f.hub.Get(ctx, types.NamespacedName{Namespace: f.ns, Name: "stages"}, &strategy); err != nil {
		t.Fatal(err)
	}
	orig := strategy.DeepCopy()
	strategy.Spec.OnFailure = v1alpha1.FailureActionRollback
	if err := f.hub.Patch(ctx, &strategy, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "revision 1 runs everywhere", 3*time.Minute, func() bool { return availableEverywhere(t, "staged-fail", "web", "example.invalid/web:1") })
	eventually(t, "the run of revision 1 completes", 2*time.Minute, func() bool { return runOf("shop-web-r1").Status.State == v1alpha1.RunCompleted })
	before := snapshotDeployments(t, f)

	up.Commit("main", map[string]string{"web/deployment.yaml": labelledManifest("example.invalid/web:2", controlplane.UnreadyAfterLabel, regressAfter)})
	expectRolledBack(t, f, 2, workloads[0].Name)
	run := runOf("shop-web-r2")
	if run.Status.State != v1alpha1.RunRolledBack || run.Status.Failure == nil || !strings.Contains(run.Status.Failure.Message, "maxAllowedFailures") {
		t.Errorf("run of revision 2: %s, failure %+v: want RolledBack over the canary's budget", run.Status.State, run.Status.Failure)
	}
	eventually(t, "the canary runs revision 1 again", time.Minute, func() bool {
		return deploymentAvailable(t, workloads[0], "staged-fail", "web", "example.invalid/web:1")
	}, showDeployments(t, f))
	for _, w := range workloads[1:] {
		if !before.unchangedSince(t, f, w.Name) {
			t.Errorf("%s, which never received revision 2, was touched: %+v", w.Name, deploymentOn(t, f, w.Name).Spec)
		}
	}
	// A person's run of the quarantined revision fails at once and releases nothing.
	rev := int64(2)
	again := &v1alpha1.StagedUpdateRun{ObjectMeta: metav1.ObjectMeta{Name: "again", Namespace: f.ns},
		Spec: v1alpha1.StagedUpdateRunSpec{Bundle: "shop-web", Strategy: "stages", RevisionIndex: &rev, State: v1alpha1.RunRun}}
	if err := f.hub.Create(ctx, again); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a run of the quarantined revision fails", time.Minute, func() bool {
		st := runOf("again").Status
		return st.State == v1alpha1.RunFailed && strings.Contains(st.Message, "quarantined")
	})
	if bd := deploymentOn(t, f, workloads[0].Name); released(bd) != 1 {
		t.Errorf("the quarantined revision was released again: %+v", bd.Spec)
	}

	up.Commit("main", map[string]string{"web/deployment.yaml": webManifest("example.invalid/web:3")})
	eventually(t, "the fix's run completes", 3*time.Minute, func() bool { return runOf("shop-web-r3").Status.State == v1alpha1.RunCompleted })
	if !availableEverywhere(t, "staged-fail", "web", "example.invalid/web:3") {
		t.Errorf("the fix does not run everywhere")
	}
}

// A canary that never becomes Ready holds a partitioned rollout; once failureTimeout passed,
// onFailure Rollback restores revision 1 on it (R5.3, R5.4); the rest partition never received
// revision 2 and is untouched. A fixing commit rolls out normally.
func TestR5_3_R5_4_PartitionedRolloutPastFailureTimeoutRollsBack(t *testing.T) {
	up, f := deployWeb(t, canaryFirst("parts-fail", "onFailure: Rollback", "failureTimeout: 20s"))
	before := snapshotDeployments(t, f)
	up.Commit("main", map[string]string{"web/deployment.yaml": labelledManifest("example.invalid/web:2", controlplane.NeverReadyLabel, "true")})
	eventually(t, "the canary receives revision 2", time.Minute, func() bool { return released(deploymentOn(t, f, workloads[0].Name)) == 2 })
	expectRolledBack(t, f, 2, workloads[0].Name)
	eventually(t, "the canary runs revision 1 again", time.Minute, func() bool { return deploymentAvailable(t, workloads[0], "parts-fail", "web", "example.invalid/web:1") }, showDeployments(t, f))
	for _, w := range workloads[1:] {
		if !before.unchangedSince(t, f, w.Name) {
			t.Errorf("%s, which never received revision 2, was touched: %+v", w.Name, deploymentOn(t, f, w.Name).Spec)
		}
	}
	up.Commit("main", map[string]string{"web/deployment.yaml": webManifest("example.invalid/web:3")})
	eventually(t, "the fix reaches every cluster", 2*time.Minute, func() bool { return availableEverywhere(t, "parts-fail", "web", "example.invalid/web:3") })
	waitRepo(t, f, "all ready after the fix", func(r *v1alpha1.GitRepo) bool {
		return r.Status.Display.ReadyClusters == allReady() && r.Status.Display.State == "Ready"
	})
}

// R5.4 for a first deployment: the canary had no earlier revision, so its rollback removes the
// bundle (the agent uninstalls it and says so in the cluster's namespace); the rest never
// received revision 1 and have no deployment of it.
func TestR5_4_AFirstDeploymentRollsBackToNothing(t *testing.T) {
	fleetYAML := canaryFirst("first-fail", "onFailure: Rollback", "failureTimeout: 15s")
	up := gitserver.New(t)
	up.Commit("main", map[string]string{"web/fleet.yaml": fleetYAML, "web/deployment.yaml": labelledManifest("example.invalid/web:1", controlplane.NeverReadyLabel, "true")})
	srv := up.ServeHTTP("", "")
	f := startFleet(t)
	createRepo(t, f, srv.URL+"/repo.git", map[string]string{"env": "prod"})
	canary := workloads[0]
	deployment := func() error {
		_, err := kubernetes.NewForConfigOrDie(canary.Config()).AppsV1().Deployments("first-fail").Get(context.Background(), "web", metav1.GetOptions{})
		return err
	}
	eventually(t, "the canary runs revision 1", time.Minute, func() bool { return deployment() == nil })
	expectRolledBack(t, f, 1, canary.Name)
	eventually(t, "the canary's agent removed the bundle", time.Minute, func() bool { return apierrors.IsNotFound(deployment()) }, showDeployments(t, f))
	if bd := deploymentOn(t, f, canary.Name); bd.Spec.Released != nil || !bd.Spec.Rollback {
		t.Errorf("the canary's deployment after the rollback: %+v", bd.Spec)
	}
	for _, w := range workloads[1:] {
		if bd := deploymentOn(t, f, w.Name); bd.Spec.Released != nil {
			t.Errorf("%s received revision 1 although the canary never became ready: %+v", w.Name, bd.Spec)
		}
	}
	eventually(t, "the canary's namespace tells the removal", 30*time.Second, func() bool {
		return eventsOf(t, f, f.clusterNamespaces[canary.Name], agent.EventsController).Tells("RevisionApplied: revision 1 applied", "RolledBack: revision 1 removed")
	}, func() string {
		return eventsOf(t, f, f.clusterNamespaces[canary.Name], agent.EventsController).String()
	})
}
