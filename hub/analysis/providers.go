package analysis

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/bundle/analysisexpr"
	"github.com/flotilla-dev/flotilla/bundle/scrub"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/endpoint"
	"github.com/flotilla-dev/flotilla/rollout"
)

// Limits of one measurement.
const (
	// DefaultTimeout bounds a measurement whose provider sets none.
	DefaultTimeout = 10 * time.Second
	// maxResponse bounds what the hub reads of a provider's answer.
	maxResponse = 1 << 20
	// resolvedFor is how long a provider's connection (its CA and credentials, read from
	// Secrets) is reused before it is read again.
	resolvedFor = 30 * time.Second
)

// take measures one check once: it resolves the provider, renders the query, asks, and
// evaluates the condition. Anything that keeps it from a verdict is inconclusive (R7.5), with
// the reason.
func (r *Runner) take(ctx context.Context, d dueEntry) (rollout.MeasurementOutcome, string, string) {
	p, err := r.resolved.get(ctx, d.owner.Namespace, d.check.Provider)
	if err != nil {
		return rollout.MeasuredInconclusive, err.Error(), "unresolved"
	}
	q, err := analysisexpr.ParseQuery(d.check.Query)
	if err != nil {
		return rollout.MeasuredInconclusive, "query " + err.Error(), p.kind
	}
	data := analysisexpr.QueryData{Bundle: d.owner.Bundle, Namespace: d.owner.Namespace, Revision: d.key.Revision, Gate: d.key.Gate, Clusters: d.clusters}
	if d.key.Cluster != "" {
		data.Cluster = analysisexpr.ClusterData{Name: d.key.Cluster, Labels: d.labels}
		if data.Cluster.Labels == nil {
			data.Cluster.Labels = map[string]string{}
		}
	}
	query, err := q.Render(data)
	if err != nil {
		return rollout.MeasuredInconclusive, err.Error(), p.kind
	}
	cond, err := analysisexpr.CompileCondition(d.check.Condition)
	if err != nil {
		return rollout.MeasuredInconclusive, "condition " + err.Error(), p.kind
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	var result any
	switch p.kind {
	case "prometheus":
		result, err = p.queryPrometheus(ctx, query)
	default:
		result, err = p.post(ctx, query, d)
	}
	if err != nil {
		return rollout.MeasuredInconclusive, err.Error(), p.kind
	}
	holds, err := cond.Holds(result)
	switch {
	case err != nil:
		return rollout.MeasuredInconclusive, fmt.Sprintf("condition %s on result %s: %v", d.check.Condition, describe(result), err), p.kind
	case !holds:
		return rollout.MeasuredFail, fmt.Sprintf("result %s: %s does not hold", describe(result), d.check.Condition), p.kind
	}
	return rollout.MeasuredPass, fmt.Sprintf("result %s", describe(result)), p.kind
}

// describe shows a result briefly.
func describe(result any) string {
	out, err := json.Marshal(result)
	if err != nil {
		return fmt.Sprint(result)
	}
	return truncate(string(out), 120)
}

// provider is a resolved AnalysisProvider: where to ask and how.
type provider struct {
	kind     string // prometheus or http
	url      string
	client   *http.Client
	header   http.Header
	timeout  time.Duration
	version  string
	resolved time.Time
	// secrets are its credentials, scrubbed from what its queries' errors say.
	secrets scrub.Secrets
}

// providers caches resolved providers per namespace and name.
type providers struct {
	c client.Reader
	// addresses is the hub's allow-list of where providers may be reached.
	addresses endpoint.AddressList
	mu        sync.Mutex
	by        map[client.ObjectKey]*provider
}

func newProviders(c client.Reader, addresses endpoint.AddressList) *providers {
	return &providers{c: c, addresses: addresses, by: map[client.ObjectKey]*provider{}}
}

// get resolves the provider name of namespace ns: it must exist there and every
// FleetRestriction of ns must allow it (R7.1).
func (ps *providers) get(ctx context.Context, ns, name string) (*provider, error) {
	var ap v1alpha1.AnalysisProvider
	key := client.ObjectKey{Namespace: ns, Name: name}
	if err := ps.c.Get(ctx, key, &ap); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("AnalysisProvider %q not found in namespace %s: the operator defines the providers checks may name", name, ns)
		}
		return nil, fmt.Errorf("failed to read AnalysisProvider %s: %w", name, err)
	}
	var restrictions v1alpha1.FleetRestrictionList
	if err := ps.c.List(ctx, &restrictions, client.InNamespace(ns)); err != nil {
		return nil, fmt.Errorf("failed to list FleetRestrictions: %w", err)
	}
	for _, fr := range restrictions.Items {
		if !fr.Spec.AllowsProvider(name) {
			return nil, fmt.Errorf("AnalysisProvider %q is not allowed by FleetRestriction %s (analysisProviders.allowed)", name, fr.Name)
		}
	}
	ps.mu.Lock()
	p := ps.by[key]
	ps.mu.Unlock()
	if p != nil && p.version == ap.ResourceVersion && time.Since(p.resolved) < resolvedFor {
		return p, nil
	}
	policy, err := endpoint.PolicyFor(ctx, ps.c, ns, ps.addresses)
	if err != nil {
		return nil, err
	}
	if p, err = ps.build(ctx, &ap, policy); err != nil {
		return nil, fmt.Errorf("AnalysisProvider %s: %w", name, err)
	}
	ps.mu.Lock()
	ps.by[key] = p
	ps.mu.Unlock()
	return p, nil
}

