// Package bundle reads fleet.yaml repositories and renders each bundle per target cluster with
// Helm, Kustomize or plain YAML, without a cluster. It never imports the hub or the agent.
package bundle
