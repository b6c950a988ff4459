package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// RolloutStrategy is fleet.yaml's rolloutStrategy: a continuous rollout through partitions
// limited by unavailability budgets (ROLLOUT.md §1). Unset fields take the defaults of R1.1.
type RolloutStrategy struct {
	// MaxUnavailable is the number or percent of targeted clusters that may be unavailable
	// (R1.9); a percent rounds down with a minimum of 1. Default 100%.
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=4
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 0 : self.matches('^(100|[1-9]?[0-9])%$')",message="must be a non-negative integer or a percentage from 0% to 100%"
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`
	// MaxUnavailablePartitions is how many partitions may be NotReady while the rollout moves on
	// (R1.7). Default 0.
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=4
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 0 : self.matches('^(100|[1-9]?[0-9])%$')",message="must be a non-negative integer or a percentage from 0% to 100%"
	MaxUnavailablePartitions *intstr.IntOrString `json:"maxUnavailablePartitions,omitempty"`
	// AutoPartitionSize is the size of automatic partitions (R1.4). Default 25%.
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=4
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 0 : self.matches('^(100|[1-9]?[0-9])%$')",message="must be a non-negative integer or a percentage from 0% to 100%"
	AutoPartitionSize *intstr.IntOrString `json:"autoPartitionSize,omitempty"`
	// AutoPartitionThreshold is the number of targeted clusters from which automatic
	// partitioning starts; 0 disables it (R1.4). Default 200.
	// +optional
	// +kubebuilder:validation:Minimum=0
	AutoPartitionThreshold *int32 `json:"autoPartitionThreshold,omitempty"`
	// MaxNew is the most BundleDeployments released per reconcile within a partition (R1.8).
	// Default 50.
	// +optional
	// +kubebuilder:validation:Minimum=1
	MaxNew *int32 `json:"maxNew,omitempty"`
	// Partitions, when set, replace automatic partitioning; they are rolled out in this order.
	// +optional
	// +kubebuilder:validation:MaxItems=100
	// +listType=map
	// +listMapKey=name
	Partitions []Partition `json:"partitions,omitempty"`
	// Analysis are the rollout's checks (§7): a Cluster check judges each cluster from its
	// first Ready, a Gate check each partition once it is fully released.
	// +optional
	// +kubebuilder:validation:MaxItems=10
	Analysis []AnalysisCheck `json:"analysis,omitempty"`
	// FailurePolicy is how the rollout answers a revision that fails (§5).
	FailurePolicy `json:",inline"`
}

// Partition is a manually defined set of clusters rolled out together (R1.3).
// +kubebuilder:validation:XValidation:rule="has(self.clusterName) || has(self.clusterSelector) || has(self.clusterGroup) || has(self.clusterGroupSelector)",message="a partition needs clusterName, clusterSelector, clusterGroup or clusterGroupSelector"
type Partition struct {
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// MaxUnavailable overrides the strategy's value for this partition (R1.5).
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=4
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 0 : self.matches('^(100|[1-9]?[0-9])%$')",message="must be a non-negative integer or a percentage from 0% to 100%"
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`

	ClusterMatch `json:",inline"`
}

// PlacementType says how a placement chooses clusters (R2.1).
// +kubebuilder:validation:Enum=PickAll;PickN;PickFixed
type PlacementType string

const (
	PickAll   PlacementType = "PickAll"
	PickN     PlacementType = "PickN"
	PickFixed PlacementType = "PickFixed"
)

