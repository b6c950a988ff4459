package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AnalysisProviderSpec says where and how the hub measures analysis checks (ROLLOUT.md §7).
// The operator defines providers; a repository's check only names one of its own namespace,
// so the hub queries nothing a repository wrote an address for.
// +kubebuilder:validation:XValidation:rule="has(self.prometheus) != has(self.http)",message="set exactly one of prometheus and http"
type AnalysisProviderSpec struct {
	// Prometheus queries a Prometheus-compatible HTTP API (/api/v1/query) with the check's
	// query; the result is the sample's value, or a list of values for several series.
	// +optional
	Prometheus *PrometheusProvider `json:"prometheus,omitempty"`
	// HTTP posts the check's query, cluster, bundle and revision as JSON to a URL; the JSON
	// answer is the result.
	// +optional
	HTTP *HTTPProvider `json:"http,omitempty"`
	// Timeout bounds one measurement. Default 10s.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s') && duration(self) <= duration('60s')",message="timeout must be between 0s and 60s"
	Timeout *metav1.Duration `json:"timeout,omitempty"`
}

// PrometheusProvider is a Prometheus-compatible query endpoint.
type PrometheusProvider struct {
	// Address is the server's base URL, e.g. https://prometheus.monitoring:9090.
	// +kubebuilder:validation:Pattern=`^https?://[^\s]+$`
	// +kubebuilder:validation:MaxLength=2048
	Address string `json:"address"`
	// Connection is the TLS and credentials to reach it with.
	// +optional
	Connection ProviderConnection `json:"connection,omitempty"`
}

// HTTPProvider is a URL that judges a check's query.
type HTTPProvider struct {
	// URL is posted to; the hub never changes its host or path.
	// +kubebuilder:validation:Pattern=`^https?://[^\s]+$`
	// +kubebuilder:validation:MaxLength=2048
	URL string `json:"url"`
	// +optional
	Connection ProviderConnection `json:"connection,omitempty"`
}

// ProviderConnection is how the hub reaches a provider: the CA that signs its certificate and
// the credentials it presents, from Secrets of the provider's namespace.
type ProviderConnection struct {
	// CASecretRef names a Secret whose ca.crt key is the PEM bundle the provider's certificate
	// must chain to; without it, the hub's system roots.
	// +optional
	CASecretRef *LocalSecretReference `json:"caSecretRef,omitempty"`
	// CredentialsSecretRef names a Secret with a token key (sent as a bearer token) or
	// username and password keys (basic authentication).
	// +optional
	CredentialsSecretRef *LocalSecretReference `json:"credentialsSecretRef,omitempty"`
}

// LocalSecretReference names a Secret in the referring object's namespace.
type LocalSecretReference struct {
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// AnalysisProvider is an operator's definition of a metrics or verdict endpoint that the
// rollouts of its namespace may ask (ROLLOUT.md §7, R7.1).
// +kubebuilder:object:root=true
// +kubebuilder:resource:categories=flotilla
// +kubebuilder:printcolumn:name="Prometheus",type=string,JSONPath=`.spec.prometheus.address`
// +kubebuilder:printcolumn:name="HTTP",type=string,JSONPath=`.spec.http.url`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type AnalysisProvider struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec AnalysisProviderSpec `json:"spec"`
}

// AnalysisProviderList is a list of AnalysisProviders.
// +kubebuilder:object:root=true
type AnalysisProviderList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AnalysisProvider `json:"items"`
}

// AnalysisCheck is one check of a rollout's outcome (R7.2): the provider to ask, the query
// (a Go template of .Cluster.Name, .Cluster.Labels, .Bundle, .Namespace, .Revision and, for a
// Gate check, .Gate and .Clusters), the CEL condition over result that holds while the
// workload is healthy, how often, and how much failure it tolerates.
type AnalysisCheck struct {
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// Provider names an AnalysisProvider in the bundle's namespace.
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:MaxLength=63
	Provider string `json:"provider"`
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	Query string `json:"query"`
	// Condition is CEL over result, e.g. result < 0.01.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Condition string `json:"condition"`
	// Interval between measurements; default 1m, at least 5s.
	// +optional
	Interval *metav1.Duration `json:"interval,omitempty"`
	// FailureLimit is how many failed measurements are tolerated. Default 0.
	// +optional
	// +kubebuilder:validation:Minimum=0
	FailureLimit int32 `json:"failureLimit,omitempty"`
	// InconclusiveLimit is how long the check may have no verdict (the provider down, no
	// data) before that counts as a failure. Default 5m.
	// +optional
	InconclusiveLimit *metav1.Duration `json:"inconclusiveLimit,omitempty"`
	// Scope is Cluster (default: measured on each cluster, a failure is the cluster's, R7.6)
	// or Gate (measured once for the partition, stage or group, a failure is the gate's, R7.7).
	// +optional
	// +kubebuilder:validation:Enum=Cluster;Gate
	Scope string `json:"scope,omitempty"`
}

// AnalysisStatus is what one check of the rollout says now, bounded whatever the fleet's size:
// counts of the clusters or gates per verdict, and a few of those that hold or failed.
type AnalysisStatus struct {
	// Check is the check's name; Scope its scope.
	Check string `json:"check"`
	// +optional
	Scope string `json:"scope,omitempty"`
	// Revision is the revision it judges.
	Revision int64 `json:"revision"`
	// Verdict is the worst of its verdicts: Pending, Passed, Failing, Inconclusive or Failed.
	Verdict string `json:"verdict"`
	// Counts are how many clusters (or gates) have each verdict.
	// +optional
	Counts map[string]int32 `json:"counts,omitempty"`
	// Message says what the worst measurement found (its value, or why there was none).
	// +optional
	Message string `json:"message,omitempty"`
	// Targets are up to 10 clusters or gates that hold or failed, worst first.
	// +optional
	// +kubebuilder:validation:MaxItems=10
	Targets []string `json:"targets,omitempty"`
	// Since is when the worst verdict began.
	// +optional
	Since *metav1.Time `json:"since,omitempty"`
}
