package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// HelmOpSpec deploys one Helm chart from a chart repository or an OCI registry, without git:
// the newest chart version that satisfies helm.version is picked up at each poll and rolls out
// under the rollout strategy, as a GitRepo's new commit does.
// +kubebuilder:validation:XValidation:rule="[has(self.rolloutStrategy), has(self.stagedUpdate), has(self.sequence)].filter(x, x).size() <= 1",message="set at most one of rolloutStrategy, stagedUpdate and sequence"
type HelmOpSpec struct {
	// Helm names the chart, its versions and its values.
	Helm HelmOpChart `json:"helm"`
	// DefaultNamespace is where the chart's namespaced objects go when they name none;
	// Namespace forces every namespaced object into one namespace (fleet.yaml's fields).
	// +optional
	// +kubebuilder:validation:MaxLength=63
	DefaultNamespace string `json:"defaultNamespace,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace,omitempty"`

	// HelmSecretRef names a Secret of the HelmOp's namespace with the username and password
	// sent to the chart's server (helm.repo's scheme and host exactly, never another).
	// +optional
	HelmSecretRef *LocalObjectReference `json:"helmSecretRef,omitempty"`
	// CABundle is a PEM bundle trusted for the chart's server besides the system's roots.
	// +optional
	CABundle []byte `json:"caBundle,omitempty"`
	// Verify requires the chart to be signed with cosign by one of the keys it names (OCI
	// charts only). A version that is not is neither rendered nor deployed: the HelmOp says
	// which version and why, and what is deployed stays.
	// +optional
	Verify *ChartVerification `json:"verify,omitempty"`
	// PollingInterval between reads of the chart server's versions. Default 1m.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s')",message="pollingInterval must be at least 1s"
	PollingInterval *metav1.Duration `json:"pollingInterval,omitempty"`

	// Targets are the clusters the chart deploys to.
	// +optional
	// +kubebuilder:validation:MaxItems=100
	Targets []Target `json:"targets,omitempty"`
	// RolloutStrategy releases a new version partition by partition (R2).
	// +optional
	RolloutStrategy *RolloutStrategy `json:"rolloutStrategy,omitempty"`
	// StagedUpdate runs each new version through a StagedUpdateStrategy (R3).
	// +optional
	StagedUpdate *StagedUpdateRef `json:"stagedUpdate,omitempty"`
	// Sequence names the RolloutSequence of groups the versions pass through (R4).
	// +optional
	Sequence *LocalObjectReference `json:"sequence,omitempty"`
	// Paused stops releasing new versions; they are still picked up and rendered (R1.13).
	// +optional
	Paused bool `json:"paused,omitempty"`
	// RevisionHistoryLimit is how many revisions the HelmOp's bundle keeps. Default 10.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	RevisionHistoryLimit *int32 `json:"revisionHistoryLimit,omitempty"`
}

// HelmOpChart is the chart a HelmOp deploys.
type HelmOpChart struct {
	// Repo is the chart's server: a Helm repository (https://, or http:// given explicitly) or
	// an OCI registry path holding the chart as a repository, oci://registry/path/chart.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.matches('^(https?|oci)://[^ ]+$')",message="must be an http(s):// Helm repository or an oci:// chart"
	Repo string `json:"repo"`
	// Chart is the chart's name in the Helm repository; empty for an oci:// repo, which names
	// the chart itself.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Chart string `json:"chart,omitempty"`
	// Version is a semantic version constraint ("~1.4", ">=1.2.0 <2.0.0") or one version; the
	// newest satisfying version is deployed. Empty: the newest release (no pre-release).
	// +optional
	// +kubebuilder:validation:MaxLength=255
	Version string `json:"version,omitempty"`
	// ReleaseName is the Helm release's name; default the HelmOp's name.
	// +optional
	// +kubebuilder:validation:MaxLength=53
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	ReleaseName string `json:"releaseName,omitempty"`
	// Values are the chart's values, as in fleet.yaml (Go templates of the cluster's labels
	// and values allowed).
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Type=object
	Values *runtime.RawExtension `json:"values,omitempty"`
	// TimeoutSeconds bounds the agent's apply of one release.
	// +optional
	// +kubebuilder:validation:Minimum=0
	TimeoutSeconds int `json:"timeoutSeconds,omitempty"`
}

// ChartVerification names the cosign public keys a chart must be signed with.
type ChartVerification struct {
	// Provider is the signature format; cosign only.
	// +kubebuilder:validation:Enum=cosign
	Provider string `json:"provider"`
	// SecretRef names a Secret of the HelmOp's namespace whose every value is a PEM public
	// key (cosign.pub). Adding a key lets its versions through from the next poll.
	SecretRef LocalObjectReference `json:"secretRef"`
}

// HelmOpStatus is what a HelmOp deploys and how far it has rolled out.
type HelmOpStatus struct {
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Version is the chart version currently rendered into the bundle.
	// +optional
	Version string `json:"version,omitempty"`
	// Digest is the version's content digest: the OCI manifest's, or the archive's sha256 as the
	// Helm repository's index gives it.
	// +optional
	Digest string `json:"digest,omitempty"`
	// LastPollTime is when the chart server was last read.
	// +optional
	LastPollTime *metav1.Time `json:"lastPollTime,omitempty"`
	// Summary counts the bundle's BundleDeployments per state.
	// +optional
	Summary StateCounts `json:"summary,omitempty"`
	// +optional
	Display Display `json:"display,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// HelmOp deploys one Helm chart, version by version, to the clusters it targets.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=flotilla,path=helmops,singular=helmop
// +kubebuilder:printcolumn:name="Repo",type=string,JSONPath=`.spec.helm.repo`
// +kubebuilder:printcolumn:name="Chart",type=string,JSONPath=`.spec.helm.chart`
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.status.version`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.display.readyClusters`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.display.state`
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.display.message`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type HelmOp struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   HelmOpSpec   `json:"spec"`
	Status HelmOpStatus `json:"status,omitempty"`
}

// HelmOpList is a list of HelmOps.
// +kubebuilder:object:root=true
type HelmOpList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []HelmOp `json:"items"`
}
