package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FailurePolicy is how a rollout answers a revision that fails (ROLLOUT.md §5): every gate
// that opens on readiness or time watches the outcome while it holds. The defaults keep a
// failing rollout where it is, as before: regressions count as failures, failures pause.
type FailurePolicy struct {
	// OnRegression is what a gate does when a member that was Ready on the revision is no longer
	// (R5.2): Fail (default) counts it as a failure of its partition, stage or group; Restart
	// starts the wait or soak over once it is Ready again; Ignore counts readiness at the moment
	// only.
	// +optional
	// +kubebuilder:validation:Enum=Fail;Restart;Ignore
	OnRegression string `json:"onRegression,omitempty"`
	// OnFailure is what the rollout does once its failures exceed what it tolerates (R5.3):
	// Pause (default) holds it; Rollback releases every cluster that received the revision its
	// last good one again and quarantines the revision (R5.4, R5.5).
	// +optional
	// +kubebuilder:validation:Enum=Pause;Rollback
	OnFailure string `json:"onFailure,omitempty"`
	// FailureTimeout is how long failing clusters may hold a partition before the policy
	// applies, and how long a cluster may take to become Ready before it fails. Default 10m.
	// Staged runs use clusterTimeout instead.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="must be above 0"
	FailureTimeout *metav1.Duration `json:"failureTimeout,omitempty"`
	// HealthWindow is how long after a partition, stage or soak finished a regression still
	// counts (R5.1). Default 0: none.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="must not be negative"
	HealthWindow *metav1.Duration `json:"healthWindow,omitempty"`
}

// The actions of onFailure, as a RevisionFailure records them.
const (
	FailureActionPause    = "Pause"
	FailureActionRollback = "Rollback"
)

// RolloutOutcome is how the rollout of a revision ended (R5.6).
// +kubebuilder:validation:Enum=Completed;Failed;RolledBack
type RolloutOutcome string

const (
	OutcomeCompleted  RolloutOutcome = "Completed"
	OutcomeFailed     RolloutOutcome = "Failed"
	OutcomeRolledBack RolloutOutcome = "RolledBack"
)

// RevisionFailure is a revision that failed under its rollout's policy: the rule that fired,
// the clusters that failed and what the policy did (R5.6). With action Rollback the revision
// is quarantined (R5.5) until a newer revision or a person's retry.
type RevisionFailure struct {
	// Revision is the index of the revision that failed.
	// +kubebuilder:validation:Minimum=1
	Revision int64 `json:"revision"`
	// Rule is the rule that fired: R5.2 (a member regressed) or R5.3 (a failure budget).
	Rule string `json:"rule"`
	// Action is what the policy did: Pause or Rollback.
	// +kubebuilder:validation:Enum=Pause;Rollback
	Action string `json:"action"`
	// Clusters are the clusters that failed (at most 50 named).
	// +optional
	// +kubebuilder:validation:MaxItems=50
	Clusters []string `json:"clusters,omitempty"`
	// Message says what failed and what happens, for people.
	// +optional
	Message string `json:"message,omitempty"`
	// At is when the failure was recorded.
	At metav1.Time `json:"at"`
}

// RolloutResult is how the newest revision's rollout stands: its outcome once it ended and the
// failure that fired, with the revision each rolled-back cluster was restored to.
type RolloutResult struct {
	// Revision is the revision the outcome is of.
	Revision int64 `json:"revision"`
	// Outcome is Completed, Failed (held by the failure policy) or RolledBack; empty while
	// the rollout goes on.
	// +optional
	Outcome RolloutOutcome `json:"outcome,omitempty"`
	// Failure is what fired the failure policy, if it did.
	// +optional
	Failure *RevisionFailure `json:"failure,omitempty"`
	// RestoredRevision is the revision most rolled-back clusters run again (their last good
	// one; each cluster's own is on its BundleDeployment).
	// +optional
	RestoredRevision int64 `json:"restoredRevision,omitempty"`
	// At is when the outcome was reached.
	// +optional
	At *metav1.Time `json:"at,omitempty"`
}

// RevisionRetry is a person's request to roll a quarantined revision out again (R5.5):
// `flotilla rollout retry BUNDLE --revision N` writes it; the hub lifts the quarantine of a
// failure recorded at or before At (times are kept to the second).
type RevisionRetry struct {
	// +kubebuilder:validation:Minimum=1
	Revision int64       `json:"revision"`
	At       metav1.Time `json:"at"`
	// By is who asked, for the record.
	// +optional
	By string `json:"by,omitempty"`
}
