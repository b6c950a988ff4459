package bundle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"sync"

	"github.com/flotilla-dev/flotilla/bundle/scrub"
)

// RendererOptions configure a Renderer.
type RendererOptions struct {
	// Charts fetches repository and OCI charts; default a fetcher without disk cache.
	Charts *ChartFetcher
	// Values resolves helm.valuesFrom; nil makes valuesFrom an error (as in the CLI).
	Values ValuesResolver
	// KubeVersion is what charts see as .Capabilities.KubeVersion; default DefaultKubeVersion.
	KubeVersion string
	// Sandbox runs the template engines in child processes with a deadline and memory and
	// output limits; nil runs them in this process (for a repository one trusts, as in the CLI).
	Sandbox *Sandbox
	// Decryption decrypts the repository's SOPS files; nil: a bundle that reads one fails.
	Decryption *Decryptor
	// Secrets are values no error of the renderer may show (chart credentials, say); the
	// renderer adds what it reads from secrets itself (values from a Secret, what SOPS files
	// decrypt to). Nil: the renderer keeps its own.
	Secrets *scrub.Secrets
}

// Renderer renders the bundles of one checkout (one commit) for many targets. Targets with
// equal inputs share one render: the result is cached by a hash of everything that goes into
// it. Safe for concurrent use.
type Renderer struct {
	checkout    *Checkout
	fetcher     *ChartFetcher
	values      ValuesResolver
	kubeVersion string
	sandbox     *sandboxSession
	// secrets are scrubbed from every error Render returns, with what the decryptor revealed.
	secrets *scrub.Secrets

	mu      sync.Mutex
	results map[string]*renderCall
	memFS   *kustomizeFS
	renders int
}

type renderCall struct {
	done chan struct{}
	res  *Rendered
	err  error
}

// NewRenderer prepares rendering of the checkout at root; Close releases it.
func NewRenderer(root string, opts RendererOptions) (*Renderer, error) {
	checkout, err := OpenCheckout(root)
	if err != nil {
		return nil, err
	}
	fetcher := opts.Charts
	if fetcher == nil {
		fetcher = &ChartFetcher{}
	}
	checkout.decryptor = opts.Decryption
	r := &Renderer{checkout: checkout, fetcher: fetcher, values: opts.Values, kubeVersion: opts.KubeVersion, secrets: opts.Secrets, results: map[string]*renderCall{}}
	if r.secrets == nil {
		r.secrets = &scrub.Secrets{}
	}
	if opts.Sandbox != nil {
		r.sandbox = opts.Sandbox.session()
	}
	return r, nil
}

// Close releases the checkout and ends the sandbox's child process. Renders under way may fail.
func (r *Renderer) Close() error {
	if r.sandbox != nil {
		r.sandbox.close()
	}
	return r.checkout.Close()
}

// Renders counts the renders actually performed (not served from the cache).
func (r *Renderer) Renders() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.renders
}

// Rendered is a bundle rendered for one target.
type Rendered struct {
	Bundle string
	// Objects are sorted by group, kind, namespace and name.
	Objects []Object
	// Manifest is the normalized YAML stream of Objects.
	Manifest []byte
	// ContentID is a hash of Manifest; DeploymentID adds the deployment options.
	ContentID    string
	DeploymentID string
	Options      DeploymentOptions
	// DoNotDeploy: a target customization excludes this cluster.
	DoNotDeploy bool
	// Customization names the target customization that applied, if any.
	Customization string
}

// DeploymentOptions are the resolved options that change how the agent deploys.
type DeploymentOptions struct {
	DefaultNamespace     string              `json:"defaultNamespace,omitempty"`
	TargetNamespace      string              `json:"namespace,omitempty"`
	NamespaceLabels      map[string]string   `json:"namespaceLabels,omitempty"`
	NamespaceAnnotations map[string]string   `json:"namespaceAnnotations,omitempty"`
	ServiceAccount       string              `json:"serviceAccount,omitempty"`
	CorrectDrift         bool                `json:"correctDrift,omitempty"`
	KeepResources        bool                `json:"keepResources,omitempty"`
	DeleteNamespace      bool                `json:"deleteNamespace,omitempty"`
	IgnoreConditions     []map[string]string `json:"ignoreConditions,omitempty"`
	HealthChecks         []HealthCheck       `json:"healthChecks,omitempty"`
	ComparePatches       []ComparePatch      `json:"comparePatches,omitempty"`
	TakeOwnership        bool                `json:"takeOwnership,omitempty"`
	Force                bool                `json:"force,omitempty"`
	TimeoutSeconds       int                 `json:"timeoutSeconds,omitempty"`
	WaitForJobs          bool                `json:"waitForJobs,omitempty"`
	ForceSyncGeneration  int64               `json:"forceSyncGeneration,omitempty"`
}

