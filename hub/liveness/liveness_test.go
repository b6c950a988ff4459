package liveness

import (
	"context"
	"errors"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// testClocks move the hub's wall and monotonic clocks apart (package livenesstest, which
// tests here cannot import, has the same for other packages' tests).
type testClocks struct {
	Wall time.Time
	Mono time.Duration
}

func (c *testClocks) Liveness() *Liveness {
	return New(nil, 0, 0, func() time.Duration { return c.Mono })
}

func clusterSeen(at time.Time) *v1alpha1.Cluster {
	c := &v1alpha1.Cluster{Spec: v1alpha1.ClusterSpec{HeartbeatDeadline: &metav1.Duration{Duration: 6 * time.Second}}}
	c.Status.AgentLastSeen = &metav1.Time{Time: at}
	return c
}

// TestR1_11_Liveness: a cluster is online while its last heartbeat is within the deadline by
// the hub's wall clock and the hub saw it within the deadline on its monotonic clock.
func TestR1_11_Liveness(t *testing.T) {
	w0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	type step struct {
		wall    time.Duration // the hub's wall clock, from w0
		mono    time.Duration
		beat    *time.Duration // a heartbeat the hub sees now, written at w0 + *beat
		online  bool
		left    time.Duration
		comment string
	}
	d := func(x time.Duration) *time.Duration { return &x }
	cases := []struct {
		name  string
		steps []step
	}{
		{"a live agent, then a stopped one", []step{
			{0, 0, d(0), true, 6 * time.Second, "just reported"},
			{4 * time.Second, 4 * time.Second, nil, true, 2 * time.Second, "within the deadline"},
			{7 * time.Second, 7 * time.Second, nil, false, 0, "past it"},
		}},
		{"the hub's wall clock steps back after the last heartbeat", []step{
			{0, 0, d(0), true, 6 * time.Second, "just reported"},
			{-60 * time.Second, 7 * time.Second, nil, false, 0, "the wall clock says 66 s are left; the monotonic clock says the deadline passed"},
			{-59 * time.Second, 8 * time.Second, d(-59 * time.Second), true, 6 * time.Second, "the agent reports again, on the stepped clock"},
		}},
		{"an agent claims a heartbeat in the future and stops", []step{
			{0, 0, d(time.Hour), true, 6 * time.Second, "the monotonic clock bounds the claim"},
			{7 * time.Second, 7 * time.Second, nil, false, 0, "no heartbeat seen for longer than the deadline"},
		}},
		{"the hub's wall clock steps forward", []step{
			{0, 0, d(0), true, 6 * time.Second, "just reported"},
			{time.Hour, 1 * time.Second, nil, false, 0, "the wall clock says the deadline passed: offline until the next heartbeat"},
			{time.Hour + time.Second, 2 * time.Second, d(time.Hour + time.Second), true, 6 * time.Second, "the next heartbeat, on the new clock"},
		}},
		{"a hub that starts after the agent stopped", []step{
			{0, 0, d(-time.Hour), false, 0, "seen for the first time, an hour old by the wall clock"},
		}},
	}
	for _, c := range cases {
		for _, source := range []string{"lease", "cluster status"} {
			t.Run(c.name+"/"+source, func(t *testing.T) {
				clocks := &testClocks{}
				live := clocks.Liveness()
				leases := leaseCache{}
				live.Leases = leases
				cl := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{UID: "c1"}, Spec: v1alpha1.ClusterSpec{HeartbeatDeadline: &metav1.Duration{Duration: 6 * time.Second}},
					Status: v1alpha1.ClusterStatus{Namespace: "cluster-a"}}
				for i, s := range c.steps {
					clocks.Wall, clocks.Mono = w0.Add(s.wall), s.mono
					if s.beat != nil {
						if source == "lease" {
							live.ObserveObject(leases.renew("cluster-a", w0.Add(*s.beat)))
						} else {
							cl = clusterSeen(w0.Add(*s.beat))
							cl.Status.Namespace = "cluster-a"
							live.ObserveObject(cl)
						}
					}
					online, left := live.Check(cl, clocks.Wall)
					if online != s.online || left != s.left {
						t.Errorf("step %d (%s): online %v, %s left; want %v, %s", i, s.comment, online, left, s.online, s.left)
					}
				}
			})
		}
	}
}

