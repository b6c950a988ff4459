package bundle

import (
	"fmt"
	"io/fs"
	"path"
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
	mem     filesys.FileSystem
	escaped map[string]error
}

// memFS copies the checkout into memory and checks every kustomization in it (checkKustomization).
func (c *Checkout) memFS() (*kustomizeFS, error) {
	k := &kustomizeFS{mem: filesys.MakeFsInMemory(), escaped: map[string]error{}}
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
		if total += int64(len(data)); total > maxCheckoutSize {
			return fmt.Errorf("the checkout is larger than %d MiB", maxCheckoutSize>>20)
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
		return k.checkKustomization(strings.TrimPrefix(p, "/"))
	})
	if err != nil {
		return nil, err
	}
	return k, nil
}

// checkKustomization refuses a kustomization that would make Kustomize read anything but the
// repository's own files: every path it names must be a file or directory of the checkout.
// Kustomize fetches URLs given as resources, generator files and envs, patches and more over
// the network, and clones git URLs; checking each field against the checkout, rather than
// each field against a list of remote forms, leaves no form unchecked. Helm inflation is
// refused as well: it would run or download charts outside the renderer's control.
func (k *kustomizeFS) checkKustomization(file string) error {
	data, err := k.mem.ReadFile("/" + file)
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
		{"generators", kust.Generators, true},
		{"transformers", kust.Transformers, true},
		{"validators", kust.Validators, true},
	} {
		if err := checkAll(l.field, l.refs, l.inline); err != nil {
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

// renderKustomize builds the kustomization in dir (relative to the root) on the in-memory copy.
func renderKustomize(k *kustomizeFS, dir string) ([]Object, error) {
	kz := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	res, err := kz.Run(k.mem, "/"+dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	data, err := res.AsYaml()
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	return parseObjects(dir+" (kustomize output)", data)
}
