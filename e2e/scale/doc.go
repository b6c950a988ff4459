// Package scale holds the hub's scale benchmarks: one real API server, the real hub, and a
// simulator acting as N agents (each watches its cluster's BundleDeployments; eight writers
// report each release applied and ready with one status write, as the real agent does at
// best). Run them with
//
//	go test -run XXX -bench . -benchtime 1x -timeout 60m ./e2e/scale/
//
// BenchmarkFleet reports, per scenario, the time to all-Ready for a first deployment (from the
// GitRepo's creation, once the clusters are registered) and for an update (from the push and
// its webhook), the API server's write floor for the same number of objects (create each,
// write its status once) measured in the same run, the same floor with objects shaped like the
// hub's deployments and the agents' reports, that shaped floor watched as the hub and an agent
// watch deployments (the median of three runs, with their spread, and the first deployment and
// update against it), the hub's writes per BundleDeployment and its heap. BenchmarkStrategies
// reports the same for one bundle rolled out by a staged run of five stages and by a sequence
// of three groups (SCALE_STRATEGY_CLUSTERS clusters); BenchmarkRestart restarts the hub under
// a deployed fleet and reports its resync (time, writes, heap) and its first release after it.
// BenchmarkWriteKinds measures each kind of deployment write alone. Set SCALE_WRITES=1
// for the writes by kind and the per-revision timeline, SCALE_HEAP_PROFILE=path for a heap
// profile, and FLOTILLA_APISERVER_PROFILING=1 SCALE_APISERVER_PROFILE=path for a CPU profile
// of the API server over each first deployment and update (SCALE_APISERVER_PROFILE_SECONDS,
// default 30). SCALE_AGENT_EVENTS=1 makes the simulated agents also record the Events an agent
// with --events=all records of each release. SCALE_APISERVER_CPU=n throttles the API server
// every benchmark runs against to n cores of CPU time (a cgroup CPU quota: needs root), a slow
// API server for every client alike, floors included; the benchmarks then report how long the
// kernel held it back. A fleet that makes no progress for two minutes fails the benchmark with
// the states of the deployments that are not ready. Figures: README "Measured".
package scale
