package dashboard

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"k8s.io/client-go/rest"
)

// Identity is whom a request acts as on the hub's API server.
type Identity struct {
	User   string   `json:"user"`
	Groups []string `json:"groups,omitempty"`
}

// key tells identities apart: viewers and CSRF tokens are per identity.
func (id Identity) key() string {
	groups := slices.Clone(id.Groups)
	slices.Sort(groups)
	// JSON, so that no user or group name can be read as the boundary between two others.
	key, _ := json.Marshal(Identity{User: id.User, Groups: groups})
	return string(key)
}

// ProxyAuth is the in-cluster mode: the dashboard sits behind an authenticating proxy that
// presents a client certificate signed by ClientCA with a common name in AllowedNames (required:
// any certificate the CA signed for another purpose is no proxy) and asserts the user and
// groups in UserHeader and GroupHeader, as the API server's request-header authentication does.
// The dashboard impersonates that user with the asserted groups AllowedGroups lists (others are
// dropped: the dashboard's account may impersonate only those); a `system:` user or group is
// never impersonated, whatever the lists say, and a request asserting one is refused. A request
// without the proxy's certificate is refused, whatever headers it carries.
type ProxyAuth struct {
	ClientCA      *x509.CertPool
	AllowedNames  []string
	AllowedGroups []string
	UserHeader    string // default X-Remote-User
	GroupHeader   string // default X-Remote-Group
}

var errUnauthenticated = errors.New("unauthenticated")

// systemPrefix names the API server's own identities (system:masters, system:nodes,
// system:serviceaccount:…): a person signing in through a proxy is never one of them.
const systemPrefix = "system:"

// identify returns the user a request through the proxy asserts, or errUnauthenticated when it
// did not come through the proxy or asserts a system identity.
func (p *ProxyAuth) identify(r *http.Request) (Identity, error) {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.VerifiedChains[0]) == 0 {
		return Identity{}, errUnauthenticated
	}
	// Go verified the chain against ClientCA in the handshake (VerifyClientCertIfGiven); what is
	// left is whether this certificate is the proxy's.
	leaf := r.TLS.VerifiedChains[0][0]
	if !slices.Contains(p.AllowedNames, leaf.Subject.CommonName) {
		return Identity{}, errUnauthenticated
	}
	user := strings.TrimSpace(r.Header.Get(p.userHeader()))
	if user == "" || strings.HasPrefix(user, systemPrefix) {
		return Identity{}, errUnauthenticated
	}
	var groups []string
	for _, v := range r.Header.Values(p.groupHeader()) {
		for _, g := range strings.Split(v, ",") {
			g = strings.TrimSpace(g)
			if strings.HasPrefix(g, systemPrefix) {
				return Identity{}, errUnauthenticated
			}
			if g != "" && slices.Contains(p.AllowedGroups, g) && !slices.Contains(groups, g) {
				groups = append(groups, g)
			}
		}
	}
	return Identity{User: user, Groups: groups}, nil
}

func (p *ProxyAuth) userHeader() string  { return cmpOr(p.UserHeader, "X-Remote-User") }
func (p *ProxyAuth) groupHeader() string { return cmpOr(p.GroupHeader, "X-Remote-Group") }

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// impersonating is base acting as id: the only thing the in-cluster dashboard's own service
// account may do.
func impersonating(base *rest.Config, id Identity) *rest.Config {
	cfg := rest.CopyConfig(base)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: id.User, Groups: id.Groups}
	return cfg
}

// sessionCookie carries the local dashboard's login: the link `flotilla dashboard` prints
// holds a token only the person who started it has; other users of the machine, and pages of
// other sites, reach a loopback port too. The link signs in once, within LoginTTL of the
// start: the session it opens is a secret of its own, so a link seen later (in a terminal's
// scrollback, a shell history, a browser's) opens nothing.
const sessionCookie = "flotilla_session"

// mac is the server's keyed hash, for session and CSRF tokens.
func (s *Server) mac(purpose, value string) string {
	h := hmac.New(sha256.New, s.key)
	h.Write([]byte(purpose + "\x00" + value))
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil))
}

func (s *Server) csrfToken(id Identity) string { return s.mac("csrf", id.key()) }

func equalToken(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

// authenticate says who a request acts as: in local mode the kubeconfig's user, once the
// browser holds the session cookie; in proxy mode the user the proxy asserts.
func (s *Server) authenticate(r *http.Request) (Identity, error) {
	if s.opts.Proxy != nil {
		return s.opts.Proxy.identify(r)
	}
	c, err := r.Cookie(sessionCookie)
	s.mu.Lock()
	session := s.session
	s.mu.Unlock()
	if err != nil || session == "" || !equalToken(c.Value, s.mac("session", session)) {
		return Identity{}, errUnauthenticated
	}
	return s.localIdentity, nil
}

// sameOrigin refuses a state-changing request a page of another origin could have sent: it must
// carry the CSRF token of its identity (which only a page of this origin can read) and, where
// the browser says where it comes from, come from here.
func (s *Server) sameOrigin(r *http.Request, id Identity) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" {
		return false
	}
	if origin := r.Header.Get("Origin"); origin != "" {
		u, err := url.Parse(origin)
		if err != nil || u.Host != r.Host {
			return false
		}
	}
	if !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		return false
	}
	return equalToken(r.Header.Get("X-Flotilla-CSRF"), s.csrfToken(id))
}

// LoopbackHost admits the Host names (and listen addresses) a local dashboard answers to: a
// loopback address or localhost, with or without a port. A name that resolves to 127.0.0.1
// only by an attacker's DNS (rebinding) is not one.
func LoopbackHost(host string) bool {
	h, port, err := net.SplitHostPort(host)
	if err != nil {
		h = host
	} else if strings.Trim(port, "0123456789") != "" {
		return false
	}
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(h, "[]"))
	return ip != nil && ip.IsLoopback()
}
