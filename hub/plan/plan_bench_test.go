package plan

import (
	"context"
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/deploy"
	"github.com/flotilla-dev/flotilla/hub/liveness"
	"github.com/flotilla-dev/flotilla/hub/model"
	"github.com/flotilla-dev/flotilla/rollout"
)

// handFilled is a cache whose informers are client-go's, never started: the benchmark fills
// their stores by hand, and the hub's indexes and heartbeat handlers read them as they read a
// running cache's.
type handFilled struct {
	cache.Cache
	informers map[string]toolscache.SharedIndexInformer
}

func (h handFilled) GetInformer(_ context.Context, o client.Object, _ ...cache.InformerGetOption) (cache.Informer, error) {
	inf, ok := h.informers[fmt.Sprintf("%T", o)]
	if !ok {
		return nil, fmt.Errorf("no informer for %T", o)
	}
	return inf, nil
}

func (h handFilled) add(tb testing.TB, objs ...client.Object) {
	for _, o := range objs {
		if err := h.informers[fmt.Sprintf("%T", o)].GetStore().Add(o); err != nil {
			tb.Fatal(err)
		}
	}
}

func (h handFilled) remove(tb testing.TB, o client.Object) {
	if err := h.informers[fmt.Sprintf("%T", o)].GetStore().Delete(o); err != nil {
		tb.Fatal(err)
	}
}

// newHandFilled is a hand-filled cache of Clusters, deployments and Leases with the hub's
// FleetIndex and Liveness on it, and a client reading the index and groups (the fake's).
func newHandFilled(tb testing.TB, groups ...client.Object) (handFilled, model.IndexedClient, *liveness.Liveness) {
	ctx := context.Background()
	h := handFilled{informers: map[string]toolscache.SharedIndexInformer{}}
	for _, o := range []runtime.Object{&v1alpha1.BundleDeployment{}, &v1alpha1.Cluster{}, &coordinationv1.Lease{}} {
		h.informers[fmt.Sprintf("%T", o)] = toolscache.NewSharedIndexInformer(&toolscache.ListWatch{}, o, 0, toolscache.Indexers{})
	}
	fleet, err := model.NewFleetIndex(ctx, h)
	if err != nil {
		tb.Fatal(err)
	}
	live, err := liveness.WatchLiveness(ctx, h, 0, 0)
	if err != nil {
		tb.Fatal(err)
	}
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		tb.Fatal(err)
	}
	return h, model.IndexedClient{Client: fake.NewClientBuilder().WithScheme(scheme).WithObjects(groups...).Build(), Fleet: fleet}, live
}

// BenchmarkPlanningPass is what one planning pass of a continuous rollout reads and decides for
// a bundle on 10,000 clusters halfway through its first deployment (5,000 released and Ready,
// 5,000 Pending, every agent's Lease renewed), then rollout.Plan. A rollout of that fleet makes
// 200 such passes per revision (maxNew 50, R1.8), so what a pass costs per cluster is paid two
// million times. whole is GatherPlan, reading the fleet from the informers' stores through the
// hub's indexes at each pass; tracked is the rollout controller's Tracker after the batch
// before it: 50 deployments changed (their events noted), the rest read at an earlier pass.
// Each pass also counts the 50 releases the pass before wrote that the cache does not show yet
// (R1.8). With groups, the bundle's namespace has ten ClusterGroups, each cluster in one.
func BenchmarkPlanningPass(b *testing.B) {
	for _, groups := range []int{0, 10} {
		for _, tracked := range []bool{false, true} {
			name := map[bool]string{false: "whole", true: "tracked"}[tracked]
			b.Run(fmt.Sprintf("10000clusters-%dgroups-%s", groups, name), func(b *testing.B) {
				benchmarkPass(b, 10000, groups, tracked)
			})
		}
	}
}

