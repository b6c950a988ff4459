package bundle

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
	"sigs.k8s.io/kustomize/api/builtins"
	"sigs.k8s.io/kustomize/api/types"
	k8syaml "sigs.k8s.io/yaml"
)

// A kustomization's generators, transformers and validators are plugin configurations: inline
// documents, or files of them. Each is admitted only as one of the built-in plugins that read
// nothing but the checkout's files, decoded strictly, with every path it names inside the
// checkout. Anything else (another kind, a field of no such plugin, a directory whose
// kustomization would produce the configurations) is refused with the file and field: an
// allow-list, since a kind or field not known here could fetch a URL or run a program.

// pluginPaths are the built-in plugins admitted, each with the paths its configuration names.
var pluginPaths = map[string]func(data []byte) ([]pluginPath, error){
	"AnnotationsTransformer":   noPaths[builtins.AnnotationsTransformerPlugin],
	"HashTransformer":          noPaths[builtins.HashTransformerPlugin],
	"ImageTagTransformer":      noPaths[builtins.ImageTagTransformerPlugin],
	"LabelTransformer":         noPaths[builtins.LabelTransformerPlugin],
	"NamespaceTransformer":     noPaths[builtins.NamespaceTransformerPlugin],
	"PrefixTransformer":        noPaths[builtins.PrefixTransformerPlugin],
	"SuffixTransformer":        noPaths[builtins.SuffixTransformerPlugin],
	"ReplicaCountTransformer":  noPaths[builtins.ReplicaCountTransformerPlugin],
	"ValueAddTransformer":      noPaths[builtins.ValueAddTransformerPlugin],
	"SortOrderTransformer":     noPaths[sortOrderTransformer],
	"PatchTransformer":         pathsOf(func(p *builtins.PatchTransformerPlugin) []pluginPath { return []pluginPath{{"path", p.Path}} }),
	"PatchJson6902Transformer": pathsOf(func(p *builtins.PatchJson6902TransformerPlugin) []pluginPath { return []pluginPath{{"path", p.Path}} }),
	"PatchStrategicMergeTransformer": pathsOf(func(p *builtins.PatchStrategicMergeTransformerPlugin) []pluginPath {
		var out []pluginPath
		for i, ref := range p.Paths {
			if !strings.Contains(string(ref), "\n") { // an inline patch, not a path
				out = append(out, pluginPath{fmt.Sprintf("paths[%d]", i), string(ref)})
			}
		}
		return out
	}),
	"ReplacementTransformer": pathsOf(func(p *builtins.ReplacementTransformerPlugin) []pluginPath {
		var out []pluginPath
		for i, r := range p.ReplacementList {
			out = append(out, pluginPath{fmt.Sprintf("replacements[%d].path", i), r.Path})
		}
		return out
	}),
	"ConfigMapGenerator": pathsOf(func(p *builtins.ConfigMapGeneratorPlugin) []pluginPath { return generatorPaths(p.GeneratorArgs) }),
	"SecretGenerator":    pathsOf(func(p *builtins.SecretGeneratorPlugin) []pluginPath { return generatorPaths(p.GeneratorArgs) }),
}

// sortOrderTransformer is SortOrderTransformer's configuration (its plugin type is not exported).
type sortOrderTransformer struct {
	SortOptions *types.SortOptions `json:"sortOptions,omitempty"`
}

// pluginPath is a path a plugin's configuration names, and the field it is in.
type pluginPath struct{ field, ref string }

func generatorPaths(g types.GeneratorArgs) []pluginPath {
	var out []pluginPath
	for j, f := range g.FileSources {
		_, p, found := strings.Cut(f, "=")
		if !found {
			p = f
		}
		out = append(out, pluginPath{fmt.Sprintf("files[%d]", j), p})
	}
	for j, e := range g.EnvSources {
		out = append(out, pluginPath{fmt.Sprintf("envs[%d]", j), e})
	}
	if g.EnvSource != "" {
		out = append(out, pluginPath{"env", g.EnvSource})
	}
	return out
}

