package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RolloutSequenceSpec is a linear chain of cluster groups (ROLLOUT.md §4). Each group names its
// upstream; exactly one group (the first) has none, and no group has two downstreams.
// +kubebuilder:validation:XValidation:rule="self.groups.filter(g, !has(g.upstream)).size() == 1",message="exactly one group must have no upstream: the first of the chain"
// +kubebuilder:validation:XValidation:rule="self.groups.all(g, self.groups.filter(h, has(h.upstream) && h.upstream == g.name).size() <= 1)",message="a group may be the upstream of at most one group: sequences do not branch"
// +kubebuilder:validation:XValidation:rule="self.groups.all(g, !has(g.upstream) || (g.upstream != g.name && self.groups.exists(h, h.name == g.upstream)))",message="every upstream must name another group of the sequence"
type RolloutSequenceSpec struct {
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=20
	// +listType=map
	// +listMapKey=name
	Groups []SequenceGroup `json:"groups"`
	// Revisions hold per-revision controls: pause, cancel and soak overrides (R4.2, R4.10).
	// +optional
	// +kubebuilder:validation:MaxItems=100
	// +listType=map
	// +listMapKey=index
	Revisions []SequenceRevisionControl `json:"revisions,omitempty"`
	// FailurePolicy is how every group's soak watches its members (§5).
	FailurePolicy `json:",inline"`
}

// SequenceGroup is one link of the chain.
// +kubebuilder:validation:XValidation:rule="(has(self.clusterSelector) ? 1 : 0) + (has(self.selector) ? 1 : 0) + (has(self.clusterGroup) ? 1 : 0) == 1",message="select the group's clusters with exactly one of clusterSelector, selector and clusterGroup"
type SequenceGroup struct {
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// Upstream is the group that must complete a revision before this one receives it.
	// +optional
	Upstream string `json:"upstream,omitempty"`
	// ClusterSelector selects the group's clusters; Selector does the same in the string form
	// of kubectl's --selector (R3.6); ClusterGroup takes a ClusterGroup's members.
	// +optional
	ClusterSelector *metav1.LabelSelector `json:"clusterSelector,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Selector string `json:"selector,omitempty"`
	// +optional
	ClusterGroup string `json:"clusterGroup,omitempty"`
	// Soak is how long the group holds a finished revision before it qualifies downstream;
	// 0 to 30 days, default 7 days (R4.2).
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s') && duration(self) <= duration('720h')",message="soak must be between 0 and 30 days (720h)"
	Soak *metav1.Duration `json:"soak,omitempty"`
	// Analysis are the checks measured during the group's soak: it ends once they passed (§7).
	// +optional
	// +kubebuilder:validation:MaxItems=10
	Analysis []AnalysisCheck `json:"analysis,omitempty"`
}

// SequenceRevisionControl changes how one revision moves through the sequence.
type SequenceRevisionControl struct {
	// +kubebuilder:validation:Minimum=1
	Index int64 `json:"index"`
	// Paused: nothing new starts for this revision.
	// +optional
	Paused bool `json:"paused,omitempty"`
	// Cancelled: clusters in flight finish; the revision goes no further downstream.
	// +optional
	Cancelled bool `json:"cancelled,omitempty"`
	// SoakOverrides replace a group's soak for this revision only.
	// +optional
	// +kubebuilder:validation:MaxItems=20
	// +listType=map
	// +listMapKey=group
	SoakOverrides []SoakOverride `json:"soakOverrides,omitempty"`
}

// SoakOverride is one group's soak for one revision.
type SoakOverride struct {
	Group string `json:"group"`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s') && duration(self) <= duration('720h')",message="soak must be between 0 and 30 days (720h)"
	Soak metav1.Duration `json:"soak"`
}

// SequenceState is a group's state for one revision (R4.6).
// +kubebuilder:validation:Enum=INELIGIBLE;PENDING;IN_PROGRESS;SOAKING;FORCED_SOAKING;COMPLETE;FAILED;ROLLED_BACK
type SequenceState string

const (
	SequenceIneligible    SequenceState = "INELIGIBLE"
	SequencePending       SequenceState = "PENDING"
	SequenceInProgress    SequenceState = "IN_PROGRESS"
	SequenceSoaking       SequenceState = "SOAKING"
	SequenceForcedSoaking SequenceState = "FORCED_SOAKING"
	SequenceComplete      SequenceState = "COMPLETE"
	// SequenceFailed: a member failed the revision (R5.2, R5.3); SequenceRolledBack: the
	// revision was rolled back from the group (R5.4).
	SequenceFailed     SequenceState = "FAILED"
	SequenceRolledBack SequenceState = "ROLLED_BACK"
)

// RolloutSequenceStatus reports the groups and the bundles that follow the sequence. Each
// bundle's revisions are its own, so their progress per group is on the Bundle
// (status.sequence).
type RolloutSequenceStatus struct {
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Groups in chain order, with their member counts.
	// +optional
	Groups []SequenceGroupStatus `json:"groups,omitempty"`
	// Bundles following the sequence.
	// +optional
	Bundles []string `json:"bundles,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// SequenceGroupStatus is one group's progress.
type SequenceGroupStatus struct {
	Name string `json:"name"`
	// Clusters is the number of member clusters.
	// +optional
	Clusters int32 `json:"clusters,omitempty"`
	// +optional
	Revisions []SequenceRevisionStatus `json:"revisions,omitempty"`
}

// SequenceRevisionStatus is one group's progress on one revision.
type SequenceRevisionStatus struct {
	Index int64         `json:"index"`
	State SequenceState `json:"state"`
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
	// +optional
	SoakUntil *metav1.Time `json:"soakUntil,omitempty"`
	// +optional
	Summary StateCounts `json:"summary,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
}

// RolloutSequence rolls revisions through a chain of cluster groups with soak times.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=flotilla
// +kubebuilder:printcolumn:name="Bundles",type=string,JSONPath=`.status.bundles`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type RolloutSequence struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   RolloutSequenceSpec   `json:"spec"`
	Status RolloutSequenceStatus `json:"status,omitempty"`
}

// RolloutSequenceList is a list of RolloutSequences.
// +kubebuilder:object:root=true
type RolloutSequenceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RolloutSequence `json:"items"`
}
