package deploy

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flotilla-dev/flotilla/e2e/wait"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/model"
)

func ref(index int64, id string) v1alpha1.RevisionRef {
	return v1alpha1.RevisionRef{Index: index, ContentID: "c-" + id, DeploymentID: "d-" + id}
}

func TestStageTarget(t *testing.T) {
	r1, r2, r3 := ref(1, "1"), ref(2, "2"), ref(3, "3")
	cases := []struct {
		name         string
		staged       v1alpha1.RevisionRef
		released     *v1alpha1.RevisionRef
		target       v1alpha1.RevisionRef
		release      bool
		wantChanged  bool
		wantReleased *v1alpha1.RevisionRef
		wantRollback bool
	}{
		{"stage a newer revision, keep the release", r1, &r1, r2, false, true, &r1, false},
		{"stage and release at once", r1, &r1, r2, true, true, &r2, false},
		{"nothing changes", r2, &r2, r2, true, false, &r2, false},
		{"staging an older revision than the released one is a rollback", r3, &r3, r1, false, true, &r3, true},
		{"releasing the older revision ends the rollback mark", r3, &r3, r1, true, true, &r1, false},
	}
	for _, c := range cases {
		bd := &v1alpha1.BundleDeployment{Spec: v1alpha1.BundleDeploymentSpec{Staged: c.staged, Released: c.released}}
		changed := StageTarget(bd, model.RevisionTarget{Ref: c.target}, c.release, time.Now())
		if changed != c.wantChanged || bd.Spec.Staged != c.target || *bd.Spec.Released != *c.wantReleased || bd.Spec.Rollback != c.wantRollback {
			t.Errorf("%s: changed %v staged %v released %v rollback %v", c.name, changed, bd.Spec.Staged, bd.Spec.Released, bd.Spec.Rollback)
		}
	}
}

// R5.4: a release records the revision the cluster ran Ready as its last good one, in the same
// write; a revision never Ready there, or a restore, leaves it; a restore gives it back.
func TestReleasesRecordTheLastGoodRevision(t *testing.T) {
	r1, r2, r3 := ref(1, "1"), ref(2, "2"), ref(3, "3")
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	readyAt := metav1.NewTime(now.Add(-time.Hour))
	running := func(released v1alpha1.RevisionRef, ready bool, lastGood *v1alpha1.RevisionRef) *v1alpha1.BundleDeployment {
		bd := &v1alpha1.BundleDeployment{Spec: v1alpha1.BundleDeploymentSpec{Staged: released, Released: &released, LastGood: lastGood}}
		bd.Status.AppliedDeploymentID = released.DeploymentID
		if ready {
			bd.Status.ReadyAt = &readyAt
		}
		return bd
	}
	for _, c := range []struct {
		name string
		bd   *v1alpha1.BundleDeployment
		want *v1alpha1.RevisionRef
	}{
		{"Ready on 2: 2 is the last good one", running(r2, true, &r1), &r2},
		{"2 never Ready: 1 stays", running(r2, false, &r1), &r1},
		{"first release: none", &v1alpha1.BundleDeployment{Spec: v1alpha1.BundleDeploymentSpec{Staged: r1}}, nil},
	} {
		if !StageTarget(c.bd, model.RevisionTarget{Ref: r3}, true, now) || !reflect.DeepEqual(c.bd.Spec.LastGood, c.want) || !c.bd.Spec.ReleasedAt.Time.Equal(now) {
			t.Errorf("%s: last good %v, released at %v", c.name, c.bd.Spec.LastGood, c.bd.Spec.ReleasedAt)
		}
	}
	failing := running(r3, true, &r2)
	if !restoreTarget(failing, now) || *failing.Spec.Released != r2 || !failing.Spec.Rollback || *failing.Spec.LastGood != r2 {
		t.Errorf("restore: released %v rollback %v last good %v", failing.Spec.Released, failing.Spec.Rollback, failing.Spec.LastGood)
	}
	first := running(r1, true, nil)
	if !restoreTarget(first, now) || first.Spec.Released != nil || !first.Spec.Rollback {
		t.Errorf("restore without a last good revision: released %v rollback %v, want nothing released", first.Spec.Released, first.Spec.Rollback)
	}
	if ops := deploymentPatch(first, running(r1, true, nil)); !slices.ContainsFunc(ops, func(op patchOp) bool { return op.Op == "remove" && op.Path == "/spec/released" }) {
		t.Errorf("the patch of a restore to nothing %+v does not remove the release", ops)
	}
}

// A release patches what changed: a rollback mark that goes is removed (a false would stay in
// every later write), unchanged options are not sent.
func TestDeploymentPatchSendsWhatChanged(t *testing.T) {
	r1, r2 := ref(1, "1"), ref(2, "2")
	base := func() *v1alpha1.BundleDeployment {
		bd := &v1alpha1.BundleDeployment{Spec: v1alpha1.BundleDeploymentSpec{Staged: r1, Released: &r1, Options: v1alpha1.DeploymentOptions{DefaultNamespace: "web"}}}
		bd.Labels = map[string]string{model.LabelBundle: "web"}
		return bd
	}
	paths := func(ops []patchOp) (out []string) {
		for _, op := range ops {
			out = append(out, op.Op+" "+op.Path)
		}
		return out
	}
	rolledBack := base()
	rolledBack.Spec.Rollback = true
	unreleased := base()
	unreleased.Spec.Released = nil
	for _, tc := range []struct {
		name   string
		change func(bd *v1alpha1.BundleDeployment)
		orig   *v1alpha1.BundleDeployment
		want   []string
	}{
		{"a release", func(bd *v1alpha1.BundleDeployment) { bd.Spec.Staged, bd.Spec.Released = r2, &r2 }, base(),
			[]string{"add /spec/staged", "add /spec/released"}},
		{"staged only, nothing released yet", func(bd *v1alpha1.BundleDeployment) { bd.Spec.Staged = r2 }, unreleased,
			[]string{"add /spec/staged"}},
		{"new options", func(bd *v1alpha1.BundleDeployment) { bd.Spec.Staged, bd.Spec.Options.DefaultNamespace = r2, "shop" }, base(),
			[]string{"add /spec/staged", "add /spec/released", "add /spec/options"}},
		{"a rollback", func(bd *v1alpha1.BundleDeployment) { bd.Spec.Staged, bd.Spec.Rollback = r2, true }, base(),
			[]string{"add /spec/staged", "add /spec/released", "add /spec/rollback"}},
		{"the rollback released", func(bd *v1alpha1.BundleDeployment) { bd.Spec.Rollback = false }, rolledBack,
			[]string{"add /spec/staged", "add /spec/released", "remove /spec/rollback"}},
		{"new labels", func(bd *v1alpha1.BundleDeployment) { bd.Labels = map[string]string{model.LabelBundle: "shop"} }, base(),
			[]string{"add /spec/staged", "add /spec/released", "add /metadata/labels"}},
	} {
		bd := tc.orig.DeepCopy()
		tc.change(bd)
		want := append([]string{"test /metadata/generation"}, tc.want...) // every patch is conditional
		if got := paths(deploymentPatch(bd, tc.orig)); !slices.Equal(got, want) {
			t.Errorf("%s: %v, want %v", tc.name, got, want)
		}
	}
}

func TestReleasesAreRememberedUntilTheCacheShowsThem(t *testing.T) {
	var r Releases
	key := types.NamespacedName{Namespace: "cluster-a", Name: "fleet-web"}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r.Add(key, ref(2, "2"), now)
	if !r.Pending(key, "d-2", now.Add(time.Second)) || r.Pending(key, "d-3", now) {
		t.Fatal("a release just written must be pending, for its deployment id only")
	}
	stale := &v1alpha1.BundleDeployment{Spec: v1alpha1.BundleDeploymentSpec{Released: &v1alpha1.RevisionRef{DeploymentID: "d-1"}}}
	stale.Namespace, stale.Name = key.Namespace, key.Name
	r.Seen(stale) // the cache still shows the old release
	if !r.Pending(key, "d-2", now.Add(time.Second)) {
		t.Fatal("a stale cache must not clear the memory")
	}
	fresh := stale.DeepCopy()
	fresh.Spec.Released.DeploymentID = "d-2"
	r.Seen(fresh)
	if r.Pending(key, "d-2", now.Add(time.Second)) {
		t.Fatal("once the cache shows the release it is forgotten")
	}
	r.Add(key, ref(4, "4"), now)
	if r.Pending(key, "d-4", now.Add(releaseMemory+time.Second)) {
		t.Fatal("a release the cache never shows is forgotten after releaseMemory")
	}
}

