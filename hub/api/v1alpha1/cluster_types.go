package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ClusterSpec describes a registered downstream cluster. Its labels (metadata.labels) are what
// targets, partitions and stages select on.
// +kubebuilder:validation:XValidation:rule="!has(self.heartbeatInterval) || !has(self.heartbeatDeadline) || duration(self.heartbeatInterval) < duration(self.heartbeatDeadline)",message="heartbeatInterval must be shorter than heartbeatDeadline"
type ClusterSpec struct {
	// Paused keeps staging new revisions for this cluster but releases none (R1.13).
	// +optional
	Paused bool `json:"paused,omitempty"`
	// MaintenanceWindow restricts when staged runs may start work on the cluster (R3.13).
	// +optional
	MaintenanceWindow *CronWindow `json:"maintenanceWindow,omitempty"`
	// Exclusions are absolute ranges during which no work starts on the cluster (R3.13, R4.9).
	// +optional
	// +kubebuilder:validation:MaxItems=50
	Exclusions []TimeRange `json:"exclusions,omitempty"`
	// HeartbeatInterval is how often the agent renews its Lease on the hub. Default: the hub's
	// (--heartbeat-interval, 2m).
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s')",message="heartbeatInterval must be at least 1s"
	HeartbeatInterval *metav1.Duration `json:"heartbeatInterval,omitempty"`
	// HeartbeatDeadline is how long after the agent's last renewal the cluster counts as
	// offline (R1.11). Default: the hub's (--heartbeat-deadline, 5m).
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('5s')",message="heartbeatDeadline must be at least 5s"
	HeartbeatDeadline *metav1.Duration `json:"heartbeatDeadline,omitempty"`
	// TemplateValues are extra values available to Helm and fleet.yaml templating for this cluster.
	// +optional
	TemplateValues map[string]string `json:"templateValues,omitempty"`
}

// ClusterStatus reports the agent and the bundles on the cluster. The namespace is set at
// admission and changes only when the hub moves the cluster to a new namespace, recording the
// old one in previousNamespace: where a cluster's deployments and grants live never follows
// another write (agents may write only their heartbeat, version and agentNamespace, see
// manifests/policies).
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.__namespace__) || (has(self.__namespace__) && (self.__namespace__ == oldSelf.__namespace__ || (has(self.previousNamespace) && self.previousNamespace == oldSelf.__namespace__)))",message="status.namespace changes only when the hub moves the cluster, recording the old one in status.previousNamespace"
type ClusterStatus struct {
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Namespace is the hub namespace that holds this cluster's BundleDeployments.
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// PreviousNamespace is the namespace the cluster is moving from: the hub keeps it, and the
	// agent's access to it, until the agent reports from the new one.
	// +optional
	PreviousNamespace string `json:"previousNamespace,omitempty"`
	// AgentNamespace is the namespace the agent reports it watches (written by the agent).
	// +optional
	AgentNamespace string `json:"agentNamespace,omitempty"`
	// AgentLastSeen is the last heartbeat an agent wrote here. Agents renew their Lease
	// (flotilla-agent in the cluster's namespace) instead and write it only where the hub has
	// no Lease for them; the Ready condition says when a cluster went offline.
	// +optional
	AgentLastSeen *metav1.Time `json:"agentLastSeen,omitempty"`
	// AgentVersion is the version the agent reported.
	// +optional
	AgentVersion string `json:"agentVersion,omitempty"`
	// Summary counts this cluster's BundleDeployments per state.
	// +optional
	Summary StateCounts `json:"summary,omitempty"`
	// +optional
	Display Display `json:"display,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Cluster is a downstream cluster registered with the hub.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=flotilla
// +kubebuilder:printcolumn:name="Bundles-Ready",type=string,JSONPath=`.status.display.readyClusters`
// +kubebuilder:printcolumn:name="Agent",type=string,JSONPath=`.status.agentVersion`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.display.state`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Cluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ClusterSpec   `json:"spec,omitempty"`
	Status ClusterStatus `json:"status,omitempty"`
}

// ClusterList is a list of Clusters.
// +kubebuilder:object:root=true
type ClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Cluster `json:"items"`
}

// ClusterGroupSpec selects the group's member clusters in the same namespace.
type ClusterGroupSpec struct {
	// Selector selects member clusters by label.
	Selector *metav1.LabelSelector `json:"selector"`
}

// ClusterGroupStatus counts the group's clusters and their bundles.
type ClusterGroupStatus struct {
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// ClusterCount is the number of member clusters.
	// +optional
	ClusterCount int32 `json:"clusterCount,omitempty"`
	// NonReadyClusterCount is the number of members with a bundle that is not ready.
	// +optional
	NonReadyClusterCount int32 `json:"nonReadyClusterCount,omitempty"`
	// Summary counts the members' BundleDeployments per state.
	// +optional
	Summary StateCounts `json:"summary,omitempty"`
	// +optional
	Display Display `json:"display,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ClusterGroup is a named, label-selected set of clusters.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=flotilla
// +kubebuilder:printcolumn:name="Clusters",type=integer,JSONPath=`.status.clusterCount`
// +kubebuilder:printcolumn:name="Clusters-Not-Ready",type=integer,JSONPath=`.status.nonReadyClusterCount`
// +kubebuilder:printcolumn:name="Bundles-Ready",type=string,JSONPath=`.status.display.readyClusters`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ClusterGroup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ClusterGroupSpec   `json:"spec"`
	Status ClusterGroupStatus `json:"status,omitempty"`
}

// ClusterGroupList is a list of ClusterGroups.
// +kubebuilder:object:root=true
type ClusterGroupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterGroup `json:"items"`
}

// The agent's heartbeat is a Lease (coordination.k8s.io/v1) in its cluster's namespace on the
// hub: a small object only the hub's liveness watches, so a renewal is the cheapest write the
// API server takes and wakes nothing else. The hub creates it; the agent reads and renews it.
const (
	// AgentLeaseName names the agent's Lease.
	AgentLeaseName = "flotilla-agent"
	// AgentLeaseLabel marks the agents' Leases (the hub caches only those).
	AgentLeaseLabel = "flotilla.dev/agent-lease"
	// HeartbeatIntervalAnnotation on the Lease is the interval the hub asks the agent to renew
	// it at (spec.heartbeatInterval, or the hub's default).
	HeartbeatIntervalAnnotation = "flotilla.dev/heartbeat-interval"
	// MovedToAnnotation on the Lease tells the agent that its cluster moves to another
	// namespace: it reads its Cluster, which says where (the Cluster is the hub's word; the
	// annotation only saves the agent reading it at every beat).
	MovedToAnnotation = "flotilla.dev/moved-to"
)
