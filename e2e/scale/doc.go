// Package scale holds the hub's scale benchmark: one real API server, the real hub, and a
// simulator acting as N agents (it watches BundleDeployments and reports each release applied
// and ready with one status write, as the real agent does at best). Run it with
//
//	go test -run XXX -bench . -benchtime 1x -timeout 60m ./e2e/scale/
//
// It reports, per scenario, the time to all-Ready for a first deployment and for an update,
// the API server's write floor for the same number of objects (create each, write its status
// once), the hub's writes per BundleDeployment and its heap. Figures: README "Measured".
package scale
