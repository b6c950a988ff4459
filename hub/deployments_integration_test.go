package hub

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/deploy"
	"github.com/flotilla-dev/flotilla/hub/model"
)

// A release is a full update of the cached deployment while it is current, and a patch of what
// changed when another write came after the cached copy: neither undoes the agent's report,
// and the agent's managed fields stay.
func TestUpdateDeploymentFallsBackToAPatchWhenAnotherWriteCameFirst(t *testing.T) {
	c := apiClient(t)
	ctx := context.Background()
	ns := namespace(t, c)
	r1, r2, r3 := revisionRef(1, "1"), revisionRef(2, "2"), revisionRef(3, "3")
	bd := &v1alpha1.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Name: "fleet-web", Namespace: ns},
		Spec: v1alpha1.BundleDeploymentSpec{Bundle: "web", BundleNamespace: ns, Staged: r1, Released: &r1}}
	if err := c.Create(ctx, bd); err != nil {
		t.Fatal(err)
	}
	report := func(rev v1alpha1.RevisionRef) {
		t.Helper()
		var live v1alpha1.BundleDeployment
		if err := c.Get(ctx, client.ObjectKeyFromObject(bd), &live); err != nil {
			t.Fatal(err)
		}
		patch := client.RawPatch(types.MergePatchType, []byte(`{"status":{"ready":true,"appliedRevision":`+strconv.FormatInt(rev.Index, 10)+`}}`))
		if err := c.SubResource("status").Patch(ctx, &live, patch, client.FieldOwner("agent")); err != nil {
			t.Fatal(err)
		}
	}
	release := func(cached *v1alpha1.BundleDeployment, rev v1alpha1.RevisionRef) {
		t.Helper()
		orig, next := cached, cached.DeepCopy()
		next.ManagedFields = nil
		deploy. // the hub's cache keeps none
			StageTarget(next, model.RevisionTarget{Ref: rev}, true, time.Now())
		if err := deploy.UpdateDeployment(ctx, c, next, orig); err != nil {
			t.Fatal(err)
		}
	}
	check := func(what string, want v1alpha1.RevisionRef, applied int64) {
		t.Helper()
		var live v1alpha1.BundleDeployment
		if err := c.Get(ctx, client.ObjectKeyFromObject(bd), &live); err != nil {
			t.Fatal(err)
		}
		agentFields := slices.ContainsFunc(live.ManagedFields, func(m metav1.ManagedFieldsEntry) bool { return m.Manager == "agent" })
		if live.Spec.Staged != want || *live.Spec.Released != want || live.Status.AppliedRevision != applied || !live.Status.Ready || !agentFields {
			t.Errorf("%s: staged %v released %v, status %+v, agent's managed fields kept %v", what, live.Spec.Staged, live.Spec.Released, live.Status, agentFields)
		}
	}
	report(r1)
	var cached v1alpha1.BundleDeployment
	if err := c.Get(ctx, client.ObjectKeyFromObject(bd), &cached); err != nil {
		t.Fatal(err)
	}
	release(&cached, r2) // current: a full update
	check("full update", r2, 1)

	if err := c.Get(ctx, client.ObjectKeyFromObject(bd), &cached); err != nil {
		t.Fatal(err)
	}
	report(r2) // the agent writes after the copy was read: the update conflicts
	release(&cached, r3)
	check("patch after a conflict", r3, 2)

	// Two writers decide on the same copy (two hubs that both think they lead): the first
	// releases, the second's update and its patch both fail, and the first one's release stands.
	report(r3)
	if err := c.Get(ctx, client.ObjectKeyFromObject(bd), &cached); err != nil {
		t.Fatal(err)
	}
	r4, r5 := revisionRef(4, "4"), revisionRef(5, "5")
	release(cached.DeepCopy(), r4)
	stale := cached.DeepCopy()
	deploy.StageTarget(stale, model.RevisionTarget{Ref: r5}, true, time.Now())
	if err := deploy.UpdateDeployment(ctx, c, stale, &cached); !apierrors.IsConflict(err) {
		t.Errorf("a second writer deciding on the same copy: %v, want a conflict", err)
	}
	var live v1alpha1.BundleDeployment
	if err := c.Get(ctx, client.ObjectKeyFromObject(bd), &live); err != nil {
		t.Fatal(err)
	}
	if live.Spec.Released == nil || *live.Spec.Released != r4 || live.Spec.Staged != r4 {
		t.Errorf("after the second writer: staged %v, released %v; want the first writer's %v", live.Spec.Staged, live.Spec.Released, r4)
	}
}
