package controlplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Kind says which components a cluster runs.
type Kind string

const (
	// Bare is an API server alone: enough for the hub, which only stores objects.
	Bare Kind = "bare"
	// Workload adds kube-controller-manager, kube-scheduler and kwok with simulated nodes.
	Workload Kind = "workload"
)

// ClusterOptions configure one cluster.
type ClusterOptions struct {
	// Name is a DNS label, unique in the environment; also the etcd prefix.
	Name string
	Kind Kind
	// Nodes is the number of simulated nodes of a workload cluster. Default 1.
	Nodes int
	// External makes the cluster's API server reachable as other clusters reach a real one: at
	// ExternalHost, another loopback address, the only address its certificate names. Host
	// then stands for its in-cluster address: valid only under the in-cluster server name
	// (Config and the kubeconfig set it), so a client given Host as it is fails, as a client
	// on another cluster fails to dial an in-cluster address. The kubeconfig names its
	// certificates by file.
	External bool
	// APIServerCPU throttles the API server to this many cores of CPU time (a cgroup CPU
	// quota, as a container's CPU limit), as a slow or overloaded API server: every client
	// waits longer for every answer. Needs writable cgroups (root). Default: unlimited.
	APIServerCPU float64
}

// externalIP is the loopback address external clusters are reached at.
var externalIP = net.ParseIP("127.0.0.2")

// serviceIP is the first address of the service range: the in-cluster "kubernetes" Service.
const serviceIP = "10.96.0.1"

// Cluster is a running cluster.
type Cluster struct {
	Name string
	Kind Kind
	// KubeconfigPath is an admin kubeconfig for kubectl and tests.
	KubeconfigPath string
	// Host is the API server URL.
	Host string
	// ExternalHost is where other clusters reach the API server (ClusterOptions.External).
	ExternalHost string

	dir       string
	pki       *pki
	procs     []*process // in start order; stopped in reverse
	forwarder *forwarder
	// cpuCgroup is the cgroup that limits the API server's CPU (ClusterOptions.APIServerCPU).
	cpuCgroup string
	// cleanups run once the processes have stopped.
	cleanups []func()
	// startAPIServerAgain starts the API server as it was started first (RestartAPIServer).
	startAPIServerAgain func(ctx context.Context) error
}

// RestartAPIServer stops the cluster's API server (SIGTERM, then SIGKILL) and starts it again
// on the same address, as a control plane's API server restarts: its clients' connections
// break, its watches end, and it serves again once ready.
func (c *Cluster) RestartAPIServer(ctx context.Context) error {
	i := slices.IndexFunc(c.procs, func(p *process) bool { return p.name == "kube-apiserver" })
	if i < 0 || c.startAPIServerAgain == nil {
		return errors.New("the cluster " + c.Name + " runs no API server")
	}
	c.procs[i].stop()
	c.procs = slices.Delete(c.procs, i, i+1)
	return c.startAPIServerAgain(ctx)
}

// Config returns an admin client config for the cluster.
func (c *Cluster) Config() *rest.Config {
	return &rest.Config{
		Host: c.Host,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:     c.pki.caData,
			CertData:   c.pki.adminCert,
			KeyData:    c.pki.adminKey,
			ServerName: c.serverName(),
		},
		QPS:   200,
		Burst: 400,
	}
}

// ExternalConfig is an admin client config through ExternalHost, as from another cluster.
func (c *Cluster) ExternalConfig() *rest.Config {
	cfg := c.Config()
	cfg.Host, cfg.ServerName = c.ExternalHost, ""
	return cfg
}

// CA is the PEM of the cluster's certificate authority.
func (c *Cluster) CA() []byte { return c.pki.caData }

// ExternalConnections counts the connections made through ExternalHost.
func (c *Cluster) ExternalConnections() int64 {
	if c.forwarder == nil {
		return 0
	}
	return c.forwarder.connections.Load()
}

// serverName is the name Host is valid under: the in-cluster one for an external cluster.
func (c *Cluster) serverName() string {
	if c.ExternalHost != "" {
		return inClusterName
	}
	return ""
}

// Stop stops the cluster's components. Its data stays in etcd until the environment stops.
func (c *Cluster) Stop() {
	for i := len(c.procs) - 1; i >= 0; i-- {
		c.procs[i].stop()
	}
	c.procs = nil
	if c.forwarder != nil {
		c.forwarder.stop()
		c.forwarder = nil
	}
	for _, f := range c.cleanups {
		f()
	}
	c.cleanups = nil
}

// APIServerThrottled is how many scheduling periods the kernel throttled the API server in and
// for how long in all, since it started: its CPU limit at work (ClusterOptions.APIServerCPU).
func (c *Cluster) APIServerThrottled() (periods int64, seconds float64, err error) {
	if c.cpuCgroup == "" {
		return 0, 0, errors.New("the API server of " + c.Name + " has no CPU limit")
	}
	return cpuThrottled(c.cpuCgroup)
}

