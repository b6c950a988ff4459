package hub

import (
	"time"

	"k8s.io/client-go/rest"
)

// Options configure the hub. cmd/flotilla-hub fills them from flags; tests fill them directly,
// so both run exactly the same code.
type Options struct {
	// Config reaches the hub cluster's API server.
	Config *rest.Config
	// Server is the hub API address agents use, written into registration secrets; default
	// Config.Host.
	Server string
	// CACert is the hub API's CA (PEM) for agents; default Config's CA data.
	CACert []byte
	// CacheDir holds git checkouts and chart archives.
	CacheDir string
	// WebhookAddr is where git webhooks are received (e.g. ":8080"); empty disables them.
	WebhookAddr string
	// DashboardURL is where people open the dashboard (flotilla dashboard, or its in-cluster
	// address behind a proxy): notifications link to it; empty, they carry no link.
	DashboardURL string
	// MetricsAddr serves Prometheus metrics; empty or "0" disables them.
	MetricsAddr string
	// MetricsSecure serves them over HTTPS (a self-signed certificate unless MetricsCertDir
	// holds tls.crt and tls.key) to callers the API server authenticates (TokenReview) and
	// authorizes for GET on the non-resource URL /metrics (SubjectAccessReview): the ClusterRole
	// flotilla-hub-metrics-reader. Without it, metrics are plain HTTP to anyone who reaches the
	// address: for loopback (tests, the quickstart).
	MetricsSecure bool
	// MetricsCertDir holds the metrics endpoint's tls.crt and tls.key; empty: self-signed.
	MetricsCertDir string
	// HealthAddr serves /healthz and /readyz; empty disables them.
	HealthAddr string
	// GitCacheBytes bounds the git cache under CacheDir; default gitsource.DefaultMaxCacheBytes
	// (10 GiB). Past it, the caches of the repositories used longest ago go.
	GitCacheBytes int64
	// PollWorkers bounds concurrent git polls; default gitsource.DefaultPollWorkers. One
	// fleet namespace's GitRepos hold at most half of them, and so do one server's.
	PollWorkers int
	// GitTimeout bounds one git or registry operation as a whole (default
	// gitsource.DefaultTimeout); GitStallTimeout the silence within it (default
	// gitsource.DefaultStallTimeout): a server that hangs holds a poll worker that long.
	GitTimeout, GitStallTimeout time.Duration
	// CheckoutMaxBytes and CheckoutMaxFiles bound one checkout of a commit or an artifact,
	// counted as it is read (defaults gitsource.DefaultMaxCheckoutBytes and
	// gitsource.DefaultMaxCheckoutFiles).
	CheckoutMaxBytes int64
	CheckoutMaxFiles int
	// GitMaxObjectBytes and GitMaxPackObjects bound one fetch: each object inflated, read from
	// its header as the pack arrives, and the objects of the pack (defaults
	// gitsource.DefaultMaxObjectBytes and gitsource.DefaultMaxPackObjects).
	GitMaxObjectBytes int64
	GitMaxPackObjects int
	// PollRecordInterval is how often an unchanged poll is still written to a GitRepo's
	// status.lastPollTime; default 5m. Every change of commit or condition is written at once.
	PollRecordInterval int64 // seconds
	// StatusDelay gathers a cluster's deployment changes for this long before its Cluster and
	// ClusterGroup status are written; default 5s. A change of counts alone waits for three,
	// and for its share of a hub-wide budget of such writes (see ProgressThrottle).
	StatusDelay time.Duration
	// WritesInFlight bounds the BundleDeployment writes (with their agents' Role grants) the hub
	// has in flight, all controllers together; default 8. More only queue in the API server,
	// where they hold back the agents' reports that move a rollout on.
	WritesInFlight int
	// GrantPruneDelay is how long a content grant shared by several clusters' agents waits
	// before it drops the agents that no longer deploy its content, and the grant once none
	// does; default 1m.
	GrantPruneDelay time.Duration
	// AllowCrossNamespaceRefs lets a repository's references (helm.valuesFrom) name
	// ConfigMaps and Secrets in namespaces other than its GitRepo's. Off: a repository reads
	// only its own tenant's objects.
	AllowCrossNamespaceRefs bool
	// AllowedChartHosts are the only chart servers (host or host:port; "*": any) the hub
	// downloads charts from on a repository's behalf: Helm repositories, OCI registries,
	// dependencies and redirects alike. Empty: none (charts in the repository still render).
	AllowedChartHosts []string
	// AllowedProviderAddresses are where AnalysisProviders and NotificationProviders may be
	// reached (endpoint.ParseAddressList: CIDRs, IPs, host names, *.domain, each optionally
	// with http:// or https://); a namespace's FleetRestrictions narrow it further. Empty:
	// nowhere. Loopback, link-local and metadata addresses need an entry that names them.
	AllowedProviderAddresses []string
	// RenderTimeout bounds each render of a bundle (Helm, values templates, Kustomize), which
	// runs in a child process of the hub; default 60s. RenderMemory bounds that process's memory,
	// enforced by the kernel; default 256 MiB. A render past either fails its GitRepo with a condition, and the others go on.
	RenderTimeout time.Duration
	RenderMemory  int64
	// RenderBudget bounds the rendering of one commit of a GitRepo, every bundle for every
	// cluster together; default DefaultRenderBudget. Bundles not rendered within it fail alone
	// and are rendered again at the next poll, so that a slow repository holds a poll worker
	// for its budget at most.
	RenderBudget time.Duration
	// RegistrationTokenTTL is the lifetime of ClusterRegistrationTokens that set none; default
	// 7 days.
	RegistrationTokenTTL time.Duration
	// AgentTokenTTL is the lifetime of the hub tokens agents are issued at registration and
	// renew themselves; default 7 days. Agents renew theirs when a third of it is left.
	AgentTokenTTL time.Duration
	// RegistrationBurst registrations a token may grant at once, then one per
	// RegistrationInterval; defaults 10 and 6s. Later ones wait, with a condition.
	RegistrationBurst    int
	RegistrationInterval time.Duration
	// Version is the hub's version. With Namespace, the hub's own namespace, it is recorded in
	// the ConfigMap flotilla-hub there, where `flotilla status` compares the agents' versions
	// with it. Empty Namespace: not recorded.
	Version, Namespace string
	// Clock is the time the rollout controllers decide at (soaks, timed waits, scheduled
	// starts, maintenance windows, the forced soak of R4.5); default time.Now. Tests set it to
	// simulate days (ROLLOUT.md §0), with clusters whose agents the test plays: a Clock far
	// from the wall clock would judge real agents' Leases stale.
	Clock func() time.Time
	// HeartbeatInterval is how often agents renew their Lease, HeartbeatDeadline how long after
	// the last renewal a cluster counts as offline (R1.11), for Clusters whose spec sets
	// neither; defaults 2m and 5m. An idle fleet costs N / HeartbeatInterval writes a second.
	HeartbeatInterval, HeartbeatDeadline time.Duration
	// Shard is the hub shard this hub is: it owns the GitRepos labelled flotilla.dev/shard with
	// this name. Empty: the default shard, which owns the unlabelled GitRepos and keeps the
	// fleet-wide view (clusters, agents, status, Content collection); see shard.
	Shard string
	// LeaderElection runs the hub's controllers and polls only in the replica that holds the
	// Lease flotilla-hub in Namespace; the others keep their caches warm, forward the webhooks
	// they receive to the leader (an annotation on the GitRepo), and take over within
	// LeaseDuration of the leader's loss. LeaseDuration, RenewDeadline and RetryPeriod
	// default to 15s, 10s and 2s.
	LeaderElection                            bool
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// LeaderElectionIdentity is who this replica is in the election. A replica that loses its
	// Lease (the API server stalled past RenewDeadline) returns a LeaseLostError, and its
	// process steps back in under the same identity (StepBackIn); restarted under it (its
	// pod's name: the installs pass it), it takes the Lease it still holds back at once
	// instead of waiting LeaseDuration for its own dead record. It must name one live replica
	// only. Empty: the host name and a random suffix, new at every start.
	LeaderElectionIdentity string
	// UninstallTimeout is how long a deleted BundleDeployment waits for its agent to confirm it
	// removed the workloads before it goes anyway (its Cluster then says so); default 10m.
	UninstallTimeout time.Duration
	// ContentGrace is how old Content that nothing references (no revision in a Bundle's
	// history, no BundleDeployment) must be before it is deleted; default 10m.
	ContentGrace time.Duration
}