// build reads the provider's CA and credentials and makes its HTTP client. Redirects are not
// followed, and the address must satisfy policy: a query goes to the address the operator
// wrote and only where the operator allows.
func (ps *providers) build(ctx context.Context, ap *v1alpha1.AnalysisProvider, policy endpoint.Policy) (*provider, error) {
	p := &provider{timeout: DefaultTimeout, version: ap.ResourceVersion, resolved: time.Now(), header: http.Header{}}
	if t := ap.Spec.Timeout; t != nil && t.Duration > 0 {
		p.timeout = t.Duration
	}
	var conn v1alpha1.ProviderConnection
	switch {
	case ap.Spec.Prometheus != nil:
		p.kind, p.url, conn = "prometheus", strings.TrimSuffix(ap.Spec.Prometheus.Address, "/"), ap.Spec.Prometheus.Connection
	case ap.Spec.HTTP != nil:
		p.kind, p.url, conn = "http", ap.Spec.HTTP.URL, ap.Spec.HTTP.Connection
	default:
		return nil, errors.New("sets neither prometheus nor http")
	}
	if err := endpoint.CheckURL(p.url); err != nil {
		return nil, err
	}
	if p.kind == "prometheus" {
		// The query's path is the provider kind's: an address with a query or a fragment
		// (#) would choose another.
		if u, _ := url.Parse(p.url); u.RawQuery != "" || u.Fragment != "" || strings.Contains(p.url, "#") {
			return nil, errors.New("prometheus.address: a Prometheus server's base URL has no query or fragment")
		}
	}
	if err := policy.CheckAddress(p.url); err != nil {
		return nil, err
	}
	hc, err := endpoint.NewClient(ctx, ps.c, ap.Namespace, endpoint.Options{CA: conn.CASecretRef, Proxy: true, Allowed: policy})
	if err != nil {
		return nil, err
	}
	p.client = hc
	if ref := conn.CredentialsSecretRef; ref != nil {
		var s corev1.Secret
		if err := ps.c.Get(ctx, client.ObjectKey{Namespace: ap.Namespace, Name: ref.Name}, &s); err != nil {
			return nil, fmt.Errorf("failed to read credentials secret %s: %w", ref.Name, err)
		}
		p.secrets.Add(strings.TrimSpace(string(s.Data["token"])), string(s.Data["password"]))
		switch {
		case len(s.Data["token"]) > 0:
			p.header.Set("Authorization", "Bearer "+strings.TrimSpace(string(s.Data["token"])))
		case len(s.Data["username"]) > 0:
			req := &http.Request{Header: http.Header{}}
			req.SetBasicAuth(string(s.Data["username"]), string(s.Data["password"]))
			p.header.Set("Authorization", req.Header.Get("Authorization"))
			p.secrets.Add(strings.TrimPrefix(req.Header.Get("Authorization"), "Basic "))
		default:
			return nil, fmt.Errorf("credentials secret %s has neither a token nor a username key", ref.Name)
		}
	}
	return p, nil
}

