package bundle

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/Masterminds/semver/v3"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/registry"
	"helm.sh/helm/v3/pkg/repo"
	k8syaml "sigs.k8s.io/yaml"
)

// ChartAccess is how one GitRepo reaches chart servers: the credentials of its helmSecretRef
// and the CA bundle it trusts in addition to the system's roots.
type ChartAccess struct {
	Username, Password string
	// CredentialsFor admits the chart repository and registry URLs the credentials are sent
	// to (ForServer, ForURLsMatching); nil sends them to none. The URLs are the repository's
	// author's, so the operator's scope is an allow-list. Credentials always go to the chart
	// repository's own host alone, never to the hosts of the archives its index links to.
	CredentialsFor func(serverURL string) bool
	CABundle       []byte
}

// credentials returns the credentials to send to serverURL, if any.
func (a ChartAccess) credentials(serverURL string) (user, pass string, ok bool) {
	if a.Username == "" && a.Password == "" || a.CredentialsFor == nil || !a.CredentialsFor(serverURL) {
		return "", "", false
	}
	return a.Username, a.Password, true
}

// ForServer admits the URLs of one chart server exactly: the scheme and host (with its port)
// of server, such as https://charts.example.com or oci://registry.example.com. A plain http
// server is admitted only when server says http itself: the operator's explicit choice.
func ForServer(server string) (func(string) bool, error) {
	u, err := url.Parse(server)
	if err != nil || u.Host == "" || u.User != nil {
		return nil, fmt.Errorf("%q is not a chart server URL (scheme://host[:port])", redact(server))
	}
	switch u.Scheme {
	case "https", "http", "oci":
	default:
		return nil, fmt.Errorf("%q: the scheme must be https, oci or (explicitly) http", redact(server))
	}
	scheme, host := u.Scheme, strings.ToLower(u.Host)
	return func(serverURL string) bool {
		v, err := url.Parse(serverURL)
		return err == nil && v.Scheme == scheme && strings.ToLower(v.Host) == host
	}, nil
}

// ForURLsMatching admits the chart server URLs that re matches as a whole (Fleet's
// helmRepoURLRegex, anchored: a pattern that matched part of a URL admitted any host
// containing it), over https and oci only.
func ForURLsMatching(re *regexp.Regexp) func(string) bool {
	whole := regexp.MustCompile(`^(?:` + re.String() + `)$`)
	return func(serverURL string) bool {
		u, err := url.Parse(serverURL)
		return err == nil && (u.Scheme == "https" || u.Scheme == "oci") && u.User == nil && whole.MatchString(serverURL)
	}
}

// identity tells caches apart by what the server lets a client see: "" without credentials.
func (a ChartAccess) identity() string {
	if a.Username == "" && a.Password == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(fmt.Sprintf("%d:%s%d:%s", len(a.Username), a.Username, len(a.Password), a.Password)))
	return hex.EncodeToString(sum[:8])
}

// Chart download limits: a chart server is reached on a repository's behalf, so it may be slow
// or hostile.
const (
	chartDialTimeout    = 10 * time.Second
	chartHeaderTimeout  = 30 * time.Second
	chartRequestTimeout = 2 * time.Minute
	chartMaxRedirects   = 5
	defaultIndexTTL     = 5 * time.Minute
	maxCachedIndexes    = 256
)

