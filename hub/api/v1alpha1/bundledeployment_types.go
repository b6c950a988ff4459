package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BundleDeploymentSpec is what the hub wants one cluster to run. It lives in the cluster's
// namespace on the hub, where only that cluster's agent can read it.
//
//	staged   ── the revision the cluster should run once the rollout reaches it
//	released ── the revision the agent may apply now (moved forward by the rollout planner)
//	applied  ── status: what the agent last applied
//
// A continuous rollout writes staged when it releases the cluster, both in one write; a
// cluster it has not reached keeps its older revision staged (OutOfSync against the Bundle's
// revision). Paused bundles and clusters (R1.13), staged runs and sequences stage every new
// revision at once and release it later.
//
// +kubebuilder:validation:XValidation:rule="!has(self.released) || self.released.index <= self.staged.index || has(self.rollback) && self.rollback",message="released must not be newer than staged unless rollback is set"
type BundleDeploymentSpec struct {
	// Bundle is the name of the Bundle in the GitRepo's namespace.
	// +kubebuilder:validation:MinLength=1
	Bundle string `json:"bundle"`
	// BundleNamespace is the namespace of the Bundle.
	// +kubebuilder:validation:MinLength=1
	BundleNamespace string `json:"bundleNamespace"`
	// Staged is the revision the cluster should run once the rollout reaches it.
	Staged RevisionRef `json:"staged"`
	// Released is the revision the agent may apply now; absent until the rollout reaches the cluster.
	// +optional
	Released *RevisionRef `json:"released,omitempty"`
	// Rollback marks a release of an older index than staged on purpose; without released,
	// a rollback that removes the bundle (the cluster had no earlier revision, R5.4).
	// +optional
	Rollback bool `json:"rollback,omitempty"`
	// ReleasedAt is when released was released.
	// +optional
	ReleasedAt *metav1.Time `json:"releasedAt,omitempty"`
	// LastGood is the newest revision that was Ready on the cluster before released; an
	// automatic rollback releases it again (R5.4).
	// +optional
	LastGood *RevisionRef `json:"lastGood,omitempty"`
	// Paused stops the agent from applying anything new.
	// +optional
	Paused bool `json:"paused,omitempty"`
	// Options are how the agent deploys the resources.
	// +optional
	Options DeploymentOptions `json:"options,omitempty"`
}

// DeploymentOptions are fleet.yaml's options that change how resources are deployed.
type DeploymentOptions struct {
	// DefaultNamespace is used for namespaced resources that name none.
	// +optional
	DefaultNamespace string `json:"defaultNamespace,omitempty"`
	// TargetNamespace forces every namespaced resource into this namespace.
	// +optional
	TargetNamespace string `json:"namespace,omitempty"`
	// NamespaceLabels are set on the created namespace.
	// +optional
	NamespaceLabels map[string]string `json:"namespaceLabels,omitempty"`
	// NamespaceAnnotations are set on the created namespace.
	// +optional
	NamespaceAnnotations map[string]string `json:"namespaceAnnotations,omitempty"`
	// CorrectDrift undoes changes made to deployed objects outside Flotilla.
	// +optional
	CorrectDrift bool `json:"correctDrift,omitempty"`
	// KeepResources leaves resources in place when they leave the bundle or the bundle is deleted.
	// +optional
	KeepResources bool `json:"keepResources,omitempty"`
	// DeleteNamespace deletes the target namespace when the bundle is removed.
	// +optional
	DeleteNamespace bool `json:"deleteNamespace,omitempty"`
	// IgnoreConditions lists conditions that do not make a resource NotReady: each entry
	// matches conditions whose fields equal all of its key/values (e.g. type: Degraded).
	// +optional
	// +kubebuilder:validation:MaxItems=20
	IgnoreConditions []map[string]string `json:"ignoreConditions,omitempty"`
	// HealthChecks judge objects of the kinds they name by CEL expressions instead of kstatus
	// (fleet.yaml healthChecks).
	// +optional
	// +kubebuilder:validation:MaxItems=20
	HealthChecks []HealthCheck `json:"healthChecks,omitempty"`
	// ComparePatches exclude fields from drift detection.
	// +optional
	// +kubebuilder:validation:MaxItems=100
	ComparePatches []ComparePatch `json:"comparePatches,omitempty"`
	// ServiceAccount is the downstream ServiceAccount, in the agent's namespace, that the agent
	// impersonates to deploy: the bundle's, or its FleetRestriction's default.
	// +optional
	ServiceAccount string `json:"serviceAccount,omitempty"`
	// Restrictions are the FleetRestrictions of the bundle's namespace: the agent refuses to
	// deploy an object that any of them does not allow.
	// +optional
	Restrictions []DeploymentRestriction `json:"restrictions,omitempty"`
	// TakeOwnership adopts existing objects that another manager created.
	// +optional
	TakeOwnership bool `json:"takeOwnership,omitempty"`
	// Force replaces objects whose immutable fields changed.
	// +optional
	Force bool `json:"force,omitempty"`
	// TimeoutSeconds bounds how long an apply may take.
	// +optional
	// +kubebuilder:validation:Minimum=0
	TimeoutSeconds int32 `json:"timeoutSeconds,omitempty"`
	// WaitForJobs counts Jobs as ready only once they completed.
	// +optional
	WaitForJobs bool `json:"waitForJobs,omitempty"`
}

