package controlplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
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
}

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

	dir   string
	pki   *pki
	procs []*process // in start order; stopped in reverse
}

// Config returns an admin client config for the cluster.
func (c *Cluster) Config() *rest.Config {
	return &rest.Config{
		Host: c.Host,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   c.pki.caData,
			CertData: c.pki.adminCert,
			KeyData:  c.pki.adminKey,
		},
		QPS:   200,
		Burst: 400,
	}
}

// Stop stops the cluster's components. Its data stays in etcd until the environment stops.
func (c *Cluster) Stop() {
	for i := len(c.procs) - 1; i >= 0; i-- {
		c.procs[i].stop()
	}
	c.procs = nil
}

func startCluster(ctx context.Context, bins *Binaries, etcdURL, dir string, opts ClusterOptions) (*Cluster, error) {
	if opts.Kind == "" {
		opts.Kind = Bare
	}
	if opts.Nodes <= 0 {
		opts.Nodes = 1
	}
	p, err := newPKI(filepath.Join(dir, "pki"))
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	c := &Cluster{Name: opts.Name, Kind: opts.Kind, dir: dir, pki: p, Host: "https://127.0.0.1:" + strconv.Itoa(port)}
	c.KubeconfigPath = filepath.Join(dir, "kubeconfig")
	if err := c.writeKubeconfig(); err != nil {
		return nil, err
	}
	if err := c.startAPIServer(ctx, bins.APIServer, etcdURL, port); err != nil {
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

func (c *Cluster) startAPIServer(ctx context.Context, binary, etcdURL string, port int) error {
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
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}},
	}, nil
}
