package hub

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// object is a kind of the hub's API: a pointer to a type with a Status field.
type object[T any] interface {
	*T
	client.Object
}

// outcome is what a controller's step decided beside the status it set.
type outcome struct {
	// after: look again after this long (a deadline, a write held back); 0: on events only.
	after time.Duration
	// hold: the status changed but is not written now (progress counts within their
	// throttle); after says when to look again.
	hold bool
	// written, if set, runs once the status is written: what is told of a change (an Event)
	// is told when the status shows it.
	written func()
}

// statusController is the skeleton of the hub's status controllers: it reads the object (one
// that is gone is done), lets step bring the status of a copy up to date, and writes the
// status only when it changed (also when the step failed: the status says why). With lock, the write is conditional on the object as read: a
// status derived from a cache that is behind fails with a conflict and is derived again,
// instead of writing over what the cache does not show yet.
//
// With a finalizer, the skeleton keeps it on the object while it lives and, once the object is
// deleted, calls finalize instead of step until it reports done, then lets the object go.
type statusController[T any, PT object[T]] struct {
	client client.Client
	lock   bool
	// step sets obj's status; orig is the object as read, not to be changed.
	step func(ctx context.Context, obj, orig PT) (outcome, error)
	// finalizer, if set, holds a deleted object until finalize reports done.
	finalizer string
	finalize  func(ctx context.Context, obj PT) (done bool, err error)
}

func (s statusController[T, PT]) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	obj := PT(new(T))
	if err := s.client.Get(ctx, req.NamespacedName, obj); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if s.finalizer != "" {
		if !obj.GetDeletionTimestamp().IsZero() {
			return ctrl.Result{}, s.release(ctx, obj)
		}
		if controllerutil.AddFinalizer(obj, s.finalizer) {
			if err := s.client.Update(ctx, obj); err != nil {
				return ctrl.Result{}, fmt.Errorf("failed to add the finalizer of %T %s: %w", obj, req.NamespacedName, err)
			}
		}
	}
	orig := obj.DeepCopyObject().(PT)
	// The status is written whether or not the step failed: a step that fails says why in
	// the status it set, and the error retries it.
	out, stepErr := s.step(ctx, obj, orig)
	if out.hold || !statusChanged(orig, obj) {
		return ctrl.Result{RequeueAfter: out.after}, stepErr
	}
	// The patch's base is the object as the step left it (its own writes of the object's
	// metadata included) with the status as read: the patch carries the status alone.
	base := obj.DeepCopyObject().(PT)
	reflect.ValueOf(base).Elem().FieldByName("Status").Set(reflect.ValueOf(orig).Elem().FieldByName("Status"))
	patch := client.MergeFrom(base)
	if s.lock {
		patch = client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})
	}
	if err := client.IgnoreNotFound(s.client.Status().Patch(ctx, obj, patch)); err != nil {
		return ctrl.Result{}, errors.Join(stepErr, fmt.Errorf("failed to update the status of %T %s: %w", obj, req.NamespacedName, err))
	}
	if out.written != nil {
		out.written()
	}
	return ctrl.Result{RequeueAfter: out.after}, stepErr
}

// release finalizes a deleted object and, once that is done, removes its finalizer.
func (s statusController[T, PT]) release(ctx context.Context, obj PT) error {
	if !controllerutil.ContainsFinalizer(obj, s.finalizer) {
		return nil
	}
	if done, err := s.finalize(ctx, obj); err != nil || !done {
		return err
	}
	controllerutil.RemoveFinalizer(obj, s.finalizer)
	return client.IgnoreNotFound(s.client.Update(ctx, obj))
}

// statusChanged reports whether two versions of an object differ in their status.
func statusChanged(a, b client.Object) bool {
	return !equality.Semantic.DeepEqual(reflect.ValueOf(a).Elem().FieldByName("Status").Interface(), reflect.ValueOf(b).Elem().FieldByName("Status").Interface())
}
