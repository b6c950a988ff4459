package controlplane

import (
	"context"
	"fmt"
	"os"
	"time"
)

// Tests is a package's tests: *testing.M (this package does not link the testing package, so
// that the quickstart, which starts clusters with it, ships none of it).
type Tests interface{ Run() int }

// RunTests is a package's TestMain body for tests against real clusters (one control plane per
// test package): it starts an environment, lets setup start clusters and install what the tests
// need, runs the tests and stops everything, also when setup or a test fails.
//
//	func TestMain(m *testing.M) {
//		os.Exit(controlplane.RunTests(m, func(ctx context.Context, env *controlplane.Environment) (err error) {
//			hub, err = env.StartCluster(ctx, controlplane.ClusterOptions{Name: "hub"})
//			return err
//		}))
//	}
func RunTests(m Tests, setup func(ctx context.Context, env *Environment) error) int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	env, err := Start(ctx, Options{Progress: os.Stderr})
	if err != nil {
		fmt.Fprintln(os.Stderr, "failed to start the control plane (build the binaries with: go run ./e2e/prepare):", err)
		return 1
	}
	defer env.Stop()
	if err := setup(ctx, env); err != nil {
		fmt.Fprintln(os.Stderr, "failed to set up the test clusters:", err)
		return 1
	}
	return m.Run()
}
