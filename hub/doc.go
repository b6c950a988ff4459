// Package hub is the control plane of Flotilla: it turns GitRepos (and HelmOps, charts without
// git) into Bundles and releases
// BundleDeployments to clusters as each bundle's rollout strategy allows. This package keeps
// Run, its Options and flags, the hub's version record and the table of controllers; each
// controller lives in the package of its responsibility, the rollout decisions in package
// rollout, the rendering in package bundle.
//
// # The packages
//
// One row per package of hub/ (a row with no name continues the one above): the hub packages
// it may import, and the kinds it writes through an API client itself: Kind (created,
// updated or patched), Kind/status (a subresource), Kind(delete), and "object" where the code
// writes what its caller hands it (the reconciler skeleton, a list of things to revoke). The
// rows run from the bottom up; a package imports only rows above its own. e2e/archtest reads
// this table: an import or a write the code has and the table does not draw fails it, and so
// does one the table draws and the code no longer has.
//
//	package               | may import                                    | writes
//	api/v1alpha1          | -                                             | -
//	reconciler            | -                                             | object object/status
//	gitsource             | -                                             | -
//	bdstate               | api/v1alpha1                                  | -
//	content               | api/v1alpha1                                  | -
//	contentstore          | api/v1alpha1 content                          | Content
//	events                | api/v1alpha1                                  | -
//	model                 | api/v1alpha1 bdstate contentstore events      | Event object
//	liveness              | api/v1alpha1 model                            | Lease
//	liveness/livenesstest | api/v1alpha1 liveness                         | -
//	metrics               | api/v1alpha1 gitsource model                  | -
//	endpoint              | api/v1alpha1                                  | -
//	analysis              | api/v1alpha1 endpoint events metrics          | -
//	notify                | api/v1alpha1 endpoint events metrics model    | Alert/status NotificationProvider/status
//	access                | api/v1alpha1 liveness model reconciler        | BundleDeployment BundleDeployment/status
//	                      |                                               | BundleDeployment(delete) Cluster/status Lease
//	                      |                                               | Namespace Namespace(delete) Role Role(delete)
//	                      |                                               | RoleBinding RoleBinding(delete) ServiceAccount
//	                      |                                               | ServiceAccount(delete) ServiceAccount/token
//	                      |                                               | object(delete)
//	deploy                | access api/v1alpha1 events metrics model      | BundleDeployment
//	plan                  | api/v1alpha1 bdstate deploy events liveness   | -
//	                      | model                                         |
//	lifecycle             | api/v1alpha1 liveness model reconciler        | Cluster/status Content(delete)
//	clusters              | access api/v1alpha1 bdstate events liveness   | Cluster Secret ServiceAccount ServiceAccount(delete)
//	                      | model reconciler                              | ServiceAccount/token object(delete)
//	strategy              | analysis api/v1alpha1 bdstate deploy events   | ApprovalRequest BundleDeployment(delete)
//	                      | liveness metrics model plan reconciler        | StagedUpdateRun
//	sources               | access api/v1alpha1 contentstore deploy       | Bundle Bundle/status Bundle(delete)
//	                      | events gitsource lifecycle liveness metrics   | BundleDeployment(delete) GitRepo GitRepo/status
//	                      | model plan reconciler                         |
//	helmops               | api/v1alpha1 events gitsource lifecycle model | -
//	                      | reconciler sources                            |
//	webhooks              | api/v1alpha1 gitsource                        | -
//	.                     | access analysis api/v1alpha1 clusters         | ConfigMap
//	                      | contentstore deploy endpoint events gitsource |
//	                      | helmops lifecycle liveness metrics model      |
//	                      | notify sources strategy webhooks              |
//	report                | api/v1alpha1 model                            | -
//	preview               | api/v1alpha1 model                            | -
//	fleetimport           | api/v1alpha1                                  | -
//	operate               | api/v1alpha1 bdstate                          | ApprovalRequest/status Bundle Cluster
//	                      |                                               | SelfSubjectReview StagedUpdateRun
//	dashboard             | api/v1alpha1 bdstate contentstore model       | -
//	                      | operate report                                |
//
// Read from the bottom: the libraries (reconciler, the controllers' skeleton; gitsource;
// contentstore; bdstate, content and events, shared with the agent, which links no API client
// of controller-runtime's) know nothing of the controllers. model is what all of them share about the fleet's objects (labels, cache
// reads and indexes, the revision store, the shard). liveness judges agents' heartbeats;
// access owns what an agent may read; deploy is the one writer of deployments' specs (but
// for access copying a cluster's deployments as they are when the cluster changes namespace),
// with its write slots, releases record and staging set. plan gathers a rollout decision's
// inputs; analysis measures the rollouts' checks from the providers the operator defined
// (ROLLOUT.md §7) and hands their judgements to the planner as inputs, writing no object;
// endpoint makes the HTTP clients of what an operator defined (analysis and notification
// providers); notify passes what the Events tell to the providers the Alerts choose;
// strategy, sources, clusters and lifecycle hold the controllers. report and operate
// are the CLI's: a status read and what a person does, under the person's own identity;
// dashboard serves both to a browser, live, and writes nothing but through operate;
// fleetimport converts a Fleet installation's objects into Flotilla's, with I/O to the CLI.
//
// What controllers share is handed to them by Run, never kept in package state (the one
// exception is the process's metrics registry, package metrics's, as Prometheus wants it): one
// liveness.Liveness (written by its Lease informer, read by every controller that plans or
// shows online), one deploy.Releases, deploy.WriteSlots and deploy.StagingNow (made with the
// bundler, shared with the strategy controllers), one model.RevisionStore, one events.Recorder,
// one analysis.Runner (its measurements, for the three strategy controllers) and the
// replica's model.Shard.
//
// # The controllers
//
// Run starts them from one table (controllers, in run.go). Each reconciles one kind (For),
// wakes on others (Watches) and writes only what its package's row above allows.
//
//	controller (package)             reconciles        wakes on                         writes
//	gitrepo-source (sources)          GitRepo           its spec, Clusters, groups,      GitRepo status and finalizer; through the
//	                                                    restrictions, webhooks, polls    bundler: Bundles, Contents, revision
//	                                                                                     records, staged deployments (deploy),
//	                                                                                     a Bundle's status.renderFailure
//	gitrepo-status (sources)          GitRepo           its Bundles                      GitRepo status: the bundles' sum
//	helmop-source (helmops)           HelmOp            its spec, Clusters, groups,      HelmOp status and finalizer; through the
//	                                                    restrictions, polls              bundler: its Bundle, as gitrepo-source
//	helmop-status (helmops)           HelmOp            its Bundle                       HelmOp status: the bundle's sum
//	commit-status (notify)            GitRepo           its Bundles                      nothing of its own: the forge's commit
//	                                                                                     statuses (spec.commitStatus); its
//	                                                                                     provider's Ready condition
//	bundle-rollout (strategy)         Bundle            its deployments, Clusters,       BundleDeployments (releases through
//	                                                    agents' Leases, staged runs,     deploy, removals), Bundle status;
//	                                                    its checks' verdicts             automatic staged runs
//	bundle-sequence (strategy)        Bundle            its deployments, sequences,      BundleDeployments (deploy), Bundle status
//	                                                    its checks' verdicts
//	sequence-status (strategy)        RolloutSequence   Bundles, Clusters                RolloutSequence status
//	staged-run (strategy)             StagedUpdateRun   deployments, approvals,          BundleDeployments (deploy),
//	                                                    Bundles, Clusters, other runs,   ApprovalRequests, run status, the
//	                                                    its checks' verdicts             superseded-by mark
//	deployment-removal (lifecycle)    BundleDeployment  its deletion                     its finalizer; the Cluster's
//	                                                                                     Uninstalled record
//	bundle-removal (lifecycle)        Bundle            its deletion, its deployments    its deployments (deleted), its finalizer
//	content-gc (lifecycle)            (namespace)       Bundles, deployments             Contents nothing references (deleted)
//	cluster-status (clusters)         Cluster           deployments, Bundles, Leases     Cluster status (counts, online, offline)
//	clustergroup-status (clusters)    ClusterGroup      Clusters                         ClusterGroup status
//	registration-token (clusters)     ClusterRegistrationToken                           its Secret and ServiceAccount, status
//	cluster-registration (clusters)   ClusterRegistration  Clusters                      the Cluster, its sealed credentials,
//	                                                                                     status
//	cluster-access (access)           Cluster           deployments                      the cluster's namespace, agent identity,
//	                                                                                     Roles and Lease; its Admitted condition
//	content-grant (access)            RoleBinding       deployments                      shared content grants (Roles,
//	                                                                                     RoleBindings)
//
// Beside the controllers, the notification dispatcher (package notify) is handed every Event
// the recorder records and delivers what the Alerts of its namespace select, on workers of its
// own, never holding a controller.
//
// Beside the controllers, the webhook receiver (package webhooks) runs in every replica of
// every shard: its senders are untrusted, so it finds a delivery's GitRepos in a cache of
// its own and reads their webhook secrets at most every few seconds; the leader of the
// GitRepo's shard polls at once (through a Poller, the source controller), any other replica
// forwards the delivery to it with an annotation write, at most one per GitRepo a second.
// The flotilla_* metrics (package metrics) are read from the caches at each scrape.
//
// A bundle of a commit that does not render fails alone: the others are written, the failed
// one keeps its revisions and gets status.renderFailure, which the strategy controllers show
// as its Rendered condition, and the GitRepo's Rendered condition names them. The agents'
// address and CA that registration tokens carry are the operator's (clusters.AgentEndpoint),
// never an in-cluster address.
//
// Every controller of an object with a status or a finalizer runs on one skeleton,
// reconciler.Status (package hub/reconciler; the agent's deployment loop does the same on
// client-go's informer alone): it reads the object, lets
// the controller's step set the status of a copy, writes the status only when it changed
// (conditionally on the object as read where a stale cache could mislead), holds and releases
// finalizers (the removal controllers only finalize), and tells what changed (Events) once the
// status shows it. A write that loses an optimistic-lock race is done again from a fresh read,
// logged at debug level, not as an error. Two are not object reconcilers and do not use it:
// content-gc collects a namespace, and content-grant prunes RoleBindings, which have no status.
//
// When a revision fails (ROLLOUT.md §5, package plan), the controller of the bundle's strategy
// records it first (the Bundle's status.quarantined and status.outcome; a run's status.failure)
// and then writes the rollback through deploy: each deployment released its last good revision
// again, one write each. A release records that last good revision in its own write.
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
// +kubebuilder:rbac:groups=flotilla.dev,resources=gitrepos;helmops;bundles;bundledeployments;clusters;clustergroups;clusterregistrationtokens;clusterregistrations;stagedupdatestrategies;stagedupdateruns;approvalrequests;rolloutsequences;contents;fleetrestrictions,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=flotilla.dev,resources=analysisproviders;notificationproviders;alerts,verbs=get;list;watch
// +kubebuilder:rbac:groups=flotilla.dev,resources=notificationproviders/status;alerts/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=flotilla.dev,resources=bundledeployments,verbs=deletecollection
// +kubebuilder:rbac:groups=flotilla.dev,resources=gitrepos/status;helmops/status;bundles/status;bundledeployments/status;clusters/status;clustergroups/status;clusterregistrationtokens/status;clusterregistrations/status;stagedupdateruns/status;approvalrequests/status;rolloutsequences/status,verbs=get;update;patch
// the verb of the policy flotilla-cluster-namespace-is-the-hubs, held by nobody else: only it
// moves a cluster's deployments to another namespace (manifests/policies);
// +kubebuilder:rbac:groups=flotilla.dev,resources=clusters,verbs=move
// clusters' namespaces and agents' and registration tokens' identities, cached;
// +kubebuilder:rbac:groups="",resources=namespaces;serviceaccounts,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=serviceaccounts/token,verbs=create
// no Secrets: those it reads one by one when a GitRepo names one (never listed, never cached),
// and the registration tokens' Secrets it creates and deletes, are in fleet namespaces, where
// the install binds the ClusterRole flotilla-hub-secrets (manifests/rbac/secrets.yaml) to it,
// namespace by namespace; the hub reads no Secret of any other namespace;
// ConfigMaps read when a fleet.yaml names one (valuesFrom), and its own version record;
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;create;update
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// agents' Roles and content grants, which grant only what the hub holds itself (no escalate,
// no bind, no cluster-wide roles);
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles;rolebindings,verbs=get;list;watch;create;update;patch;delete
// who scrapes its metrics, asked of the API server (--metrics-secure);
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
// agents' Leases (their heartbeats) and the hub's leader election.
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete
