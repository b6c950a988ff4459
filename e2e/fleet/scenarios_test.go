package fleet

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/agent"
	"github.com/flotilla-dev/flotilla/e2e/controlplane"
	"github.com/flotilla-dev/flotilla/e2e/gitserver"
	"github.com/flotilla-dev/flotilla/e2e/wait"
	"github.com/flotilla-dev/flotilla/hub"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/events"
	"github.com/flotilla-dev/flotilla/hub/model"
	"github.com/flotilla-dev/flotilla/hub/report"
)

func createRepo(t *testing.T, f *fleetEnv, url string, selector map[string]string) {
	t.Helper()
	repo := &v1alpha1.GitRepo{ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: f.ns}, Spec: v1alpha1.GitRepoSpec{
		Repo: url, PollingInterval: &metav1.Duration{Duration: time.Second},
		Targets: []v1alpha1.Target{{ClusterMatch: v1alpha1.ClusterMatch{ClusterSelector: &metav1.LabelSelector{MatchLabels: selector}}}},
	}}
	if err := f.hub.Create(context.Background(), repo); err != nil {
		t.Fatal(err)
	}
}

// eventually is how the fleet's tests wait (package e2e/wait): until timeout, then it
// fails the test with what it waited for and what show returns (the objects it waited on).
func eventually(t *testing.T, what string, timeout time.Duration, cond func() bool, show ...func() string) {
	t.Helper()
	wait.Until(t, what, timeout, cond, show...)
}

// rulesHeld waits until the API server's authorizer grants the subject of cfg the rules just
// bound to it, in namespace ("" for a ClusterRole's).
func rulesHeld(t *testing.T, cfg *rest.Config, namespace string, rules []rbacv1.PolicyRule) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := controlplane.WaitRulesHeld(ctx, cfg, namespace, rules); err != nil {
		t.Fatal(err)
	}
}

func bundleOf(t *testing.T, f *fleetEnv, name string) *v1alpha1.Bundle {
	t.Helper()
	var b v1alpha1.Bundle
	if err := f.hub.Get(context.Background(), types.NamespacedName{Namespace: f.ns, Name: name}, &b); err != nil {
		return &v1alpha1.Bundle{}
	}
	return &b
}