func startCluster(ctx context.Context, bins *Binaries, etcdURL, dir string, opts ClusterOptions) (*Cluster, error) {
	if opts.Kind == "" {
		opts.Kind = Bare
	}
	if opts.Nodes <= 0 {
		opts.Nodes = 1
	}
	var external net.IP
	if opts.External {
		external = externalIP
	}
	p, err := newPKI(filepath.Join(dir, "pki"), external)
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	c := &Cluster{Name: opts.Name, Kind: opts.Kind, dir: dir, pki: p, Host: "https://127.0.0.1:" + strconv.Itoa(port)}
	if opts.External {
		if c.forwarder, err = forward(external, "127.0.0.1:"+strconv.Itoa(port)); err != nil {
			return nil, err
		}
		c.ExternalHost = "https://" + c.forwarder.addr
	}
	c.KubeconfigPath = filepath.Join(dir, "kubeconfig")
	if err := c.writeKubeconfig(); err != nil {
		return nil, err
	}
	c.startAPIServerAgain = func(ctx context.Context) error {
		return c.startAPIServer(ctx, bins.APIServer, etcdURL, port, opts.APIServerCPU)
	}
	if err := c.startAPIServerAgain(ctx); err != nil {
		return c, err
	}
	if opts.Kind == Workload {
		if err := c.startWorkloadComponents(ctx, bins, opts.Nodes); err != nil {
			return c, err
		}
	}
	return c, nil
}

func (c *Cluster) writeKubeconfig() error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[c.Name] = &clientcmdapi.Cluster{Server: c.Host, CertificateAuthorityData: c.pki.caData}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: c.pki.adminCert, ClientKeyData: c.pki.adminKey}
	if c.ExternalHost != "" {
		cfg.Clusters[c.Name] = &clientcmdapi.Cluster{Server: c.Host, CertificateAuthority: c.pki.path("ca.crt"), TLSServerName: c.serverName()}
		cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificate: c.pki.path("admin.crt"), ClientKey: c.pki.path("admin.key")}
	}
	cfg.Contexts[c.Name] = &clientcmdapi.Context{Cluster: c.Name, AuthInfo: "admin"}
	cfg.CurrentContext = c.Name
	if err := os.MkdirAll(filepath.Dir(c.KubeconfigPath), 0o700); err != nil {
		return fmt.Errorf("failed to create kubeconfig dir: %w", err)
	}
	if err := clientcmd.WriteToFile(*cfg, c.KubeconfigPath); err != nil {
		return fmt.Errorf("failed to write kubeconfig: %w", err)
	}
	return nil
}

func (c *Cluster) startAPIServer(ctx context.Context, binary, etcdURL string, port int, cpu float64) error {
	p := c.pki
	proc, err := startProcess("kube-apiserver", c.dir, binary,
		"--etcd-servers="+etcdURL,
		"--etcd-prefix=/"+c.Name,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(port),
		"--cert-dir="+filepath.Join(c.dir, "apiserver-certs"),
		"--tls-cert-file="+p.path("apiserver.crt"),
		"--tls-private-key-file="+p.path("apiserver.key"),
		"--client-ca-file="+p.path("ca.crt"),
		"--service-account-issuer=https://"+c.Name+".flotilla.test",
		"--service-account-key-file="+p.path("sa.pub"),
		"--service-account-signing-key-file="+p.path("sa.key"),
		"--service-cluster-ip-range=10.96.0.0/16",
		"--authorization-mode=RBAC",
		"--allow-privileged=true",
		// Several API servers share one etcd; each keeps its own endpoints under its prefix.
		"--endpoint-reconciler-type=none",
		// FLOTILLA_APISERVER_PROFILING=1 serves /debug/pprof (the scale bench profiles with it).
		"--profiling="+strconv.FormatBool(os.Getenv("FLOTILLA_APISERVER_PROFILING") != ""),
	)
	if err != nil {
		return err
	}
	c.procs = append(c.procs, proc)
	if cpu > 0 {
		c.cpuCgroup = fmt.Sprintf("flotilla-%s-apiserver-%d", c.Name, proc.cmd.Process.Pid)
		remove, err := limitCPU(proc.cmd.Process.Pid, c.cpuCgroup, cpu)
		if err != nil {
			return err
		}
		c.cleanups = append(c.cleanups, remove)
	}
	client, err := c.httpClient()
	if err != nil {
		return err
	}
	return proc.waitFor(ctx, 60*time.Second, "/readyz", httpOK(client, c.Host+"/readyz"))
}

// httpClient is an admin HTTPS client for health checks.
func (c *Cluster) httpClient() (*http.Client, error) {
	cert, err := tls.X509KeyPair(c.pki.adminCert, c.pki.adminKey)
	if err != nil {
		return nil, fmt.Errorf("failed to load admin certificate: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.pki.caData)
	return &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, ServerName: c.serverName()}},
	}, nil
}