// Placement chooses target clusters and, with RollingUpdate, how the workload moves between
// them (ROLLOUT.md §2).
// +kubebuilder:validation:XValidation:rule="self.type != 'PickN' || has(self.numberOfClusters)",message="numberOfClusters is required when type is PickN"
// +kubebuilder:validation:XValidation:rule="self.type != 'PickFixed' || (has(self.clusterNames) && size(self.clusterNames) > 0)",message="clusterNames is required when type is PickFixed"
// +kubebuilder:validation:XValidation:rule="self.type == 'PickN' || !has(self.numberOfClusters)",message="numberOfClusters is only valid with type PickN"
// +kubebuilder:validation:XValidation:rule="self.type != 'PickFixed' || !has(self.affinity)",message="affinity is not valid with type PickFixed: it names its clusters"
// +kubebuilder:validation:XValidation:rule="self.type == 'PickN' || !has(self.affinity) || !has(self.affinity.clusterAffinity) || !has(self.affinity.clusterAffinity.preferredDuringSchedulingIgnoredDuringExecution)",message="preferred cluster affinity orders the clusters PickN takes: only valid with type PickN"
type Placement struct {
	// +kubebuilder:default=PickAll
	Type PlacementType `json:"type"`
	// NumberOfClusters is how many of the matching clusters PickN takes, in order of cluster name.
	// +optional
	// +kubebuilder:validation:Minimum=0
	NumberOfClusters *int32 `json:"numberOfClusters,omitempty"`
	// ClusterNames are the clusters of PickFixed.
	// +optional
	// +kubebuilder:validation:MaxItems=1000
	// +listType=set
	ClusterNames []string `json:"clusterNames,omitempty"`
	// Affinity narrows the clusters PickAll and PickN take, and orders those of PickN (R2.1).
	// +optional
	Affinity *Affinity `json:"affinity,omitempty"`
	// RollingUpdate bounds how many clusters may be unavailable or carry an extra copy while
	// the workload changes.
	// +optional
	RollingUpdate *RollingUpdate `json:"rollingUpdate,omitempty"`
}

// Affinity narrows and orders the clusters a placement takes, in the shape of Azure Fleet's
// policy.affinity (R2.1).
type Affinity struct {
	// +optional
	ClusterAffinity *ClusterAffinity `json:"clusterAffinity,omitempty"`
}

// ClusterAffinity: a picked cluster matches one of the required terms; PickN prefers the
// clusters whose matching preferred terms weigh the most (after those that already carry the
// workload). Flotilla applies the required terms during execution too: a cluster that stops
// matching leaves the pick within the rolling update's budgets.
type ClusterAffinity struct {
	// +optional
	Required *ClusterSelector `json:"requiredDuringSchedulingIgnoredDuringExecution,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxItems=10
	Preferred []PreferredClusterTerm `json:"preferredDuringSchedulingIgnoredDuringExecution,omitempty"`
}

// ClusterSelector is a list of terms; a cluster matches when it matches any of them.
type ClusterSelector struct {
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=10
	ClusterSelectorTerms []ClusterSelectorTerm `json:"clusterSelectorTerms"`
}

// ClusterSelectorTerm selects clusters by label; without a selector it matches every cluster.
type ClusterSelectorTerm struct {
	// +optional
	LabelSelector *metav1.LabelSelector `json:"labelSelector,omitempty"`
}

// PreferredClusterTerm adds its weight to the score of every cluster it matches.
type PreferredClusterTerm struct {
	// +kubebuilder:validation:Minimum=-100
	// +kubebuilder:validation:Maximum=100
	Weight     int32               `json:"weight"`
	Preference ClusterSelectorTerm `json:"preference"`
}

// RollingUpdate is the rolling-update strategy of a placement (R2.3–R2.5).
type RollingUpdate struct {
	// MaxUnavailable, rounded up against N. Default 25%. Zero is rejected.
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=4
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self > 0 : self.matches('^(100|[1-9][0-9]?)%$')",message="must be a positive integer or a percentage from 1% to 100%: zero would block the rollout"
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`
	// MaxSurge, rounded up against N. Default 25%. Zero is rejected.
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=4
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self > 0 : self.matches('^(100|[1-9][0-9]?)%$')",message="must be a positive integer or a percentage from 1% to 100%: zero would block the rollout"
	MaxSurge *intstr.IntOrString `json:"maxSurge,omitempty"`
	// UnavailablePeriodSeconds is how long a cluster that newly applied a revision still counts
	// as unavailable (R2.5). Default 60.
	// +optional
	// +kubebuilder:validation:Minimum=0
	UnavailablePeriodSeconds *int32 `json:"unavailablePeriodSeconds,omitempty"`
	// Analysis are Cluster checks (§7): a cluster counts as available once they passed.
	// +optional
	// +kubebuilder:validation:MaxItems=10
	Analysis []AnalysisCheck `json:"analysis,omitempty"`
	// FailurePolicy is how the rolling update answers a revision that fails (§5).
	FailurePolicy `json:",inline"`
}
