package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ClusterMatch selects clusters by name, labels, cluster group or cluster-group labels. A cluster
// matches when it satisfies every field that is set; an empty match selects nothing.
type ClusterMatch struct {
	// ClusterName selects one cluster by name.
	// +optional
	ClusterName string `json:"clusterName,omitempty"`
	// ClusterSelector selects clusters by their labels.
	// +optional
	ClusterSelector *metav1.LabelSelector `json:"clusterSelector,omitempty"`
	// ClusterGroup selects the members of one ClusterGroup.
	// +optional
	ClusterGroup string `json:"clusterGroup,omitempty"`
	// ClusterGroupSelector selects the members of every ClusterGroup whose labels match.
	// +optional
	ClusterGroupSelector *metav1.LabelSelector `json:"clusterGroupSelector,omitempty"`
}

// Target says which clusters a GitRepo or Bundle deploys to.
// +kubebuilder:validation:XValidation:rule="has(self.clusterName) || has(self.clusterSelector) || has(self.clusterGroup) || has(self.clusterGroupSelector)",message="a target needs clusterName, clusterSelector, clusterGroup or clusterGroupSelector"
type Target struct {
	// Name identifies the target in status and in fleet.yaml targetCustomizations.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name,omitempty"`

	ClusterMatch `json:",inline"`
}

// LocalObjectReference names an object in the same namespace.
type LocalObjectReference struct {
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// CronWindow is a recurring time window: it opens at each time the cron schedule names and
// stays open for Duration.
type CronWindow struct {
	// Schedule is a standard five-field cron expression or a descriptor such as @daily. The
	// API server checks its shape; the hub holds the cluster's runs (fails closed) if the
	// schedule still does not parse.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:Pattern=`^(@(annually|yearly|monthly|weekly|daily|midnight|hourly)|@every ([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+|[0-9A-Za-z*?/,-]+( +[0-9A-Za-z*?/,-]+){4})$`
	Schedule string `json:"schedule"`
	// Duration is how long the window stays open after each opening.
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="duration must be positive"
	Duration metav1.Duration `json:"duration"`
	// TimeZone is an IANA time zone name; the default is UTC.
	// +optional
	// +kubebuilder:validation:Pattern=`^[A-Z][A-Za-z_]*(/[A-Za-z0-9_+-]+)*$`
	TimeZone string `json:"timeZone,omitempty"`
}

// TimeRange is an absolute range of time, [Start, End).
// +kubebuilder:validation:XValidation:rule="self.end > self.start",message="end must be after start"
type TimeRange struct {
	// Name describes the range for people (for example "black friday freeze").
	// +optional
	Name  string      `json:"name,omitempty"`
	Start metav1.Time `json:"start"`
	End   metav1.Time `json:"end"`
}

// RevisionRef points at one revision of a bundle.
type RevisionRef struct {
	// Index is the revision's position in the bundle's history (1, 2, 3 …); higher is newer.
	// +kubebuilder:validation:Minimum=1
	Index int64 `json:"index"`
	// ContentID is the hash of the rendered manifests; the content is stored under this id.
	// +kubebuilder:validation:MinLength=1
	ContentID string `json:"contentID"`
	// DeploymentID is a hash of ContentID and the options that change what is deployed.
	// +kubebuilder:validation:MinLength=1
	DeploymentID string `json:"deploymentID"`
}

// Display holds short, human-readable summaries for printer columns.
type Display struct {
	// ReadyClusters is "ready/desired", e.g. "3/5".
	// +optional
	ReadyClusters string `json:"readyClusters,omitempty"`
	// State is the most important non-ready state, or Ready.
	// +optional
	State string `json:"state,omitempty"`
	// Message is a one-line reason for the state, e.g. why the rollout waits.
	// +optional
	Message string `json:"message,omitempty"`
}
