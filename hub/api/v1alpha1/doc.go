// Package v1alpha1 holds the hub's API: the custom resources of the flotilla.dev group.
//
// The kinds fall into four families:
//
//   - Sources and what is rendered from them: GitRepo → Bundle (one per rendered path, with a
//     revision history) → BundleDeployment (one per bundle and target cluster).
//   - The fleet: Cluster, ClusterGroup, and the registration handshake ClusterRegistrationToken →
//     ClusterRegistration.
//   - Staged rollouts: StagedUpdateStrategy (reusable), StagedUpdateRun (one execution of a
//     strategy for one bundle revision) and ApprovalRequest (a gate a person opens).
//   - Sequenced rollouts: RolloutSequence, a chain of cluster groups with soak times.
//
// Every kind reports the kstatus condition vocabulary (see conditions.go): Ready is always
// present, Reconciling and Stalled only while they are true, so generic tooling can read the
// health of any Flotilla object. The per-cluster state values (ClusterState) are computed by one
// function in the rollout package; these types only carry them.
//
// The package imports apimachinery only, so the agent can use it without pulling in the hub.
//
// +kubebuilder:object:generate=true
// +groupName=flotilla.dev
package v1alpha1
