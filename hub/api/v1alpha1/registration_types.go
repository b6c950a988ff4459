package v1alpha1

import (
	"crypto/sha256"
	"encoding/hex"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Keys of a registration token's Secret (status.secretName): what an agent needs to register.
// The agent's bootstrap Secret carries the same keys plus the cluster it asks to be.
const (
	RegistrationTokenKey     = "token"
	RegistrationNamespaceKey = "namespace"
	RegistrationCAKey        = "ca.crt"
	RegistrationServerKey    = "server"
	// RegistrationTokenNameKey names the ClusterRegistrationToken the token was issued for.
	RegistrationTokenNameKey = "token-name"
	// RegistrationClusterNameKey is the agent's request.
	RegistrationClusterNameKey = "cluster-name"
)

// AgentServiceAccountName is the identity of a cluster's agent on the hub, in the cluster's
// namespace there: the agent renews its own token for it.
const AgentServiceAccountName = "flotilla-agent"

// DefaultAgentTokenTTL is the lifetime of the agents' hub tokens unless the hub is told another
// (--agent-token-ttl); the hub records the one it uses in HubRecordConfigMap (agentTokenSeconds).
const DefaultAgentTokenTTL = 7 * 24 * time.Hour

// HubRecordConfigMap is the hub's record of itself in its own namespace: its version, for the
// CLI, and under HubRecordAgentTokenSeconds the agent token lifetime the admission policy
// flotilla-agent-token-lifetime-is-the-hubs holds agents' renewals to.
const (
	HubRecordConfigMap         = "flotilla-hub"
	HubRecordAgentTokenSeconds = "agentTokenSeconds"
)

// Condition reasons of a ClusterRegistration.
const (
	// RegistrationRefusedReason: the registration can never be granted (the message says why).
	RegistrationRefusedReason = "Refused"
	// AwaitingApprovalReason: the registration claims a Cluster that has another identity; an
	// operator approves it with `flotilla cluster approve`.
	AwaitingApprovalReason = "AwaitingApproval"
	// RateLimitedReason: the token issued too many registrations lately; it is granted later.
	RateLimitedReason = "RateLimited"
)

// Annotations of Clusters that registration reads and writes.
const (
	// ClientIDAnnotation is the identity (spec.clientID) of the cluster's registered agent.
	ClientIDAnnotation = "flotilla.dev/client-id"
	// RegistrationAnnotation is the UID of the ClusterRegistration that the Cluster's agent
	// registered with.
	RegistrationAnnotation = "flotilla.dev/registration"
	// ApprovedRegistrationAnnotation, set by an operator on a Cluster, approves the
	// registration with this UID to take the Cluster over (`flotilla cluster approve`).
	ApprovedRegistrationAnnotation = "flotilla.dev/approved-registration"
	// RegistrationTokenAnnotation, set by an operator on a Cluster created before its agent
	// registered (`flotilla agent install --label` sets it), names the ClusterRegistrationToken
	// whose registrations may claim it. A registration with any other token waits for approval.
	RegistrationTokenAnnotation = "flotilla.dev/registration-token"
)

// ClusterRegistrationTokenSpec configures a token that agents present to register.
type ClusterRegistrationTokenSpec struct {
	// TTL is how long the token is valid after creation; unset, the hub's
	// --registration-token-ttl (7 days). Deleting the token revokes it at once.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1m')",message="ttl must be at least 1m"
	TTL *metav1.Duration `json:"ttl,omitempty"`
	// ClusterLabels are set on every cluster that registers with this token: with the labels an
	// operator sets, the only labels of a registered cluster (an agent's request has none).
	// +optional
	ClusterLabels map[string]string `json:"clusterLabels,omitempty"`
}

// ClusterRegistrationTokenStatus says where the agent's bootstrap values are.
type ClusterRegistrationTokenStatus struct {
	// SecretName is the Secret holding the token and the hub's address and CA.
	// +optional
	SecretName string `json:"secretName,omitempty"`
	// Expires is when the token stops working.
	// +optional
	Expires *metav1.Time `json:"expires,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ClusterRegistrationToken lets agents register clusters with the hub.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=flotilla
// +kubebuilder:printcolumn:name="Secret",type=string,JSONPath=`.status.secretName`
// +kubebuilder:printcolumn:name="Expires",type=date,JSONPath=`.status.expires`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ClusterRegistrationToken struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ClusterRegistrationTokenSpec   `json:"spec,omitempty"`
	Status ClusterRegistrationTokenStatus `json:"status,omitempty"`
}

// ClusterRegistrationTokenList is a list of ClusterRegistrationTokens.
// +kubebuilder:object:root=true
type ClusterRegistrationTokenList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterRegistrationToken `json:"items"`
}

// ClusterRegistrationSpec is an agent's request to join the fleet.
type ClusterRegistrationSpec struct {
	// ClientID identifies the downstream cluster stably (e.g. its kube-system namespace UID).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="clientID is immutable"
	ClientID string `json:"clientID"`
	// ClusterName is the name the agent asks for; the hub may choose another if it is taken.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	ClusterName string `json:"clusterName,omitempty"`
	// TokenName is the ClusterRegistrationToken the agent registers with. An admission policy
	// (manifests/policies) holds a token's agents to their own token's name.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	TokenName string `json:"tokenName,omitempty"`
	// PublicKey is the agent's X25519 public key (32 bytes): the hub seals the cluster's
	// credentials to it, so no one else who can read registrations can use them.
	PublicKey []byte `json:"publicKey"`
}

// RequestedClusterName is the Cluster a registration asks to be: its clusterName, or a name
// derived from its client id.
func (s *ClusterRegistrationSpec) RequestedClusterName() string {
	if s.ClusterName != "" {
		return s.ClusterName
	}
	sum := sha256.Sum256([]byte(s.ClientID))
	return "cluster-" + hex.EncodeToString(sum[:])[:10]
}

// ClusterRegistrationStatus says whether the registration was granted.
type ClusterRegistrationStatus struct {
	// ClusterName is the Cluster created for this registration.
	// +optional
	ClusterName string `json:"clusterName,omitempty"`
	// Granted is true once the cluster's credentials exist.
	// +optional
	Granted bool `json:"granted,omitempty"`
	// Namespace is the cluster's namespace on the hub (its BundleDeployments).
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// ClusterNamespace is where the Cluster object lives.
	// +optional
	ClusterNamespace string `json:"clusterNamespace,omitempty"`
	// Credentials is the agent's hub token, sealed to spec.publicKey (NaCl anonymous box).
	// +optional
	Credentials []byte `json:"credentials,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ClusterRegistration is created by an agent, with a registration token, to join the fleet.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=flotilla
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.status.clusterName`
// +kubebuilder:printcolumn:name="Granted",type=boolean,JSONPath=`.status.granted`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ClusterRegistration struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ClusterRegistrationSpec   `json:"spec"`
	Status ClusterRegistrationStatus `json:"status,omitempty"`
}

// ClusterRegistrationList is a list of ClusterRegistrations.
// +kubebuilder:object:root=true
type ClusterRegistrationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterRegistration `json:"items"`
}
