// Package lifecycle removes what is no longer wanted: the deployment-removal controller
// holds a BundleDeployment until its agent uninstalled it (or the uninstall timeout passed,
// recorded on the Cluster), the bundle-removal controller deletes a Bundle's deployments
// before the Bundle goes, and the content collector deletes Content nothing references after
// a grace period. It writes finalizers, deletions, and a Cluster's record of uninstalls it
// could not confirm.
package lifecycle