// leaseCache stands in for the hub's cache of agent Leases in the decision's unit tests.
type leaseCache map[string]*coordinationv1.Lease

func (c leaseCache) renew(ns string, at time.Time) *coordinationv1.Lease {
	renewed := &metav1.MicroTime{Time: at}
	c[ns] = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.AgentLeaseName, Namespace: ns}, Spec: coordinationv1.LeaseSpec{RenewTime: renewed}}
	return c[ns].DeepCopy()
}

func (c leaseCache) Get(_ context.Context, key client.ObjectKey, o client.Object, _ ...client.GetOption) error {
	lease, ok := c[key.Namespace]
	if !ok || key.Name != v1alpha1.AgentLeaseName {
		return apierrors.NewNotFound(coordinationv1.Resource("leases"), key.Name)
	}
	lease.DeepCopyInto(o.(*coordinationv1.Lease))
	return nil
}

func (c leaseCache) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return errors.New("not listed")
}

// leaseJudged is a Liveness on test clocks at w0 reading the leases given, and a cluster of
// namespace cluster-a with a deadline of 6 s.
func leaseJudged(w0 time.Time) (*testClocks, *Liveness, leaseCache, *v1alpha1.Cluster) {
	clocks := &testClocks{Wall: w0}
	live := clocks.Liveness()
	leases := leaseCache{}
	live.Leases = leases
	cl := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{UID: "c1"}, Spec: v1alpha1.ClusterSpec{HeartbeatDeadline: &metav1.Duration{Duration: 6 * time.Second}},
		Status: v1alpha1.ClusterStatus{Namespace: "cluster-a"}}
	return clocks, live, leases, cl
}

// An agent that comes back after its deadline by its Lease wakes the controllers; routine
// renewals, and a first sight of a stale Lease, do not (R1.11).
func TestR1_11_AgentBackByItsLease(t *testing.T) {
	w0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	clocks, live, leases, cl := leaseJudged(w0)
	created := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.AgentLeaseName, Namespace: "cluster-a"}}
	first := leases.renew("cluster-a", w0)
	for _, tc := range []struct {
		name         string
		wall, mono   time.Duration
		old, updated *coordinationv1.Lease
		back         bool
	}{
		{"the first renewal of the Lease the hub created", 0, 0, created, first, true},
		{"the Lease seen for the first time, renewed just now", 0, 0, nil, first, true},
		{"a routine renewal", 2 * time.Second, 2 * time.Second, first, leases.renew("cluster-a", w0.Add(2*time.Second)), false},
		{"a renewal after the deadline passed", 20 * time.Second, 20 * time.Second, first, leases.renew("cluster-a", w0.Add(20*time.Second)), true},
		{"a stale Lease seen for the first time (the hub restarted)", time.Hour, time.Hour, nil, first, false},
	} {
		clocks.Wall, clocks.Mono = w0.Add(tc.wall), tc.mono
		if tc.old != nil && tc.old.Spec.RenewTime != nil {
			live.ObserveObject(tc.old)
		}
		if got := live.leaseBackOnline(cl, tc.old, tc.updated, clocks.Wall); got != tc.back {
			t.Errorf("%s: back online %v, want %v", tc.name, got, tc.back)
		}
	}
}

