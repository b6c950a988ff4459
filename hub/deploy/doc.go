// Package deploy is the one writer of BundleDeployments' specs: staging and releasing a
// revision (conditional on the deployment as read, a JSON patch after a conflict), restoring
// the last good one, and granting the agent's access first (GrantAndWrite). Writes are bounded
// by WriteSlots; Releases remembers what was released until the cache shows it, so no release
// is written twice; StagingNow tells the rollout controllers which deployments the bundler is
// staging. The bundler and the strategy controllers share one of each, made by hub.Run.
package deploy
