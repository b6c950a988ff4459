// Command flotilla-hub runs the Flotilla hub: it follows GitRepos, renders their bundles and
// rolls them out to the registered clusters. It parses flags into hub.Options and calls hub.Run.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/flotilla-dev/flotilla/hub"
)

func main() {
	var opts hub.Options
	var recordEvery int64
	cache, _ := os.UserCacheDir()
	flag.StringVar(&opts.CacheDir, "cache-dir", filepath.Join(cache, "flotilla-hub"), "directory for git checkouts and chart archives")
	flag.StringVar(&opts.WebhookAddr, "webhook-addr", ":8080", "address of the git webhook receiver; empty disables it")
	flag.StringVar(&opts.MetricsAddr, "metrics-addr", ":8081", "address of the Prometheus metrics endpoint; 0 disables it")
	flag.StringVar(&opts.HealthAddr, "health-addr", ":8082", "address of /healthz and /readyz; empty disables them")
	flag.IntVar(&opts.PollWorkers, "poll-workers", 4, "concurrent git polls")
	flag.IntVar(&opts.WritesInFlight, "writes-in-flight", hub.DefaultWritesInFlight, "BundleDeployment writes the hub has in flight at once, all controllers together")
	flag.DurationVar(&opts.GrantPruneDelay, "grant-prune-delay", time.Minute, "how long a content grant shared by several agents waits before it drops those no longer deploying its content")
	flag.Int64Var(&recordEvery, "poll-record-interval", 300, "seconds between writes of an unchanged poll to status.lastPollTime")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse() // also reads --kubeconfig, registered by controller-runtime
	opts.PollRecordInterval = recordEvery
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	cfg, err := ctrl.GetConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, "flotilla-hub:", err)
		os.Exit(2)
	}
	opts.Config = cfg
	if err := hub.Run(ctrl.SetupSignalHandler(), opts); err != nil {
		fmt.Fprintln(os.Stderr, "flotilla-hub:", err)
		os.Exit(1)
	}
}