// HealthCheck says, in CEL over the object (apiVersion, kind, metadata, spec, status), when an
// object of one kind is current, in progress or failed. Failed is evaluated first, then
// current, then inProgress; when none holds the object is in progress.
type HealthCheck struct {
	// APIVersion is the kind's group/version; the check judges every version of the group.
	// +kubebuilder:validation:MinLength=1
	APIVersion string `json:"apiVersion"`
	// +kubebuilder:validation:MinLength=1
	Kind string `json:"kind"`
	// Current holds once the object is healthy.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	Current string `json:"current"`
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	InProgress string `json:"inProgress,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	Failed string `json:"failed,omitempty"`
}

// ComparePatch excludes JSON pointers or operations from drift detection for matching objects.
type ComparePatch struct {
	// +optional
	APIVersion string `json:"apiVersion,omitempty"`
	// +kubebuilder:validation:MinLength=1
	Kind string `json:"kind"`
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// +optional
	Name string `json:"name,omitempty"`
	// JSONPointers are the fields to ignore, e.g. /spec/replicas.
	// +optional
	JSONPointers []string `json:"jsonPointers,omitempty"`
}

// BundleDeploymentStatus is what the agent reports.
type BundleDeploymentStatus struct {
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// AppliedRevision is the index the agent last applied successfully.
	// +optional
	AppliedRevision int64 `json:"appliedRevision,omitempty"`
	// AppliedDeploymentID is the deployment id of that revision.
	// +optional
	AppliedDeploymentID string `json:"appliedDeploymentID,omitempty"`
	// AppliedAt is when that apply succeeded (R2.5 counts from it).
	// +optional
	AppliedAt *metav1.Time `json:"appliedAt,omitempty"`
	// ReadyAt is when the applied revision first became Ready; it stays while the revision is
	// applied, so that NotReady after it is a regression (R5.1).
	// +optional
	ReadyAt *metav1.Time `json:"readyAt,omitempty"`
	// Ready is true when every applied resource is ready.
	// +optional
	Ready bool `json:"ready,omitempty"`
	// Modified is true when live objects drifted from the revision.
	// +optional
	Modified bool `json:"modified,omitempty"`
	// State is the per-cluster state (ROLLOUT.md §0) for the staged revision, as the agent
	// last computed it.
	// +optional
	State ClusterState `json:"state,omitempty"`
	// NonReadyResources summarises up to 10 resources that are not ready.
	// +optional
	// +kubebuilder:validation:MaxItems=10
	NonReadyResources []ResourceSummary `json:"nonReadyResources,omitempty"`
	// ModifiedResources summarises up to 10 resources that drifted.
	// +optional
	// +kubebuilder:validation:MaxItems=10
	ModifiedResources []ResourceSummary `json:"modifiedResources,omitempty"`
	// Ineligible says the cluster cannot run the released revision: it does not serve APIs the
	// revision uses (ROLLOUT.md R1.15). The agent sets it before it applies anything and clears
	// it once the revision applies.
	// +optional
	Ineligible *Ineligibility `json:"ineligible,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Ineligibility is what a cluster lacks to run a release.
type Ineligibility struct {
	// DeploymentID is the release the agent found the cluster cannot run.
	// +kubebuilder:validation:MaxLength=128
	DeploymentID string `json:"deploymentID"`
	// UnservedAPIs are the apiVersion and kind of each API it uses that the cluster does not
	// serve, e.g. "autoscaling/v2beta2 HorizontalPodAutoscaler".
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=10
	// +kubebuilder:validation:items:MaxLength=317
	UnservedAPIs []string `json:"unservedAPIs"`
}

// ResourceSummary names one deployed object and says what is wrong with it.
type ResourceSummary struct {
	// +optional
	APIVersion string `json:"apiVersion,omitempty"`
	Kind       string `json:"kind"`
	// +optional
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	// Message is the reason, e.g. "Available: 0/3 replicas" or "missing".
	// +optional
	Message string `json:"message,omitempty"`
}

// String is "Kind namespace/name: message", as statuses and events name an object.
func (r ResourceSummary) String() string {
	name := r.Name
	if r.Namespace != "" {
		name = r.Namespace + "/" + r.Name
	}
	if r.Message == "" {
		return r.Kind + " " + name
	}
	return r.Kind + " " + name + ": " + r.Message
}

// BundleDeployment is one bundle on one cluster.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=flotilla,shortName=bd
// +kubebuilder:printcolumn:name="Bundle",type=string,JSONPath=`.spec.bundle`
// +kubebuilder:printcolumn:name="Staged",type=integer,JSONPath=`.spec.staged.index`
// +kubebuilder:printcolumn:name="Released",type=integer,JSONPath=`.spec.released.index`
// +kubebuilder:printcolumn:name="Applied",type=integer,JSONPath=`.status.appliedRevision`
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type BundleDeployment struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   BundleDeploymentSpec   `json:"spec"`
	Status BundleDeploymentStatus `json:"status,omitempty"`
}

// BundleDeploymentList is a list of BundleDeployments.
// +kubebuilder:object:root=true
type BundleDeploymentList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BundleDeployment `json:"items"`
}