// do sends a request to the provider and reads its JSON answer into out. Its error shows none of
// the provider's credentials (an answer may quote the request).
func (p *provider) do(req *http.Request, out any) error {
	return p.secrets.Error(p.exchange(req, out))
}

func (p *provider) exchange(req *http.Request, out any) error {
	for k, vs := range p.header {
		req.Header[k] = vs
	}
	req.Header.Set("Accept", "application/json")
	resp, err := p.client.Do(req)
	if err != nil {
		return fmt.Errorf("provider unreachable: %w", err)
	}
	defer resp.Body.Close()
	body, err := endpoint.ReadBody(resp.Body, maxResponse)
	if err != nil {
		return fmt.Errorf("reading the provider's answer: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("the provider answered %s: %s", resp.Status, truncate(strings.TrimSpace(string(body)), 200))
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("the provider's answer is not JSON: %w", err)
	}
	return nil
}

// promResponse is the part of Prometheus' /api/v1/query answer a check reads.
type promResponse struct {
	Status    string `json:"status"`
	ErrorType string `json:"errorType"`
	Error     string `json:"error"`
	Data      struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	} `json:"data"`
}

// queryPrometheus runs an instant query. Its result is the value of a scalar or of a vector's
// one sample, a list of values for several samples. No sample is no verdict: a query that
// matches nothing says nothing of the workload (write `or vector(0)` where none means good).
func (p *provider) queryPrometheus(ctx context.Context, query string) (any, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(p.url, "/")+"/api/v1/query", strings.NewReader(url.Values{"query": {query}}.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	var resp promResponse
	if err := p.do(req, &resp); err != nil {
		return nil, err
	}
	if resp.Status != "success" {
		return nil, fmt.Errorf("the query failed (%s): %s", resp.ErrorType, resp.Error)
	}
	return promValues(resp.Data.ResultType, resp.Data.Result)
}

// promValues reads a query's result as a number or a list of numbers.
func promValues(resultType string, raw json.RawMessage) (any, error) {
	switch resultType {
	case "scalar":
		var sample []any
		if err := json.Unmarshal(raw, &sample); err != nil || len(sample) != 2 {
			return nil, fmt.Errorf("unreadable scalar result %s", truncate(string(raw), 100))
		}
		return promNumber(sample[1])
	case "vector":
		var samples []struct {
			Value []any `json:"value"`
		}
		if err := json.Unmarshal(raw, &samples); err != nil {
			return nil, fmt.Errorf("unreadable vector result: %w", err)
		}
		if len(samples) == 0 {
			return nil, errors.New("the query returned no data")
		}
		values := make([]any, len(samples))
		for i, s := range samples {
			if len(s.Value) != 2 {
				return nil, errors.New("unreadable sample")
			}
			v, err := promNumber(s.Value[1])
			if err != nil {
				return nil, err
			}
			values[i] = v
		}
		if len(values) == 1 {
			return values[0], nil
		}
		return values, nil
	}
	return nil, fmt.Errorf("the query returned a %s; a check needs an instant vector or a scalar", resultType)
}

func promNumber(v any) (float64, error) {
	s, ok := v.(string)
	if !ok {
		return 0, fmt.Errorf("sample value %v is not a string", v)
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("sample value %q is not a number", s)
	}
	return f, nil
}

// httpQuery is what an HTTP provider receives for one measurement.
type httpQuery struct {
	Check     string            `json:"check"`
	Query     string            `json:"query"`
	Namespace string            `json:"namespace"`
	Bundle    string            `json:"bundle"`
	Revision  int64             `json:"revision"`
	Cluster   string            `json:"cluster,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
	Gate      string            `json:"gate,omitempty"`
	Clusters  []string          `json:"clusters,omitempty"`
}

// post asks an HTTP provider; its JSON answer is the result.
func (p *provider) post(ctx context.Context, query string, d dueEntry) (any, error) {
	body, err := json.Marshal(httpQuery{Check: d.key.Check, Query: query, Namespace: d.owner.Namespace, Bundle: d.owner.Bundle, Revision: d.key.Revision,
		Cluster: d.key.Cluster, Labels: d.labels, Gate: d.key.Gate, Clusters: d.clusters})
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	var result any
	if err := p.do(req, &result); err != nil {
		return nil, err
	}
	return result, nil
}
