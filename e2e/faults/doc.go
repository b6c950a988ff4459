// Package faults is the hub's fault suite. The real hub (cmd/flotilla-hub, built by the suite)
// runs as a process of its own under a supervisor that starts it again at once when it ends, as
// a kubelet restarts a container; it talks to a real API server on a real etcd
// (e2e/controlplane); simulated agents renew their clusters' Leases and report each release
// applied and ready after a random delay; git servers fail on demand (e2e/gitserver).
//
// While a partitioned, a staged and a sequenced rollout run, the suite SIGKILLs the hub at
// random moments, pauses etcd past the hub's renew deadline, restarts the API server, cuts
// agents off past their heartbeat deadline, makes the git server answer 500, hang before its
// first byte and hang mid-fetch, force-pushes, and floods the webhook receiver. A watch of
// every BundleDeployment checks the rollout's rules at every event (invariants_test.go): never
// more clusters released and not ready than the strategy's budgets allow, no stage, group or
// partition entered before the ones before it allow it, each cluster released each revision
// once and written once for it, and in the end every targeted cluster on the last revision,
// ready, and no deployment lost or orphaned. A second test puts a tenant of 50 hung
// repositories, a repository holding a 1 GiB file of zeros, an artifact of a 1 GiB file and one
// of 200,000 entries beside a healthy tenant, and reports the healthy tenant's latency and the
// hub's peak memory.
//
// The faults are drawn from a seeded random source: FAULTS_SEED (default 1) repeats a run,
// FAULTS_ROUNDS (default 1) runs that many updates of each rollout, each with its own faults.
// CI runs the default, a few minutes; the figures of longer runs are in README.md beside this
// file.
package faults
