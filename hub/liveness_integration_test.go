package hub

import (
	"context"
	"testing"
	"time"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/clusters"
	"github.com/flotilla-dev/flotilla/hub/liveness/livenesstest"
	"github.com/flotilla-dev/flotilla/hub/model"
	"github.com/flotilla-dev/flotilla/hub/reconciler"
	"github.com/flotilla-dev/flotilla/hub/strategy"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The interleaving of the stopped-agent e2e test, reproduced with the cluster status
// reconciler on a real API server and controlled clocks: the agent reports, stops, and the
// hub's wall clock steps back by a minute. Its Cluster turns Offline one deadline after the
// last heartbeat the hub saw, not a minute later; when the agent reports again it is back.
// Agents renew their Lease; older ones write their Cluster's status.
func TestR1_11_StoppedAgentTurnsOfflineWhateverTheWallClock(t *testing.T) {
	c := apiClient(t) // no hub runs: the reconciler is driven by hand
	ctx := context.Background()
	for _, source := range []string{"lease", "cluster status"} {
		t.Run(source, func(t *testing.T) {
			ns := namespace(t, c)
			registerCluster(t, c, ns, "edge", nil)
			w0 := time.Now().UTC().Truncate(time.Second)
			clocks := &livenesstest.Clocks{Wall: w0}
			live := clocks.Liveness()
			live.Leases = c
			r := &clusters.ClusterStatusReconciler{Client: c, Live: live, Now: func() time.Time { return clocks.Wall }, Delay: time.Second,
				Progress: model.ProgressThrottle{Every: 3 * time.Second, PerSecond: strategy.ClusterProgressPerSecond}}
			key := types.NamespacedName{Namespace: ns, Name: "edge"}
			var cl v1alpha1.Cluster
			if err := c.Get(ctx, key, &cl); err != nil {
				t.Fatal(err)
			}
			patch := client.MergeFrom(cl.DeepCopy())
			cl.Spec.HeartbeatDeadline = &metav1.Duration{Duration: 6 * time.Second}
			if err := c.Patch(ctx, &cl, patch); err != nil {
				t.Fatal(err)
			}
			if err := live.EnsureLease(ctx, c, &cl); err != nil {
				t.Fatal(err)
			}
			heartbeat := func(at time.Time) {
				t.Helper()
				if source == "lease" {
					var lease coordinationv1.Lease
					if err := c.Get(ctx, types.NamespacedName{Namespace: cl.Status.Namespace, Name: v1alpha1.AgentLeaseName}, &lease); err != nil {
						t.Fatal(err)
					}
					lease.Spec.RenewTime = &metav1.MicroTime{Time: at}
					if err := c.Update(ctx, &lease); err != nil {
						t.Fatal(err)
					}
					live.ObserveObject(&lease)
					return
				}
				if err := c.Get(ctx, key, &cl); err != nil {
					t.Fatal(err)
				}
				patch := client.MergeFrom(cl.DeepCopy())
				cl.Status.AgentLastSeen = &metav1.Time{Time: at}
				if err := c.Status().Patch(ctx, &cl, patch); err != nil {
					t.Fatal(err)
				}
				live.ObserveObject(&cl)
			}
			reconcile := func(what string) (v1alpha1.Cluster, ctrl.Result) {
				t.Helper()
				res, err := r.Controller().Reconcile(ctx, ctrl.Request{NamespacedName: key})
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				var cl v1alpha1.Cluster
				if err := c.Get(ctx, key, &cl); err != nil {
					t.Fatal(err)
				}
				return cl, res
			}
			offline := func(cl v1alpha1.Cluster) bool {
				cond := meta.FindStatusCondition(cl.Status.Conditions, v1alpha1.ReadyCondition)
				return cl.Status.Display.State == "Offline" && cond != nil && cond.Reason == "Offline"
			}

			if cl, _ := reconcile("before the agent reports"); cl.Status.Display.State != "WaitingForAgent" {
				t.Errorf("a cluster whose agent never reported: state %q, want WaitingForAgent", cl.Status.Display.State)
			}
			heartbeat(w0)
			cl, res := reconcile("the agent reporting")
			if offline(cl) || cl.Status.Display.State == "WaitingForAgent" || res.RequeueAfter != 7*time.Second || res.Priority == nil || *res.Priority != reconciler.UrgentPriority {
				t.Fatalf("a reporting agent: state %s, requeue after %s with priority %v (want an urgent look one second past the 6 s deadline)", cl.Status.Display.State, res.RequeueAfter, res.Priority)
			}
			// The agent stops; at the requeue the hub's wall clock has stepped back a minute.
			clocks.Wall, clocks.Mono = w0.Add(-time.Minute), res.RequeueAfter
			if cl, _ = reconcile("at the deadline"); !offline(cl) {
				t.Errorf("one deadline after the last heartbeat, with the wall clock stepped back: state %q, conditions %+v", cl.Status.Display.State, cl.Status.Conditions)
			}
			// The agent reports again, on the stepped clock.
			clocks.Mono += time.Second
			heartbeat(clocks.Wall)
			if cl, _ = reconcile("the agent back"); offline(cl) {
				t.Errorf("the agent reported again but the cluster stays Offline")
			}
		})
	}
}