// ChartFetcher fetches charts from Helm repositories (HTTP(S), index.yaml) and OCI registries,
// keeping archives in a cache directory by digest so each version is downloaded once, and
// indexes in memory for IndexTTL. It never runs Helm plugins: only the HTTP and OCI protocols
// are spoken, over a client with timeouts and size limits, to the hosts the operator allows.
// For gives each GitRepo its own view with its credentials and CA bundle, sharing the caches:
// what one GitRepo's credentials fetched is cached apart from what others can see.
type ChartFetcher struct {
	// CacheDir holds downloaded archives as <sha256>.tgz. Empty: no disk cache.
	CacheDir string
	// Access is the GitRepo's credentials and CA bundle.
	Access ChartAccess
	// AllowedHosts, when set, are the only chart servers (host or host:port) reached; a chart,
	// dependency or redirect elsewhere is refused; "*" allows any. Empty: any, unless Closed.
	AllowedHosts []string
	// Closed: an empty AllowedHosts allows no chart server (the hub's and the preview's
	// default: a repository reaches only the servers the operator names).
	Closed bool
	// IndexTTL is how long a repository's index.yaml is used before it is read again; default
	// 5 minutes, so new chart versions appear without a restart.
	IndexTTL time.Duration
	// PlainHTTPRegistries lets OCI references to these hosts use plain HTTP (loopback tests).
	PlainHTTPRegistries []string
	// HTTPClient replaces the client built from Access.CABundle (tests).
	HTTPClient *http.Client

	init   sync.Once
	shared *fetcherCache
	client *http.Client
}

// fetcherCache is what the fetchers made with For share: repository indexes by URL and
// credential identity (for IndexTTL), and one HTTP client per CA bundle, so that connections
// to a chart server are reused from one commit's renders to the next.
type fetcherCache struct {
	mu      sync.Mutex
	indexes map[string]cachedIndex
	clients map[string]*http.Client
}

type cachedIndex struct {
	index   *repo.IndexFile
	fetched time.Time
}

func (f *ChartFetcher) setup() {
	f.init.Do(func() {
		if f.shared == nil {
			f.shared = &fetcherCache{indexes: map[string]cachedIndex{}, clients: map[string]*http.Client{}}
		}
		if f.client = f.HTTPClient; f.client != nil {
			return
		}
		sum := sha256.Sum256(f.Access.CABundle)
		key := hex.EncodeToString(sum[:])
		f.shared.mu.Lock()
		defer f.shared.mu.Unlock()
		if f.client = f.shared.clients[key]; f.client == nil {
			f.client = f.newHTTPClient()
			f.shared.clients[key] = f.client
		}
	})
}

// For returns a fetcher that reaches chart servers with access, sharing f's caches and settings.
func (f *ChartFetcher) For(access ChartAccess) *ChartFetcher {
	f.setup()
	return &ChartFetcher{CacheDir: f.CacheDir, Access: access, AllowedHosts: f.AllowedHosts, Closed: f.Closed, IndexTTL: f.IndexTTL,
		PlainHTTPRegistries: f.PlainHTTPRegistries, HTTPClient: f.HTTPClient, shared: f.shared}
}

// newHTTPClient builds the client for chart servers: bounded in time, trusting the access's CA
// bundle beside the system roots, following a few redirects to allowed hosts only.
func (f *ChartFetcher) newHTTPClient() *http.Client {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.DialContext = (&net.Dialer{Timeout: chartDialTimeout, KeepAlive: 30 * time.Second}).DialContext
	transport.TLSHandshakeTimeout = chartDialTimeout
	transport.ResponseHeaderTimeout = chartHeaderTimeout
	transport.Proxy = http.ProxyFromEnvironment
	if len(f.Access.CABundle) > 0 {
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		pool.AppendCertsFromPEM(f.Access.CABundle)
		transport.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return &http.Client{Transport: transport, Timeout: chartRequestTimeout, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if len(via) >= chartMaxRedirects {
			return fmt.Errorf("more than %d redirects", chartMaxRedirects)
		}
		return f.allowed(req.URL)
	}}
}

// Allows refuses a chart server URL (https://…, oci://…) whose host the operator does not allow:
// what reaches a chart server by other means (an OCI chart's tags and signatures) asks first.
func (f *ChartFetcher) Allows(serverURL string) error {
	u, err := url.Parse(serverURL)
	if err != nil || u.Host == "" {
		return fmt.Errorf("%q is not a chart server URL", redact(serverURL))
	}
	return f.allowed(u)
}

