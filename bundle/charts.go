package bundle

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/Masterminds/semver/v3"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/registry"
	"helm.sh/helm/v3/pkg/repo"
	k8syaml "sigs.k8s.io/yaml"
)

// Credentials returns basic-auth credentials for a chart server, or ok=false for none.
type Credentials func(serverURL string) (username, password string, ok bool)

// ChartFetcher fetches charts from Helm repositories (HTTP(S), index.yaml) and OCI registries,
// keeping archives in a cache directory by digest so each version is downloaded once. It never
// runs Helm plugins: only the HTTP and OCI protocols are spoken.
type ChartFetcher struct {
	// CacheDir holds downloaded archives as <sha256>.tgz. Empty: no disk cache.
	CacheDir string
	// HTTPClient is used for repositories; default http.DefaultClient.
	HTTPClient  *http.Client
	Credentials Credentials
	// PlainHTTPRegistries lets OCI references to these hosts use plain HTTP (loopback tests).
	PlainHTTPRegistries []string

	mu      sync.Mutex
	indexes map[string]*repo.IndexFile
}

func (f *ChartFetcher) client() *http.Client {
	if f.HTTPClient != nil {
		return f.HTTPClient
	}
	return http.DefaultClient
}

// FromRepository fetches chart name at the newest version matching constraint ("" for the
// newest) from the repository at repoURL.
func (f *ChartFetcher) FromRepository(ctx context.Context, repoURL, name, constraint string) (*chart.Chart, error) {
	index, err := f.index(ctx, repoURL)
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

// index reads a repository's index.yaml once per fetcher.
func (f *ChartFetcher) index(ctx context.Context, repoURL string) (*repo.IndexFile, error) {
	f.mu.Lock()
	if idx, ok := f.indexes[repoURL]; ok {
		f.mu.Unlock()
		return idx, nil
	}
	f.mu.Unlock()
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
	f.mu.Lock()
	if f.indexes == nil {
		f.indexes = map[string]*repo.IndexFile{}
	}
	f.indexes[repoURL] = idx
	f.mu.Unlock()
	return idx, nil
}

// get downloads a URL, sending credentials only to the repository's own host.
func (f *ChartFetcher) get(ctx context.Context, target, repoURL string, limit int64) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return nil, fmt.Errorf("invalid URL %s: %w", redact(target), err)
	}
	if f.Credentials != nil && sameHost(target, repoURL) {
		if user, pass, ok := f.Credentials(repoURL); ok {
			req.SetBasicAuth(user, pass)
		}
	}
	resp, err := f.client().Do(req)
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

func (f *ChartFetcher) cached(digest string) ([]byte, bool) {
	if f.CacheDir == "" || digest == "" {
		return nil, false
	}
	data, err := os.ReadFile(filepath.Join(f.CacheDir, strings.ToLower(digest)+".tgz"))
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
	_ = os.Rename(tmp.Name(), filepath.Join(f.CacheDir, digest+".tgz"))
}

// FromOCI pulls an oci:// chart at the newest tag matching constraint.
func (f *ChartFetcher) FromOCI(ctx context.Context, ref, constraint string) (*chart.Chart, error) {
	host := strings.SplitN(strings.TrimPrefix(ref, "oci://"), "/", 2)[0]
	opts := []registry.ClientOption{registry.ClientOptHTTPClient(f.client())}
	for _, h := range f.PlainHTTPRegistries {
		if h == host {
			opts = append(opts, registry.ClientOptPlainHTTP())
		}
	}
	if f.Credentials != nil {
		if user, pass, ok := f.Credentials(ref); ok {
			opts = append(opts, registry.ClientOptBasicAuth(user, pass))
		}
	}
	client, err := registry.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("failed to create registry client: %w", err)
	}
	name := strings.TrimPrefix(ref, "oci://")
	version := constraint
	if _, err := semver.StrictNewVersion(strings.TrimPrefix(constraint, "v")); err != nil {
		tags, err := client.Tags(name)
		if err != nil {
			return nil, fmt.Errorf("failed to list tags of %s: %w", ref, err)
		}
		if version, err = newestMatching(tags, constraint); err != nil {
			return nil, fmt.Errorf("%s: %w", ref, err)
		}
	}
	res, err := client.Pull(name+":"+version, registry.PullOptWithChart(true))
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
