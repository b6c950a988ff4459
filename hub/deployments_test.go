package hub

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
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
		changed := stageTarget(bd, revisionTarget{Ref: c.target}, c.release)
		if changed != c.wantChanged || bd.Spec.Staged != c.target || *bd.Spec.Released != *c.wantReleased || bd.Spec.Rollback != c.wantRollback {
			t.Errorf("%s: changed %v staged %v released %v rollback %v", c.name, changed, bd.Spec.Staged, bd.Spec.Released, bd.Spec.Rollback)
		}
	}
}

func TestReleasesAreRememberedUntilTheCacheShowsThem(t *testing.T) {
	var r releases
	key := types.NamespacedName{Namespace: "cluster-a", Name: "fleet-web"}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r.add(key, "d-2", now)
	if !r.pending(key, "d-2", now.Add(time.Second)) || r.pending(key, "d-3", now) {
		t.Fatal("a release just written must be pending, for its deployment id only")
	}
	stale := &v1alpha1.BundleDeployment{Spec: v1alpha1.BundleDeploymentSpec{Released: &v1alpha1.RevisionRef{DeploymentID: "d-1"}}}
	stale.Namespace, stale.Name = key.Namespace, key.Name
	r.seen(stale) // the cache still shows the old release
	if !r.pending(key, "d-2", now.Add(time.Second)) {
		t.Fatal("a stale cache must not clear the memory")
	}
	fresh := stale.DeepCopy()
	fresh.Spec.Released.DeploymentID = "d-2"
	r.seen(fresh)
	if r.pending(key, "d-2", now.Add(time.Second)) {
		t.Fatal("once the cache shows the release it is forgotten")
	}
	r.add(key, "d-4", now)
	if r.pending(key, "d-4", now.Add(releaseMemory+time.Second)) {
		t.Fatal("a release the cache never shows is forgotten after releaseMemory")
	}
}
