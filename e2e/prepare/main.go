// Command prepare builds the control-plane binaries that the integration and end-to-end tests
// run (kube-apiserver, kube-controller-manager, kube-scheduler, etcd, kwok) into the per-version
// cache, showing progress. The README's test command runs it first so that the first build is
// visible instead of hidden inside a silent test binary; later runs find the cache and return at once.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/flotilla-dev/flotilla/e2e/controlplane"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	started := time.Now()
	bins, err := controlplane.EnsureBinaries(ctx, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "prepare:", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "prepare: control-plane binaries ready in %s (kube-apiserver at %s)\n", time.Since(started).Round(time.Second), bins.APIServer)
}
