// Package plan gathers what a rollout decision is made from: a bundle's deployments and
// clusters as the planner sees them (GatherPlan: liveness, dependencies, releases the cache
// does not show yet, quarantined revisions) and the outcome bookkeeping of ROLLOUT.md §5
// (recording a failed revision, quarantine, and the rollback it writes through deploy). The
// decisions themselves are the rollout package's. A Tracker keeps what a bundle's passes read
// between passes and reads again only the clusters its events name (the rollout controller's
// watches go through Noting), so a pass does not read the whole fleet again after each batch.
// It writes BundleDeployments only through deploy (restores); everything else it sets on a
// Bundle's status is written by its caller.
package plan