// A planning pass reads its bundle's unseen releases by cluster namespace (R1.8): another
// bundle's are not its, and one remembered past releaseMemory is forgotten.
func TestR1_8_UnseenReleasesOfABundle(t *testing.T) {
	var r Releases
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r.Add(types.NamespacedName{Namespace: "cluster-a", Name: "fleet-web"}, ref(2, "2"), now)
	r.Add(types.NamespacedName{Namespace: "cluster-b", Name: "fleet-web"}, ref(2, "2"), now.Add(-releaseMemory))
	r.Add(types.NamespacedName{Namespace: "cluster-c", Name: "fleet-db"}, ref(3, "3"), now)
	got := r.UnseenOf("fleet-web", now.Add(time.Second))
	if len(got) != 1 || got["cluster-a"].DeploymentID != "d-2" {
		t.Fatalf("unseen releases of fleet-web: %v, want cluster-a's alone", got)
	}
	if _, ok := r.Unseen(types.NamespacedName{Namespace: "cluster-b", Name: "fleet-web"}, now); ok {
		t.Error("a release past releaseMemory is still remembered")
	}
	shown := &v1alpha1.BundleDeployment{Spec: v1alpha1.BundleDeploymentSpec{Released: &v1alpha1.RevisionRef{DeploymentID: "d-2"}}}
	shown.Namespace, shown.Name = "cluster-a", "fleet-web"
	r.SeenOf("fleet-web", func(ns string) *v1alpha1.BundleDeployment {
		if ns == shown.Namespace {
			return shown
		}
		return nil
	})
	if got := r.UnseenOf("fleet-web", now); len(got) != 0 {
		t.Errorf("after the cache shows it: %v", got)
	}
}

// The hub-wide bound on deployment writes: never more in flight than its size, and a write
// waiting for a slot gives up when its context ends.
func TestWriteSlotsBoundWritesInFlight(t *testing.T) {
	slots := make(WriteSlots, 2)
	var inFlight, most, done atomic.Int32
	release := make(chan struct{})
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = slots.Do(context.Background(), func() error {
				n := inFlight.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				<-release // the writes hold their slots until the bound is reached
				inFlight.Add(-1)
				done.Add(1)
				return nil
			})
		}()
	}
	wait.Until(t, "two writes in flight", 30*time.Second, func() bool { return inFlight.Load() >= 2 })
	if done.Load() != 0 || len(slots) != cap(slots) {
		t.Fatalf("%d writes done and %d slots taken before any was released", done.Load(), len(slots))
	}
	close(release)
	wg.Wait()
	if got := most.Load(); got != 2 {
		t.Errorf("at most %d writes were in flight, want exactly the bound 2", got)
	}

	full := make(WriteSlots, 1)
	full <- struct{}{}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	ran := false
	if err := full.Do(ctx, func() error { ran = true; return nil }); !errors.Is(err, context.DeadlineExceeded) || ran {
		t.Errorf("a write waiting for a full bound must give up with its context: err %v, ran %v", err, ran)
	}
}

// R1.10: the rollout controller hears when the bundler's staging of a bundle ends, once the
// last of its overlapping commits is done, and plans what the bundler left at once, not after a
// retry delay.
func TestR1_10_StagingEndWakesTheRolloutOfEachBundle(t *testing.T) {
	s := NewStagingNow()
	web, db := types.NamespacedName{Namespace: "fleet", Name: "web"}, types.NamespacedName{Namespace: "fleet", Name: "db"}
	s.Begin([]types.NamespacedName{web, db})
	s.Begin([]types.NamespacedName{web}) // a second commit of web overlaps
	s.End([]types.NamespacedName{web, db})
	if !s.Active(web) || s.Active(db) {
		t.Fatalf("web must still be staging, db not: web %v db %v", s.Active(web), s.Active(db))
	}
	woken := func() []string {
		var names []string
		for {
			select {
			case e := <-s.Done:
				names = append(names, e.Object.GetNamespace()+"/"+e.Object.GetName())
			default:
				return names
			}
		}
	}
	if got := woken(); !slices.Equal(got, []string{"fleet/db"}) {
		t.Errorf("woken %v, want only fleet/db", got)
	}
	s.End([]types.NamespacedName{web})
	if got := woken(); !slices.Equal(got, []string{"fleet/web"}) {
		t.Errorf("woken %v, want fleet/web once its last commit ended", got)
	}
}

// Releases no pass asks about again (a staged run's deployments, created and then shown by the
// cache) are dropped once past releaseMemory: the memory holds what was released lately, not
// every deployment ever created.
func TestReleasesForgetWhatNoPassAsksAbout(t *testing.T) {
	var r Releases
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 10 * minReleaseSweep {
		at := now.Add(time.Duration(i) * releaseMemory / minReleaseSweep) // a thousand a memory's span
		r.Add(types.NamespacedName{Namespace: fmt.Sprintf("cluster-%d", i), Name: "fleet-web"}, ref(1, "1"), at)
	}
	if n := len(r.at); n > 3*minReleaseSweep {
		t.Errorf("%d releases remembered after 10 memory spans of %d each, want the last spans' alone", n, minReleaseSweep)
	}
	last := types.NamespacedName{Namespace: fmt.Sprintf("cluster-%d", 10*minReleaseSweep-1), Name: "fleet-web"}
	if _, ok := r.Unseen(last, now.Add(10*releaseMemory)); !ok {
		t.Error("the latest release was dropped")
	}
}
