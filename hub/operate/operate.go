// Package operate holds what a person does to a fleet through the CLI: approve a gate, start,
// stop or resume a run, skip part of it. The CLI calls it; tests call the same code.
package operate

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/rollout"
)

// ErrInput marks a request that cannot be carried out as asked (unknown run, gate not reached,
// invalid transition).
type ErrInput struct{ Err error }

func (e *ErrInput) Error() string { return e.Err.Error() }
func (e *ErrInput) Unwrap() error { return e.Err }

func run(ctx context.Context, c client.Client, ns, name string) (*v1alpha1.StagedUpdateRun, error) {
	var r v1alpha1.StagedUpdateRun
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &r); err != nil {
		return nil, &ErrInput{fmt.Errorf("run %s/%s: %w", ns, name, err)}
	}
	return &r, nil
}

// Approve approves a gate of a run (R3.9), recording who approved, when and why. It returns
// the approval request's name and whether it was already approved.
func Approve(ctx context.Context, c client.Client, ns, runName, stage, group string, after bool, by, comment string) (string, bool, error) {
	r, err := run(ctx, c, ns, runName)
	if err != nil {
		return "", false, err
	}
	gate := "Before"
	if after {
		gate = "After"
	}
	name := rollout.ApprovalName(r.Name, gate, stage, group)
	var ar v1alpha1.ApprovalRequest
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &ar); err != nil {
		return name, false, &ErrInput{fmt.Errorf("approval request %s: %w (has the run reached that gate?)", name, err)}
	}
	if ar.Status.Approval != nil {
		return name, true, nil
	}
	orig := ar.DeepCopy()
	ar.Status.Approval = &v1alpha1.ApprovalRecord{By: by, At: metav1.Now(), Comment: comment}
	if err := c.Status().Patch(ctx, &ar, client.MergeFrom(orig)); err != nil {
		return name, false, fmt.Errorf("failed to approve %s: %w", name, err)
	}
	return name, false, nil
}

// SetRunState moves a run to Run or Stop, refusing what R3.7 forbids.
func SetRunState(ctx context.Context, c client.Client, ns, runName string, state v1alpha1.RunAction) error {
	r, err := run(ctx, c, ns, runName)
	if err != nil {
		return err
	}
	if err := rollout.ValidateTransition(rollout.RunAction(r.Spec.State), rollout.RunAction(state), rollout.RunState(r.Status.State)); err != nil {
		return &ErrInput{fmt.Errorf("run %s: %w", r.Name, err)}
	}
	orig := r.DeepCopy()
	r.Spec.State = state
	if err := c.Patch(ctx, r, client.MergeFrom(orig)); err != nil {
		return fmt.Errorf("failed to update run %s: %w", r.Name, err)
	}
	return nil
}

// Skip adds a skip to a run (R3.11).
func Skip(ctx context.Context, c client.Client, ns, runName string, skip v1alpha1.RunSkip) error {
	r, err := run(ctx, c, ns, runName)
	if err != nil {
		return err
	}
	orig := r.DeepCopy()
	r.Spec.Skips = append(r.Spec.Skips, skip)
	if err := c.Patch(ctx, r, client.MergeFrom(orig)); err != nil {
		return fmt.Errorf("failed to update run %s: %w", r.Name, err)
	}
	return nil
}
