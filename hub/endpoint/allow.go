package endpoint

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// Addresses: an endpoint an object names (an analysis or notification provider) is reached only
// where the operator's allow-lists admit it: the hub's (--allowed-provider-addresses) and, when
// they set one, every FleetRestriction's of the object's namespace. An entry is a CIDR
// (10.0.0.0/8), an IP address, a host name (prometheus.monitoring.svc) or a wildcard of one
// (*.example.com), each optionally with a scheme (https://*.example.com: https only; without
// one, http and https). The address a host name resolves to is checked when the connection is
// made, so a name that resolves elsewhere later reaches nothing the lists do not admit.
//
// Loopback, link-local (the cloud metadata services at 169.254.169.254 and fd00:ec2::254 among
// them) and unspecified addresses are admitted only by an entry that names them: an IP or a CIDR
// inside their range, or the exact host name; 0.0.0.0/0 and *.example.com do not.

// AddressList is one parsed allow-list. The zero value admits nothing.
type AddressList struct {
	entries []addressEntry
	// source names the list in messages (the hub's flag, a FleetRestriction).
	source string
}

type addressEntry struct {
	scheme string       // "" for http and https
	prefix netip.Prefix // valid for a CIDR or an IP
	host   string       // a name, or "*.suffix"
}

// wildcardOf reports whether the entry is a *.suffix wildcard that host falls under.
func (e addressEntry) wildcardOf(host string) bool {
	return strings.HasPrefix(e.host, "*.") && strings.HasSuffix(host, e.host[1:])
}

// ParseAddressList parses entries; source names the list in errors and refusals.
func ParseAddressList(source string, entries []string) (AddressList, error) {
	l := AddressList{source: source}
	for i, raw := range entries {
		raw = strings.TrimSpace(raw)
		if raw == "" {
			continue
		}
		var e addressEntry
		if scheme, rest, ok := strings.Cut(raw, "://"); ok {
			e.scheme, raw = strings.ToLower(scheme), rest
			if e.scheme != "http" && e.scheme != "https" {
				return l, fmt.Errorf("%s[%d]: scheme %q: only http and https are reached", source, i, scheme)
			}
		}
		switch p, perr := netip.ParsePrefix(raw); {
		case perr == nil:
			e.prefix = p.Masked()
		default:
			if a, err := netip.ParseAddr(strings.Trim(raw, "[]")); err == nil {
				e.prefix = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
				break
			}
			name := strings.ToLower(raw)
			if !validHostPattern(name) {
				return l, fmt.Errorf("%s[%d]: %q is no CIDR, IP address, host name or *.domain", source, i, entries[i])
			}
			e.host = name
		}
		l.entries = append(l.entries, e)
	}
	return l, nil
}

// MustParseAddressList is ParseAddressList for lists written in code; it panics on an error.
func MustParseAddressList(source string, entries ...string) AddressList {
	l, err := ParseAddressList(source, entries)
	if err != nil {
		panic(err)
	}
	return l
}

func validHostPattern(name string) bool {
	name = strings.TrimPrefix(name, "*.")
	if name == "" || len(name) > 253 || strings.HasSuffix(name, ".") {
		return false
	}
	for _, label := range strings.Split(name, ".") {
		if label == "" || strings.Trim(label, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" {
			return false
		}
	}
	return true
}

// special are the ranges an entry must name to admit them.
var special = []netip.Prefix{
	netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128"),
	netip.MustParsePrefix("169.254.0.0/16"), netip.MustParsePrefix("fe80::/10"),
	netip.MustParsePrefix("fd00:ec2::254/128"),
	netip.MustParsePrefix("0.0.0.0/8"), netip.MustParsePrefix("::/128"),
}

func specialRange(a netip.Addr) (netip.Prefix, bool) {
	for _, p := range special {
		if p.Contains(a) {
			return p, true
		}
	}
	return netip.Prefix{}, false
}

// admitsName reports whether an entry admits scheme and host before any name is resolved:
// a host name matching a name entry, or any host when a CIDR entry might admit its addresses.
func (l AddressList) admitsName(scheme, host string) bool {
	host = strings.ToLower(host)
	for _, e := range l.entries {
		if e.scheme != "" && e.scheme != scheme {
			continue
		}
		if e.prefix.IsValid() || e.host == host || e.wildcardOf(host) {
			return true
		}
	}
	return false
}

