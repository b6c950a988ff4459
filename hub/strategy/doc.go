// Package strategy holds the controllers that release revisions as a bundle's strategy
// allows: bundle-rollout (partitions and rolling updates, and the automatic staged runs),
// bundle-sequence and sequence-status (rollout sequences), and staged-run (staged update runs,
// their approvals and waits). Each reads its fleet from the caches (model, liveness), decides
// with the rollout package, writes BundleDeployments through deploy, and writes its own
// object's status: Bundle, RolloutSequence, StagedUpdateRun and their ApprovalRequests.
package strategy
