// Package hub is the control plane of Flotilla: it turns GitRepos into Bundles and releases
// BundleDeployments to clusters as each bundle's rollout strategy allows.
//
// The hub's API types live in hub/api/v1alpha1; the CRDs and the hub's RBAC role in
// manifests/ are generated from this tree by `go generate ./hub/...` (controller-gen, pinned as
// a tool in go.mod). The RBAC markers below declare everything the hub may touch.
package hub

//go:generate go tool controller-gen object paths=./api/...
//go:generate go tool controller-gen crd:maxDescLen=400 paths=./api/... output:crd:artifacts:config=../manifests/crds
//go:generate go tool controller-gen rbac:roleName=flotilla-hub paths=./... output:rbac:artifacts:config=../manifests/rbac

// +kubebuilder:rbac:groups=flotilla.dev,resources=gitrepos;bundles;bundledeployments;clusters;clustergroups;clusterregistrationtokens;clusterregistrations;stagedupdatestrategies;stagedupdateruns;approvalrequests;rolloutsequences;contents;fleetrestrictions,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=flotilla.dev,resources=bundledeployments,verbs=deletecollection
// +kubebuilder:rbac:groups=flotilla.dev,resources=gitrepos/status;bundles/status;bundledeployments/status;clusters/status;clustergroups/status;clusterregistrationtokens/status;clusterregistrations/status;stagedupdateruns/status;approvalrequests/status;rolloutsequences/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=namespaces;serviceaccounts;secrets;configmaps,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=serviceaccounts/token,verbs=create
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles;rolebindings;clusterroles;clusterrolebindings,verbs=get;list;watch;create;update;patch;delete;bind;escalate
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete
