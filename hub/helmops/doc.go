// Package helmops deploys Helm charts without git: a HelmOp names a chart in a Helm repository
// or an OCI registry, a semantic version range, values, targets and a rollout strategy. The
// helmop-source controller reads the chart server's versions at each poll, verifies an OCI
// chart's cosign signature when the HelmOp asks, and hands the newest matching version to the
// bundler as the revision of a repository of one bundle (pinned: the version, and for an OCI
// chart the manifest digest it verified), so that everything after is a GitRepo's path: the
// renderer and its sandbox, revisions, Content, and the rollout under the strategy. The
// helmop-status controller sums the HelmOp's bundle into its status.
//
// It writes HelmOps' status and finalizers and, through the bundler, a Bundle per HelmOp
// (labelled model.LabelHelmOp), its revision records and BundleDeployments. It reads the
// Secrets a HelmOp names one by one from the API server, never through a cache.
package helmops
