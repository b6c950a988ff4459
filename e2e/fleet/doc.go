// Package fleet holds the end-to-end tests: a hub cluster, workload clusters with real
// controllers and simulated nodes, a real git server, the hub and one agent per cluster, all on
// loopback. Readiness comes from the workload clusters' controllers, never from shortcuts.
package fleet
