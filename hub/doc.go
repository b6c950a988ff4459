// Package hub is the control plane of Flotilla: it turns GitRepos into Bundles and releases
// BundleDeployments to clusters as each bundle's rollout strategy allows.
//
// # The controllers
//
// Run starts them from one table. Each reconciles one kind (For), wakes on others (Watches)
// and writes only what this map says; the rollout decisions themselves are the rollout
// package's, the rendering the bundle package's.
//
//	controller (file)                       reconciles     wakes on                         writes
//	gitrepo-source (source_controller.go)    GitRepo        its spec, Clusters, groups,       GitRepo status and finalizer; through the
//	                                                        restrictions, webhooks, polls     bundler (bundler.go): Bundles, Contents,
//	                                                                                          revision records, staged deployments,
//	                                                                                          a Bundle's status.renderFailure
//	gitrepo-status (gitrepo_status.go)       GitRepo        its Bundles                       GitRepo status: the bundles' sum
//	bundle-rollout (rollout_controller.go)   Bundle         its deployments, Clusters,        BundleDeployments (releases, removals),
//	                                                        agents' Leases, staged runs       Bundle status; automatic staged runs
//	bundle-sequence (sequence_controller.go) Bundle         its deployments, sequences        BundleDeployments (releases), Bundle status
//	sequence-status (sequence_controller.go) RolloutSequence Bundles, Clusters               RolloutSequence status
//	staged-run (run_controller.go)           StagedUpdateRun deployments, approvals,          BundleDeployments (releases), ApprovalRequests,
//	                                                        Bundles, Clusters, other runs     run status, the superseded-by mark
//	deployment-removal (removal.go)          BundleDeployment its deletion                    its finalizer; the Cluster's Uninstalled record
//	bundle-removal (removal.go)              Bundle         its deletion, its deployments     its deployments (deleted), its finalizer
//	cluster-status (cluster_status.go)       Cluster        deployments, Bundles, Leases      Cluster status (counts, online or offline)
//	clustergroup-status (cluster_status.go)  ClusterGroup   Clusters                          ClusterGroup status
//	cluster-access (access.go)               Cluster        deployments                       the cluster's namespace, agent identity,
//	                                                                                          Roles and Lease; its Admitted condition
//	content-grant (content_grants.go)        RoleBinding    deployments                       shared content grants (Roles, RoleBindings)
//	content-gc (content_gc.go)               (namespace)    Bundles, deployments              Contents nothing references (deleted)
//	registration-token (registration.go)     ClusterRegistrationToken                         its Secret and ServiceAccount, its status
//	cluster-registration (registration.go)   ClusterRegistration Clusters                     the Cluster, its sealed credentials, status
//
// A bundle of a commit that does not render fails alone (bundler.render): the others are
// written, the failed one keeps its revisions and gets status.renderFailure, which the
// strategy controllers show as its Rendered condition, and the GitRepo's Rendered condition
// names them. The agents' address and CA that registration tokens carry are the operator's
// (agent_endpoint.go), never an in-cluster address.
//
// Every controller of an object with a status or a finalizer runs on one skeleton,
// reconciler.Status (package hub/reconciler, shared with the agent): it reads the object, lets
// the controller's step set the status of a copy, writes the status only when it changed
// (conditionally on the object as read where a stale cache could mislead), holds and releases
// finalizers (the removal controllers only finalize), and tells what changed (Events) once the
// status shows it. A write that loses an optimistic-lock race is done again from a fresh read,
// logged at debug level, not as an error. Two are not object reconcilers and do not use it: content-gc collects a
// namespace, and content-grant prunes RoleBindings, which have no status.
//
// When a revision fails (ROLLOUT.md §5, outcome.go), the controller of the bundle's strategy
// records it first (the Bundle's status.quarantined and status.outcome; a run's status.failure)
// and then writes the rollback: each deployment released its last good revision again, one
// write each (restore). A release records that last good revision in its own write.
//
// Deployment writes go through one component, deployments.go: writeDeployment and restage
// (conditional on the deployment as read), grantAndWrite (the agent's access first), bounded
// by writeSlots; the bundler and the rollout controllers share it and the releases record
// (releases) that keeps them from writing one release twice while the cache catches up.
// Events (package events) and the flotilla_* metrics (metrics.go) are told where the status
// they describe is written.
//
// The webhook receiver (webhooks.go) runs in every replica of every shard. It finds a
// delivery's GitRepos in a cache of every shard's, indexed by the repository they follow, and
// reads their webhook secrets at most every few seconds: its senders are untrusted, and no
// delivery may make the hub load the API server. The leader of the GitRepo's shard polls at
// once; any other replica forwards the delivery to it with an annotation write, at most one
// per GitRepo a second (a burst's last delivery is forwarded when the second ends).
//
// The hub's API types live in hub/api/v1alpha1; the CRDs and the hub's RBAC role in
// manifests/ are generated from this tree by `go generate ./hub/...` (controller-gen, pinned as
// a tool in go.mod). The RBAC markers below declare everything the hub may touch.
package hub

//go:generate go tool controller-gen object paths=./api/...
//go:generate go tool controller-gen crd:maxDescLen=400 paths=./api/... output:crd:artifacts:config=../manifests/crds
//go:generate go tool controller-gen rbac:roleName=flotilla-hub paths=./... output:rbac:artifacts:config=../manifests/rbac

// The hub's ClusterRole, rule by rule (what each is for is in the README's security model):
// Flotilla's own kinds, which it reconciles and writes;
// +kubebuilder:rbac:groups=flotilla.dev,resources=gitrepos;bundles;bundledeployments;clusters;clustergroups;clusterregistrationtokens;clusterregistrations;stagedupdatestrategies;stagedupdateruns;approvalrequests;rolloutsequences;contents;fleetrestrictions,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=flotilla.dev,resources=bundledeployments,verbs=deletecollection
// +kubebuilder:rbac:groups=flotilla.dev,resources=gitrepos/status;bundles/status;bundledeployments/status;clusters/status;clustergroups/status;clusterregistrationtokens/status;clusterregistrations/status;stagedupdateruns/status;approvalrequests/status;rolloutsequences/status,verbs=get;update;patch
// the verb of the policy flotilla-cluster-namespace-is-the-hubs, held by nobody else: only it
// moves a cluster's deployments to another namespace (manifests/policies);
// +kubebuilder:rbac:groups=flotilla.dev,resources=clusters,verbs=move
// clusters' namespaces and agents' and registration tokens' identities, cached;
// +kubebuilder:rbac:groups="",resources=namespaces;serviceaccounts,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=serviceaccounts/token,verbs=create
// Secrets read one by one when a GitRepo names one (never listed, never cached), and the
// registration tokens' Secrets it creates and deletes;
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create;delete
// ConfigMaps read when a fleet.yaml names one (valuesFrom), and its own version record;
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;create;update
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// agents' Roles and content grants, which grant only what the hub holds itself (no escalate,
// no bind, no cluster-wide roles);
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles;rolebindings,verbs=get;list;watch;create;update;patch;delete
// agents' Leases (their heartbeats) and the hub's leader election.
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete
