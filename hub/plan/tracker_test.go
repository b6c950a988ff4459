package plan

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/deploy"
	"github.com/flotilla-dev/flotilla/hub/model"
	"github.com/flotilla-dev/flotilla/rollout"
)

// trackedFleet is a bundle's fleet in a hand-filled cache that changes the way the hub's
// objects do, every change delivered to a Tracker's handler as the informer would.
type trackedFleet struct {
	t       *testing.T
	rnd     *rand.Rand
	h       handFilled
	c       model.IndexedClient
	noting  handler.EventHandler
	bun     *v1alpha1.Bundle
	now     time.Time
	version int
	ref     v1alpha1.RevisionRef
}

func (f *trackedFleet) set(old, updated client.Object) {
	f.version++
	switch {
	case updated == nil:
		f.h.remove(f.t, old)
		f.noting.Delete(context.Background(), event.DeleteEvent{Object: old}, nil)
	case old == nil:
		updated.SetResourceVersion(fmt.Sprint(f.version))
		f.h.add(f.t, updated)
		f.noting.Create(context.Background(), event.CreateEvent{Object: updated}, nil)
	default:
		updated.SetResourceVersion(fmt.Sprint(f.version))
		f.h.add(f.t, updated)
		f.noting.Update(context.Background(), event.UpdateEvent{ObjectOld: old, ObjectNew: updated}, nil)
	}
}

func (f *trackedFleet) clusters() []*v1alpha1.Cluster {
	cls, err := f.c.Fleet.Clusters("fleet")
	if err != nil {
		f.t.Fatal(err)
	}
	slices.SortFunc(cls, func(a, b *v1alpha1.Cluster) int { return strings.Compare(a.Name, b.Name) })
	return cls
}

func (f *trackedFleet) pick() *v1alpha1.Cluster {
	cls := f.clusters()
	return cls[f.rnd.IntN(len(cls))]
}

func (f *trackedFleet) newCluster(name string) {
	cl := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: name, UID: types.UID("uid-" + name),
		Labels: map[string]string{"ring": fmt.Sprintf("r%d", f.rnd.IntN(3))}}}
	cl.Status.Namespace = "cluster-fleet-" + name
	f.set(nil, cl)
	f.renew(cl.Status.Namespace, f.now.Add(-time.Duration(f.rnd.IntN(400))*time.Second))
}

func (f *trackedFleet) renew(ns string, at time.Time) {
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: v1alpha1.AgentLeaseName},
		Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: at}}}
	old, found, _ := f.h.informers[fmt.Sprintf("%T", lease)].GetStore().Get(lease)
	if !found {
		f.set(nil, lease)
		return
	}
	f.set(old.(client.Object), lease)
}

// deploy gives cl a deployment (staged, released, applied or Ready at random) in the namespace
// given, replacing the one there.
func (f *trackedFleet) deploy(cl *v1alpha1.Cluster, ns string) {
	bd := &v1alpha1.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: model.DeploymentName("fleet", "web"),
		Labels: map[string]string{model.LabelBundle: "web", model.LabelBundleNamespace: "fleet", model.LabelCluster: cl.Name}},
		Spec: v1alpha1.BundleDeploymentSpec{Bundle: "web", BundleNamespace: "fleet", Staged: f.ref}}
	if f.rnd.IntN(3) > 0 {
		released := f.ref
		bd.Spec.Released, bd.Spec.ReleasedAt = &released, &metav1.Time{Time: f.now.Add(-time.Minute)}
		if f.rnd.IntN(2) == 0 {
			bd.Status.AppliedRevision, bd.Status.AppliedDeploymentID, bd.Status.AppliedAt = 1, f.ref.DeploymentID, &metav1.Time{Time: f.now.Add(-50 * time.Second)}
			if bd.Status.Ready = f.rnd.IntN(2) == 0; bd.Status.Ready {
				bd.Status.ReadyAt = &metav1.Time{Time: f.now.Add(-40 * time.Second)}
			}
		}
	}
	var old client.Object // the one in that namespace, removed or not
	if o, found, _ := f.h.informers[fmt.Sprintf("%T", bd)].GetStore().Get(bd); found {
		old = o.(*v1alpha1.BundleDeployment)
	}
	f.set(old, bd)
}

// change makes one change of the kinds the hub sees during a rollout.
func (f *trackedFleet) change() string {
	cl := f.pick()
	switch op := f.rnd.IntN(11); op {
	case 0, 1, 2:
		f.deploy(cl, cl.Status.Namespace)
		return "deployment of " + cl.Name + " written"
	case 3:
		if bd := f.c.Fleet.DeploymentOn(f.bun, cl); bd != nil {
			f.set(bd, nil)
		}
		return "deployment of " + cl.Name + " deleted"
	case 4:
		if bd := f.c.Fleet.DeploymentOn(f.bun, cl); bd != nil {
			removing := bd.DeepCopy()
			removing.DeletionTimestamp = &metav1.Time{Time: f.now}
			f.set(bd, removing)
		}
		return "deployment of " + cl.Name + " being removed"
	case 5:
		updated := cl.DeepCopy()
		updated.Labels["ring"] = fmt.Sprintf("r%d", f.rnd.IntN(3))
		updated.Spec.Paused = f.rnd.IntN(2) == 0
		f.set(cl, updated)
		return "cluster " + cl.Name + " relabelled or paused"
	case 6:
		f.renew(cl.Status.Namespace, f.now.Add(-time.Duration(f.rnd.IntN(400))*time.Second))
		return "lease of " + cl.Name + " renewed"
	case 7:
		f.set(cl, nil)
		return "cluster " + cl.Name + " deleted"
	case 8:
		f.newCluster(fmt.Sprintf("n%03d", f.version))
		return "a cluster added"
	case 9:
		// Moving: the agent's new namespace, its deployment and Lease still in the old one.
		moving := cl.DeepCopy()
		moving.Status.PreviousNamespace, moving.Status.Namespace = cl.Status.Namespace, fmt.Sprintf("cluster-fleet-%s-%d", cl.Name, f.version)
		f.set(cl, moving)
		if f.rnd.IntN(2) == 0 {
			f.deploy(moving, moving.Status.Namespace)
		}
		return "cluster " + cl.Name + " moving"
	default:
		f.now = f.now.Add(time.Duration(f.rnd.IntN(90)) * time.Second)
		return "time passes"
	}
}

// comparable is a plan state as compared: groups in name order (the planner reads them as a set).
func comparable(st *PlanState) *PlanState {
	in := *st.In
	in.Groups = slices.Clone(in.Groups)
	slices.SortFunc(in.Groups, func(a, b rollout.ClusterGroup) int { return strings.Compare(a.Name, b.Name) })
	return &PlanState{In: &in, Bds: maps.Clone(st.Bds), Clusters: maps.Clone(st.Clusters), Requeue: st.Requeue}
}

// R1.10, R1.11, R1.8: a pass the Tracker gathers from the events since the bundle's last pass
// plans on what GatherPlan reads from the whole cache: the same targets (deployments, groups,
// pause, heartbeats judged at the pass's time), the same deployments and clusters, the same
// requeue, and the same releases the cache does not show yet counted as released.
// Random changes of every kind the hub sees are made between passes, several seeds.
func TestR1_10_ATrackedPassPlansOnWhatTheWholeCacheSays(t *testing.T) {
	for seed := range uint64(8) {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			groups := []client.Object{}
			for g := range 2 {
				groups = append(groups, &v1alpha1.ClusterGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: fmt.Sprintf("g%d", g)},
					Spec: v1alpha1.ClusterGroupSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"ring": fmt.Sprintf("r%d", g)}}}})
			}
			h, c, live := newHandFilled(t, groups...)
			tracker := NewTracker(c, live)
			f := &trackedFleet{t: t, rnd: rand.New(rand.NewPCG(seed, 36)), h: h, c: c, noting: tracker.Noting(handler.Funcs{}),
				bun: &v1alpha1.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "web", UID: "bundle-uid"}, Spec: v1alpha1.BundleSpec{LatestRevision: 1}},
				now: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC),
				ref: v1alpha1.RevisionRef{Index: 1, ContentID: "s256-0123", DeploymentID: "s256-3210"}}
			if seed%2 == 1 { // a placement: clusters outside the record take part as Excluded
				f.bun.Spec.Placement = &v1alpha1.Placement{}
			}
			recorded := model.RevisionTargets{}
			for i := range 40 {
				name := fmt.Sprintf("c%03d", i)
				f.newCluster(name)
				if i%4 != 3 {
					recorded[name] = model.RevisionTarget{Ref: f.ref}
				}
				if i%2 == 0 {
					f.deploy(f.pick(), "cluster-fleet-"+name)
				}
			}
			var changes []string
			for pass := range 60 {
				tracked, err := tracker.Gather(context.Background(), c, f.now, f.bun, recorded)
				if err != nil {
					t.Fatal(err)
				}
				whole, err := GatherPlan(context.Background(), c, live, f.now, f.bun, recorded)
				if err != nil {
					t.Fatal(err)
				}
				// Releases this hub wrote, some of which the cache shows (R1.8): both passes
				// count the same as released and forget the same.
				// Some are written to a namespace a cluster leaves, or that no cluster has.
				var wholeReleases, trackedReleases deploy.Releases
				for _, cl := range f.clusters() {
					if f.rnd.IntN(3) == 0 {
						ns := cl.Status.Namespace
						switch f.rnd.IntN(6) {
						case 0:
							ns = cl.Status.PreviousNamespace
						case 1:
							ns += "-gone"
						}
						key := types.NamespacedName{Namespace: ns, Name: model.DeploymentName("fleet", "web")}
						ref := f.ref
						if f.rnd.IntN(2) == 0 {
							ref.DeploymentID = "s256-next"
						}
						wholeReleases.Add(key, ref, f.now)
						trackedReleases.Add(key, ref, f.now)
					}
				}
				countUnseenByVisit(whole, &wholeReleases, f.bun, f.now)
				tracked.CountUnseen(&trackedReleases, f.bun, f.now)
				if diff := cmp.Diff(comparable(whole), comparable(tracked), cmp.Exporter(func(reflect.Type) bool { return true })); diff != "" {
					t.Fatalf("pass %d after %s: the tracked pass plans on another fleet (-whole +tracked):\n%s", pass, strings.Join(changes, "; "), diff)
				}
				name := model.DeploymentName("fleet", "web")
				if w, tr := wholeReleases.UnseenOf(name, f.now), trackedReleases.UnseenOf(name, f.now); !maps.Equal(w, tr) {
					t.Fatalf("pass %d after %s: releases still unseen differ: whole %v, tracked %v", pass, strings.Join(changes, "; "), w, tr)
				}
				if pass == 30 { // the groups change: every cluster is read again
					g := &v1alpha1.ClusterGroup{}
					if err := c.Get(context.Background(), client.ObjectKey{Namespace: "fleet", Name: "g1"}, g); err != nil {
						t.Fatal(err)
					}
					g.Spec.Selector.MatchLabels["ring"] = "r2"
					if err := c.Update(context.Background(), g); err != nil {
						t.Fatal(err)
					}
				}
				changes = changes[:0]
				for range 1 + f.rnd.IntN(6) {
					changes = append(changes, f.change())
				}
			}
		})
	}
}