// allowed refuses a chart server the operator does not allow.
func (f *ChartFetcher) allowed(u *url.URL) error {
	if len(f.AllowedHosts) == 0 && !f.Closed {
		return nil
	}
	for _, h := range f.AllowedHosts {
		if h == "*" || strings.EqualFold(h, u.Host) || strings.EqualFold(h, u.Hostname()) {
			return nil
		}
	}
	return fmt.Errorf("chart server %s is not among the hosts the operator allows (--allowed-chart-hosts)", u.Host)
}

// FromRepository fetches chart name at the newest version matching constraint ("" for the
// newest) from the repository at repoURL.
func (f *ChartFetcher) FromRepository(ctx context.Context, repoURL, name, constraint string) (*chart.Chart, error) {
	f.setup()
	index, err := f.index(ctx, repoURL, false)
	if err != nil {
		return nil, err
	}
	cv, err := index.Get(name, constraint)
	if err != nil {
		return nil, fmt.Errorf("chart %s %s not found in %s: %w", name, constraint, redact(repoURL), err)
	}
	if len(cv.URLs) == 0 {
		return nil, fmt.Errorf("chart %s %s in %s has no download URL", name, cv.Version, redact(repoURL))
	}
	chartURL, err := resolveURL(repoURL, cv.URLs[0])
	if err != nil {
		return nil, err
	}
	if data, ok := f.cached(cv.Digest); ok {
		return loader.LoadArchive(bytes.NewReader(data))
	}
	data, err := f.get(ctx, chartURL, repoURL, maxChartArchive)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(data)
	digest := hex.EncodeToString(sum[:])
	if cv.Digest != "" && !strings.EqualFold(cv.Digest, digest) {
		return nil, fmt.Errorf("chart %s %s from %s: digest %s does not match the index's %s", name, cv.Version, redact(chartURL), digest, cv.Digest)
	}
	f.store(digest, data)
	return loader.LoadArchive(bytes.NewReader(data))
}

// FromURL downloads a chart archive (.tgz) from an http(s) URL: a chart not in a repository
// index. The URL is the chart's version; what it serves is not cached.
func (f *ChartFetcher) FromURL(ctx context.Context, chartURL string) (*chart.Chart, error) {
	f.setup()
	data, err := f.get(ctx, chartURL, chartURL, maxChartArchive)
	if err != nil {
		return nil, err
	}
	ch, err := loader.LoadArchive(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("%s is not a chart archive: %w", redact(chartURL), err)
	}
	return ch, nil
}

// ChartVersion is one version of a chart as its server lists it.
type ChartVersion struct {
	Version string
	// Digest is the archive's sha256 as the repository's index gives it (hex, may be empty).
	Digest string
}

// NewestInRepository reads a Helm repository's index now, not from the cache (which it
// refreshes, so a render that follows sees the same index), and returns the newest version of
// chart name that satisfies constraint ("" for the newest release).
func (f *ChartFetcher) NewestInRepository(ctx context.Context, repoURL, name, constraint string) (ChartVersion, error) {
	f.setup()
	index, err := f.index(ctx, repoURL, true)
	if err != nil {
		return ChartVersion{}, err
	}
	cv, err := index.Get(name, constraint)
	if err != nil {
		return ChartVersion{}, fmt.Errorf("chart %s %s not found in %s: %w", name, constraint, redact(repoURL), err)
	}
	return ChartVersion{Version: cv.Version, Digest: cv.Digest}, nil
}