// e2e scenario 2: a commit rolls through manual partitions in order with maxUnavailable 0; a
// revision whose pods never become ready on the first cluster pauses the rollout with a
// readable reason; a fixing commit resumes it.
func TestR1_6_PartitionsPauseOnNeverReadyAndResume(t *testing.T) {
	up, f := deployWeb(t, canaryFirst("parts", "maxUnavailablePartitions: 0"))

	broken := strings.Replace(webManifest("example.invalid/web:2"), "labels: {app: web}}", "labels: {app: web, "+controlplane.NeverReadyLabel+": \"true\"}}", 1)
	up.Commit("main", map[string]string{"web/deployment.yaml": broken})
	eventually(t, "the rollout pauses at the canary", 90*time.Second, func() bool {
		cond := meta.FindStatusCondition(bundleOf(t, f, "shop-web").Status.Conditions, v1alpha1.RolloutPausedCondition)
		return cond != nil && strings.Contains(cond.Message, "partitions NotReady (canary)")
	})
	// The rest partition still runs revision 1.
	if !availableEverywhere(t, "parts", "web", "example.invalid/web:1", workloads[1:]...) {
		t.Errorf("the rest partition received the broken revision")
	}
	// flotilla status shows where the rollout stands and why it waits.
	wants := [][]string{{"Bundle shop-web", "revision 2"}, {"waiting:", "partitions NotReady (canary)"}, {"Partition canary", "NotReady"},
		{workloads[0].Name, "NotReady", "not ready: Deployment parts/web: InProgress"}, {workloads[1].Name, "OutOfSync"}, {workloads[2].Name, "OutOfSync"}}
	var out strings.Builder
	eventually(t, "flotilla status explains the pause", 60*time.Second, func() bool {
		out.Reset()
		if err := report.Write(context.Background(), &out, f.hub, f.ns, "shop"); err != nil {
			return false
		}
		for _, want := range wants {
			if !lineWith(out.String(), want...) {
				return false
			}
		}
		return true
	})
	// The Bundle's message names the object that holds the canary (Fleet #3341).
	readyMessage := func() string {
		return meta.FindStatusCondition(bundleOf(t, f, "shop-web").Status.Conditions, v1alpha1.ReadyCondition).Message
	}
	eventually(t, "the Bundle's Ready message names the deployment that holds the canary", 30*time.Second, func() bool {
		return strings.Contains(readyMessage(), "not ready on "+workloads[0].Name+": Deployment parts/web: InProgress")
	}, readyMessage)
	// The canary's agent warns that revision 2 did not become ready (2 s here), and names it.
	eventually(t, "the canary's agent tells revision 2 not ready", 30*time.Second, func() bool {
		told := eventsOf(t, f, f.clusterNamespaces[workloads[0].Name], agent.EventsController)
		return told.Count("RevisionNotReady: revision 2 not ready 2s after its apply") == 1 && told.Count("resources not ready: Deployment parts/web: InProgress") >= 1
	}, func() string {
		return eventsOf(t, f, f.clusterNamespaces[workloads[0].Name], agent.EventsController).String()
	})
	up.Commit("main", map[string]string{"web/deployment.yaml": webManifest("example.invalid/web:3")})
	eventually(t, "the fix reaches every cluster", 90*time.Second, func() bool { return availableEverywhere(t, "parts", "web", "example.invalid/web:3") })
	waitRepo(t, f, "all ready after the fix", func(r *v1alpha1.GitRepo) bool { return r.Status.Display.ReadyClusters == allReady() })
	// `kubectl get events -n <namespace>` tells the story, in order.
	story := []string{
		"GitRepo/shop CommitPickedUp:", ": shop-web revision 2 staged for 3 clusters",
		"Bundle/shop-web PartitionReleased: revision 2 released to partition canary (1 clusters, maxUnavailable 0)",
		"Bundle/shop-web RolloutPaused: revision 2: 1 partitions NotReady (canary)",
		"GitRepo/shop CommitPickedUp:", ": shop-web revision 3 staged for 3 clusters",
		"Bundle/shop-web PartitionReleased: revision 3 released to partition canary",
		"Bundle/shop-web PartitionReleased: revision 3 released to partition rest (2 clusters, maxUnavailable 0)",
		"Bundle/shop-web RolloutCompleted: revision 3 ready on 3 clusters",
	}
	var told events.Story
	defer func() {
		if t.Failed() {
			t.Logf("the Events:\n%s", told)
		}
	}()
	eventually(t, "the Events tell the rollout in order", 30*time.Second, func() bool {
		told = eventsOf(t, f, f.ns, hub.EventsController)
		return told.Tells(story...)
	})
	// `kubectl get events -n <cluster namespace>` tells what reached each cluster: the canary
	// got revision 2, which never became ready; the rest went from 1 to 3.
	canary := []string{"RevisionApplied: revision 1 applied", "RevisionReady: revision 1 ready",
		"RevisionApplied: revision 2 applied", "RevisionNotReady: revision 2 not ready", "RevisionApplied: revision 3 applied", "RevisionReady: revision 3 ready"}
	eventually(t, "the canary's cluster namespace tells its part", 30*time.Second, func() bool {
		told = eventsOf(t, f, f.clusterNamespaces[workloads[0].Name], agent.EventsController)
		return told.Tells(canary...) && told.Count("RevisionReady: revision 2") == 0
	})
	for _, w := range workloads[1:] {
		eventually(t, "the cluster namespace of "+w.Name+" tells its part", 30*time.Second, func() bool {
			told = eventsOf(t, f, f.clusterNamespaces[w.Name], agent.EventsController)
			return told.Tells("revision 1 ready", "revision 3 applied", "revision 3 ready") && told.Count("revision 2") == 0
		})
	}
}

// eventsOf is what `kubectl get events -n ns` shows of a controller's Events.
func eventsOf(t *testing.T, f *fleetEnv, ns, controller string) events.Story {
	t.Helper()
	story, err := model.ReadStory(context.Background(), f.hub, ns, controller)
	if err != nil {
		t.Fatal(err)
	}
	return story
}

