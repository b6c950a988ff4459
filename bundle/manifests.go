package bundle

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
)

// manifestFiles lists a plain-manifest bundle's files (relative to the bundle directory):
// YAML and JSON files below it, without nested bundles, hidden directories, overlays/, the
// fleet.yaml and files used as Helm values.
func (c *Checkout) manifestFiles(src *Source, exclude map[string]bool) ([]string, error) {
	dir := src.Dir
	nested := map[string]bool{}
	for _, n := range src.Nested {
		nested[n] = true
	}
	var files []string
	err := c.Walk(dir, func(p string, info fs.FileInfo, err error) error {
		if err != nil {
			return err
		}
		name := path.Base(p)
		if info.IsDir() {
			if p != dir && (nested[p] || strings.HasPrefix(name, ".") || (path.Dir(p) == dir && name == "overlays")) {
				return fs.SkipDir
			}
			return nil
		}
		rel := relSlash(dir, p)
		switch {
		case !info.Mode().IsRegular():
			return nil
		case rel == FleetFileName, exclude[rel], strings.HasPrefix(name, "."):
			return nil
		}
		switch strings.ToLower(path.Ext(rel)) {
		case ".yaml", ".yml", ".json":
			files = append(files, rel)
		}
		return nil
	})
	sort.Strings(files)
	return files, err
}

// renderManifests reads a plain-manifest bundle and applies its yaml overlays in order: in
// overlays/<name>/, a file <base>_patch.<ext> is a JSON merge patch for the objects of <base>.<ext>
// (matched by kind and name when the patch names them); any other file replaces the bundle's
// file of the same name or adds a new one.
func (c *Checkout) renderManifests(ctx context.Context, src *Source, t Target, opts Options, exclude map[string]bool) ([]Object, error) {
	files, err := c.manifestFiles(src, exclude)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", src.Dir, err)
	}
	if err := refuseStrayKustomizations(src, t, files); err != nil {
		return nil, err
	}
	byFile := map[string][]Object{}
	var order []string
	// Each file is bounded (maxFileSize) and parsed in linear time; a render that is no longer
	// wanted (its commit's render budget spent, the hub stopping) stops between files.
	load := func(rel, name string) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		data, err := c.ReadPlain(name, maxFileSize)
		if err != nil {
			return err
		}
		objs, err := parseObjects(name, data)
		if err != nil {
			return err
		}
		if _, seen := byFile[rel]; !seen {
			order = append(order, rel)
		}
		byFile[rel] = objs
		return nil
	}
	for _, f := range files {
		if err := load(f, path.Join(src.Dir, f)); err != nil {
			return nil, err
		}
	}
	if opts.YAML != nil {
		for i, name := range opts.YAML.Overlays {
			overlayDir, err := c.join(src.Dir, path.Join("overlays", name))
			if err != nil {
				return nil, &FieldError{File: src.FleetFile, Field: fmt.Sprintf("yaml.overlays[%d]", i), Err: err}
			}
			overlayFiles, err := c.manifestFiles(&Source{Dir: overlayDir}, nil)
			if err != nil {
				return nil, err
			}
			for _, f := range overlayFiles {
				abs := path.Join(overlayDir, f)
				ext := path.Ext(f)
				base, isPatch := strings.CutSuffix(strings.TrimSuffix(f, ext), "_patch")
				if !isPatch {
					if err := load(f, abs); err != nil {
						return nil, err
					}
					continue
				}
				if err := c.applyPatchFile(abs, byFile, base, ext); err != nil {
					return nil, err
				}
			}
		}
	}
	var out []Object
	for _, f := range order {
		out = append(out, byFile[f]...)
	}
	return out, nil
}

func (c *Checkout) applyPatchFile(file string, byFile map[string][]Object, base, ext string) error {
	target := base + ext
	if _, ok := byFile[target]; !ok {
		for _, alt := range []string{".yaml", ".yml", ".json"} {
			if _, ok := byFile[base+alt]; ok {
				target = base + alt
				break
			}
		}
	}
	objs, ok := byFile[target]
	if !ok {
		return &FieldError{File: file, Message: fmt.Sprintf("patches %s, which the bundle does not have", target)}
	}
	data, err := c.ReadPlain(file, maxFileSize)
	if err != nil {
		return err
	}
	patches, err := parsePatches(file, data)
	if err != nil {
		return err
	}
	for _, p := range patches {
		matched := false
		for i, o := range objs {
			if (p.Kind() == "" || p.Kind() == o.Kind()) && (p.Name() == "" || p.Name() == o.Name()) {
				objs[i] = Object(mergePatch(map[string]any(o), map[string]any(p)).(map[string]any))
				matched = true
			}
		}
		if !matched {
			return &FieldError{File: file, Message: fmt.Sprintf("patch for %s %s matches no object of %s", p.Kind(), p.Name(), target)}
		}
	}
	return nil
}

// parsePatches reads patch documents; unlike manifests they need no apiVersion or name.
func parsePatches(file string, data []byte) ([]Object, error) {
	var out []Object
	for i, doc := range strings.Split(string(data), "\n---") {
		var m map[string]any
		if err := decodeStrict(file, []byte(doc), &m); err != nil {
			return nil, err
		}
		if m == nil {
			continue
		}
		if normalizeYAML(m) == nil {
			return nil, &FieldError{File: file, Message: fmt.Sprintf("document %d is empty", i+1)}
		}
		out = append(out, Object(m))
	}
	return out, nil
}

// mergePatch applies an RFC 7386 JSON merge patch.
func mergePatch(target, patch any) any {
	pm, ok := patch.(map[string]any)
	if !ok {
		return patch
	}
	tm, ok := target.(map[string]any)
	if !ok {
		tm = map[string]any{}
	}
	for k, v := range pm {
		if v == nil {
			delete(tm, k)
			continue
		}
		tm[k] = mergePatch(tm[k], v)
	}
	return tm
}
