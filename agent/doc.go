// Package agent is the small program that runs in each downstream cluster: it pulls its own
// BundleDeployments from the hub, applies them with server-side apply, and reports readiness and
// drift back. It must stay small: it imports the hub's API types, never Helm, Kustomize or
// go-git (rendering happens on the hub); e2e/archtest enforces this.
package agent