// index reads a repository's index.yaml, at most once per IndexTTL for each credential identity
// unless fresh.
func (f *ChartFetcher) index(ctx context.Context, repoURL string, fresh bool) (*repo.IndexFile, error) {
	key := repoURL + "\x00" + f.Access.identity()
	ttl := f.IndexTTL
	if ttl <= 0 {
		ttl = defaultIndexTTL
	}
	now := time.Now()
	f.shared.mu.Lock()
	if e, ok := f.shared.indexes[key]; ok && now.Sub(e.fetched) < ttl && !fresh {
		f.shared.mu.Unlock()
		return e.index, nil
	}
	f.shared.mu.Unlock()
	indexURL, err := resolveURL(strings.TrimSuffix(repoURL, "/")+"/", "index.yaml")
	if err != nil {
		return nil, err
	}
	data, err := f.get(ctx, indexURL, repoURL, maxIndexSize)
	if err != nil {
		return nil, err
	}
	idx := &repo.IndexFile{}
	if err := k8syaml.Unmarshal(data, idx); err != nil {
		return nil, fmt.Errorf("invalid index.yaml at %s: %w", redact(indexURL), err)
	}
	idx.SortEntries()
	f.shared.mu.Lock()
	defer f.shared.mu.Unlock()
	if len(f.shared.indexes) >= maxCachedIndexes {
		for k, e := range f.shared.indexes {
			if now.Sub(e.fetched) >= ttl || len(f.shared.indexes) >= maxCachedIndexes {
				delete(f.shared.indexes, k)
			}
		}
	}
	f.shared.indexes[key] = cachedIndex{index: idx, fetched: now}
	return idx, nil
}

// get downloads a URL, sending credentials only to the repository's own host.
func (f *ChartFetcher) get(ctx context.Context, target, repoURL string, limit int64) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return nil, fmt.Errorf("invalid URL %s: %w", redact(target), err)
	}
	if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
		return nil, fmt.Errorf("%s: only http and https chart repositories are supported", redact(target))
	}
	if err := f.allowed(req.URL); err != nil {
		return nil, err
	}
	if sameHost(target, repoURL) {
		if user, pass, ok := f.Access.credentials(repoURL); ok {
			req.SetBasicAuth(user, pass)
		}
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("failed to fetch %s: %w", redact(target), err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return nil, fmt.Errorf("failed to fetch %s: authentication failed (%s)", redact(target), resp.Status)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("failed to fetch %s: %s", redact(target), resp.Status)
	}
	return readAllLimited(resp.Body, limit, redact(target))
}

// archiveFile is where an archive of digest is cached: archives fetched with credentials are
// kept apart by credential identity, so that a GitRepo cannot name a digest to read a chart
// another GitRepo's credentials fetched.
func (f *ChartFetcher) archiveFile(digest string) string {
	name := strings.ToLower(digest)
	if id := f.Access.identity(); id != "" {
		name += "-" + id
	}
	return filepath.Join(f.CacheDir, name+".tgz")
}

func (f *ChartFetcher) cached(digest string) ([]byte, bool) {
	if f.CacheDir == "" || digest == "" {
		return nil, false
	}
	data, err := os.ReadFile(f.archiveFile(digest))
	if err != nil {
		return nil, false
	}
	sum := sha256.Sum256(data)
	return data, strings.EqualFold(hex.EncodeToString(sum[:]), digest)
}

func (f *ChartFetcher) store(digest string, data []byte) {
	if f.CacheDir == "" {
		return
	}
	if err := os.MkdirAll(f.CacheDir, 0o755); err != nil {
		return // the cache is an optimisation: a failure only costs a download next time
	}
	tmp, err := os.CreateTemp(f.CacheDir, "chart-*")
	if err != nil {
		return
	}
	_, werr := tmp.Write(data)
	cerr := tmp.Close()
	if werr != nil || cerr != nil {
		_ = os.Remove(tmp.Name())
		return
	}
	_ = os.Rename(tmp.Name(), f.archiveFile(digest))
}