// e2e scenario 5: a commit with a broken fleet.yaml: the GitRepo condition names the file;
// deployed workloads are unchanged.
func TestBrokenFleetYAMLKeepsWorkloads(t *testing.T) {
	up, f := deployWeb(t, "defaultNamespace: broken\n")
	up.Commit("main", map[string]string{"web/fleet.yaml": "defaultNamespace: broken\nhelm: {chart: ../../../etc}\n", "web/deployment.yaml": webManifest("example.invalid/web:2")})
	waitRepo(t, f, "Rendered=False naming the file", func(r *v1alpha1.GitRepo) bool {
		c := meta.FindStatusCondition(r.Status.Conditions, v1alpha1.RenderedCondition)
		return c != nil && c.Status == metav1.ConditionFalse && strings.Contains(c.Message, "web/fleet.yaml: helm.chart:")
	})
	// The commit failed before anything was written: every deployment still stages revision 1,
	// and every workload runs it.
	var bds v1alpha1.BundleDeploymentList
	if err := f.hub.List(context.Background(), &bds, client.MatchingLabels{"flotilla.dev/bundle-namespace": f.ns}); err != nil || len(bds.Items) != len(workloads) {
		t.Fatalf("deployments: %d, %v", len(bds.Items), err)
	}
	for _, bd := range bds.Items {
		if bd.Spec.Staged.Index != 1 || bundleOf(t, f, "shop-web").Spec.LatestRevision != 1 {
			t.Errorf("%s: a broken commit staged revision %d", bd.Namespace, bd.Spec.Staged.Index)
		}
	}
	for _, w := range workloads {
		if !deploymentAvailable(t, w, "broken", "web", "example.invalid/web:1") {
			t.Errorf("%s: the deployed workload changed", w.Name)
		}
	}
}

