package hub

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/reconciler"
)

// The status skeleton writes a status only when the step changed it, not while the step holds
// it back, tells what it wrote after the write, and with lock refuses to write a status derived
// from an object that changed since it was read.
func TestStatusControllerWritesOnlyChangedStatus(t *testing.T) {
	c := apiClient(t)
	ns := namespace(t, c)
	ctx := context.Background()
	g := &v1alpha1.ClusterGroup{ObjectMeta: metav1.ObjectMeta{Name: "g", Namespace: ns}, Spec: v1alpha1.ClusterGroupSpec{Selector: &metav1.LabelSelector{}}}
	if err := c.Create(ctx, g); err != nil {
		t.Fatal(err)
	}
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(g)}
	var count int32
	var hold, told bool
	sc := reconciler.Status[v1alpha1.ClusterGroup, *v1alpha1.ClusterGroup]{Client: c, Lock: true, Step: func(_ context.Context, g, _ *v1alpha1.ClusterGroup) (reconciler.Outcome, error) {
		g.Status.ClusterCount = count
		return reconciler.Outcome{Hold: hold, Written: func() { told = true }}, nil
	}}
	version := func() string {
		var now v1alpha1.ClusterGroup
		if err := c.Get(ctx, req.NamespacedName, &now); err != nil {
			t.Fatal(err)
		}
		return now.ResourceVersion
	}
	rv := version()
	if _, err := sc.Reconcile(ctx, req); err != nil || version() != rv || told {
		t.Fatalf("an unchanged status was written (or told): %v", err)
	}
	count, hold = 3, true
	if _, err := sc.Reconcile(ctx, req); err != nil || version() != rv || told {
		t.Fatalf("a status held back was written (or told): %v", err)
	}
	hold = false
	if _, err := sc.Reconcile(ctx, req); err != nil || version() == rv || !told {
		t.Fatalf("a changed status was not written and told: %v", err)
	}
	// A step that read a stale copy: the locked write conflicts instead of writing over.
	count, told = 5, false
	stale := reconciler.Status[v1alpha1.ClusterGroup, *v1alpha1.ClusterGroup]{Client: c, Lock: true, Step: func(ctx context.Context, g, _ *v1alpha1.ClusterGroup) (reconciler.Outcome, error) {
		var other v1alpha1.ClusterGroup
		if err := c.Get(ctx, req.NamespacedName, &other); err != nil {
			return reconciler.Outcome{}, err
		}
		other.Labels = map[string]string{"changed": "meanwhile"}
		if err := c.Update(ctx, &other); err != nil {
			return reconciler.Outcome{}, err
		}
		g.Status.ClusterCount = count
		return reconciler.Outcome{Written: func() { told = true }}, nil
	}}
	// The write loses the race: nothing is told, and the pass is done again (a conflict is no
	// error to log).
	if res, err := stale.Reconcile(ctx, req); err != nil || res.RequeueAfter == 0 || told {
		t.Fatalf("a status derived from a stale object: %v %+v (told %t), want it done again after its conflict", err, res, told)
	}
	if err := c.Get(ctx, req.NamespacedName, g); err != nil || g.Status.ClusterCount != 3 {
		t.Errorf("the stale status was written: %d (%v)", g.Status.ClusterCount, err)
	}
	// A deleted object is done.
	if err := c.Delete(ctx, g); err != nil {
		t.Fatal(err)
	}
	if _, err := sc.Reconcile(ctx, req); err != nil {
		t.Errorf("a deleted object: %v", err)
	}
}