// countUnseenByVisit is CountUnseen by its definition: every deployment the state holds is
// offered as seen, and every target whose cluster lives in a namespace with a release still
// unseen counts it as released.
func countUnseenByVisit(st *PlanState, r *deploy.Releases, bun *v1alpha1.Bundle, now time.Time) {
	for _, bd := range st.Bds {
		r.Seen(bd)
	}
	unseen := r.UnseenOf(model.DeploymentName(bun.Namespace, bun.Name), now)
	for i := range st.In.Targets {
		if ref, ok := unseen[st.Clusters[st.In.Targets[i].Cluster].Status.Namespace]; ok {
			countReleased(&st.In.Targets[i], ref, now)
		}
	}
}

// A change the Tracker was not told of is not read: the pass plans on what it read before.
// This is what makes the test above able to fail, and why every watch of a tracked object goes
// through Noting.
func TestTrackerReadsOnlyWhatEventsSayChanged(t *testing.T) {
	h, c, live := newHandFilled(t)
	tracker := NewTracker(c, live)
	f := &trackedFleet{t: t, rnd: rand.New(rand.NewPCG(1, 2)), h: h, c: c, noting: tracker.Noting(handler.Funcs{}),
		bun: &v1alpha1.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "web"}, Spec: v1alpha1.BundleSpec{LatestRevision: 1}},
		now: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC), ref: v1alpha1.RevisionRef{Index: 1, DeploymentID: "d"}}
	f.newCluster("a")
	recorded := model.RevisionTargets{"a": {Ref: f.ref}}
	if _, err := tracker.Gather(context.Background(), c, f.now, f.bun, recorded); err != nil {
		t.Fatal(err)
	}
	cl := f.c.Fleet.Cluster("fleet", "a")
	paused := cl.DeepCopy()
	paused.Spec.Paused = true
	f.h.add(t, paused) // in the cache, not noted
	st, err := tracker.Gather(context.Background(), c, f.now, f.bun, recorded)
	if err != nil {
		t.Fatal(err)
	}
	if st.In.Targets[0].Paused {
		t.Fatal("the tracker read a cluster no event named")
	}
	f.set(cl, paused)
	if st, err = tracker.Gather(context.Background(), c, f.now, f.bun, recorded); err != nil {
		t.Fatal(err)
	}
	if !st.In.Targets[0].Paused {
		t.Fatal("the tracker did not read the cluster its event named")
	}
}