func benchmarkPass(b *testing.B, clusters, groups int, tracked bool) {
	ctx := context.Background()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	var groupObjs []client.Object
	for g := range groups {
		groupObjs = append(groupObjs, &v1alpha1.ClusterGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: fmt.Sprintf("g%d", g)},
			Spec: v1alpha1.ClusterGroupSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"ring": fmt.Sprintf("r%d", g)}}}})
	}
	h, c, live := newHandFilled(b, groupObjs...)

	bun := &v1alpha1.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "web"}, Spec: v1alpha1.BundleSpec{LatestRevision: 1}}
	ref := v1alpha1.RevisionRef{Index: 1, ContentID: "s256-0123456789abcdef0123456789abcdef", DeploymentID: "s256-fedcba9876543210fedcba9876543210"}
	recorded := model.RevisionTargets{}
	renewed := metav1.NewMicroTime(now.Add(-30 * time.Second))
	for i := range clusters {
		name := fmt.Sprintf("c%05d", i)
		ns := "cluster-fleet-" + name
		cl := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: name, UID: types.UID("uid-" + name),
			Labels: map[string]string{"ring": fmt.Sprintf("r%d", i%max(groups, 1)), "env": "prod"}}}
		cl.Status.Namespace = ns
		lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: v1alpha1.AgentLeaseName}, Spec: coordinationv1.LeaseSpec{RenewTime: &renewed}}
		h.add(b, cl, lease)
		recorded[name] = model.RevisionTarget{Ref: ref}
		if i%2 == 1 {
			continue // Pending: the rollout has not reached it
		}
		released := ref
		bd := &v1alpha1.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: model.DeploymentName(bun.Namespace, bun.Name),
			Labels: map[string]string{model.LabelBundle: bun.Name, model.LabelBundleNamespace: bun.Namespace, model.LabelCluster: name}},
			Spec: v1alpha1.BundleDeploymentSpec{Bundle: bun.Name, BundleNamespace: bun.Namespace, Staged: ref, Released: &released,
				ReleasedAt: &metav1.Time{Time: now.Add(-time.Minute)}}}
		bd.Status.AppliedRevision, bd.Status.AppliedDeploymentID, bd.Status.Ready = 1, ref.DeploymentID, true
		bd.Status.ReadyAt, bd.Status.AppliedAt = &metav1.Time{Time: now.Add(-50 * time.Second)}, &metav1.Time{Time: now.Add(-55 * time.Second)}
		h.add(b, bd)
	}

	gather := func() *PlanState {
		st, err := GatherPlan(ctx, c, live, now, bun, recorded)
		if err != nil {
			b.Fatal(err)
		}
		return st
	}
	if tracked {
		tracker := NewTracker(c, live)
		noting := tracker.Noting(handler.Funcs{})
		if _, err := tracker.Gather(ctx, c, now, bun, recorded); err != nil { // the pass before
			b.Fatal(err)
		}
		// Each pass follows a batch: 50 of the released clusters report (a new status), and
		// their events are noted.
		next := 0
		gather = func() *PlanState {
			b.StopTimer()
			for range 50 {
				name := fmt.Sprintf("c%05d", next%clusters/2*2)
				next += 2
				old := model.FleetIndexOf(c).DeploymentOn(bun, model.FleetIndexOf(c).Cluster("fleet", name))
				bd := old.DeepCopy()
				bd.ResourceVersion = fmt.Sprint(next)
				h.add(b, bd)
				noting.Update(ctx, event.UpdateEvent{ObjectOld: old, ObjectNew: bd}, nil)
			}
			b.StartTimer()
			st, err := tracker.Gather(ctx, c, now, bun, recorded)
			if err != nil {
				b.Fatal(err)
			}
			return st
		}
	}
	// The batch the pass before released is in flight: written, not yet in the cache.
	var inFlight deploy.Releases
	batch := 0
	var released int
	for b.Loop() {
		b.StopTimer()
		for range 50 {
			cl := model.FleetIndexOf(c).Cluster("fleet", fmt.Sprintf("c%05d", batch%clusters/2*2+1))
			inFlight.Add(deploy.DeploymentKey(bun, cl), ref, now)
			batch += 2
		}
		b.StartTimer()
		st := gather()
		st.CountUnseen(&inFlight, bun, now)
		released = len(rollout.Plan(st.In).Release)
		b.StopTimer()
		for ns := range inFlight.UnseenOf(model.DeploymentName(bun.Namespace, bun.Name), now) {
			inFlight.Forget(types.NamespacedName{Namespace: ns, Name: model.DeploymentName(bun.Namespace, bun.Name)}, ref.DeploymentID)
		}
		b.StartTimer()
	}
	if released != 50 { // maxNew: the pass was planned on the whole fleet
		b.Fatalf("the pass released %d clusters, want maxNew (50)", released)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(clusters), "ns/cluster")
}
