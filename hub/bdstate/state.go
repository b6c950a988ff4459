// Package bdstate reads a BundleDeployment in the rollout planner's terms. The hub (to plan and
// to report) and the agent (to report) both use it, so a cluster's state (ROLLOUT.md §0) is
// computed the same way everywhere, by rollout.ClusterState. It reads StagedUpdateRuns too
// (RunRefs), for the hub and the CLI to apply one rule of which run holds a bundle's rollout.
package bdstate

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/rollout"
)

// Deployment converts a BundleDeployment's spec and status; none (nil) is none: the rollout
// has not reached the cluster.
func Deployment(bd *v1alpha1.BundleDeployment) *rollout.Deployment {
	if bd == nil {
		return nil
	}
	d := &rollout.Deployment{Staged: bd.Spec.Staged.Index, Applied: bd.Status.AppliedRevision, Ready: bd.Status.Ready, Modified: bd.Status.Modified}
	if bd.Spec.Released != nil {
		d.Released = bd.Spec.Released.Index
		if bd.Status.AppliedDeploymentID != bd.Spec.Released.DeploymentID {
			d.Applied = 0 // a new deployment of the same index (options changed) is not applied yet
		}
	}
	switch ie := bd.Status.Ineligible; {
	case ie != nil && bd.Spec.Released != nil && ie.DeploymentID == bd.Spec.Released.DeploymentID:
		// Not a failed apply: the cluster runs what it ran before (R1.15).
		d.Unserved, d.Applied = ie.UnservedAPIs, bd.Status.AppliedRevision
	case meta.IsStatusConditionFalse(bd.Status.Conditions, v1alpha1.AppliedCondition):
		d.ApplyFailed = true
	}
	if bd.Status.AppliedAt != nil {
		d.AppliedAt = bd.Status.AppliedAt.Time
	}
	if bd.Spec.ReleasedAt != nil {
		d.ReleasedAt = bd.Spec.ReleasedAt.Time
	}
	if bd.Spec.LastGood != nil {
		d.LastGood = bd.Spec.LastGood.Index
	}
	d.Rollback = bd.Spec.Rollback
	// Ready since its apply (R5.1): NotReady from then on is a regression, from when the
	// agent saw it.
	if d.Applied != 0 && bd.Status.ReadyAt != nil {
		d.WasReady = true
		if c := meta.FindStatusCondition(bd.Status.Conditions, v1alpha1.ReadyCondition); c != nil && c.Status == metav1.ConditionFalse {
			d.NotReadyAt = c.LastTransitionTime.Time
		}
	}
	return d
}

// State is the cluster's state for revision, the one its bundle rolls out: a cluster still
// holding an older release is OutOfSync (§0). A deployment is staged only when the rollout
// reaches its cluster, so its own staged index says nothing about a revision the rollout has
// not brought there yet: callers pass the bundle's.
func State(bd *v1alpha1.BundleDeployment, revision int64) v1alpha1.ClusterState {
	return v1alpha1.ClusterState(rollout.ClusterState(Deployment(bd), revision))
}

// Available reports whether the deployment runs revision Ready (or Modified): what a bundle
// that depends on it waits for.
func Available(bd *v1alpha1.BundleDeployment, revision int64) bool {
	return rollout.ClusterState(Deployment(bd), revision).Available()
}

// RunRefs is what the planner's run rules (R3.14: rollout.PlanAutoRuns, rollout.Superseding,
// rollout.CurrentRun) read of a bundle's runs.
func RunRefs(runs []v1alpha1.StagedUpdateRun) []rollout.RunRef {
	refs := make([]rollout.RunRef, len(runs))
	for i := range runs {
		run := &runs[i]
		rev := run.Status.RevisionIndex
		if run.Spec.RevisionIndex != nil {
			rev = *run.Spec.RevisionIndex
		}
		refs[i] = rollout.RunRef{Name: run.Name, Revision: rev, Auto: run.Labels[v1alpha1.LabelAutoRun] == "true", State: rollout.RunState(run.Status.State),
			Action: rollout.RunAction(run.Spec.State), Created: run.CreationTimestamp.Time, SupersededBy: run.Annotations[v1alpha1.AnnotationSupersededBy]}
		if run.Status.StartedAt != nil {
			refs[i].Started = run.Status.StartedAt.Time
		}
	}
	return refs
}
