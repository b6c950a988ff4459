package fleet

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/model"
)

// canaryFirst is a fleet.yaml deploying to namespace in two partitions, the first workload
// cluster (the canary) and then the rest, none unavailable at a time; strategy adds lines to
// its rolloutStrategy.
func canaryFirst(namespace string, strategy ...string) string {
	var extra strings.Builder
	for _, line := range strategy {
		extra.WriteString("  " + line + "\n")
	}
	return "defaultNamespace: " + namespace + `
rolloutStrategy:
  maxUnavailable: 0
` + extra.String() + `  partitions:
  - {name: canary, clusterSelector: {matchLabels: {index: "0"}}}
  - {name: rest, clusterSelector: {matchExpressions: [{key: index, operator: NotIn, values: ["0"]}]}}
`
}

// deploymentOn is the shop-web bundle's deployment on a cluster.
func deploymentOn(t *testing.T, f *fleetEnv, cluster string) v1alpha1.BundleDeployment {
	return deploymentOf(t, f, cluster, "shop-web")
}

func deploymentOf(t *testing.T, f *fleetEnv, cluster, bundle string) v1alpha1.BundleDeployment {
	t.Helper()
	var bds v1alpha1.BundleDeploymentList
	if err := f.hub.List(context.Background(), &bds, client.MatchingLabels{model.LabelCluster: cluster, model.LabelBundleNamespace: f.ns, model.LabelBundle: bundle}); err != nil || len(bds.Items) != 1 {
		return v1alpha1.BundleDeployment{}
	}
	return bds.Items[0]
}

func released(bd v1alpha1.BundleDeployment) int64 {
	if bd.Spec.Released == nil {
		return 0
	}
	return bd.Spec.Released.Index
}

// e2e scenario 4: an agent stopped for a while turns its Cluster Offline within its heartbeat
// deadline plus a few seconds, and is counted unavailable (R1.11): the canary partition holds
// the rollout and the offline canary is not released the new revision (R1.6). When the agent
// returns it catches up and the rollout completes.
func TestR1_11_R1_6_StoppedAgentHoldsRolloutAndCatchesUp(t *testing.T) {
	up, f := deployWeb(t, canaryFirst("offline"))

	canary := workloads[0]
	f.stopKnownAgent(canary)
	stopped := time.Now()
	// 6 s deadline after the last heartbeat (at most one 2 s interval and a second of the
	// timestamp's precision before the stop), a second to notice, a few more for a machine
	// loaded by the other test packages.
	var last v1alpha1.Cluster
	defer func() {
		if t.Failed() {
			t.Logf("the canary's Cluster %.1fs after the stop: resourceVersion %s, display %+v, conditions %+v",
				time.Since(stopped).Seconds(), last.ResourceVersion, last.Status.Display, last.Status.Conditions)
		}
	}()
	eventually(t, "the canary's Cluster reports it offline", 15*time.Second, func() bool {
		if err := f.hub.Get(context.Background(), types.NamespacedName{Namespace: f.ns, Name: canary.Name}, &last); err != nil {
			return false
		}
		cond := meta.FindStatusCondition(last.Status.Conditions, v1alpha1.ReadyCondition)
		return last.Status.Display.State == "Offline" && cond != nil && cond.Reason == "Offline"
	})
	up.Commit("main", map[string]string{"web/deployment.yaml": webManifest("example.invalid/web:2")})
	var lastHold string
	defer func() {
		if t.Failed() {
			t.Logf("last RolloutPaused message: %q", lastHold)
		}
	}()
	eventually(t, "the offline canary holds the rollout", 60*time.Second, func() bool {
		bun := bundleOf(t, f, "shop-web")
		cond := meta.FindStatusCondition(bun.Status.Conditions, v1alpha1.RolloutPausedCondition)
		if cond != nil {
			lastHold = cond.Message
		}
		return cond != nil && strings.Contains(cond.Message, "partition canary: 1 clusters unavailable") && strings.Contains(cond.Message, "(R1.6)")
	})
	for _, w := range workloads {
		if r := released(deploymentOn(t, f, w.Name)); r != 1 {
			t.Errorf("%s got revision %d while the canary was offline", w.Name, r)
		}
	}
	f.startAgent(canary)
	eventually(t, "every cluster catches up", 90*time.Second, func() bool { return availableEverywhere(t, "offline", "web", "example.invalid/web:2") })
}

// e2e scenario 8: the hub killed mid-rollout and restarted: the rollout continues from where it
// was; no cluster is released out of order or skipped.
func TestHubRestartMidRollout(t *testing.T) {
	up, f := deployWeb(t, canaryFirst("restart"))

	up.Commit("main", map[string]string{"web/deployment.yaml": webManifest("example.invalid/web:2")})
	eventually(t, "the canary gets revision 2", 60*time.Second, func() bool { return released(deploymentOn(t, f, workloads[0].Name)) == 2 })
	f.stop("hub")
	restBefore := map[string]int64{}
	for _, w := range workloads[1:] {
		restBefore[w.Name] = released(deploymentOn(t, f, w.Name))
	}
	eventually(t, "the canary reports revision 2 ready while the hub is down", 60*time.Second, func() bool {
		bd := deploymentOn(t, f, workloads[0].Name)
		return bd.Status.AppliedRevision == 2 && bd.Status.Ready
	})
	for _, w := range workloads[1:] {
		if r := released(deploymentOn(t, f, w.Name)); r != restBefore[w.Name] {
			t.Fatalf("%s in the rest partition was released revision %d while the hub was down", w.Name, r)
		}
	}
	f.startHub()
	eventually(t, "the rollout continues after the restart", 90*time.Second, func() bool { return availableEverywhere(t, "restart", "web", "example.invalid/web:2") })
	waitRepo(t, f, "all ready after the restart", func(r *v1alpha1.GitRepo) bool { return r.Status.Display.ReadyClusters == allReady() })
	// Revision 2 was released to each cluster once: its generation moved by exactly two steps
	// per cluster since revision 1 (staged, then released).
	for _, w := range workloads {
		bd := deploymentOn(t, f, w.Name)
		if bd.Spec.Staged.Index != 2 || released(bd) != 2 {
			t.Errorf("%s: staged %d, released %d", w.Name, bd.Spec.Staged.Index, released(bd))
		}
	}
}