func deploymentOptions(o Options) DeploymentOptions {
	d := DeploymentOptions{DefaultNamespace: o.DefaultNamespace, TargetNamespace: o.Namespace, NamespaceLabels: o.NamespaceLabels,
		NamespaceAnnotations: o.NamespaceAnnotations, ServiceAccount: o.ServiceAccount, KeepResources: o.KeepResources,
		DeleteNamespace: o.DeleteNamespace, ForceSyncGeneration: o.ForceSyncGeneration}
	if o.CorrectDrift != nil {
		d.CorrectDrift = o.CorrectDrift.Enabled
	}
	if o.Ignore != nil {
		d.IgnoreConditions = o.Ignore.Conditions
	}
	d.HealthChecks = o.HealthChecks
	if o.Diff != nil {
		// A remove operation excludes its path like a JSON pointer (validateOptions refuses
		// every other operation).
		for _, p := range o.Diff.ComparePatches {
			p.JSONPointers = slices.Clone(p.JSONPointers)
			for _, op := range p.Operations {
				p.JSONPointers = append(p.JSONPointers, op.Path)
			}
			p.Operations = nil
			d.ComparePatches = append(d.ComparePatches, p)
		}
	}
	if h := o.Helm; h != nil {
		d.TakeOwnership, d.Force, d.TimeoutSeconds, d.WaitForJobs = h.TakeOwnership, h.Force, h.TimeoutSeconds, h.WaitForJobs
	}
	return d
}

// Render renders a bundle for a target. Its error shows no secret the renderer read or was
// given (Scrub).
func (r *Renderer) Render(ctx context.Context, src *Source, t Target) (*Rendered, error) {
	res, err := r.renderCached(ctx, src, t)
	return res, r.Scrub(err)
}

// Scrub is err without the values of secrets this renderer read or was given: what a caller
// adds to a render's outcome (a check of the rendered objects) passes through it too.
func (r *Renderer) Scrub(err error) error {
	return r.checkout.decryptor.Revealed().Error(r.secrets.Error(err))
}

