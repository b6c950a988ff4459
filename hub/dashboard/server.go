package dashboard

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/hub/operate"
)

//go:embed assets
var assets embed.FS

// Options configure a dashboard server.
type Options struct {
	// Config reaches the hub's API server: the person's own kubeconfig (local mode), or the
	// dashboard's service account, which may only impersonate (proxy mode).
	Config *rest.Config
	Scheme *runtime.Scheme
	// Namespace is the fleet namespace a page opens on.
	Namespace string
	// Proxy, when set, is the in-cluster mode: every request must come through the
	// authenticating proxy, and acts as the user it asserts.
	Proxy *ProxyAuth
	// Version is this dashboard's version, compared with the hub's.
	Version string
	// PushInterval is the least time between two pushes of one page's view: changes in between
	// are coalesced into one (default 500ms).
	PushInterval time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// LoginTTL is how long after the start the local mode's login link signs in (once);
	// default DefaultLoginTTL.
	LoginTTL time.Duration
}

// DefaultLoginTTL is Options.LoginTTL's default.
const DefaultLoginTTL = 15 * time.Minute

// Server serves the dashboard.
type Server struct {
	opts       Options
	scheme     *runtime.Scheme
	key        []byte
	loginToken string
	// loginUntil ends the login link's validity; mu guards session, the secret of the one
	// session the link opened ("" until it did: the link signs in once).
	loginUntil    time.Time
	mu            sync.Mutex
	session       string
	localIdentity Identity
	viewers       *viewers
	now           func() time.Time
	pushes        atomic.Int64
}

// New prepares a server. In local mode it asks the API server who the kubeconfig's user is:
// the name the page shows and approvals record.
func New(ctx context.Context, opts Options) (*Server, error) {
	if opts.Config == nil || opts.Scheme == nil {
		return nil, errors.New("dashboard: a config and a scheme are required")
	}
	if opts.PushInterval == 0 {
		opts.PushInterval = 500 * time.Millisecond
	}
	s := &Server{opts: opts, scheme: opts.Scheme, key: randomBytes(32), loginToken: base64.RawURLEncoding.EncodeToString(randomBytes(24)), now: opts.Now}
	if s.now == nil {
		s.now = time.Now
	}
	if opts.LoginTTL <= 0 {
		opts.LoginTTL = DefaultLoginTTL
	}
	s.loginUntil = s.now().Add(opts.LoginTTL)
	s.viewers = &viewers{scheme: opts.Scheme, config: s.config, linger: 30 * time.Second, open: map[string]*viewer{}, starting: map[string]chan struct{}{}}
	if opts.Proxy == nil {
		c, err := newClient(opts.Config, opts.Scheme)
		if err != nil {
			return nil, err
		}
		user, err := operate.Whoami(ctx, c)
		if err != nil {
			return nil, fmt.Errorf("dashboard: %w", err)
		}
		s.localIdentity = Identity{User: user}
	}
	return s, nil
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return b
}

// config is the API server connection that acts as id: the kubeconfig as it is in local mode,
// impersonation in proxy mode.
func (s *Server) config(id Identity) *rest.Config {
	if s.opts.Proxy == nil {
		return s.opts.Config
	}
	return impersonating(s.opts.Config, id)
}

// LoginPath is the path of the local dashboard's login link: it carries the session token.
func (s *Server) LoginPath() string { return "/login?token=" + s.loginToken }

// Pushes counts the views pushed to pages since the start.
func (s *Server) Pushes() int64 { return s.pushes.Load() }

// Handler serves the pages, the API and the live stream.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(assets, "assets")
	files := http.FileServerFS(static)
	mux.Handle("GET /assets/", http.StripPrefix("/assets/", files))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		if _, err := s.authenticate(r); err != nil {
			s.unauthenticated(w)
			return
		}
		http.ServeFileFS(w, r, static, "index.html")
	})
	mux.HandleFunc("GET /login", s.login)
	// For the kubelet's probes, which carry no credential: it says only that the server answers.
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /api/session", s.authenticated(s.serveSession))
	mux.HandleFunc("GET /api/view", s.authenticated(s.serveView))
	mux.HandleFunc("GET /api/stream", s.authenticated(s.serveStream))
	mux.HandleFunc("/api/action", s.authenticated(s.serveAction))
	return s.secure(mux)
}

