package bundle

import (
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// manifestFiles lists a plain-manifest bundle's files (relative to the bundle directory):
// YAML and JSON files below it, without nested bundles, hidden directories, overlays/, the
// fleet.yaml and files used as Helm values.
func manifestFiles(root string, src *Source, exclude map[string]bool) ([]string, error) {
	dir := filepath.Join(root, filepath.FromSlash(src.Dir))
	nested := map[string]bool{}
	for _, n := range src.Nested {
		nested[filepath.Join(root, filepath.FromSlash(n))] = true
	}
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != dir && (nested[p] || strings.HasPrefix(d.Name(), ".") || (filepath.Dir(p) == dir && d.Name() == "overlays")) {
				return filepath.SkipDir
			}
			return nil
		}
		rel := relSlash(dir, p)
		switch {
		case !d.Type().IsRegular():
			return nil // symlinks are not followed
		case rel == FleetFileName, exclude[rel], strings.HasPrefix(d.Name(), "."):
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
func renderManifests(root string, src *Source, opts Options, exclude map[string]bool) ([]Object, error) {
	bundleDir := filepath.Join(root, filepath.FromSlash(src.Dir))
	files, err := manifestFiles(root, src, exclude)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", src.Dir, err)
	}
	byFile := map[string][]Object{}
	var order []string
	load := func(rel, abs string) error {
		data, err := readLimited(abs, maxFileSize)
		if err != nil {
			return fmt.Errorf("%s: %w", path.Join(src.Dir, rel), err)
		}
		objs, err := parseObjects(relSlash(root, abs), data)
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
		if err := load(f, filepath.Join(bundleDir, filepath.FromSlash(f))); err != nil {
			return nil, err
		}
	}
	if opts.YAML != nil {
		for i, name := range opts.YAML.Overlays {
			overlayDir, err := safeJoin(root, bundleDir, path.Join("overlays", name))
			if err != nil {
				return nil, &FieldError{File: src.FleetFile, Field: fmt.Sprintf("yaml.overlays[%d]", i), Message: err.Error()}
			}
			overlayFiles, err := manifestFiles(root, &Source{Dir: relSlash(root, overlayDir)}, nil)
			if err != nil {
				return nil, err
			}
			for _, f := range overlayFiles {
				abs := filepath.Join(overlayDir, filepath.FromSlash(f))
				ext := path.Ext(f)
				base, isPatch := strings.CutSuffix(strings.TrimSuffix(f, ext), "_patch")
				if !isPatch {
					if err := load(f, abs); err != nil {
						return nil, err
					}
					continue
				}
				if err := applyPatchFile(root, abs, byFile, base, ext); err != nil {
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

func applyPatchFile(root, abs string, byFile map[string][]Object, base, ext string) error {
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
	file := relSlash(root, abs)
	if !ok {
		return &FieldError{File: file, Message: fmt.Sprintf("patches %s, which the bundle does not have", target)}
	}
	data, err := readLimited(abs, maxFileSize)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
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
