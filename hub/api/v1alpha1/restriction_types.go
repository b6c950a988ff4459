package v1alpha1

import (
	"path"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FleetRestrictionSpec limits what the GitRepos and bundles of its namespace may do. Every
// FleetRestriction of a namespace applies: a repository, namespace or kind must be allowed by
// each of them.
type FleetRestrictionSpec struct {
	// AllowedRepoPatterns are regular expressions; a GitRepo's spec.repo must match one of them
	// in full. Empty allows any repository.
	// +optional
	// +kubebuilder:validation:MaxItems=100
	AllowedRepoPatterns []string `json:"allowedRepoPatterns,omitempty"`
	// AllowedTargetNamespaces are glob patterns (e.g. team-a-*) that the downstream namespace of
	// every namespaced object a bundle deploys must match; a Namespace object's name must match
	// too. Empty allows any namespace.
	// +optional
	// +kubebuilder:validation:MaxItems=100
	AllowedTargetNamespaces []string `json:"allowedTargetNamespaces,omitempty"`
	// AllowedClusterScopedKinds are the cluster-scoped kinds bundles may deploy, as Kind for the
	// core group (Namespace) or group/Kind (rbac.authorization.k8s.io/ClusterRole); "*" allows
	// any. Empty allows none.
	// +optional
	// +kubebuilder:validation:MaxItems=100
	AllowedClusterScopedKinds []string `json:"allowedClusterScopedKinds,omitempty"`
	// DefaultServiceAccount is the downstream ServiceAccount, in the agent's namespace, that the
	// agent impersonates to deploy a bundle that names none: downstream RBAC then bounds what
	// the bundle can do. Empty: the agent deploys as itself.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	DefaultServiceAccount string `json:"defaultServiceAccount,omitempty"`
	// AllowedServiceAccounts are the ServiceAccounts a bundle's serviceAccount may name, beside
	// the default.
	// +optional
	// +kubebuilder:validation:MaxItems=100
	AllowedServiceAccounts []string `json:"allowedServiceAccounts,omitempty"`
	// AllowedProviderAddresses bounds where the namespace's AnalysisProviders and
	// NotificationProviders may send, within the hub's --allowed-provider-addresses: CIDRs,
	// IP addresses, host names and *.domain wildcards, each optionally with http:// or
	// https://. Loopback, link-local and metadata addresses need an entry that names them.
	// Unset: the hub's list alone; empty: nowhere.
	// +optional
	// +kubebuilder:validation:MaxItems=100
	AllowedProviderAddresses []string `json:"allowedProviderAddresses,omitempty"`
	// AnalysisProviders bounds the AnalysisProviders of the namespace that rollouts' checks
	// may ask (§7). Unset: any of them.
	// +optional
	AnalysisProviders *AllowedProviders `json:"analysisProviders,omitempty"`
	// RequireVerifiedSources: every GitRepo of the namespace must verify the signatures of what
	// it deploys (spec.verify); one that does not is not fetched.
	// +optional
	RequireVerifiedSources bool `json:"requireVerifiedSources,omitempty"`
}

// AllowedProviders lists the AnalysisProviders checks may name; an empty list allows none.
type AllowedProviders struct {
	// +optional
	// +kubebuilder:validation:MaxItems=100
	Allowed []string `json:"allowed"`
}

// AllowsProvider reports whether checks may ask the named AnalysisProvider.
func (s *FleetRestrictionSpec) AllowsProvider(name string) bool {
	return s.AnalysisProviders == nil || slices.Contains(s.AnalysisProviders.Allowed, name)
}

// FleetRestriction is a tenancy boundary for one fleet namespace, like Fleet's
// GitRepoRestriction, Argo CD's AppProject or Flux's service-account impersonation: it bounds
// the repositories the namespace's GitRepos use and what their bundles deploy downstream.
// +kubebuilder:object:root=true
// +kubebuilder:resource:categories=flotilla
// +kubebuilder:printcolumn:name="Service-Account",type=string,JSONPath=`.spec.defaultServiceAccount`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type FleetRestriction struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec FleetRestrictionSpec `json:"spec,omitempty"`
}

// FleetRestrictionList is a list of FleetRestrictions.
// +kubebuilder:object:root=true
type FleetRestrictionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []FleetRestriction `json:"items"`
}

// DeploymentRestriction is one FleetRestriction as the agent enforces it on a deployment.
type DeploymentRestriction struct {
	// Name of the FleetRestriction, for messages.
	Name string `json:"name"`
	// AllowedNamespaces are FleetRestrictionSpec.AllowedTargetNamespaces.
	// +optional
	AllowedNamespaces []string `json:"allowedNamespaces,omitempty"`
	// AllowedClusterScopedKinds are FleetRestrictionSpec.AllowedClusterScopedKinds.
	// +optional
	AllowedClusterScopedKinds []string `json:"allowedClusterScopedKinds,omitempty"`
}

// AllowsNamespace reports whether objects may be deployed into namespace ns: it matches one of
// AllowedNamespaces (path.Match globs), or there are none.
func (r *DeploymentRestriction) AllowsNamespace(ns string) bool {
	if len(r.AllowedNamespaces) == 0 {
		return true
	}
	for _, p := range r.AllowedNamespaces {
		if ok, err := path.Match(p, ns); err == nil && ok {
			return true
		}
	}
	return false
}

// AllowsClusterScopedKind reports whether objects of a cluster-scoped kind may be deployed.
func (r *DeploymentRestriction) AllowsClusterScopedKind(group, kind string) bool {
	if group != "" {
		kind = group + "/" + kind
	}
	return slices.Contains(r.AllowedClusterScopedKinds, "*") || slices.Contains(r.AllowedClusterScopedKinds, kind)
}
