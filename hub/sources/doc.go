// Package sources turns GitRepos into Bundles. The gitrepo-source controller follows each
// GitRepo (polls, webhooks, schedules) through hub/gitsource and hands each new commit to the
// bundler, which renders every bundle per target cluster (package bundle, in its sandbox,
// within the repository's render budget and the FleetRestrictions of its namespace), records
// the revision and stages the deployments the commit changes (through deploy). The
// gitrepo-status controller sums the GitRepo's bundles into its status.
//
// It writes GitRepos' status and finalizers, Bundles, revision records (Content) and, through
// deploy, BundleDeployments. It reads Secrets and ConfigMaps one by one from the API server
// when a GitRepo or fleet.yaml names one, never through a cache.
package sources