// FromOCI pulls an oci:// chart at the newest tag matching constraint.
func (f *ChartFetcher) FromOCI(ctx context.Context, ref, constraint string) (*chart.Chart, error) {
	f.setup()
	host := strings.SplitN(strings.TrimPrefix(ref, "oci://"), "/", 2)[0]
	if err := f.allowed(&url.URL{Host: host}); err != nil {
		return nil, err
	}
	opts := []registry.ClientOption{registry.ClientOptHTTPClient(f.client)}
	for _, h := range f.PlainHTTPRegistries {
		if h == host {
			opts = append(opts, registry.ClientOptPlainHTTP())
		}
	}
	if user, pass, ok := f.Access.credentials(ref); ok {
		opts = append(opts, registry.ClientOptBasicAuth(user, pass))
	}
	client, err := registry.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("failed to create registry client: %w", err)
	}
	name := strings.TrimPrefix(ref, "oci://")
	version := constraint
	if tag, digest, pinned := strings.Cut(constraint, "@"); pinned {
		// tag@sha256:…: the manifest of that digest, whatever the tag names now (a HelmOp pins
		// the version it verified).
		if !ociManifestDigest.MatchString(digest) {
			return nil, fmt.Errorf("%s: version %q: a pin is tag@sha256:<64 hex digits>", ref, constraint)
		}
		return f.pullOCI(client, ref, name+"@"+digest, tag)
	}
	if _, err := semver.StrictNewVersion(strings.TrimPrefix(constraint, "v")); err != nil {
		tags, err := client.Tags(name)
		if err != nil {
			return nil, fmt.Errorf("failed to list tags of %s: %w", ref, err)
		}
		if version, err = newestMatching(tags, constraint); err != nil {
			return nil, fmt.Errorf("%s: %w", ref, err)
		}
	}
	return f.pullOCI(client, ref, name+":"+version, version)
}

var ociManifestDigest = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// pullOCI pulls the chart of pull (name:tag or name@digest); version names it in errors.
func (f *ChartFetcher) pullOCI(client *registry.Client, ref, pull, version string) (*chart.Chart, error) {
	res, err := client.Pull(pull, registry.PullOptWithChart(true))
	if err != nil {
		return nil, fmt.Errorf("failed to pull %s:%s: %w", ref, version, err)
	}
	if int64(len(res.Chart.Data)) > maxChartArchive {
		return nil, fmt.Errorf("chart %s:%s is larger than %d MiB", ref, version, maxChartArchive>>20)
	}
	return loader.LoadArchive(bytes.NewReader(res.Chart.Data))
}

// newestMatching picks the highest semantic version among tags that satisfies constraint
// (any version when the constraint is empty).
func newestMatching(tags []string, constraint string) (string, error) {
	var c *semver.Constraints
	if constraint != "" {
		var err error
		if c, err = semver.NewConstraint(constraint); err != nil {
			return "", fmt.Errorf("invalid version constraint %q: %w", constraint, err)
		}
	}
	var versions []*semver.Version
	byVersion := map[*semver.Version]string{}
	for _, t := range tags {
		v, err := semver.NewVersion(t)
		if err != nil || (c != nil && !c.Check(v)) {
			continue
		}
		versions = append(versions, v)
		byVersion[v] = t
	}
	if len(versions) == 0 {
		return "", fmt.Errorf("no version matches %q", constraint)
	}
	sort.Sort(semver.Collection(versions))
	return byVersion[versions[len(versions)-1]], nil
}

func resolveURL(base, ref string) (string, error) {
	b, err := url.Parse(base)
	if err != nil {
		return "", fmt.Errorf("invalid repository URL %s: %w", redact(base), err)
	}
	r, err := url.Parse(ref)
	if err != nil {
		return "", fmt.Errorf("invalid chart URL %q: %w", ref, err)
	}
	if !strings.HasSuffix(b.Path, "/") {
		b.Path += "/"
	}
	return b.ResolveReference(r).String(), nil
}

func sameHost(a, b string) bool {
	ua, err1 := url.Parse(a)
	ub, err2 := url.Parse(b)
	return err1 == nil && err2 == nil && ua.Host == ub.Host
}

// redact removes credentials from a URL for messages.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	u.User = nil
	return u.String()
}