func (r *Renderer) renderCached(ctx context.Context, src *Source, t Target) (*Rendered, error) {
	if src.Err != nil {
		return nil, src.Err
	}
	opts, skip, customization := src.Fleet.customize(t)
	if skip {
		return &Rendered{Bundle: src.Name, DoNotDeploy: true, Customization: customization}, nil
	}
	mode := r.mode(src, opts)
	if mode == modeHelm && opts.Helm == nil {
		opts.Helm = &Helm{} // a chart in the bundle directory, all defaults
	}
	// The cache key holds every input: for Helm the final values (which carry the cluster's
	// labels), otherwise only the options.
	keyInput := map[string]any{"dir": src.Dir, "mode": mode, "options": opts}
	if mode == modeHelm {
		vals, err := r.helmValues(ctx, src, opts.Helm, t)
		if err != nil {
			return nil, err
		}
		keyInput["values"] = vals
	}
	keyJSON, err := json.Marshal(keyInput)
	if err != nil {
		return nil, fmt.Errorf("failed to hash render inputs: %w", err)
	}
	key := hashID("", keyJSON)

	r.mu.Lock()
	call, ok := r.results[key]
	if !ok {
		call = &renderCall{done: make(chan struct{})}
		r.results[key] = call
		r.renders++
	}
	r.mu.Unlock()
	if !ok {
		call.res, call.err = r.render(ctx, src, t, opts, mode, keyInput["values"])
		close(call.done)
	}
	select {
	case <-call.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if call.err != nil {
		return nil, call.err
	}
	res := *call.res
	res.Customization = customization
	return &res, nil
}

type renderMode string

const (
	modeHelm      renderMode = "helm"
	modeKustomize renderMode = "kustomize"
	modeManifests renderMode = "manifests"
)

func (r *Renderer) mode(src *Source, opts Options) renderMode {
	switch {
	case opts.Helm != nil && (opts.Helm.Chart != "" || opts.Helm.Repo != ""):
		return modeHelm
	case opts.Kustomize != nil && opts.Kustomize.Dir != "":
		return modeKustomize
	case r.checkout.IsFile(path.Join(src.Dir, "Chart.yaml")):
		return modeHelm
	case r.checkout.hasKustomization(src.Dir):
		return modeKustomize
	}
	return modeManifests
}

func (r *Renderer) render(ctx context.Context, src *Source, t Target, opts Options, mode renderMode, values any) (*Rendered, error) {
	var objs []Object
	var err error
	switch mode {
	case modeHelm:
		h := opts.Helm
		ch, err := r.loadChart(ctx, src, h)
		if err != nil {
			return nil, err
		}
		release := h.ReleaseName
		if release == "" {
			release = src.Name
		}
		ns := opts.Namespace
		if ns == "" {
			ns = opts.DefaultNamespace
		}
		if ns == "" {
			ns = "default"
		}
		objs, err = r.renderHelm(ctx, ch, values.(map[string]any), release, ns, h)
		if err != nil {
			return nil, &FieldError{File: src.FleetFile, Field: "helm", Err: err}
		}
		if opts.Kustomize != nil && opts.Kustomize.Dir != "" {
			if objs, err = r.kustomizeChart(ctx, src, opts.Kustomize.Dir, objs); err != nil {
				return nil, err
			}
		}
	case modeKustomize:
		mem, dir, err := r.kustomization(src, opts)
		if err != nil {
			return nil, err
		}
		if objs, err = r.renderKustomize(ctx, mem, dir, nil); err != nil {
			return nil, stoppedIn(src, dir, err)
		}
	default:
		if objs, err = r.checkout.renderManifests(ctx, src, t, opts, valuesFileSet(&src.Fleet)); err != nil {
			return nil, err
		}
	}
	objs, manifest, err := normalize(objs, opts.DefaultNamespace, opts.Namespace)
	if err != nil {
		return nil, fmt.Errorf("bundle %s (%s): %w", src.Name, src.Dir, err)
	}
	dopts := deploymentOptions(opts)
	optsJSON, err := json.Marshal(dopts)
	if err != nil {
		return nil, fmt.Errorf("failed to hash options: %w", err)
	}
	content := hashID("s-", manifest)
	return &Rendered{Bundle: src.Name, Objects: objs, Manifest: manifest, ContentID: content, DeploymentID: hashID("d-", []byte(content), optsJSON), Options: dopts}, nil
}

// stoppedIn names where a build the sandbox stopped was declared: the bundle's kustomize
// options, or its kustomization when it has no fleet.yaml.
func stoppedIn(src *Source, dir string, err error) error {
	var limit *LimitError
	switch {
	case !errors.As(err, &limit):
		return err
	case src.FleetFile != "":
		return &FieldError{File: src.FleetFile, Field: "kustomize", Err: err}
	}
	return &FieldError{File: path.Join(dir, kustomizationFiles[0]), Err: err}
}

// checkoutFS builds the in-memory copy of the checkout once (Checkout.memFS).
func (r *Renderer) checkoutFS() (*kustomizeFS, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.memFS != nil {
		return r.memFS, nil
	}
	// With a sandbox, builds run in its child, which makes its own copy: the hub's holds names,
	// kustomizations and decrypted files only.
	mem, err := r.checkout.memFS(true, r.sandbox != nil)
	if err != nil {
		return nil, err
	}
	r.memFS = mem
	return mem, nil
}

// valuesFileSet lists every file fleet.yaml uses as Helm values: they are not manifests.
func valuesFileSet(f *FleetYAML) map[string]bool {
	set := map[string]bool{}
	add := func(h *Helm) {
		if h != nil {
			for _, v := range h.ValuesFiles {
				set[filepath.ToSlash(filepath.Clean(v))] = true
			}
		}
	}
	add(f.Helm)
	for _, tc := range f.TargetCustomizations {
		add(tc.Helm)
	}
	return set
}