// secure sets the headers every answer carries: a content policy that runs only the
// dashboard's own scripts (no inline script, no eval, nothing from elsewhere), no framing, no
// sniffing, no referrer, no caching of the API. A local dashboard answers only to loopback
// Host names (DNS rebinding).
func (s *Server) secure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		if strings.HasPrefix(r.URL.Path, "/api/") || r.URL.Path == "/login" {
			h.Set("Cache-Control", "no-store")
		}
		if s.opts.Proxy == nil && !LoopbackHost(r.Host) {
			http.Error(w, "this dashboard answers only on a loopback address", http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (s *Server) unauthenticated(w http.ResponseWriter) {
	msg := "not signed in: open the link `flotilla dashboard` printed"
	if s.opts.Proxy != nil {
		msg = "unauthenticated: this dashboard answers only through its authenticating proxy"
	}
	http.Error(w, msg, http.StatusUnauthorized)
}

// login trades the token of the printed link for the session cookie (HttpOnly, SameSite
// Strict: no other site's page sends it) and goes to the page.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	if s.opts.Proxy != nil || !equalToken(r.URL.Query().Get("token"), s.loginToken) {
		s.unauthenticated(w)
		return
	}
	s.mu.Lock()
	used, expired := s.session != "", s.now().After(s.loginUntil)
	if !used && !expired {
		s.session = base64.RawURLEncoding.EncodeToString(randomBytes(24))
	}
	session := s.session
	s.mu.Unlock()
	if used || expired {
		http.Error(w, "this login link has been used or has expired: it signs in once, within minutes of the start; start `flotilla dashboard` again for a new one", http.StatusUnauthorized)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: s.mac("session", session), Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
	target := "/"
	if ns := r.URL.Query().Get("namespace"); ns != "" {
		target += "#/" + ns
	}
	http.Redirect(w, r, target, http.StatusSeeOther)
}

func (s *Server) authenticated(h func(http.ResponseWriter, *http.Request, Identity)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, err := s.authenticate(r)
		if err != nil {
			s.unauthenticated(w)
			return
		}
		h(w, r, id)
	}
}

// session is what a page learns first: who it acts as, its CSRF token, where it opens.
type session struct {
	Identity
	CSRF      string `json:"csrf"`
	Namespace string `json:"namespace"`
	Version   string `json:"version"`
}

func (s *Server) serveSession(w http.ResponseWriter, _ *http.Request, id Identity) {
	writeJSON(w, http.StatusOK, session{Identity: id, CSRF: s.csrfToken(id), Namespace: s.opts.Namespace, Version: s.opts.Version})
}

// parseView reads what a page asks to see from its query.
func parseView(r *http.Request) (namespace string, req viewRequest, err error) {
	q := r.URL.Query()
	namespace = q.Get("namespace")
	req = viewRequest{Kind: q.Get("view"), Name: q.Get("name"), State: Chip(q.Get("state"))}
	if p := q.Get("page"); p != "" {
		if req.Page, err = strconv.Atoi(p); err != nil {
			return "", req, fmt.Errorf("page: %w", err)
		}
	}
	switch req.Kind {
	case "fleet", "bundle", "cluster", "diff":
	default:
		return "", req, fmt.Errorf("unknown view %q", req.Kind)
	}
	if namespace == "" {
		return "", req, errors.New("namespace is required")
	}
	return namespace, req, nil
}

// render builds a view as JSON.
func (s *Server) render(ctx context.Context, v *viewer, r *http.Request, req viewRequest) ([]byte, error) {
	var view any
	var err error
	switch req.Kind {
	case "fleet":
		view, err = s.fleetView(ctx, v)
	case "bundle":
		view, err = s.bundleView(ctx, v, req)
	case "cluster":
		view, err = s.clusterView(ctx, v, req.Name)
	case "diff":
		q := r.URL.Query()
		from, _ := strconv.ParseInt(q.Get("from"), 10, 64)
		to, _ := strconv.ParseInt(q.Get("to"), 10, 64)
		view, err = s.diffView(ctx, v, req.Name, q.Get("cluster"), from, to)
	}
	if err != nil {
		return nil, err
	}
	return json.Marshal(view)
}

// viewError is a view that cannot be shown, with the API server's reason.
type viewError struct {
	Error  string `json:"error"`
	Reason string `json:"reason,omitempty"`
	Code   int32  `json:"code,omitempty"`
}