func noPaths[T any](data []byte) ([]pluginPath, error) {
	var cfg T
	return nil, k8syaml.UnmarshalStrict(data, &cfg)
}

func pathsOf[T any](paths func(*T) []pluginPath) func([]byte) ([]pluginPath, error) {
	return func(data []byte) ([]pluginPath, error) {
		var cfg T
		if err := k8syaml.UnmarshalStrict(data, &cfg); err != nil {
			return nil, err
		}
		return paths(&cfg), nil
	}
}

// builtinAPIVersions are the apiVersions kustomize's built-in plugins are configured with.
var builtinAPIVersions = []string{"builtin", ""}

// checkPlugins admits the plugin configurations of a kustomization's field (generators,
// transformers, validators): each entry an inline document or a file of them.
func (k *kustomizeFS) checkPlugins(file, field string, entries []string) error {
	dir := path.Dir(file)
	for i, entry := range entries {
		where := fmt.Sprintf("%s[%d]", field, i)
		data, source := []byte(entry), file
		if !strings.Contains(entry, "\n") {
			if err := k.local(dir, entry); err != nil {
				return &FieldError{File: file, Field: where, Err: err}
			}
			p := path.Join(dir, entry)
			if k.mem.IsDir("/" + p) {
				return &FieldError{File: file, Field: where, Message: fmt.Sprintf("%q is a directory: give plugin configurations as files or inline", entry)}
			}
			var err error
			if data, err = k.readFile("/" + p); err != nil {
				return &FieldError{File: file, Field: where, Err: err}
			}
			source, where = p, ""
		}
		// Paths in a configuration are the kustomization's, wherever the configuration is.
		if err := k.checkPluginDocs(source, where, dir, data); err != nil {
			return err
		}
	}
	return nil
}

// checkPluginDocs admits every document of data as a built-in plugin's configuration whose
// paths (relative to dir, the kustomization's directory, as Kustomize reads them) are files of
// the checkout.
func (k *kustomizeFS) checkPluginDocs(file, field, dir string, data []byte) error {
	at := func(sub string) string {
		switch {
		case field == "":
			return sub
		case sub == "":
			return field
		}
		return field + "." + sub
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for doc := 0; ; doc++ {
		var cfg map[string]any
		err := dec.Decode(&cfg)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return &FieldError{File: file, Field: field, Message: fmt.Sprintf("document %d: %s", doc+1, strings.TrimPrefix(err.Error(), "yaml: "))}
		}
		if cfg == nil {
			continue
		}
		kind, _ := cfg["kind"].(string)
		apiVersion, _ := cfg["apiVersion"].(string)
		paths, known := pluginPaths[kind]
		if !known || !slices.Contains(builtinAPIVersions, apiVersion) {
			return &FieldError{File: file, Field: at("kind"), Message: fmt.Sprintf("%s %q is not one of kustomize's built-in plugins that read only the repository's files (%s)",
				orNone(apiVersion), kind, strings.Join(slices.Sorted(maps.Keys(pluginPaths)), ", "))}
		}
		// What every configuration may carry beside its plugin's fields; the generators'
		// metadata is their own.
		delete(cfg, "apiVersion")
		delete(cfg, "kind")
		if kind != "ConfigMapGenerator" && kind != "SecretGenerator" {
			delete(cfg, "metadata")
		}
		rest, err := k8syaml.Marshal(cfg)
		if err != nil {
			return &FieldError{File: file, Field: field, Err: err}
		}
		refs, err := paths(rest)
		if err != nil {
			return &FieldError{File: file, Field: at(kind), Err: err}
		}
		for _, r := range refs {
			if r.ref == "" {
				continue
			}
			if err := k.local(dir, r.ref); err != nil {
				return &FieldError{File: file, Field: at(r.field), Err: err}
			}
		}
	}
}

func orNone(s string) string {
	if s == "" {
		return "(no apiVersion)"
	}
	return "apiVersion " + s
}
