package bundle

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	k8syaml "sigs.k8s.io/yaml"
)

var kustomizationFiles = []string{"kustomization.yaml", "kustomization.yml", "Kustomization"}

// hasKustomization reports whether dir holds a kustomization file.
func hasKustomization(dir string) bool {
	for _, name := range kustomizationFiles {
		if info, err := os.Lstat(filepath.Join(dir, name)); err == nil && info.Mode().IsRegular() {
			return true
		}
	}
	return false
}

// checkoutFS copies the checkout's regular files into memory. Kustomize runs on this copy, so
// it sees nothing outside the repository, no symlinks and no host paths.
func checkoutFS(root string) (filesys.FileSystem, error) {
	mem := filesys.MakeFsInMemory()
	var total int64
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == ".git" {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		data, err := readLimited(p, maxFileSize)
		if err != nil {
			return err
		}
		if total += int64(len(data)); total > maxCheckoutSize {
			return fmt.Errorf("the checkout is larger than %d MiB", maxCheckoutSize>>20)
		}
		return mem.WriteFile("/"+relSlash(root, p), data)
	})
	if err != nil {
		return nil, fmt.Errorf("failed to read the checkout: %w", err)
	}
	return mem, nil
}

// rejectRemoteBases fails on kustomizations anywhere in the checkout that reach out of it:
// remote bases would make the hub fetch arbitrary code.
func rejectRemoteBases(mem filesys.FileSystem) error {
	return mem.Walk("/", func(p string, info fs.FileInfo, err error) error {
		if err != nil || info.IsDir() || !isKustomizationName(path.Base(p)) {
			return err
		}
		data, err := mem.ReadFile(p)
		if err != nil {
			return err
		}
		var k struct {
			Resources  []string `json:"resources"`
			Bases      []string `json:"bases"`
			Components []string `json:"components"`
		}
		if err := k8syaml.Unmarshal(data, &k); err != nil {
			return &FieldError{File: strings.TrimPrefix(p, "/"), Message: err.Error()}
		}
		for field, list := range map[string][]string{"resources": k.Resources, "bases": k.Bases, "components": k.Components} {
			for i, r := range list {
				if isRemote(r) {
					return &FieldError{File: strings.TrimPrefix(p, "/"), Field: fmt.Sprintf("%s[%d]", field, i), Message: fmt.Sprintf("remote base %q: only paths inside the repository are allowed", r)}
				}
			}
		}
		return nil
	})
}

func isKustomizationName(name string) bool {
	for _, k := range kustomizationFiles {
		if name == k {
			return true
		}
	}
	return false
}

func isRemote(r string) bool {
	return strings.Contains(r, "://") || strings.HasPrefix(r, "git@") || strings.Contains(r, "?ref=") ||
		strings.HasPrefix(r, "github.com/") || strings.HasPrefix(r, "gitlab.com/") || strings.HasPrefix(r, "bitbucket.org/")
}

// renderKustomize builds the kustomization in dir (relative to the root) on the in-memory copy.
func renderKustomize(mem filesys.FileSystem, dir string) ([]Object, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	res, err := k.Run(mem, "/"+dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	data, err := res.AsYaml()
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	return parseObjects(dir+" (kustomize output)", data)
}
