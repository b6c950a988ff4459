package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
)

// aggregatedDiscovery asks /api and /apis for every group, version and resource at once
// (Kubernetes 1.30 and later serve it).
const aggregatedDiscovery = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"

// discoveryTimeout bounds a reading of discovery: a mapping waits on it.
const discoveryTimeout = time.Minute

// maxDiscovery bounds a discovery document: a cluster with many CRDs serves a few megabytes.
const maxDiscovery = 64 << 20

// Mapper maps kinds to resources as the cluster's aggregated discovery tells, read at the first
// mapping and again after Reset (a CRD may have appeared since).
type Mapper struct {
	http *http.Client
	base string

	mu     sync.Mutex
	mapper *meta.DefaultRESTMapper // nil: discovery not read since the last Reset
}

// NewMapper reads discovery with cfg's identity when it first maps a kind.
func NewMapper(cfg *rest.Config) (*Mapper, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("failed to make an HTTP client for %s: %w", cfg.Host, err)
	}
	u, _, err := rest.DefaultServerUrlFor(cfg)
	if err != nil {
		return nil, err
	}
	return &Mapper{http: hc, base: strings.TrimSuffix(u.String(), "/")}, nil
}

// RESTMapping maps a kind to its resource in the first of versions the cluster serves, or in its
// group's preferred version when none is given. An unknown kind is a meta.NoKindMatchError.
func (m *Mapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mapper == nil {
		ctx, cancel := context.WithTimeout(context.Background(), discoveryTimeout)
		defer cancel()
		mapper, err := m.discover(ctx)
		if err != nil {
			return nil, err
		}
		m.mapper = mapper
	}
	return m.mapper.RESTMapping(gk, versions...)
}

// Reset forgets what discovery told: the next mapping reads it again.
func (m *Mapper) Reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mapper = nil
}

// discover builds a mapper of every resource the cluster serves, each group's versions in the
// order of the server's preference.
func (m *Mapper) discover(ctx context.Context) (*meta.DefaultRESTMapper, error) {
	var groups []apidiscoveryv2.APIGroupDiscovery
	for _, path := range []string{"/api", "/apis"} {
		list, err := m.read(ctx, path)
		if err != nil {
			return nil, err
		}
		groups = append(groups, list.Items...)
	}
	var preferred []schema.GroupVersion
	for _, g := range groups {
		for _, v := range g.Versions {
			preferred = append(preferred, schema.GroupVersion{Group: g.Name, Version: v.Version})
		}
	}
	mapper := meta.NewDefaultRESTMapper(preferred)
	for _, g := range groups {
		for _, v := range g.Versions {
			for _, r := range v.Resources {
				if r.ResponseKind == nil || r.ResponseKind.Kind == "" {
					continue // served without a kind of its own: nothing applies it
				}
				scope := meta.RESTScopeRoot
				if r.Scope == apidiscoveryv2.ScopeNamespace {
					scope = meta.RESTScopeNamespace
				}
				gv := schema.GroupVersion{Group: g.Name, Version: v.Version}
				mapper.AddSpecific(gv.WithKind(r.ResponseKind.Kind), gv.WithResource(r.Resource), gv.WithResource(r.SingularResource), scope)
			}
		}
	}
	return mapper, nil
}

// read reads one aggregated discovery document.
func (m *Mapper) read(ctx context.Context, path string) (*apidiscoveryv2.APIGroupDiscoveryList, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.base+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", aggregatedDiscovery)
	resp, err := m.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("failed to read the cluster's discovery at %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxDiscovery+1))
	if err != nil {
		return nil, fmt.Errorf("failed to read the cluster's discovery at %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("the cluster's discovery at %s: %s: %s", path, resp.Status, truncate(string(body), 200))
	}
	if len(body) > maxDiscovery {
		return nil, fmt.Errorf("the cluster's discovery at %s is larger than %d MiB", path, maxDiscovery>>20)
	}
	if _, params, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); params["as"] != "APIGroupDiscoveryList" {
		return nil, fmt.Errorf("the cluster's API server does not serve aggregated discovery at %s (Kubernetes 1.30 or later does)", path)
	}
	var list apidiscoveryv2.APIGroupDiscoveryList
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, fmt.Errorf("the cluster's discovery at %s: %w", path, err)
	}
	return &list, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
