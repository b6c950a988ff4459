package bundle

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strings"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	k8syaml "sigs.k8s.io/yaml"
)

var kustomizationFiles = []string{"kustomization.yaml", "kustomization.yml", "Kustomization"}

// hasKustomization reports whether the checkout directory dir holds a kustomization file.
func (c *Checkout) hasKustomization(dir string) bool {
	for _, name := range kustomizationFiles {
		if c.IsFile(path.Join(dir, name)) {
			return true
		}
	}
	return false
}

// kustomizeFS is the in-memory copy of a checkout that Kustomize builds from: its regular files,
// symlinks inside the checkout copied as what they point to. Kustomize sees nothing outside
// the repository. escaped names the symlinks left out because they lead out of it.
type kustomizeFS struct {
	mem filesys.FileSystem
	// stubs are the files of mem held by name only (their bytes are read from checkout when
	// asked for): the hub's own copy, whose builds run in the sandbox's child, holds the bytes
	// of the kustomizations and decrypted SOPS files alone, so that a repository of large files
	// costs the hub their names, not their size.
	stubs    map[string]bool
	checkout *Checkout
	escaped  map[string]error
	// refused are the kustomizations checkKustomization refused, by absolute path: a build
	// that reads one fails with why, and a bundle that reads none is not held back by them.
	refused map[string]error
	// decrypted are the SOPS files of the copy, decrypted, by absolute path, and undecryptable
	// those that are not, with why: a build in the sandbox's child, which has no keys, gets
	// both laid over its own copy.
	decrypted     map[string][]byte
	undecryptable map[string]error
}

