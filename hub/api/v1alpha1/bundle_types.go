package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BundleSpec is one rendered path of a GitRepo, its revision history and its rollout.
// +kubebuilder:validation:XValidation:rule="[has(self.rolloutStrategy), has(self.placement) && has(self.placement.rollingUpdate), has(self.stagedUpdate), has(self.sequence)].filter(x, x).size() <= 1",message="choose at most one of rolloutStrategy, placement.rollingUpdate, stagedUpdate and sequence"
type BundleSpec struct {
	// GitRepo is the name of the GitRepo this bundle was rendered from; empty for bundles
	// created by hand.
	// +optional
	GitRepo string `json:"gitRepo,omitempty"`
	// Path is the bundle's directory inside the repository.
	// +optional
	Path string `json:"path,omitempty"`
	// Targets are the clusters the bundle deploys to.
	// +optional
	// +kubebuilder:validation:MaxItems=100
	Targets []Target `json:"targets,omitempty"`
	// Revisions is the history, oldest first; indexes increase strictly.
	// +optional
	// +kubebuilder:validation:MaxItems=100
	// +listType=map
	// +listMapKey=index
	Revisions []BundleRevision `json:"revisions,omitempty"`
	// LatestRevision is the index of the newest revision ever created; it never decreases, so a
	// deleted history entry's index is never reused.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:XValidation:rule="self >= oldSelf",message="latestRevision must not decrease"
	LatestRevision int64 `json:"latestRevision,omitempty"`
	// TargetRevision, when set, deploys this older index instead of the latest (rollback). The
	// next new revision clears it: a commit after a rollback is the fix going forward.
	// +optional
	// +kubebuilder:validation:Minimum=1
	TargetRevision *int64 `json:"targetRevision,omitempty"`
	// Retry, set by a person (`flotilla rollout retry`), lifts the quarantine of a revision
	// that failed before it was asked (R5.5): the revision rolls out again.
	// +optional
	Retry *RevisionRetry `json:"retry,omitempty"`

	// RolloutStrategy is fleet.yaml's continuous rollout (ROLLOUT.md §1).
	// +optional
	RolloutStrategy *RolloutStrategy `json:"rolloutStrategy,omitempty"`
	// Placement chooses clusters among the targets (ROLLOUT.md §2).
	// +optional
	Placement *Placement `json:"placement,omitempty"`
	// StagedUpdate rolls revisions out through a StagedUpdateStrategy (ROLLOUT.md §3).
	// +optional
	StagedUpdate *StagedUpdateRef `json:"stagedUpdate,omitempty"`
	// Sequence rolls revisions out through a RolloutSequence (ROLLOUT.md §4).
	// +optional
	Sequence *LocalObjectReference `json:"sequence,omitempty"`

	// DependsOn lists bundles that must be Ready on a cluster before this one is released there.
	// +optional
	// +kubebuilder:validation:MaxItems=50
	DependsOn []BundleDependency `json:"dependsOn,omitempty"`
	// Paused keeps staging new revisions but releases none (R1.13).
	// +optional
	Paused bool `json:"paused,omitempty"`
	// Options are how the agent deploys the bundle's resources.
	// +optional
	Options DeploymentOptions `json:"options,omitempty"`
}

// BundleRevision is one immutable rendered version of the bundle.
type BundleRevision struct {
	RevisionRef `json:",inline"`
	// Commit is the git commit it was rendered from.
	// +optional
	Commit string `json:"commit,omitempty"`
	// Created is when the hub first saw this revision.
	Created metav1.Time `json:"created"`
	// TargetsID names the stored record of what this revision deploys to each cluster, so that
	// it can be deployed again (rollback, runs of older revisions, sequences) without re-rendering.
	// +optional
	TargetsID string `json:"targetsID,omitempty"`
}

// StagedUpdateRef points a bundle at a StagedUpdateStrategy.
type StagedUpdateRef struct {
	// Strategy is the StagedUpdateStrategy's name.
	// +kubebuilder:validation:MinLength=1
	Strategy string `json:"strategy"`
	// AutoRun creates and starts a StagedUpdateRun for every new revision (R3.14).
	// +optional
	AutoRun bool `json:"autoRun,omitempty"`
}

// BundleDependency names a bundle that must be ready first.
type BundleDependency struct {
	// Name of the bundle.
	// +optional
	Name string `json:"name,omitempty"`
	// Selector selects bundles by label.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
}

// BundleStatus reports the rollout of a bundle across its targets.
type BundleStatus struct {
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// ReleasingRevision is the index being rolled out.
	// +optional
	ReleasingRevision int64 `json:"releasingRevision,omitempty"`
	// Commit is the git commit of the revision being rolled out.
	// +optional
	Commit string `json:"commit,omitempty"`
	// Summary counts targeted clusters per state.
	// +optional
	Summary StateCounts `json:"summary,omitempty"`
	// Partitions report each partition's progress (continuous rollouts).
	// +optional
	// +kubebuilder:validation:MaxItems=100
	Partitions []PartitionStatus `json:"partitions,omitempty"`
	// UnpartitionedClusters is the number of targeted clusters in no manual partition; the
	// UnpartitionedClusters condition names them.
	// +optional
	UnpartitionedClusters int32 `json:"unpartitionedClusters,omitempty"`
	// Stages report each stage's progress (staged rollouts).
	// +optional
	// +kubebuilder:validation:MaxItems=31
	Stages []StageProgress `json:"stages,omitempty"`
	// Sequence reports every group of the bundle's RolloutSequence per revision (R4.6).
	// +optional
	// +kubebuilder:validation:MaxItems=20
	Sequence []SequenceGroupStatus `json:"sequence,omitempty"`
	// Outcome is how the newest revision's rollout stands: Completed, Failed or RolledBack,
	// with the failure that fired (R5.6).
	// +optional
	Outcome *RolloutResult `json:"outcome,omitempty"`
	// Analysis is what each check of the rollout says now (§7): counts per verdict and the
	// few clusters or gates that hold, never a history per cluster.
	// +optional
	// +kubebuilder:validation:MaxItems=30
	Analysis []AnalysisStatus `json:"analysis,omitempty"`
	// Quarantined are the revisions that failed and were rolled back (R5.5): nothing releases
	// them until a person retries one (spec.retry) or a newer revision replaces them.
	// +optional
	// +kubebuilder:validation:MaxItems=20
	Quarantined []RevisionFailure `json:"quarantined,omitempty"`
	// RenderFailure is the newest commit of the bundle's GitRepo when the bundle does not
	// render at it: the revisions above stay deployed, the GitRepo's other bundles roll out,
	// and the Rendered condition says why. Cleared by the next commit that renders.
	// +optional
	RenderFailure *RenderFailure `json:"renderFailure,omitempty"`
	// +optional
	Display Display `json:"display,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// RenderFailure is a commit at which a bundle does not render.
type RenderFailure struct {
	Commit string `json:"commit"`
	// Message names the file and field, and the cluster it was rendered for.
	// +kubebuilder:validation:MaxLength=4096
	Message string `json:"message"`
}

// PartitionStatus is the progress of one partition (R1.6, R1.12).
type PartitionStatus struct {
	Name string `json:"name"`
	// Count is the number of clusters in the partition.
	Count int32 `json:"count"`
	// MaxUnavailable is the resolved threshold.
	MaxUnavailable int32 `json:"maxUnavailable"`
	// Unavailable is the number of unavailable clusters.
	Unavailable int32 `json:"unavailable"`
	// Ready is false while Unavailable exceeds MaxUnavailable.
	Ready bool `json:"ready"`
	// Summary counts the partition's clusters per state.
	// +optional
	Summary StateCounts `json:"summary,omitempty"`
}

// StageProgress is the progress of one stage of a staged rollout.
type StageProgress struct {
	Name      string   `json:"name"`
	State     RunState `json:"state"`
	Clusters  int32    `json:"clusters"`
	Completed int32    `json:"completed"`
}

// Bundle is one deployable unit rendered from a path of a GitRepo.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=flotilla
// +kubebuilder:printcolumn:name="Revision",type=integer,JSONPath=`.status.releasingRevision`
// +kubebuilder:printcolumn:name="Commit",type=string,JSONPath=`.status.commit`,priority=1
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.display.readyClusters`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.display.state`
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.display.message`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Bundle struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   BundleSpec   `json:"spec,omitempty"`
	Status BundleStatus `json:"status,omitempty"`
}

// BundleList is a list of Bundles.
// +kubebuilder:object:root=true
type BundleList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Bundle `json:"items"`
}
