package model

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// DecidedOnLatest returns a conflict when the API server holds another version of the object a
// decision was made on than decidedOn, a copy from the cache. A run's or a sequence's progress
// lives in its status, and the status write that records a step is conditional on the object as
// read: a step on a copy the cache shows a moment late fails that write and is taken again. The
// releases it made before cannot be taken back, though: a cluster would run a revision its stage
// has not reached. A step that is about to release or restore checks its copy first; only the
// metadata is read (a run's status names every cluster of the fleet). Without live (a reader
// past the cache), nothing is checked.
func DecidedOnLatest(ctx context.Context, live client.Reader, gvk schema.GroupVersionKind, decidedOn client.Object) error {
	if live == nil {
		return nil
	}
	current := &metav1.PartialObjectMetadata{}
	current.SetGroupVersionKind(gvk)
	if err := live.Get(ctx, client.ObjectKeyFromObject(decidedOn), current); err != nil {
		return fmt.Errorf("failed to read %s %s past the cache: %w", gvk.Kind, client.ObjectKeyFromObject(decidedOn), err)
	}
	if current.ResourceVersion != decidedOn.GetResourceVersion() {
		return apierrors.NewConflict(schema.GroupResource{Group: gvk.Group, Resource: gvk.Kind}, decidedOn.GetName(),
			fmt.Errorf("decided on version %s, the API server holds %s: decided again once the cache shows it", decidedOn.GetResourceVersion(), current.ResourceVersion))
	}
	return nil
}