func errorOf(err error) viewError {
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		return viewError{Error: err.Error(), Reason: string(st.Status().Reason), Code: st.Status().Code}
	}
	return viewError{Error: err.Error()}
}

// serveView answers one view once (a page's first paint, the diff).
func (s *Server) serveView(w http.ResponseWriter, r *http.Request, id Identity) {
	ns, req, err := parseView(r)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, viewError{Error: err.Error()})
		return
	}
	v, release, err := s.viewers.acquire(r.Context(), id, ns)
	if err != nil {
		writeJSON(w, statusOf(err), errorOf(err))
		return
	}
	defer release()
	data, err := s.render(r.Context(), v, r, req)
	if err != nil {
		writeJSON(w, statusOf(err), errorOf(err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(data)
}

func statusOf(err error) int {
	var st apierrors.APIStatus
	if errors.As(err, &st) && st.Status().Code != 0 {
		return int(st.Status().Code)
	}
	return http.StatusInternalServerError
}

// keepAlive is how often an idle stream sends a comment, so that proxies keep it open.
const keepAlive = 20 * time.Second

// serveStream pushes a view as server-sent events: at once, then whenever a watched object
// changed, at most once per PushInterval and only when the view differs from the one sent last.
// A rollout of 10,000 clusters is a few pushes a second, not one per cluster. EventSource
// reconnects a dropped stream by itself, and the first push of the new stream is the view as
// it is then.
func (s *Server) serveStream(w http.ResponseWriter, r *http.Request, id Identity) {
	ns, req, err := parseView(r)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, viewError{Error: err.Error()})
		return
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	ctx := r.Context()
	v, release, err := s.viewers.acquire(ctx, id, ns)
	if err != nil {
		writeJSON(w, statusOf(err), errorOf(err))
		return
	}
	defer release()
	changes := v.subscribe()
	defer v.unsubscribe(changes)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, "retry: 2000\n\n")
	var last []byte
	var cost time.Duration // what the last view took to build
	push := func() bool {
		started := time.Now()
		data, err := s.render(ctx, v, r, req)
		cost = time.Since(started)
		event := "view"
		if err != nil {
			data, _ = json.Marshal(errorOf(err))
			event = "problem"
		}
		if bytes.Equal(data, last) {
			return true
		}
		last = data
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, data); err != nil {
			return false
		}
		flusher.Flush()
		s.pushes.Add(1)
		return true
	}
	if !push() {
		return
	}
	ping := time.NewTicker(keepAlive)
	defer ping.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ping.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return
			}
			flusher.Flush()
		case <-changes:
			// Let the burst this change belongs to arrive: one push for all of it. A view that
			// takes long to build (a bundle of 10,000 clusters) is pushed less often, so that a
			// page costs the server at most a fifth of a core, however large the fleet.
			select {
			case <-ctx.Done():
				return
			case <-time.After(max(s.opts.PushInterval, 4*cost)):
			}
			select {
			case <-changes:
			default:
			}
			if !push() {
				return
			}
		}
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// Serve serves on ln until ctx ends, then shuts down and stops every viewer's watches.
func (s *Server) Serve(ctx context.Context, ln net.Listener, tlsConfig *tls.Config) error {
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second, TLSConfig: tlsConfig,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	errc := make(chan error, 1)
	go func() {
		if tlsConfig != nil {
			errc <- srv.ServeTLS(ln, "", "")
		} else {
			errc <- srv.Serve(ln)
		}
	}()
	select {
	case err := <-errc:
		s.viewers.closeAll()
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := srv.Shutdown(shutdown)
	s.viewers.closeAll()
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

// Close stops every viewer's watches, as Serve does when it ends: for a server whose Handler
// is served by other means.
func (s *Server) Close() { s.viewers.closeAll() }

// ProxyTLS is the TLS configuration of the in-cluster mode: the server's certificate, and
// client certificates verified against the proxy's CA when given (a request without one is
// answered 401 by the handler, so that the reason is readable).
func ProxyTLS(cert tls.Certificate, proxy *ProxyAuth) *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: proxy.ClientCA, MinVersion: tls.VersionTLS12}
}

func newClient(cfg *rest.Config, scheme *runtime.Scheme) (client.Client, error) {
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("failed to connect to the hub: %w", err)
	}
	return c, nil
}
