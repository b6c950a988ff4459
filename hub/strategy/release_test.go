package strategy

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/flotilla-dev/flotilla/e2e/wait"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/deploy"
	"github.com/flotilla-dev/flotilla/hub/model"
)

// R1.8, R1.10: a pass hands its batch of releases to the write workers and returns once no
// more than `ahead` of them wait for a worker, so that the bundle's next pass plans while the
// rest are written; it neither waits for its last writes to start nor leaves its whole batch
// queued. Each write here waits at a gate the test opens one write at a time.
func TestR1_8_R1_10_APassReturnsOnceNoMoreThanAheadOfItsWritesWait(t *testing.T) {
	for _, tc := range []struct{ writes, workers, ahead int }{
		{writes: 50, workers: 8, ahead: 16}, // a maxNew batch: returns once 26 are written
		{writes: 25, workers: 8, ahead: 16}, // one written
		{writes: 24, workers: 8, ahead: 16}, // at once: 8 writing, 16 waiting
		{writes: 3, workers: 8, ahead: 16},
		{writes: 0, workers: 8, ahead: 16},
		{writes: 30, workers: 2, ahead: 0}, // the last two writing
	} {
		t.Run(fmt.Sprintf("%d writes, %d workers, %d ahead", tc.writes, tc.workers, tc.ahead), func(t *testing.T) {
			gate := make(chan struct{})
			var finished, running, mostRunning atomic.Int32
			writes := make([]func(), tc.writes)
			for i := range writes {
				writes[i] = func() {
					n := running.Add(1)
					for m := mostRunning.Load(); n > m && !mostRunning.CompareAndSwap(m, n); m = mostRunning.Load() {
					}
					<-gate
					running.Add(-1)
					finished.Add(1)
				}
			}
			type returned struct {
				finished int32
				done     <-chan struct{}
			}
			back := make(chan returned, 1)
			go func() {
				done := startWrites(writes, tc.workers, tc.ahead)
				back <- returned{finished.Load(), done}
			}()
			// A write's worker is free for the next only once it has returned: so the pass
			// can return only after this many writes are through.
			need := max(0, tc.writes-tc.ahead-tc.workers)
			for range need {
				gate <- struct{}{}
			}
			var r returned
			select {
			case r = <-back:
			case <-time.After(time.Minute):
				t.Fatalf("the pass did not return with %d writes through and %d waiting for a worker", need, tc.writes-need-tc.workers)
			}
			if r.finished != int32(need) {
				t.Fatalf("the pass returned with %d writes through, want %d: more than %d were still waiting for a worker", r.finished, need, tc.ahead)
			}
			for range tc.writes - need {
				gate <- struct{}{}
			}
			select {
			case <-r.done:
			case <-time.After(time.Minute):
				t.Fatal("the batch did not finish once every write could")
			}
			if got := finished.Load(); got != int32(tc.writes) {
				t.Fatalf("%d of %d writes ran", got, tc.writes)
			}
			if got := mostRunning.Load(); got > int32(tc.workers) {
				t.Fatalf("%d writes ran at once, more than the %d workers", got, tc.workers)
			}
		})
	}
}

// R3.8: a stage's releases go out through the hub's write slots, as many at once as the slots
// allow and no more, and one write the API server refuses (a quota or admission policy in that
// cluster's namespace) neither stops the others nor is reported as released. Each write waits
// at a gate the test opens once the slots are full: written one after the other, the first
// write would hold the gate shut.
func TestR3_8_AStepReleasesThroughTheWriteSlotsAndARefusedWriteStopsNoOther(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	bun := &v1alpha1.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "web"}}
	old := v1alpha1.RevisionRef{Index: 1, ContentID: "k1", DeploymentID: "d-1"}
	next := model.RevisionTarget{Ref: v1alpha1.RevisionRef{Index: 2, ContentID: "k1", DeploymentID: "d-2"}}
	const refusedIn = "cluster-c05"
	var objs []client.Object
	var releases []release
	for i := range 12 {
		cl := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: fmt.Sprintf("c%02d", i)}}
		cl.Status.Namespace = "cluster-" + cl.Name
		bd := &v1alpha1.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: cl.Status.Namespace, Name: model.DeploymentName(bun.Namespace, bun.Name)},
			Spec: v1alpha1.BundleDeploymentSpec{Bundle: bun.Name, BundleNamespace: bun.Namespace, Staged: old, Released: &old}}
		objs = append(objs, bd)
		releases = append(releases, release{cluster: cl, bd: bd, target: next})
	}
	gate := make(chan struct{})
	openGate := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(openGate) // a failure below lets the writes waiting at the gate end
	var inFlight, most atomic.Int32
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithInterceptorFuncs(interceptor.Funcs{
		Update: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.UpdateOption) error {
			if o.GetNamespace() == refusedIn {
				return apierrors.NewForbidden(v1alpha1.GroupVersion.WithResource("bundledeployments").GroupResource(), o.GetName(), errors.New("exceeded quota"))
			}
			n := inFlight.Add(1)
			defer inFlight.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			<-gate
			return c.Update(ctx, o, opts...)
		},
	}).Build()
	// The releases' copies of the deployments are the client's (with their resourceVersions).
	for i := range releases {
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(releases[i].bd), releases[i].bd); err != nil {
			t.Fatal(err)
		}
	}
	slots := make(deploy.WriteSlots, 3)
	done := make(chan error, 1)
	go func() {
		done <- releaseAll(context.Background(), c, nil, slots, &deploy.Releases{}, bun, releases, time.Now())
	}()
	wait.Until(t, "the write slots full", 30*time.Second, func() bool { return inFlight.Load() == int32(cap(slots)) })
	openGate()
	var err error
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		t.Fatal("the step's releases did not finish once every write could")
	}
	if !apierrors.IsForbidden(err) || !strings.Contains(fmt.Sprint(err), "to c05") {
		t.Errorf("the refused write's error should name its cluster and why: %v", err)
	}
	if got := most.Load(); got != int32(cap(slots)) {
		t.Errorf("at most %d writes were in flight, want the slots' %d", got, cap(slots))
	}
	for _, r := range releases {
		var bd v1alpha1.BundleDeployment
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(r.bd), &bd); err != nil {
			t.Fatal(err)
		}
		want := next.Ref
		if bd.Namespace == refusedIn {
			want = old
		}
		if bd.Spec.Released == nil || *bd.Spec.Released != want || bd.Spec.Staged != want {
			t.Errorf("%s: staged %v, released %v; want both %v", r.cluster.Name, bd.Spec.Staged, bd.Spec.Released, want)
		}
	}
}
