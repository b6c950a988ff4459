package hub

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/contentstore"
	"github.com/flotilla-dev/flotilla/hub/lifecycle"
	"github.com/flotilla-dev/flotilla/hub/model"
)

// The collector keeps what a revision in a Bundle's history records (its targets and the
// content they deploy, shared by two bundles), what a BundleDeployment stages or runs although
// its revision left the history, and anything younger than the grace period; it deletes the
// rest, every chunk of it.
func TestContentCollectorKeepsWhatIsReferenced(t *testing.T) {
	c := apiClient(t)
	ctx := context.Background()
	ns := namespace(t, c)
	store := &contentstore.Store{Client: c}
	revisions := &model.RevisionStore{Content: store}
	put := func(id, text string) {
		if _, err := store.Put(ctx, ns, id, []byte(text)); err != nil {
			t.Fatal(err)
		}
	}
	put("s-shared", "shared by two bundles' histories")
	put("s-deployed", "staged on a cluster, its revision out of the history")
	put("s-orphan", "referenced by nothing")
	targetsID, err := revisions.Put(ctx, ns, model.RevisionTargets{"edge-1": {Ref: v1alpha1.RevisionRef{Index: 1, ContentID: "s-shared", DeploymentID: "d-1"}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"web", "api"} {
		bun := &v1alpha1.Bundle{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
		if err := c.Create(ctx, bun); err != nil {
			t.Fatal(err)
		}
		bun.Spec.Revisions = []v1alpha1.BundleRevision{{RevisionRef: v1alpha1.RevisionRef{Index: 1, ContentID: "s-shared", DeploymentID: "d-1"}, TargetsID: targetsID, Created: metav1.Now()}}
		if err := c.Update(ctx, bun); err != nil {
			t.Fatal(err)
		}
	}
	clusterNS := namespace(t, c)
	bd := &v1alpha1.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Name: "old", Namespace: clusterNS, Labels: map[string]string{model.LabelBundleNamespace: ns, model.LabelBundle: "gone"}},
		Spec: v1alpha1.BundleDeploymentSpec{Bundle: "gone", BundleNamespace: ns, Staged: v1alpha1.RevisionRef{Index: 7, ContentID: "s-deployed", DeploymentID: "d-7"}}}
	if err := c.Create(ctx, bd); err != nil {
		t.Fatal(err)
	}
	exists := func(id string) bool {
		err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: id}, &v1alpha1.Content{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}
	collect := func(grace time.Duration) {
		r := &lifecycle.ContentCollector{Client: c, Revisions: &model.RevisionStore{Content: store}, Now: func() time.Time { return time.Now().Add(time.Hour) }, Grace: grace}
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	collect(2 * time.Hour) // everything is younger than the grace period
	if !exists("s-orphan") {
		t.Fatal("content younger than the grace period was deleted")
	}
	collect(30 * time.Minute)
	for id, want := range map[string]bool{"s-shared": true, targetsID: true, "s-deployed": true, "s-orphan": false} {
		if got := exists(id); got != want {
			t.Errorf("content %s exists = %v, want %v", id, got, want)
		}
	}
	// The last reference goes: so does the content.
	if err := c.Delete(ctx, bd); err != nil {
		t.Fatal(err)
	}
	collect(30 * time.Minute)
	if exists("s-deployed") {
		t.Error("content no deployment and no revision references any more stays")
	}
}
