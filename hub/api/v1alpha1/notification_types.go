package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NotificationProviderType is the kind of endpoint a NotificationProvider delivers to; it
// decides the payload's shape.
type NotificationProviderType string

const (
	// ProviderSlack posts to a Slack-compatible incoming webhook ({"text", "blocks"}).
	ProviderSlack NotificationProviderType = "slack"
	// ProviderMSTeams posts an Adaptive Card to a Microsoft Teams workflow webhook.
	ProviderMSTeams NotificationProviderType = "msteams"
	// ProviderGenericHMAC posts the event as JSON, signed with HMAC-SHA256 in X-Signature.
	ProviderGenericHMAC NotificationProviderType = "generic-hmac"
	// ProviderCloudEvents posts a CloudEvent 1.0 in structured JSON mode.
	ProviderCloudEvents NotificationProviderType = "cloudevents"
	// The forges, for commit statuses (a GitRepo's spec.commitStatus): address is the API's
	// base URL (default https://api.github.com, https://gitlab.com, https://api.bitbucket.org;
	// a Gitea's must be set), token the Secret's key.
	ProviderGitHub    NotificationProviderType = "github"
	ProviderGitLab    NotificationProviderType = "gitlab"
	ProviderGitea     NotificationProviderType = "gitea"
	ProviderBitbucket NotificationProviderType = "bitbucket"
)

// Forge reports whether the type is a forge's, which takes commit statuses, not alerts.
func (t NotificationProviderType) Forge() bool {
	return t == ProviderGitHub || t == ProviderGitLab || t == ProviderGitea || t == ProviderBitbucket
}

// NotificationProviderSpec is where the alerts of its namespace are delivered. The operator
// of a namespace defines its providers; an Alert names one of its own namespace only, and the
// provider's secrets are read from that namespace alone.
// +kubebuilder:validation:XValidation:rule="has(self.address) || has(self.secretRef) || self.type in ['github', 'gitlab', 'bitbucket']",message="set address, or secretRef with an address key"
// +kubebuilder:validation:XValidation:rule="self.type != 'generic-hmac' || has(self.secretRef)",message="generic-hmac signs with the hmacKey of secretRef: set secretRef"
type NotificationProviderSpec struct {
	// +kubebuilder:validation:Enum=slack;msteams;generic-hmac;cloudevents;github;gitlab;gitea;bitbucket
	Type NotificationProviderType `json:"type"`
	// Address is the URL posted to. A webhook whose URL is its credential belongs in the
	// Secret instead (its address key), which overrides this field.
	// +optional
	// +kubebuilder:validation:Pattern=`^https?://[^\s]+$`
	// +kubebuilder:validation:MaxLength=2048
	Address string `json:"address,omitempty"`
	// SecretRef names a Secret of the provider's namespace with any of: address (the URL),
	// token (sent as a bearer token), hmacKey (generic-hmac's signing key).
	// +optional
	SecretRef *LocalSecretReference `json:"secretRef,omitempty"`
	// CASecretRef names a Secret whose ca.crt key is the PEM bundle the endpoint's certificate
	// must chain to; without it, the hub's system roots.
	// +optional
	CASecretRef *LocalSecretReference `json:"caSecretRef,omitempty"`
	// Timeout bounds one delivery attempt. Default 10s.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s') && duration(self) <= duration('60s')",message="timeout must be between 0s and 60s"
	Timeout *metav1.Duration `json:"timeout,omitempty"`
	// Suspend stops deliveries to the provider; what its alerts select meanwhile is dropped.
	// +optional
	Suspend bool `json:"suspend,omitempty"`
}

// NotificationProviderStatus says whether deliveries reach the provider. It is written when
// that changes, not per delivery.
type NotificationProviderStatus struct {
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Ready is False (reason DeliveryFailed) once a delivery gave up after its retries, with
	// the last error, and True again after one succeeds.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// NotificationProvider is an endpoint that alerts of its namespace deliver to.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=flotilla
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.type`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type NotificationProvider struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   NotificationProviderSpec   `json:"spec"`
	Status NotificationProviderStatus `json:"status,omitempty"`
}

// NotificationProviderList is a list of NotificationProviders.
// +kubebuilder:object:root=true
type NotificationProviderList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NotificationProvider `json:"items"`
}

// AlertSeverity selects events by type: info takes every event, error only warnings.
type AlertSeverity string

const (
	SeverityInfo  AlertSeverity = "info"
	SeverityError AlertSeverity = "error"
)

// AlertSpec chooses which of the hub's events about objects of its namespace go to a provider
// of that namespace.
type AlertSpec struct {
	// ProviderRef names a NotificationProvider of the alert's namespace: there is no namespace
	// field, an alert cannot deliver anywhere else.
	ProviderRef LocalSecretReference `json:"providerRef"`
	// EventSources are the objects whose events are sent; an event is sent when it matches one.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=50
	EventSources []EventSource `json:"eventSources"`
	// EventSeverity: info (default) sends every event, error only warnings.
	// +optional
	// +kubebuilder:validation:Enum=info;error
	EventSeverity AlertSeverity `json:"eventSeverity,omitempty"`
	// InclusionList are event reasons (CommitPickedUp, RolloutFailed, …); when set, only those
	// are sent.
	// +optional
	// +kubebuilder:validation:MaxItems=50
	InclusionList []EventReason `json:"inclusionList,omitempty"`
	// ExclusionList are event reasons never sent.
	// +optional
	// +kubebuilder:validation:MaxItems=50
	ExclusionList []EventReason `json:"exclusionList,omitempty"`
	// Summary is a line put before each message, a template of .Kind, .Name, .Namespace,
	// .Reason, .Message and .Severity: fields and {{if}} only, e.g. "prod: {{.Reason}}".
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Summary string `json:"summary,omitempty"`
	// RateLimit is how many messages the alert sends per minute at most (default 30); past
	// it, messages are dropped and counted.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=600
	RateLimit int32 `json:"rateLimit,omitempty"`
	// Suspend stops the alert.
	// +optional
	Suspend bool `json:"suspend,omitempty"`
}

// EventSource selects the events of objects of one kind in the alert's namespace, by name
// ("*" for all) or labels. A GitRepo or HelmOp source takes its bundles' events too, and a
// Bundle source its runs'.
type EventSource struct {
	// +kubebuilder:validation:Enum=GitRepo;HelmOp;Bundle;StagedUpdateRun;RolloutSequence;Cluster
	Kind string `json:"kind"`
	// Name is the object's name, or "*" (default) for every object of the kind.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name,omitempty"`
	// MatchLabels, when set, must all be on the object.
	// +optional
	MatchLabels map[string]string `json:"matchLabels,omitempty"`
}

// AlertStatus says whether the alert can deliver: its provider exists and its summary
// compiles.
type AlertStatus struct {
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Alert sends the hub's events about objects of its namespace to a provider of its namespace.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=flotilla
// +kubebuilder:printcolumn:name="Provider",type=string,JSONPath=`.spec.providerRef.name`
// +kubebuilder:printcolumn:name="Severity",type=string,JSONPath=`.spec.eventSeverity`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Alert struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   AlertSpec   `json:"spec"`
	Status AlertStatus `json:"status,omitempty"`
}

// AlertList is a list of Alerts.
// +kubebuilder:object:root=true
type AlertList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Alert `json:"items"`
}