// memFS copies the checkout into memory and checks every kustomization in it
// (checkKustomization). With decrypt, SOPS files are copied decrypted (Checkout.ReadPlain); a
// file that cannot be is refused to the builds that read it. Without (the sandbox's child),
// they are copied as they are, and the parent's decrypted files are laid over them. With
// namesOnly (a parent whose builds run in the sandbox), the other files are held by name
// only, their bytes read from the checkout when a check asks for them.
func (c *Checkout) memFS(decrypt, namesOnly bool) (*kustomizeFS, error) {
	k := &kustomizeFS{mem: filesys.MakeFsInMemory(), stubs: map[string]bool{}, checkout: c, escaped: map[string]error{}, refused: map[string]error{},
		decrypted: map[string][]byte{}, undecryptable: map[string]error{}}
	var total int64
	err := c.Walk(".", func(p string, info fs.FileInfo, err error) error {
		switch {
		case escapes(err):
			k.escaped[p] = err
			return nil
		case err != nil:
			return err
		case info.IsDir() && path.Base(p) == ".git":
			return fs.SkipDir
		case !info.Mode().IsRegular():
			return nil
		}
		data, err := c.ReadFile(p, maxFileSize)
		if err != nil {
			return err
		}
		abs := path.Clean("/" + p)
		encrypted := isSOPS(data)
		if encrypted {
			// The file stays in the copy (a kustomization may name it), but what a build reads
			// of it is its plaintext, or an error saying why there is none.
			if !decrypt {
				// The sandbox's child: the parent lays the plaintext over this, or says why not.
				k.refused[abs] = &FieldError{File: p, Err: ErrEncrypted}
			} else if plain, err := c.plain(p, data); err != nil {
				// Only a build that reads it fails: other bundles of the repository render.
				k.refused[abs], k.undecryptable[abs] = err, err
			} else {
				data = plain
				k.decrypted[abs] = plain
			}
		}
		if total += int64(len(data)); total > maxCheckoutSize {
			return fmt.Errorf("the checkout is larger than %d MiB", maxCheckoutSize>>20)
		}
		// Tested on what was read, not on data, which holds a SOPS file's plaintext by now.
		if namesOnly && !isKustomizationName(path.Base(p)) && !encrypted {
			k.stubs[abs] = true
			data = nil
		}
		return k.mem.WriteFile("/"+p, data)
	})
	if err != nil {
		return nil, fmt.Errorf("failed to read the checkout: %w", err)
	}
	err = k.mem.Walk("/", func(p string, info fs.FileInfo, err error) error {
		if err != nil || info.IsDir() || !isKustomizationName(path.Base(p)) {
			return err
		}
		if err := k.checkKustomization(strings.TrimPrefix(p, "/")); err != nil {
			k.refused[path.Clean(p)] = err
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return k, nil
}

// readFile reads the copy's file at p (absolute), from the checkout when the copy holds its
// name only.
func (k *kustomizeFS) readFile(p string) ([]byte, error) {
	if k.stubs[path.Clean(p)] {
		return k.checkout.ReadFile(strings.TrimPrefix(path.Clean(p), "/"), maxFileSize)
	}
	return k.mem.ReadFile(p)
}

// checkKustomization refuses a kustomization that would make Kustomize read anything but the
// repository's own files: every path it names must be a file or directory of the checkout.
// Kustomize fetches URLs given as resources, generator files and envs, patches and more over
// the network, and clones git URLs; checking each field against the checkout, rather than
// each field against a list of remote forms, leaves no form unchecked. Helm inflation is
// refused as well: it would run or download charts outside the renderer's control.
func (k *kustomizeFS) checkKustomization(file string) error {
	data, err := k.readFile("/" + file)
	if err != nil {
		return err
	}
	var kust types.Kustomization
	if err := k8syaml.UnmarshalStrict(data, &kust); err != nil {
		return &FieldError{File: file, Err: err}
	}
	dir := path.Dir(file)
	check := func(field, ref string) error {
		if err := k.local(dir, ref); err != nil {
			return &FieldError{File: file, Field: field, Err: err}
		}
		return nil
	}
	checkAll := func(field string, refs []string, inline bool) error {
		for i, ref := range refs {
			if inline && strings.Contains(ref, "\n") {
				continue // an inline document, not a path
			}
			if err := check(fmt.Sprintf("%s[%d]", field, i), ref); err != nil {
				return err
			}
		}
		return nil
	}
	for _, l := range []struct {
		field  string
		refs   []string
		inline bool
	}{
		{"resources", kust.Resources, false},
		{"bases", kust.Bases, false},
		{"components", kust.Components, false},
		{"crds", kust.Crds, false},
		{"configurations", kust.Configurations, false},
	} {
		if err := checkAll(l.field, l.refs, l.inline); err != nil {
			return err
		}
	}
	for field, entries := range map[string][]string{"generators": kust.Generators, "transformers": kust.Transformers, "validators": kust.Validators} {
		if err := k.checkPlugins(file, field, entries); err != nil {
			return err
		}
	}
	for i, p := range kust.PatchesStrategicMerge {
		if err := checkAll(fmt.Sprintf("patchesStrategicMerge[%d]", i), []string{string(p)}, true); err != nil {
			return err
		}
	}
	for field, patches := range map[string][]types.Patch{"patches": kust.Patches, "patchesJson6902": kust.PatchesJson6902} {
		for i, p := range patches {
			if p.Path != "" {
				if err := check(fmt.Sprintf("%s[%d].path", field, i), p.Path); err != nil {
					return err
				}
			}
		}
	}
	for i, r := range kust.Replacements {
		if r.Path != "" {
			if err := check(fmt.Sprintf("replacements[%d].path", i), r.Path); err != nil {
				return err
			}
		}
	}
	if p, ok := kust.OpenAPI["path"]; ok {
		if err := check("openapi.path", p); err != nil {
			return err
		}
	}
	generators := map[string][]types.GeneratorArgs{}
	for _, g := range kust.ConfigMapGenerator {
		generators["configMapGenerator"] = append(generators["configMapGenerator"], g.GeneratorArgs)
	}
	for _, g := range kust.SecretGenerator {
		generators["secretGenerator"] = append(generators["secretGenerator"], g.GeneratorArgs)
	}
	for field, args := range generators {
		for i, g := range args {
			for j, f := range g.FileSources {
				_, p, found := strings.Cut(f, "=")
				if !found {
					p = f
				}
				if err := check(fmt.Sprintf("%s[%d].files[%d]", field, i, j), p); err != nil {
					return err
				}
			}
			if err := checkAll(fmt.Sprintf("%s[%d].envs", field, i), g.EnvSources, false); err != nil {
				return err
			}
			if g.EnvSource != "" {
				if err := check(fmt.Sprintf("%s[%d].env", field, i), g.EnvSource); err != nil {
					return err
				}
			}
		}
	}
	if len(kust.HelmCharts) > 0 || len(kust.HelmChartInflationGenerator) > 0 || kust.HelmGlobals != nil {
		return &FieldError{File: file, Field: "helmCharts", Message: "Helm chart inflation in Kustomize is not supported: give the chart in fleet.yaml's helm section"}
	}
	return nil
}

// local checks that ref, a path in the kustomization in dir, names a file or directory of the
// checkout.
func (k *kustomizeFS) local(dir, ref string) error {
	if isRemote(ref) {
		return fmt.Errorf("%q is remote: only paths inside the repository are allowed", ref)
	}
	if path.IsAbs(ref) {
		return fmt.Errorf("%q is absolute: paths must be relative to the kustomization", ref)
	}
	p := path.Join(dir, ref)
	if p == ".." || strings.HasPrefix(p, "../") {
		return fmt.Errorf("%q leaves the repository", ref)
	}
	for link, err := range k.escaped {
		if p == link || strings.HasPrefix(p, link+"/") {
			return err
		}
	}
	if !k.mem.Exists("/" + p) {
		return fmt.Errorf("%q is not in the repository", ref)
	}
	return nil
}

func isKustomizationName(name string) bool {
	for _, k := range kustomizationFiles {
		if name == k {
			return true
		}
	}
	return false
}

// isRemote reports whether r is a URL or one of the git forms Kustomize clones.
func isRemote(r string) bool {
	return strings.Contains(r, "://") || strings.HasPrefix(r, "git@") || strings.Contains(r, "?ref=") ||
		strings.HasPrefix(r, "github.com/") || strings.HasPrefix(r, "gitlab.com/") || strings.HasPrefix(r, "bitbucket.org/")
}

// kustomization is the in-memory checkout and the directory (relative to its root) of the
// kustomization a bundle builds for these options: kustomize.dir, else the bundle directory.
func (r *Renderer) kustomization(src *Source, opts Options) (*kustomizeFS, string, error) {
	mem, err := r.checkoutFS()
	if err != nil {
		return nil, "", err
	}
	dir := src.Dir
	if opts.Kustomize != nil && opts.Kustomize.Dir != "" {
		if dir, err = r.checkout.join(src.Dir, opts.Kustomize.Dir); err != nil {
			return nil, "", &FieldError{File: src.FleetFile, Field: "kustomize.dir", Err: err}
		}
	}
	return mem, dir, nil
}

// chartOutputName is the file a chart's rendered objects are given to Kustomize as.
const chartOutputName = "flotilla-chart-output.yaml"

// kustomizeChart runs the kustomization in kustomize.dir over a chart's rendered objects, as
// Fleet does with helm and kustomize in one bundle: the chart's output is one more resource of
// that kustomization, so its patches and transformers apply to the chart. The checkout's
// in-memory copy is shared by every render, so the output and the kustomization that lists it
// are laid over it for this build only.
func (r *Renderer) kustomizeChart(ctx context.Context, src *Source, kustomizeDir string, objs []Object) ([]Object, error) {
	mem, dir, err := r.kustomization(src, Options{Kustomize: &Kustomize{Dir: kustomizeDir}})
	if err != nil {
		return nil, err
	}
	kustFile := ""
	for _, name := range kustomizationFiles {
		if p := path.Join(dir, name); mem.mem.Exists("/" + p) {
			kustFile = p
			break
		}
	}
	if kustFile == "" {
		return nil, &FieldError{File: src.FleetFile, Field: "kustomize.dir", Message: fmt.Sprintf("%q has no kustomization.yaml to apply to the chart", kustomizeDir)}
	}
	if err := mem.refused["/"+kustFile]; err != nil {
		return nil, err
	}
	data, err := mem.readFile("/" + kustFile)
	if err != nil {
		return nil, err
	}
	var kust map[string]any
	if err := k8syaml.Unmarshal(data, &kust); err != nil {
		return nil, &FieldError{File: kustFile, Err: err}
	}
	if kust == nil {
		kust = map[string]any{}
	}
	output := chartOutputName
	for i := 2; mem.mem.Exists("/" + path.Join(dir, output)); i++ {
		output = fmt.Sprintf("flotilla-chart-output-%d.yaml", i)
	}
	resources, _ := kust["resources"].([]any)
	kust["resources"] = append(resources, output)
	kustData, err := k8syaml.Marshal(kust)
	if err != nil {
		return nil, fmt.Errorf("failed to write the kustomization over the chart: %w", err)
	}
	var stream []byte
	for _, o := range objs {
		doc, err := k8syaml.Marshal(map[string]any(o))
		if err != nil {
			return nil, fmt.Errorf("failed to serialise %s %s for kustomize: %w", o.Kind(), o.Name(), err)
		}
		stream = append(append(stream, "---\n"...), doc...)
	}
	out, err := r.renderKustomize(ctx, mem, dir, map[string][]byte{
		"/" + kustFile:               kustData,
		"/" + path.Join(dir, output): stream,
	})
	if err != nil {
		return nil, &FieldError{File: src.FleetFile, Field: "kustomize.dir", Err: err}
	}
	return out, nil
}

// overlayFS is a file system, read-only, with some files laid over it (added or replaced) and
// some refused: reading one of those fails with its error.
type overlayFS struct {
	filesys.FileSystem
	files   map[string][]byte // absolute, clean paths
	refused map[string]error
}

func (o *overlayFS) ReadFile(p string) ([]byte, error) {
	if data, ok := o.files[path.Clean(p)]; ok {
		return data, nil
	}
	if err, ok := o.refused[path.Clean(p)]; ok {
		return nil, err
	}
	return o.FileSystem.ReadFile(p)
}

func (o *overlayFS) Exists(p string) bool {
	_, ok := o.files[path.Clean(p)]
	return ok || o.FileSystem.Exists(p)
}

func (o *overlayFS) IsDir(p string) bool {
	if _, ok := o.files[path.Clean(p)]; ok {
		return false
	}
	return o.FileSystem.IsDir(p)
}

func (o *overlayFS) CleanedAbs(p string) (filesys.ConfirmedDir, string, error) {
	if _, ok := o.files[path.Clean(p)]; ok {
		d, f := path.Split(path.Clean(p))
		return filesys.ConfirmedDir(path.Clean(d)), f, nil
	}
	return o.FileSystem.CleanedAbs(p)
}

func (o *overlayFS) Open(p string) (filesys.File, error) {
	if _, ok := o.files[path.Clean(p)]; ok {
		return nil, fmt.Errorf("%s: opening laid-over files is not supported", p)
	}
	if err, ok := o.refused[path.Clean(p)]; ok {
		return nil, err
	}
	return o.FileSystem.Open(p)
}

func (o *overlayFS) ReadDir(p string) ([]string, error) {
	names, err := o.FileSystem.ReadDir(p)
	if err != nil {
		return nil, err
	}
	for f := range o.files {
		if d, name := path.Split(f); path.Clean(d) == path.Clean(p) && !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	return names, nil
}

func (o *overlayFS) WriteFile(p string, _ []byte) error {
	return fmt.Errorf("%s: the checkout is read-only", p)
}

// refuseStrayKustomizations fails a plain-manifest render of a bundle that holds
// kustomizations: such a bundle is meant to be built by Kustomize, from a kustomize.dir that
// only some target customizations set, and a cluster none of them selects would otherwise get
// the kustomization files applied as manifests (and a confusing "apiVersion is required").
// files are the bundle's manifest files, relative to its directory.
func refuseStrayKustomizations(src *Source, t Target, files []string) error {
	var stray []string
	for _, f := range files {
		if isKustomizationName(path.Base(f)) {
			stray = append(stray, f)
		}
	}
	if len(stray) == 0 {
		return nil
	}
	var setters []string
	for _, tc := range src.Fleet.TargetCustomizations {
		if tc.Kustomize != nil && tc.Kustomize.Dir != "" {
			setters = append(setters, fmt.Sprintf("%s (%s)", tc.Name, describeMatch(tc.TargetMatch)))
		}
	}
	msg := fmt.Sprintf("cluster %s (labels %s) gets no kustomize.dir and the bundle has no kustomization at its root, so %s would be applied as a manifest",
		t.ClusterName, describeLabels(t.Labels), strings.Join(stray, ", "))
	if len(setters) > 0 {
		msg += "; the target customizations that set kustomize.dir select: " + strings.Join(setters, ", ")
	}
	if src.FleetFile == "" {
		return &FieldError{File: path.Join(src.Dir, stray[0]), Message: "is a kustomization, but " + msg + ": label the cluster, or set kustomize.dir for it"}
	}
	return &FieldError{File: src.FleetFile, Field: "kustomize.dir", Message: msg + ": label the cluster, or set kustomize.dir for it"}
}

// renderKustomize builds the kustomization in dir (relative to the root) on the in-memory copy,
// with files laid over it, in the sandbox when there is one: a kustomization can ask for
// exponentially many objects (each overlay naming its base twice), and only a child process
// can be stopped at a deadline or a memory limit.
func (r *Renderer) renderKustomize(ctx context.Context, k *kustomizeFS, dir string, files map[string][]byte) ([]Object, error) {
	var data []byte
	var err error
	if r.sandbox != nil {
		if len(k.decrypted) > 0 {
			laid := make(map[string][]byte, len(k.decrypted)+len(files))
			maps.Copy(laid, k.decrypted)
			maps.Copy(laid, files)
			files = laid
		}
		refused := make(map[string]string, len(k.undecryptable))
		for p, err := range k.undecryptable {
			refused[p] = err.Error()
		}
		data, err = r.sandbox.kustomize(ctx, r.checkout.dir, dir, files, refused)
	} else {
		// Without a sandbox the copy holds every file's bytes (Renderer.checkoutFS).
		data, err = buildKustomize(&overlayFS{FileSystem: k.mem, refused: k.refused, files: files}, dir)
	}
	if err != nil {
		return nil, k.explain(dir, err)
	}
	return parseObjects(dir+" (kustomize output)", data)
}

// buildKustomize runs Kustomize on the kustomization in dir and returns its YAML.
func buildKustomize(fsys *overlayFS, dir string) ([]byte, error) {
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fsys, path.Join("/", dir))
	if err != nil {
		return nil, err
	}
	return res.AsYaml()
}

// explain turns a failed build of dir into its error: Kustomize reports a kustomization it
// could not read as missing, so a refused one (the build's own, or a base it names) is told by
// why it was refused. The build may have run in the sandbox: err is matched by its text.
func (k *kustomizeFS) explain(dir string, err error) error {
	var limit *LimitError
	if errors.As(err, &limit) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	for p, refusal := range k.refused {
		if d := path.Dir(p); d == path.Join("/", dir) || strings.Contains(err.Error(), "'"+d+"'") {
			return refusal
		}
	}
	return fmt.Errorf("kustomize build %s: %w", dir, err)
}