// R1.11 while a cluster moves to a new namespace: its agent renews the Lease of either
// namespace, so either one keeps it online and the later one is when it was last seen, read
// through the hub's Lease informer store as through a reader.
func TestR1_11_AMovingClusterIsJudgedByTheLeaseOfEitherNamespace(t *testing.T) {
	w0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	fresh, stale := w0.Add(-2*time.Second), w0.Add(-time.Minute)
	cases := []struct {
		name           string
		current, moved *time.Time // the renewals of the new and the previous namespace's Lease
		online         bool
		lastSeen       time.Time
	}{
		{"only the previous namespace's Lease, renewed", nil, &fresh, true, fresh},
		{"the new one renewed, the previous one stale", &fresh, &stale, true, fresh},
		{"the new one stale, the previous one renewed", &stale, &fresh, true, fresh},
		{"both stale", &stale, &stale, false, stale},
		{"no Lease yet", nil, nil, false, time.Time{}},
	}
	for _, tc := range cases {
		for _, through := range []string{"reader", "informer store"} {
			clocks := &testClocks{Wall: w0}
			live := clocks.Liveness()
			leases := leaseCache{}
			store := toolscache.NewStore(toolscache.MetaNamespaceKeyFunc)
			for ns, at := range map[string]*time.Time{"cluster-a-new": tc.current, "cluster-a": tc.moved} {
				if at != nil {
					if err := store.Add(leases.renew(ns, *at)); err != nil {
						t.Fatal(err)
					}
				}
			}
			live.Leases = leases
			if through == "informer store" {
				live.leaseStore = store
			}
			cl := &v1alpha1.Cluster{Spec: v1alpha1.ClusterSpec{HeartbeatDeadline: &metav1.Duration{Duration: 6 * time.Second}},
				Status: v1alpha1.ClusterStatus{Namespace: "cluster-a-new", PreviousNamespace: "cluster-a"}}
			online, _, seen, reported := live.Look(cl, w0)
			if online != tc.online || !seen.Equal(tc.lastSeen) || reported != !tc.lastSeen.IsZero() {
				t.Errorf("%s (%s): online %v, last seen %v (reported %v); want %v, %v", tc.name, through, online, seen, reported, tc.online, tc.lastSeen)
			}
		}
	}
}

// R1.11: a planning pass reads a cluster's heartbeats once (Heartbeat) and judges them at each
// later pass (Judge). A heartbeat read before the hub noted seeing it (the handler noting it
// runs in no fixed order with the pass) is bound by the monotonic clock from when it is noted:
// an agent that claims a renewal an hour ahead and stops goes offline at the deadline however
// early the pass read its Lease.
func TestR1_11_AHeartbeatReadBeforeTheHubNotedItIsJudgedByBothClocks(t *testing.T) {
	w0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	clocks, live, leases, cl := leaseJudged(w0)
	claimed := leases.renew("cluster-a", w0.Add(time.Hour))
	h := live.Heartbeat(cl) // read before the hub noted the renewal
	if online, left, _, _ := live.Judge(&h, clocks.Wall); !online || left != time.Hour+6*time.Second {
		t.Fatalf("not noted yet: online %v, %s left; want the wall clock's claim (1h0m6s)", online, left)
	}
	live.ObserveObject(claimed)
	for _, step := range []struct {
		at     time.Duration
		online bool
		left   time.Duration
	}{{time.Second, true, 5 * time.Second}, {7 * time.Second, false, 0}, {time.Minute, false, 0}} {
		clocks.Wall, clocks.Mono = w0.Add(step.at), step.at
		online, left, seen, reported := live.Judge(&h, clocks.Wall)
		if online != step.online || left != step.left || !reported || !seen.Equal(w0.Add(time.Hour)) {
			t.Errorf("at %s: online %v, %s left, last seen %s, reported %v; want %v, %s, the claim, true", step.at, online, left, seen, reported, step.online, step.left)
		}
		if wantOnline, wantLeft := live.Check(cl, clocks.Wall); online != wantOnline || left != wantLeft {
			t.Errorf("at %s: the heartbeat read once says %v, %s; read again, %v, %s", step.at, online, left, wantOnline, wantLeft)
		}
	}
}
