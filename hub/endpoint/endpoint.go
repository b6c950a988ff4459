// Package endpoint makes the HTTP clients with which the hub reaches the endpoints an operator
// defined in a namespace (analysis providers, notification providers): the CA its certificate
// must chain to, from a Secret of that namespace alone; redirects never followed, so a request
// goes to the address the operator wrote and nowhere else; answers read up to a bound. It
// writes nothing.
package endpoint

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// ErrRedirect is what a request to an endpoint that answers with a redirect fails with.
var ErrRedirect = errors.New("the endpoint redirects: not followed, a request goes only to the address the operator set")

// Options are how a client reaches its endpoint.
type Options struct {
	// CA names a Secret of the namespace whose ca.crt is the PEM bundle the endpoint's
	// certificate must chain to; nil: the system roots.
	CA *v1alpha1.LocalSecretReference
	// Proxy sends requests through the environment's proxy (HTTPS_PROXY); without it the hub
	// connects directly. Through a proxy, the lists check the host name the request names and
	// the proxy resolves it.
	Proxy bool
	// Allowed are the allow-lists the endpoint's address must satisfy (PolicyFor); none
	// admits nothing.
	Allowed Policy
}

// NewClient makes the client for an endpoint defined in namespace ns.
func NewClient(ctx context.Context, c client.Reader, ns string, opts Options) (*http.Client, error) {
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	if ref := opts.CA; ref != nil {
		data, err := SecretValue(ctx, c, ns, ref.Name, "ca.crt")
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(data) {
			return nil, fmt.Errorf("secret %s: ca.crt holds no PEM certificate", ref.Name)
		}
		tlsConfig.RootCAs = pool
	}
	policy := opts.Allowed
	if len(policy) == 0 {
		policy = Policy{{source: "no allow-list"}}
	}
	dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	transport := &http.Transport{TLSClientConfig: tlsConfig, MaxIdleConnsPerHost: 8, IdleConnTimeout: time.Minute,
		DialContext: policy.guardedDial(dialer)}
	g := &guard{policy: policy, next: transport}
	if opts.Proxy {
		transport.Proxy, g.proxy = http.ProxyFromEnvironment, http.ProxyFromEnvironment
	}
	return &http.Client{Transport: g, CheckRedirect: func(*http.Request, []*http.Request) error { return ErrRedirect }}, nil
}

// SecretValue reads key of Secret name in namespace ns.
func SecretValue(ctx context.Context, c client.Reader, ns, name, key string) ([]byte, error) {
	var s corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &s); err != nil {
		return nil, fmt.Errorf("failed to read secret %s: %w", name, err)
	}
	data, ok := s.Data[key]
	if !ok {
		return nil, fmt.Errorf("secret %s has no %s key", name, key)
	}
	return data, nil
}

// CheckURL accepts an absolute http or https URL with a host.
func CheckURL(raw string) error {
	if u, err := url.Parse(raw); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q is not an http(s) URL", raw)
	}
	return nil
}

// ReadBody reads at most limit bytes of an answer, and fails past them.
func ReadBody(r io.Reader, limit int64) ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(body)) > limit {
		return nil, fmt.Errorf("the answer is larger than %d bytes", limit)
	}
	return body, nil
}
