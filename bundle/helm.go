package bundle

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
	"text/template"

	"github.com/Masterminds/sprig/v3"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/ignore"
	kubefake "helm.sh/helm/v3/pkg/kube/fake"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/storage"
	"helm.sh/helm/v3/pkg/storage/driver"
	k8syaml "sigs.k8s.io/yaml"
)

// ValuesResolver reads Helm values kept in ConfigMaps and Secrets on the hub (valuesFrom).
type ValuesResolver interface {
	Values(ctx context.Context, ref ValuesFrom, namespace string) (map[string]any, error)
}

// DefaultKubeVersion is the Kubernetes version charts see in .Capabilities when the target's
// is unknown.
const DefaultKubeVersion = "v1.37.0"

// loadChart finds the chart a bundle's helm options name: a path in the repository (default:
// the bundle directory), a chart of a Helm repository, an oci:// reference, or a chart
// archive's http(s) URL. Missing
// dependencies are fetched from their repositories unless disableDependencyUpdate is set.
func (r *Renderer) loadChart(ctx context.Context, src *Source, h *Helm) (*chart.Chart, error) {
	var ch *chart.Chart
	var err error
	switch {
	case strings.HasPrefix(h.Chart, "oci://"):
		ch, err = r.fetcher.FromOCI(ctx, h.Chart, h.Version)
	case h.Repo != "":
		ch, err = r.fetcher.FromRepository(ctx, h.Repo, h.Chart, h.Version)
	case strings.HasPrefix(h.Chart, "http://"), strings.HasPrefix(h.Chart, "https://"):
		// A chart archive at a URL: downloaded, never looked for as a path of the repository
		// (a download that fails says why, not that a path does not exist).
		ch, err = r.fetcher.FromURL(ctx, h.Chart)
	default:
		chartRel := h.Chart
		if chartRel == "" {
			chartRel = "."
		}
		var dir string
		if dir, err = r.checkout.join(src.Dir, chartRel); err != nil {
			return nil, &FieldError{File: src.FleetFile, Field: "helm.chart", Err: err}
		}
		ch, err = r.checkout.loadChartDir(dir)
	}
	if err != nil {
		return nil, &FieldError{File: src.FleetFile, Field: "helm.chart", Err: err}
	}
	if err := r.addMissingDependencies(ctx, ch, h.DisableDependencyUpdate); err != nil {
		return nil, &FieldError{File: src.FleetFile, Field: "helm.chart", Err: err}
	}
	return ch, nil
}

