package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/e2e/controlplane"
	"github.com/flotilla-dev/flotilla/hub"
)

var (
	environment *controlplane.Environment
	apiServer   *controlplane.Cluster
	// hubBinary is cmd/flotilla-hub, built for the suite.
	hubBinary string
)

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	os.Exit(controlplane.RunTests(m, func(ctx context.Context, env *controlplane.Environment) (err error) {
		environment = env
		if apiServer, err = env.StartCluster(ctx, controlplane.ClusterOptions{Name: "hub"}); err != nil {
			return err
		}
		if err := controlplane.InstallFlotillaAPI(ctx, apiServer.Config()); err != nil {
			return err
		}
		hubBinary = filepath.Join(env.Dir(), "flotilla-hub")
		build := exec.CommandContext(ctx, "go", "build", "-o", hubBinary, "github.com/flotilla-dev/flotilla/cmd/flotilla-hub")
		if out, err := build.CombinedOutput(); err != nil {
			return fmt.Errorf("failed to build the hub: %v\n%s", err, out)
		}
		return nil
	}))
}

// adminClient is a client of the API server with the hub's scheme.
func adminClient(t *testing.T) client.WithWatch {
	t.Helper()
	scheme, err := hub.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.NewWithWatch(apiServer.Config(), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// faultRand is the run's random source: FAULTS_SEED, default 1, logged so a failure can be
// run again as it happened.
type faultRand struct {
	mu sync.Mutex
	r  *rand.Rand
}

func newFaultRand(t *testing.T) *faultRand {
	seed := uint64(1)
	if s := os.Getenv("FAULTS_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("FAULTS_SEED=%q: %v", s, err)
		}
		seed = n
	}
	t.Logf("faults drawn with FAULTS_SEED=%d", seed)
	return &faultRand{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// intN is a number in [0, n).
func (f *faultRand) intN(n int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.r.IntN(n)
}

// rounds is FAULTS_ROUNDS: how many updates of each rollout run, each with its own faults.
func rounds(t *testing.T) int {
	s := os.Getenv("FAULTS_ROUNDS")
	if s == "" {
		return 1
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("FAULTS_ROUNDS=%q: want a positive number", s)
	}
	return n
}
