// Package reconciler is the skeleton the hub's controllers share: a Status
// reconciler reads an object, lets a step bring the status of a copy up to date, and writes
// the status only when it changed. It owns nothing of the API; the controllers are the
// steps.
package reconciler

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// Object is a kind with a status: a pointer to an API type with a Status field.
type Object[T any] interface {
	*T
	client.Object
}

// Outcome is what a step decided beside the status it set.
type Outcome struct {
	// After: look again after this long (a deadline, a write held back); 0: on events only.
	After time.Duration
	// Urgent: the look again is a deadline others wait on (an agent's heartbeat deadline):
	// it goes before the routine work queued when it is due.
	Urgent bool
	// Hold: the status changed but is not written now (progress counts within their
	// throttle); After says when to look again.
	Hold bool
	// Written, if set, runs once the status is written: what is told of a change (an Event)
	// is told when the status shows it.
	Written func()
	// Done (Finalize only): the cleanup is finished and the finalizer may go.
	Done bool
}

// Status reconciles objects of one kind: it reads the object, lets Step set the status of a
// copy, and writes the status only when it changed (also when the step failed: the status
// says why, and the error retries it). With Lock, the write is conditional on the object as
// read: a status derived from a cache that is behind fails with a conflict and is derived
// again, instead of writing over what the cache does not show yet.
//
// With a Finalizer, the reconciler keeps it on the object while it lives and, once the
// object is deleted, calls Finalize instead of Step until it reports Done, then lets the
// object go; the status Finalize sets (what the deletion waits for) is written as a step's
// is. Without a Step, the reconciler only finalizes: another writer adds the finalizer. Gone,
// if set, is called for an object that no longer exists.
type Status[T any, PT Object[T]] struct {
	Client client.Client
	Lock   bool
	// Step sets obj's status; orig is the object as read. A step that must write part of the
	// status itself before it goes on (an ordered protocol, such as a cluster's admission)
	// copies what it wrote into orig's status, so that it is not written again.
	Step func(ctx context.Context, obj, orig PT) (Outcome, error)

	Finalizer string
	// Finalize cleans up after a deleted object; Outcome.Done lets the object go.
	Finalize func(ctx context.Context, obj PT) (Outcome, error)
	Gone     func(ctx context.Context, key types.NamespacedName) error
}

// conflictRetry is how soon a pass whose write lost an optimistic-lock race is done again.
const conflictRetry = 50 * time.Millisecond

// Reconcile runs one pass. A write that lost an optimistic-lock race (the object changed since
// it was read) is no failure: the pass is done again from a fresh read, and the race is logged
// at debug level, not as an error with a stack trace.
func (s Status[T, PT]) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	res, err := s.reconcile(ctx, req)
	if err != nil && onlyConflicts(err) {
		log.FromContext(ctx).V(1).Info("the object changed while it was reconciled; reconciling it again", "error", err.Error())
		return ctrl.Result{RequeueAfter: conflictRetry}, nil
	}
	return res, err
}

// onlyConflicts reports whether every error err joins is a conflict.
func onlyConflicts(err error) bool {
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range joined.Unwrap() {
			if !onlyConflicts(e) {
				return false
			}
		}
		return len(joined.Unwrap()) > 0
	}
	return apierrors.IsConflict(err)
}

func (s Status[T, PT]) reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	obj := PT(new(T))
	if err := s.Client.Get(ctx, req.NamespacedName, obj); err != nil {
		if client.IgnoreNotFound(err) == nil && s.Gone != nil {
			return ctrl.Result{}, s.Gone(ctx, req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	step := s.Step
	switch {
	case s.Finalizer != "" && !obj.GetDeletionTimestamp().IsZero():
		if !controllerutil.ContainsFinalizer(obj, s.Finalizer) {
			return ctrl.Result{}, nil
		}
		step = s.finalize
	case step == nil:
		return ctrl.Result{}, nil
	case s.Finalizer != "" && controllerutil.AddFinalizer(obj, s.Finalizer):
		if err := s.Client.Update(ctx, obj); err != nil {
			return ctrl.Result{}, fmt.Errorf("failed to add the finalizer of %T %s: %w", obj, req.NamespacedName, err)
		}
	}
	orig := obj.DeepCopyObject().(PT)
	out, stepErr := step(ctx, obj, orig)
	if out.Hold || !StatusChanged(orig, obj) {
		return out.result(), stepErr
	}
	// The patch's base is the object as the step left it (its own writes of the object's
	// metadata included) with the status as read: the patch carries the status alone.
	base := obj.DeepCopyObject().(PT)
	reflect.ValueOf(base).Elem().FieldByName("Status").Set(reflect.ValueOf(orig).Elem().FieldByName("Status"))
	patch := client.MergeFrom(base)
	if s.Lock {
		patch = client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})
	}
	if err := client.IgnoreNotFound(s.Client.Status().Patch(ctx, obj, patch)); err != nil {
		return ctrl.Result{}, errors.Join(stepErr, fmt.Errorf("failed to update the status of %T %s: %w", obj, req.NamespacedName, err))
	}
	if out.Written != nil {
		out.Written()
	}
	return out.result(), stepErr
}

// UrgentPriority is the work queue priority of an urgent look again: above the default (0)
// of events, and far above the low priority of the objects a controller lists at its start.
const UrgentPriority = 100

func (out Outcome) result() ctrl.Result {
	res := ctrl.Result{RequeueAfter: out.After}
	if out.Urgent && out.After > 0 {
		urgent := UrgentPriority
		res.Priority = &urgent
	}
	return res
}

// finalize is the step of a deleted object: Finalize, and once it is done the finalizer's
// removal, conditional on the object as read (another writer's change comes first and the
// removal is decided again).
func (s Status[T, PT]) finalize(ctx context.Context, obj, _ PT) (Outcome, error) {
	out, err := s.Finalize(ctx, obj)
	if err != nil || !out.Done {
		return out, err
	}
	before := obj.DeepCopyObject().(PT)
	controllerutil.RemoveFinalizer(obj, s.Finalizer)
	if err := s.Client.Patch(ctx, obj, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return Outcome{}, client.IgnoreNotFound(err)
	}
	// The object may be gone: a status set on the way has nowhere to go.
	return Outcome{Hold: true}, nil
}

// StatusChanged reports whether two versions of an object differ in their status.
func StatusChanged(a, b client.Object) bool {
	return !equality.Semantic.DeepEqual(reflect.ValueOf(a).Elem().FieldByName("Status").Interface(), reflect.ValueOf(b).Elem().FieldByName("Status").Interface())
}
