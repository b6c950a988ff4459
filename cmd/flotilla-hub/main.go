// Command flotilla-hub runs the Flotilla hub: it follows GitRepos, renders their bundles and
// rolls them out to the registered clusters. It parses flags into hub.Options and calls hub.Run.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/flotilla-dev/flotilla/bundle"
	"github.com/flotilla-dev/flotilla/cmd/internal/version"
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
	flag.Func("allowed-chart-hosts", "comma-separated chart servers (host or host:port) the hub may download charts from on a repository's behalf; default any", func(v string) error {
		opts.AllowedChartHosts = append(opts.AllowedChartHosts, strings.Split(v, ",")...)
		return nil
	})
	flag.DurationVar(&opts.RenderTimeout, "render-timeout", bundle.DefaultRenderTimeout, "how long one template render of a bundle (Helm, values templates) may take")
	flag.Int64Var(&opts.RenderMemory, "render-memory", bundle.DefaultRenderMemory, "bytes of memory one template render of a bundle may use")
	flag.BoolVar(&opts.AllowCrossNamespaceRefs, "allow-cross-namespace-refs", false, "let repositories reference ConfigMaps and Secrets (helm.valuesFrom) outside their GitRepo's namespace")
	flag.Int64Var(&recordEvery, "poll-record-interval", 300, "seconds between writes of an unchanged poll to status.lastPollTime")
	flag.DurationVar(&opts.AgentTokenTTL, "agent-token-ttl", hub.DefaultAgentTokenTTL, "lifetime of the hub tokens agents get at registration and renew themselves (a third before expiry)")
	flag.IntVar(&opts.RegistrationBurst, "registration-burst", hub.DefaultRegistrationBurst, "registrations one ClusterRegistrationToken may grant at once")
	flag.DurationVar(&opts.RegistrationInterval, "registration-interval", hub.DefaultRegistrationInterval, "once the burst is used, one registration per token per this interval")
	flag.StringVar(&opts.Namespace, "namespace", orDefault(os.Getenv("POD_NAMESPACE"), "flotilla-system"), "the hub's own namespace, where it records its version (ConfigMap flotilla-hub)")
	flag.DurationVar(&opts.ContentGrace, "content-gc-grace", hub.DefaultContentGrace, "how old rendered Content that no revision in a bundle's history and no deployment references must be before it is deleted")
	flag.DurationVar(&opts.HeartbeatInterval, "heartbeat-interval", hub.DefaultHeartbeatInterval, "how often agents renew their Lease, for clusters whose spec sets no heartbeatInterval (an idle fleet of N clusters costs N / interval writes a second)")
	flag.DurationVar(&opts.HeartbeatDeadline, "heartbeat-deadline", hub.DefaultHeartbeatDeadline, "how long after its agent's last renewal a cluster counts as offline, for clusters whose spec sets no heartbeatDeadline")
	flag.DurationVar(&opts.UninstallTimeout, "uninstall-timeout", hub.DefaultUninstallTimeout, "how long a deleted deployment waits for its agent to confirm the removal of its workloads (an offline cluster's deletion finishes after it)")
	flag.StringVar(&opts.Shard, "shard", "", "the hub shard to run: it follows the GitRepos labelled flotilla.dev/shard=<shard>; empty: the default shard, which also keeps the fleet-wide view")
	flag.BoolVar(&opts.LeaderElection, "leader-elect", true, "run the controllers only in the replica holding the Lease flotilla-hub in --namespace; the others stand by and forward webhooks")
	flag.DurationVar(&opts.LeaseDuration, "leader-elect-lease-duration", 15*time.Second, "how long after a leader's last renewal a standby replica takes over")
	flag.DurationVar(&opts.RenewDeadline, "leader-elect-renew-deadline", 10*time.Second, "how long the leader tries to renew its Lease before it stops leading")
	flag.DurationVar(&opts.RetryPeriod, "leader-elect-retry-period", 2*time.Second, "how often replicas try to acquire or renew the Lease")
	flag.StringVar(&opts.Server, "agent-api-server-url", "", "the hub's API server URL as agents on other clusters reach it, given them in registration tokens; default the hub's own (an in-cluster one is refused: tokens then hold none and say why)")
	agentCA := flag.String("agent-api-server-ca", "", "PEM file of the CA agents trust for --agent-api-server-url; default the CA of the hub's own connection (its kubeconfig's file or data)")
	showVersion := flag.Bool("version", false, "print the version and exit")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse() // also reads --kubeconfig, registered by controller-runtime
	if *showVersion {
		fmt.Println(version.String("flotilla-hub"))
		return
	}
	if *agentCA != "" {
		ca, err := os.ReadFile(*agentCA)
		if err != nil {
			fmt.Fprintln(os.Stderr, "flotilla-hub: --agent-api-server-ca:", err)
			os.Exit(2)
		}
		opts.CACert = ca
	}
	opts.PollRecordInterval = recordEvery
	opts.Version = version.Version()
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

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}
