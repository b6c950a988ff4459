// Package dashboardcmd is what both binaries that serve the dashboard share: `flotilla
// dashboard` on a person's machine (local mode) and `flotilla-hub dashboard` in the cluster,
// as the hub chart runs it behind an authenticating proxy (proxy mode).
package dashboardcmd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"

	"k8s.io/client-go/rest"

	"github.com/flotilla-dev/flotilla/cmd/internal/version"
	"github.com/flotilla-dev/flotilla/hub"
	"github.com/flotilla-dev/flotilla/hub/dashboard"
	"github.com/flotilla-dev/flotilla/hub/operate"
)

// Options are the dashboard's flags.
type Options struct {
	Address string
	// The proxy mode: the CA of the proxy's client certificate, the names it may have, and the
	// dashboard's serving certificate.
	ProxyCA, ProxyNames, ProxyGroups, CertFile, KeyFile string
}

// Bind registers the flags on fs; defaultAddress is where the binary serves by default.
func (o *Options) Bind(fs *flag.FlagSet, defaultAddress string) {
	fs.StringVar(&o.Address, "address", defaultAddress, "address to serve on (loopback, unless behind a proxy)")
	fs.StringVar(&o.ProxyCA, "proxy-client-ca", "", "PEM file of the CA of the authenticating proxy's client certificate (the proxy mode)")
	fs.StringVar(&o.ProxyNames, "proxy-allowed-names", "", "comma-separated common names the proxy's certificate may have (required with --proxy-client-ca)")
	fs.StringVar(&o.ProxyGroups, "proxy-allowed-groups", "", "comma-separated groups the dashboard passes on from the proxy's group header (others are dropped; system: groups never)")
	fs.StringVar(&o.CertFile, "tls-cert-file", "", "serving certificate (the proxy mode)")
	fs.StringVar(&o.KeyFile, "tls-private-key-file", "", "serving key (the proxy mode)")
}

func badInput(format string, args ...any) error {
	return &operate.ErrInput{Err: fmt.Errorf(format, args...)}
}

// Run serves the dashboard with cfg until ctx ends: as cfg's user on loopback, or, with
// ProxyCA, behind the proxy, impersonating the users it asserts. It prints where it serves.
func (o *Options) Run(ctx context.Context, out io.Writer, cfg *rest.Config, namespace string) error {
	scheme, err := hub.Scheme()
	if err != nil {
		return err
	}
	opts := dashboard.Options{Config: cfg, Scheme: scheme, Namespace: namespace, Version: version.Version()}
	var tlsConfig *tls.Config
	if o.ProxyCA != "" {
		if opts.Proxy, tlsConfig, err = o.proxy(); err != nil {
			return err
		}
	} else if _, _, err := net.SplitHostPort(o.Address); err != nil || !dashboard.LoopbackHost(o.Address) {
		return badInput("--address %s: the dashboard acts with your credentials and serves only on a loopback address (behind a proxy, use --proxy-client-ca)", o.Address)
	}
	srv, err := dashboard.New(ctx, opts)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.Address)
	if err != nil {
		return fmt.Errorf("dashboard: %w", err)
	}
	if opts.Proxy == nil {
		fmt.Fprintf(out, "Dashboard: http://%s%s\n(as the user your kubeconfig names; Ctrl-C stops it)\n", ln.Addr(), srv.LoginPath())
	} else {
		fmt.Fprintf(out, "Dashboard: serving behind its proxy on https://%s\n", ln.Addr())
	}
	return srv.Serve(ctx, ln, tlsConfig)
}

func (o *Options) proxy() (*dashboard.ProxyAuth, *tls.Config, error) {
	pem, err := os.ReadFile(o.ProxyCA)
	if err != nil {
		return nil, nil, badInput("--proxy-client-ca: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, nil, badInput("--proxy-client-ca %s: no PEM certificate in it", o.ProxyCA)
	}
	if o.CertFile == "" || o.KeyFile == "" {
		return nil, nil, badInput("--proxy-client-ca needs --tls-cert-file and --tls-private-key-file: the proxy's certificate is checked over TLS")
	}
	cert, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
	if err != nil {
		return nil, nil, badInput("--tls-cert-file/--tls-private-key-file: %v", err)
	}
	p := &dashboard.ProxyAuth{ClientCA: pool, AllowedNames: commaList(o.ProxyNames), AllowedGroups: commaList(o.ProxyGroups)}
	if len(p.AllowedNames) == 0 {
		return nil, nil, badInput("--proxy-client-ca needs --proxy-allowed-names: the common names of the proxy's certificate (any other certificate the CA signed is no proxy)")
	}
	for _, g := range p.AllowedGroups {
		if strings.HasPrefix(g, "system:") {
			return nil, nil, badInput("--proxy-allowed-groups: %q is one of the API server's own groups, which the dashboard never impersonates", g)
		}
	}
	return p, dashboard.ProxyTLS(cert, p), nil
}

func commaList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}