// loadChartDir loads the chart in the checkout directory dir as Helm's loader would (honouring
// .helmignore), reading every file through the confined view: a chart cannot include a file
// from outside the checkout, however its links are laid out.
func (c *Checkout) loadChartDir(dir string) (*chart.Chart, error) {
	rules := ignore.Empty()
	if data, err := c.ReadFile(path.Join(dir, ignore.HelmIgnore), maxFileSize); err == nil {
		if rules, err = ignore.Parse(bytes.NewReader(data)); err != nil {
			return nil, fmt.Errorf("%s: %w", path.Join(dir, ignore.HelmIgnore), err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	rules.AddDefaults()
	var files []*loader.BufferedFile
	var total int64
	err := c.Walk(dir, func(p string, info fs.FileInfo, err error) error {
		if err != nil {
			return err
		}
		name := relSlash(dir, p)
		if name == "." {
			return nil
		}
		if rules.Ignore(name, info) {
			if info.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if info.IsDir() {
			return nil
		}
		if !info.Mode().IsRegular() {
			return fmt.Errorf("%s is not a regular file", p)
		}
		data, err := c.ReadPlain(p, maxFileSize)
		if err != nil {
			return err
		}
		if total += int64(len(data)); total > maxChartArchive {
			return fmt.Errorf("chart %s holds more than %d MiB", dir, maxChartArchive>>20)
		}
		files = append(files, &loader.BufferedFile{Name: name, Data: bytes.TrimPrefix(data, []byte("\xEF\xBB\xBF"))})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return loader.LoadFiles(files)
}

func (r *Renderer) addMissingDependencies(ctx context.Context, ch *chart.Chart, disabled bool) error {
	present := map[string]bool{}
	for _, d := range ch.Dependencies() {
		present[d.Name()] = true
	}
	for _, dep := range ch.Metadata.Dependencies {
		if present[dep.Name] {
			continue
		}
		if disabled {
			return fmt.Errorf("dependency %s is not in charts/ and disableDependencyUpdate is set", dep.Name)
		}
		var sub *chart.Chart
		var err error
		switch {
		case strings.HasPrefix(dep.Repository, "oci://"):
			sub, err = r.fetcher.FromOCI(ctx, strings.TrimSuffix(dep.Repository, "/")+"/"+dep.Name, dep.Version)
		case strings.HasPrefix(dep.Repository, "http://"), strings.HasPrefix(dep.Repository, "https://"):
			sub, err = r.fetcher.FromRepository(ctx, dep.Repository, dep.Name, dep.Version)
		default:
			return fmt.Errorf("dependency %s: repository %q is not supported: vendor it in charts/ or use an http(s) or oci:// repository", dep.Name, dep.Repository)
		}
		if err != nil {
			return fmt.Errorf("dependency %s: %w", dep.Name, err)
		}
		ch.AddDependency(sub)
	}
	return nil
}

// helmValues builds a target's values: values files, then valuesFrom, then inline values, each
// merged over the previous; `${ }` templates are evaluated with the cluster's data (Fleet's
// pre-processing) unless disablePreProcess is set; global.fleet.clusterLabels is always set.
func (r *Renderer) helmValues(ctx context.Context, src *Source, h *Helm, t Target) (map[string]any, error) {
	vals := map[string]any{}
	for i, f := range h.ValuesFiles {
		p, err := r.checkout.join(src.Dir, f)
		if err != nil {
			return nil, &FieldError{File: src.FleetFile, Field: fmt.Sprintf("helm.valuesFiles[%d]", i), Err: err}
		}
		data, err := r.checkout.ReadPlain(p, maxFileSize)
		if err != nil {
			return nil, &FieldError{File: src.FleetFile, Field: fmt.Sprintf("helm.valuesFiles[%d]", i), Err: err}
		}
		var m map[string]any
		if err := k8syaml.Unmarshal(data, &m); err != nil {
			return nil, &FieldError{File: p, Err: err}
		}
		vals = mergeValues(vals, m)
	}
	for i, vf := range h.ValuesFrom {
		if r.values == nil {
			return nil, &FieldError{File: src.FleetFile, Field: fmt.Sprintf("helm.valuesFrom[%d]", i), Message: "values from ConfigMaps and Secrets are only available on the hub"}
		}
		m, err := r.values.Values(ctx, vf, t.Namespace)
		if err != nil {
			return nil, &FieldError{File: src.FleetFile, Field: fmt.Sprintf("helm.valuesFrom[%d]", i), Err: err}
		}
		if vf.SecretKeyRef != nil {
			// Values from a Secret are as secret as the Secret: no error may show them.
			r.secrets.AddTree(m)
		}
		vals = mergeValues(vals, m)
	}
	vals = mergeValues(vals, h.Values)
	if !h.DisablePreProcess {
		var err error
		if vals, err = r.templateValues(ctx, vals, t); err != nil {
			return nil, &FieldError{File: src.FleetFile, Field: "helm.values", Err: err}
		}
	}
	labels := map[string]any{}
	for k, v := range t.Labels {
		labels[k] = v
	}
	vals = mergeValues(vals, map[string]any{"global": map[string]any{"fleet": map[string]any{"clusterLabels": labels}}})
	return vals, nil
}

// templateValues evaluates the values' templates, in the sandbox when there is one and the
// values hold any.
func (r *Renderer) templateValues(ctx context.Context, vals map[string]any, t Target) (map[string]any, error) {
	if r.sandbox == nil || !hasTemplates(vals) {
		return templateValues(vals, t)
	}
	return r.sandbox.values(ctx, vals, t)
}

// hasTemplates reports whether any string in vals holds "${".
func hasTemplates(v any) bool {
	switch v := v.(type) {
	case string:
		return strings.Contains(v, "${")
	case map[string]any:
		for k, e := range v {
			if strings.Contains(k, "${") || hasTemplates(e) {
				return true
			}
		}
	case []any:
		for _, e := range v {
			if hasTemplates(e) {
				return true
			}
		}
	}
	return false
}

// templateValues evaluates `${ .ClusterLabels.env }`-style templates in values.
func templateValues(vals map[string]any, t Target) (map[string]any, error) {
	if !hasTemplates(vals) {
		return vals, nil
	}
	data, err := k8syaml.Marshal(vals)
	if err != nil {
		return nil, err
	}
	funcs := sprig.TxtFuncMap()
	for _, unsafe := range []string{"env", "expandenv", "getHostByName"} {
		delete(funcs, unsafe)
	}
	tmpl, err := template.New("values").Delims("${", "}").Funcs(funcs).Option("missingkey=error").Parse(string(data))
	if err != nil {
		return nil, fmt.Errorf("invalid template: %w", err)
	}
	ctx := map[string]any{
		"ClusterName": t.ClusterName, "ClusterNamespace": t.Namespace,
		"ClusterLabels": t.Labels, "ClusterAnnotations": t.Annotations, "ClusterValues": t.TemplateValues,
	}
	var out bytes.Buffer
	if err := tmpl.Execute(&out, ctx); err != nil {
		return nil, fmt.Errorf("template: %w", err)
	}
	var res map[string]any
	if err := k8syaml.Unmarshal(out.Bytes(), &res); err != nil {
		return nil, fmt.Errorf("templated values are not YAML: %w", err)
	}
	return res, nil
}

// renderHelm renders a chart client-side, as `helm template` does, in the sandbox when there
// is one.
func (r *Renderer) renderHelm(ctx context.Context, ch *chart.Chart, vals map[string]any, releaseName, namespace string, h *Helm) ([]Object, error) {
	var manifest string
	var err error
	if r.sandbox != nil {
		var archive []byte
		if archive, err = packChart(ch); err == nil {
			manifest, err = r.sandbox.helm(ctx, archive, vals, releaseName, namespace, h, r.kubeVersion)
		}
	} else {
		manifest, err = helmManifest(ctx, ch, vals, releaseName, namespace, h, r.kubeVersion)
	}
	if err != nil {
		return nil, err
	}
	return parseObjects("chart "+ch.Name()+" (rendered)", []byte(manifest))
}

// helmManifest renders a chart client-side, as `helm template` does: no cluster is contacted
// and lookup returns nothing. Hooks are rendered as ordinary resources (the agent applies them
// with the rest); test hooks are left out.
func helmManifest(ctx context.Context, ch *chart.Chart, vals map[string]any, releaseName, namespace string, h *Helm, kubeVersion string) (string, error) {
	cfg := &action.Configuration{
		Releases:     storage.Init(driver.NewMemory()),
		KubeClient:   &kubefake.PrintingKubeClient{Out: io.Discard},
		Capabilities: chartutil.DefaultCapabilities,
		Log:          func(string, ...any) {},
	}
	inst := action.NewInstall(cfg)
	inst.DryRun, inst.DryRunOption, inst.ClientOnly = true, "client", true
	inst.Replace, inst.IncludeCRDs = true, true
	inst.ReleaseName, inst.Namespace = releaseName, namespace
	inst.DisableOpenAPIValidation = true
	inst.SkipSchemaValidation = h != nil && h.SkipSchemaValidation
	inst.EnableDNS = false
	if kubeVersion == "" {
		kubeVersion = DefaultKubeVersion
	}
	kv, err := chartutil.ParseKubeVersion(kubeVersion)
	if err != nil {
		return "", fmt.Errorf("invalid Kubernetes version %q: %w", kubeVersion, err)
	}
	inst.KubeVersion = kv
	rel, err := inst.RunWithContext(ctx, ch, vals)
	if err != nil {
		return "", fmt.Errorf("helm template %s: %w", ch.Name(), err)
	}
	var stream bytes.Buffer
	stream.WriteString(rel.Manifest)
	for _, hook := range rel.Hooks {
		if isTestHook(hook) {
			continue
		}
		stream.WriteString("\n---\n" + hook.Manifest)
	}
	return stream.String(), nil
}

func isTestHook(h *release.Hook) bool {
	for _, e := range h.Events {
		if e == release.HookTest {
			return true
		}
	}
	return false
}
