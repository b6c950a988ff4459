package hub

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/flotilla-dev/flotilla/bundle"
	"github.com/flotilla-dev/flotilla/hub/clusters"
	"github.com/flotilla-dev/flotilla/hub/deploy"
	"github.com/flotilla-dev/flotilla/hub/gitsource"
	"github.com/flotilla-dev/flotilla/hub/lifecycle"
	"github.com/flotilla-dev/flotilla/hub/liveness"
	"github.com/flotilla-dev/flotilla/hub/sources"
)

// Flags are the hub's command-line flags (cmd/flotilla-hub, and the hub chart's Deployment),
// bound to Options. Tests parse a chart's rendered arguments with them, so that a hub they run
// is configured exactly as the chart configures it.
type Flags struct {
	opts        Options
	recordEvery int64
	agentCA     string
}

// BindFlags defines the hub's flags on fs; getenv gives the defaults read from the pod's
// environment (POD_NAMESPACE).
func BindFlags(fs *flag.FlagSet, getenv func(string) string) *Flags {
	f := &Flags{}
	o := &f.opts
	cache, _ := os.UserCacheDir()
	namespace := getenv("POD_NAMESPACE")
	if namespace == "" {
		namespace = "flotilla-system"
	}
	fs.StringVar(&o.CacheDir, "cache-dir", filepath.Join(cache, "flotilla-hub"), "directory for git checkouts and chart archives")
	fs.StringVar(&o.WebhookAddr, "webhook-addr", ":8080", "address of the git webhook receiver; empty disables it")
	fs.StringVar(&o.DashboardURL, "dashboard-url", "", "the dashboard's address as people open it: notifications link to it")
	fs.StringVar(&o.MetricsAddr, "metrics-addr", ":8443", "address of the Prometheus metrics endpoint; 0 disables it")
	fs.BoolVar(&o.MetricsSecure, "metrics-secure", true, "serve metrics over HTTPS to callers the API server authenticates and authorizes for GET /metrics (ClusterRole flotilla-hub-metrics-reader); false: plain HTTP to anyone, for a loopback --metrics-addr")
	fs.StringVar(&o.MetricsCertDir, "metrics-cert-dir", "", "directory of the metrics endpoint's tls.crt and tls.key; empty: a self-signed certificate")
	fs.StringVar(&o.HealthAddr, "health-addr", ":8082", "address of /healthz and /readyz; empty disables them")
	fs.Int64Var(&o.GitCacheBytes, "git-cache-bytes", gitsource.DefaultMaxCacheBytes, "bytes of git repositories and checkouts kept under --cache-dir; past it, those used longest ago go")
	fs.IntVar(&o.PollWorkers, "poll-workers", gitsource.DefaultPollWorkers, "concurrent git polls; one fleet namespace's GitRepos hold at most half of them, and so do one git server's")
	fs.DurationVar(&o.GitTimeout, "git-timeout", gitsource.DefaultTimeout, "how long one git or registry operation (a listing, a fetch) may take as a whole")
	fs.Int64Var(&o.CheckoutMaxBytes, "checkout-max-bytes", gitsource.DefaultMaxCheckoutBytes, "bytes of files one checkout of a commit or an artifact may hold; one larger is refused as it is read")
	fs.Int64Var(&o.GitMaxObjectBytes, "git-max-object-bytes", gitsource.DefaultMaxObjectBytes, "bytes one object of a git fetch (a file, a tree) may inflate to; a fetch bringing a larger one is stopped at its header, and the commit not fetched again until the branch moves")
	fs.IntVar(&o.GitMaxPackObjects, "git-max-pack-objects", gitsource.DefaultMaxPackObjects, "objects one git fetch may bring; a fetch bringing more is refused from its header, and the commit not fetched again until the branch moves")
	fs.IntVar(&o.CheckoutMaxFiles, "checkout-max-files", gitsource.DefaultMaxCheckoutFiles, "files and links one checkout of a commit or an artifact may hold; one with more is refused as it is read")
	fs.DurationVar(&o.GitStallTimeout, "git-stall-timeout", gitsource.DefaultStallTimeout, "how long a git server or registry may send nothing (connecting, answering, within a transfer) before the operation is given up; a hung server holds a poll worker this long")
	fs.IntVar(&o.WritesInFlight, "writes-in-flight", deploy.DefaultWritesInFlight, "BundleDeployment writes the hub has in flight at once, all controllers together")
	fs.DurationVar(&o.GrantPruneDelay, "grant-prune-delay", time.Minute, "how long a content grant shared by several agents waits before it drops those no longer deploying its content")
	fs.Func("allowed-chart-hosts", "comma-separated chart servers (host or host:port; * for any) the hub may download charts from on a repository's behalf; default none", func(v string) error {
		o.AllowedChartHosts = append(o.AllowedChartHosts, strings.Split(v, ",")...)
		return nil
	})
	fs.Func("allowed-provider-addresses", "comma-separated addresses analysis and notification providers may reach: CIDRs, IPs, host names, *.domain, each optionally with http:// or https://; loopback, link-local and metadata addresses only where an entry names them; default none", func(v string) error {
		o.AllowedProviderAddresses = append(o.AllowedProviderAddresses, strings.Split(v, ",")...)
		return nil
	})
	fs.DurationVar(&o.RenderTimeout, "render-timeout", bundle.DefaultRenderTimeout, "how long one render of a bundle in the sandbox (Helm, values templates, Kustomize) may take")
	fs.Int64Var(&o.RenderMemory, "render-memory", bundle.DefaultRenderMemory, "bytes of memory the render sandbox (Helm, values templates, Kustomize) may use")
	fs.DurationVar(&o.RenderBudget, "render-budget", sources.DefaultRenderBudget, "how long the renders of one commit of a GitRepo may take together; the bundles left fail until the next poll")
	fs.BoolVar(&o.AllowCrossNamespaceRefs, "allow-cross-namespace-refs", false, "let repositories reference ConfigMaps and Secrets (helm.valuesFrom) outside their GitRepo's namespace")
	fs.Int64Var(&f.recordEvery, "poll-record-interval", 300, "seconds between writes of an unchanged poll to status.lastPollTime")
	fs.DurationVar(&o.AgentTokenTTL, "agent-token-ttl", clusters.DefaultAgentTokenTTL, "lifetime of the hub tokens agents get at registration and renew themselves (a third before expiry)")
	fs.DurationVar(&o.RegistrationTokenTTL, "registration-token-ttl", clusters.DefaultRegistrationTokenTTL, "lifetime of a ClusterRegistrationToken that sets no spec.ttl")
	fs.IntVar(&o.RegistrationBurst, "registration-burst", clusters.DefaultRegistrationBurst, "registrations one ClusterRegistrationToken may grant at once")
	fs.DurationVar(&o.RegistrationInterval, "registration-interval", clusters.DefaultRegistrationInterval, "once the burst is used, one registration per token per this interval")
	fs.StringVar(&o.Namespace, "namespace", namespace, "the hub's own namespace, where it records its version (ConfigMap flotilla-hub)")
	fs.DurationVar(&o.ContentGrace, "content-gc-grace", lifecycle.DefaultContentGrace, "how old rendered Content that no revision in a bundle's history and no deployment references must be before it is deleted")
	fs.DurationVar(&o.HeartbeatInterval, "heartbeat-interval", liveness.DefaultHeartbeatInterval, "how often agents renew their Lease, for clusters whose spec sets no heartbeatInterval (an idle fleet of N clusters costs N / interval writes a second)")
	fs.DurationVar(&o.HeartbeatDeadline, "heartbeat-deadline", liveness.DefaultHeartbeatDeadline, "how long after its agent's last renewal a cluster counts as offline, for clusters whose spec sets no heartbeatDeadline")
	fs.DurationVar(&o.UninstallTimeout, "uninstall-timeout", lifecycle.DefaultUninstallTimeout, "how long a deleted deployment waits for its agent to confirm the removal of its workloads (an offline cluster's deletion finishes after it)")
	fs.StringVar(&o.Shard, "shard", "", "the hub shard to run: it follows the GitRepos labelled flotilla.dev/shard=<shard>; empty: the default shard, which also keeps the fleet-wide view")
	fs.BoolVar(&o.LeaderElection, "leader-elect", true, "run the controllers only in the replica holding the Lease flotilla-hub in --namespace; the others stand by and forward webhooks")
	fs.DurationVar(&o.LeaseDuration, "leader-elect-lease-duration", DefaultLeaseDuration, "how long after a leader's last renewal a standby replica takes over")
	fs.DurationVar(&o.RenewDeadline, "leader-elect-renew-deadline", DefaultRenewDeadline, "how long the leader tries to renew its Lease before it stops leading")
	fs.DurationVar(&o.RetryPeriod, "leader-elect-retry-period", DefaultRetryPeriod, "how often replicas try to acquire or renew the Lease")
	fs.StringVar(&o.LeaderElectionIdentity, "leader-elect-identity", getenv(IdentityEnv), "this replica's identity in the election, unique to one live replica (its pod's name): restarted under it, or stepping back in after a lost Lease, a replica takes back at once the Lease it still holds; empty: a new one at every start (default $"+IdentityEnv+")")
	fs.StringVar(&o.Server, "agent-api-server-url", "", "the hub's API server URL as agents on other clusters reach it, given them in registration tokens; default the hub's own (an in-cluster one is refused: tokens then hold none and say why)")
	fs.StringVar(&f.agentCA, "agent-api-server-ca", "", "PEM file of the CA agents trust for --agent-api-server-url; default the CA of the hub's own connection (its kubeconfig's file or data)")
	return f
}

// Options are the options the parsed flags give, with the files they name read (the agents'
// CA). Config, Version and Clock are the caller's to set.
func (f *Flags) Options() (Options, error) {
	o := f.opts
	o.PollRecordInterval = f.recordEvery
	if f.agentCA != "" {
		ca, err := os.ReadFile(f.agentCA)
		if err != nil {
			return o, fmt.Errorf("--agent-api-server-ca: %w", err)
		}
		o.CACert = ca
	}
	return o, nil
}