// admitsAddr reports whether an entry admits connecting to ip for host.
func (l AddressList) admitsAddr(scheme, host string, ip netip.Addr) bool {
	host, ip = strings.ToLower(host), ip.Unmap()
	sr, isSpecial := specialRange(ip)
	for _, e := range l.entries {
		switch {
		case e.scheme != "" && e.scheme != scheme:
		case e.prefix.IsValid():
			if e.prefix.Contains(ip) && (!isSpecial || sr.Bits() <= e.prefix.Bits()) {
				return true
			}
		case e.host == host:
			return true // named exactly: whatever it resolves to
		case e.wildcardOf(host) && !isSpecial:
			return true
		}
	}
	return false
}

// Policy is the allow-lists an endpoint must satisfy, every one of them.
type Policy []AddressList

// PolicyFor is the policy of an endpoint of namespace ns: the hub's list and the lists of the
// namespace's FleetRestrictions that set one.
func PolicyFor(ctx context.Context, c client.Reader, ns string, hub AddressList) (Policy, error) {
	policy := Policy{hub}
	var list v1alpha1.FleetRestrictionList
	if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return nil, fmt.Errorf("failed to list the FleetRestrictions of %s: %w", ns, err)
	}
	for _, r := range list.Items {
		if r.Spec.AllowedProviderAddresses == nil {
			continue
		}
		l, err := ParseAddressList("FleetRestriction "+r.Name+" spec.allowedProviderAddresses", r.Spec.AllowedProviderAddresses)
		if err != nil {
			return nil, err
		}
		policy = append(policy, l)
	}
	return policy, nil
}

// ErrNotAllowed is what a request to an address the allow-lists do not admit fails with.
var ErrNotAllowed = errors.New("not among the addresses the operator allows")

// CheckAddress refuses an address whose scheme and host (an IP address, or a name) no list could
// admit, before anything is sent; the address a name resolves to is checked when the connection
// is made.
func (p Policy) CheckAddress(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("not a URL: %w", err)
	}
	ip, literal := netip.ParseAddr(u.Hostname())
	for _, l := range p {
		admitted := l.admitsName(u.Scheme, u.Hostname())
		if literal == nil {
			admitted = l.admitsAddr(u.Scheme, u.Hostname(), ip)
		}
		if !admitted {
			return fmt.Errorf("%s %w (%s)", u.Hostname(), ErrNotAllowed, l.source)
		}
	}
	return nil
}

func (p Policy) admitsAddr(scheme, host string, ip netip.Addr) (bool, string) {
	for _, l := range p {
		if !l.admitsAddr(scheme, host, ip) {
			return false, l.source
		}
	}
	return true, ""
}

// guardedDial connects to an address the policy admits among those host resolves to; a
// connection to the environment's proxy (the request's, named in the context) is the
// operator's and passes.
func (p Policy) guardedDial(dialer *net.Dialer) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		target, _ := ctx.Value(targetKey{}).(*url.URL)
		if target == nil {
			return nil, errors.New("endpoint: a connection without its request")
		}
		if proxy, _ := ctx.Value(proxyKey{}).(string); proxy != "" && proxy == addr {
			return dialer.DialContext(ctx, network, addr)
		}
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		if err != nil {
			return nil, err
		}
		var refused error
		for _, ip := range ips {
			if ok, list := p.admitsAddr(target.Scheme, host, ip); ok {
				return dialer.DialContext(ctx, network, net.JoinHostPort(ip.Unmap().String(), port))
			} else if refused == nil {
				refused = fmt.Errorf("%s (%s) %w (%s)", host, ip, ErrNotAllowed, list)
			}
		}
		return nil, refused
	}
}

type targetKey struct{}
type proxyKey struct{}

// guard is the transport's front: it refuses a scheme or host no list admits, and hands the
// dialer the request's target and proxy.
type guard struct {
	policy Policy
	proxy  func(*http.Request) (*url.URL, error)
	next   http.RoundTripper
}

func (g *guard) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := g.policy.CheckAddress(req.URL.String()); err != nil {
		return nil, err
	}
	ctx := context.WithValue(req.Context(), targetKey{}, req.URL)
	if g.proxy != nil {
		if pu, err := g.proxy(req); err == nil && pu != nil {
			port := pu.Port()
			if port == "" {
				port = map[string]string{"https": "443"}[pu.Scheme]
				if port == "" {
					port = "80"
				}
			}
			ctx = context.WithValue(ctx, proxyKey{}, net.JoinHostPort(pu.Hostname(), port))
		}
	}
	return g.next.RoundTrip(req.WithContext(ctx))
}