// e2e scenario 7: drift on a downstream object is reported, and undone when correctDrift is on.
func TestDriftReportedAndCorrected(t *testing.T) {
	up, f := deployWeb(t, "defaultNamespace: drift\ncorrectDrift: {enabled: true}\n")
	cs := kubernetes.NewForConfigOrDie(workloads[1].Config())
	ctx := context.Background()
	if _, err := cs.AppsV1().Deployments("drift").Patch(ctx, "web", types.MergePatchType, []byte(`{"spec":{"replicas":4}}`), metav1.PatchOptions{FieldManager: "kubectl-edit"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "drift corrected", 120*time.Second, func() bool {
		d, err := cs.AppsV1().Deployments("drift").Get(ctx, "web", metav1.GetOptions{})
		return err == nil && *d.Spec.Replicas == 2
	})
	// The agent tells it in its cluster's namespace on the hub, and counts it. (The test's
	// agents run in its process and share one registry: the counts are all agents'.)
	eventually(t, "the agent's Event names what it corrected", 30*time.Second, func() bool {
		return eventsOf(t, f, f.clusterNamespaces[workloads[1].Name], agent.EventsController).Tells("DriftCorrected: revision 1 applied again over Deployment web")
	})
	fams, err := agent.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	agentMetrics := scrape{}
	for _, fam := range fams {
		agentMetrics[fam.GetName()] = fam
	}
	if agentMetrics.value("flotilla_agent_drift_corrections_total") < 1 || agentMetrics.value("flotilla_agent_applies_total", "result=succeeded") < float64(len(workloads)) ||
		agentMetrics.value("flotilla_agent_apply_duration_seconds") < float64(len(workloads)) {
		t.Errorf("the agents' metrics do not count the applies and the correction:\n%s", agentMetrics.flotilla())
	}
	// Without correctDrift, drift is reported and left alone.
	up.Commit("main", map[string]string{"web/fleet.yaml": "defaultNamespace: drift\n"})
	eventually(t, "options without correctDrift deployed", 60*time.Second, func() bool {
		var bds v1alpha1.BundleDeploymentList
		_ = f.hub.List(ctx, &bds, client.MatchingLabels{"flotilla.dev/cluster": workloads[1].Name, "flotilla.dev/bundle-namespace": f.ns})
		return len(bds.Items) == 1 && !bds.Items[0].Spec.Options.CorrectDrift && bds.Items[0].Status.AppliedDeploymentID == bds.Items[0].Spec.Released.DeploymentID
	})
	if _, err := cs.AppsV1().Deployments("drift").Patch(ctx, "web", types.MergePatchType, []byte(`{"spec":{"replicas":3}}`), metav1.PatchOptions{FieldManager: "kubectl-edit"}); err != nil {
		t.Fatal(err)
	}
	var lastStatus v1alpha1.BundleDeploymentStatus
	defer func() {
		if t.Failed() {
			t.Logf("last status: state %s, modified %v, conditions %+v", lastStatus.State, lastStatus.ModifiedResources, lastStatus.Conditions)
		}
	}()
	eventually(t, "drift reported as Modified", 120*time.Second, func() bool {
		var bds v1alpha1.BundleDeploymentList
		_ = f.hub.List(ctx, &bds, client.MatchingLabels{"flotilla.dev/cluster": workloads[1].Name, "flotilla.dev/bundle-namespace": f.ns})
		if len(bds.Items) == 1 {
			lastStatus = bds.Items[0].Status
		}
		return len(bds.Items) == 1 && bds.Items[0].Status.State == v1alpha1.StateModified && len(bds.Items[0].Status.ModifiedResources) == 1 &&
			strings.Contains(bds.Items[0].Status.ModifiedResources[0].Message, "spec.replicas")
	})
	if d, _ := cs.AppsV1().Deployments("drift").Get(ctx, "web", metav1.GetOptions{}); *d.Spec.Replicas != 3 {
		t.Errorf("drift was corrected although correctDrift is off")
	}
}

// e2e scenario 9: a cluster removed from the targets loses the workload, and with deleteNamespace
// the namespace it was deployed into.
func TestClusterLeavingTheTargetsIsPruned(t *testing.T) {
	_, f := deployWeb(t, "defaultNamespace: prune\ndeleteNamespace: true\n")
	ctx := context.Background()
	var repo v1alpha1.GitRepo
	if err := f.hub.Get(ctx, types.NamespacedName{Namespace: f.ns, Name: "shop"}, &repo); err != nil {
		t.Fatal(err)
	}
	if err := f.hub.Patch(ctx, &repo, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"targets":[{"clusterSelector":{"matchLabels":{"index":"0"}}}]}}`))); err != nil {
		t.Fatal(err)
	}
	for _, w := range workloads[1:] {
		cs := kubernetes.NewForConfigOrDie(w.Config())
		eventually(t, "the workload leaves untargeted cluster "+w.Name, 60*time.Second, func() bool {
			_, err := cs.AppsV1().Deployments("prune").Get(ctx, "web", metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		})
		// deleteNamespace: the namespace the bundle deployed into goes with it.
		eventually(t, "namespace prune is deleted on "+w.Name, 60*time.Second, func() bool {
			ns, err := cs.CoreV1().Namespaces().Get(ctx, "prune", metav1.GetOptions{})
			return apierrors.IsNotFound(err) || err == nil && ns.DeletionTimestamp != nil
		})
	}
	if !deploymentAvailable(t, workloads[0], "prune", "web", "") {
		t.Errorf("the still-targeted cluster lost the workload")
	}
}

// lineWith reports whether one line of text contains every part.
func lineWith(text string, parts ...string) bool {
	for _, line := range strings.Split(text, "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return true
		}
	}
	return false
}

// deployWeb serves a repository with web/fleet.yaml and a web Deployment (image tag 1), starts a
// fleet, creates a GitRepo targeting every cluster and waits until all of them run it.
func deployWeb(t *testing.T, fleetYAML string) (*gitserver.Upstream, *fleetEnv) {
	t.Helper()
	up := gitserver.New(t)
	up.Commit("main", map[string]string{"web/fleet.yaml": fleetYAML, "web/deployment.yaml": webManifest("example.invalid/web:1")})
	srv := up.ServeHTTP("", "")
	f := startFleet(t)
	createRepo(t, f, srv.URL+"/repo.git", map[string]string{"env": "prod"})
	waitRepo(t, f, "all ready", func(r *v1alpha1.GitRepo) bool { return r.Status.Display.ReadyClusters == allReady() })
	return up, f
}

// A deleted GitRepo waits for its clusters' agents to remove the workloads, and says for which;
// an agent that is offline does not hold it forever: after the uninstall timeout the GitRepo
// goes, the cluster's Cluster says what went without its agent's confirmation, and the agent
// removes the workloads when it starts again (which ends the record).
func TestDeletedGitRepoWaitsForItsClustersButNotForever(t *testing.T) {
	const uninstallTimeout = 40 * time.Second
	up := gitserver.New(t)
	up.Commit("main", map[string]string{"web/fleet.yaml": "defaultNamespace: leaving-repo\n", "web/deployment.yaml": webManifest("example.invalid/web:1")})
	srv := up.ServeHTTP("", "")
	f := startFleetWith(t, func(f *fleetEnv) {
		f.startHubWith(func(o *hub.Options) { o.UninstallTimeout = uninstallTimeout })
	})
	createRepo(t, f, srv.URL+"/repo.git", map[string]string{"env": "prod"})
	waitRepo(t, f, "all ready", func(r *v1alpha1.GitRepo) bool { return r.Status.Display.ReadyClusters == allReady() })
	ctx := context.Background()
	away := workloads[2]
	f.stopKnownAgent(away)

	var repo v1alpha1.GitRepo
	key := types.NamespacedName{Namespace: f.ns, Name: "shop"}
	if err := f.hub.Get(ctx, key, &repo); err != nil {
		t.Fatal(err)
	}
	if err := f.hub.Delete(ctx, &repo); err != nil {
		t.Fatal(err)
	}
	// First what the deletion waits for: the stopped agent's cluster is named until the timeout
	// (the two online agents confirm meanwhile, on a loaded machine not always before the
	// first look).
	eventually(t, "the deleted GitRepo says it waits for "+away.Name, uninstallTimeout, func() bool {
		if err := f.hub.Get(ctx, key, &repo); err != nil {
			return false
		}
		cond := meta.FindStatusCondition(repo.Status.Conditions, v1alpha1.ReadyCondition)
		return cond != nil && cond.Reason == v1alpha1.DeletingReason && strings.Contains(cond.Message, "waiting for the agents of") && strings.Contains(cond.Message, away.Name)
	}, func() string { return fmt.Sprintf("conditions: %+v", repo.Status.Conditions) })
	for _, w := range workloads[:2] {
		cs := kubernetes.NewForConfigOrDie(w.Config())
		eventually(t, "the workload leaves "+w.Name, 60*time.Second, func() bool {
			_, err := cs.AppsV1().Deployments("leaving-repo").Get(ctx, "web", metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		})
	}
	eventually(t, "the GitRepo gone after the uninstall timeout", uninstallTimeout+30*time.Second, func() bool {
		return apierrors.IsNotFound(f.hub.Get(ctx, key, &repo))
	})
	var cl v1alpha1.Cluster
	if err := f.hub.Get(ctx, types.NamespacedName{Namespace: f.ns, Name: away.Name}, &cl); err != nil {
		t.Fatal(err)
	}
	cond := meta.FindStatusCondition(cl.Status.Conditions, v1alpha1.UninstalledCondition)
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != v1alpha1.UninstallTimedOutReason || !strings.Contains(cond.Message, f.ns+"/shop-web") {
		t.Errorf("the offline cluster's Uninstalled condition: %+v", cond)
	}
	awayCS := kubernetes.NewForConfigOrDie(away.Config())
	if _, err := awayCS.AppsV1().Deployments("leaving-repo").Get(ctx, "web", metav1.GetOptions{}); err != nil {
		t.Errorf("the offline cluster's workload went while its agent was stopped: %v", err)
	}

	f.startAgent(away)
	eventually(t, "the agent back removes the workload", 60*time.Second, func() bool {
		_, err := awayCS.AppsV1().Deployments("leaving-repo").Get(ctx, "web", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	eventually(t, "the cluster's record of the unconfirmed removal ends", 30*time.Second, func() bool {
		return f.hub.Get(ctx, types.NamespacedName{Namespace: f.ns, Name: away.Name}, &cl) == nil && meta.FindStatusCondition(cl.Status.Conditions, v1alpha1.UninstalledCondition) == nil
	})
}

// Deleting a GitRepo removes its Bundles and BundleDeployments, and the agents uninstall what
// they deployed; the GitRepo goes once that is done on the hub.
func TestDeletedGitRepoTakesItsBundlesAndWorkloads(t *testing.T) {
	_, f := deployWeb(t, "defaultNamespace: deleted-repo\n")
	ctx := context.Background()
	var repo v1alpha1.GitRepo
	if err := f.hub.Get(ctx, types.NamespacedName{Namespace: f.ns, Name: "shop"}, &repo); err != nil {
		t.Fatal(err)
	}
	if err := f.hub.Delete(ctx, &repo); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the GitRepo is gone", 30*time.Second, func() bool {
		return apierrors.IsNotFound(f.hub.Get(ctx, types.NamespacedName{Namespace: f.ns, Name: "shop"}, &repo))
	})
	var bundles v1alpha1.BundleList
	if err := f.hub.List(ctx, &bundles, client.InNamespace(f.ns)); err != nil || len(bundles.Items) != 0 {
		t.Errorf("bundles left: %d %v", len(bundles.Items), err)
	}
	var bds v1alpha1.BundleDeploymentList
	if err := f.hub.List(ctx, &bds, client.MatchingLabels{model.LabelBundleNamespace: f.ns}); err != nil || len(bds.Items) != 0 {
		t.Errorf("deployments left: %d %v", len(bds.Items), err)
	}
	for _, w := range workloads {
		cs := kubernetes.NewForConfigOrDie(w.Config())
		eventually(t, "the workload leaves "+w.Name, 60*time.Second, func() bool {
			_, err := cs.AppsV1().Deployments("deleted-repo").Get(ctx, "web", metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		})
	}
}
