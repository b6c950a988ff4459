package bundle

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// safeJoin resolves rel (a path written in a repository file) against base, a directory inside
// root. Absolute paths, paths climbing out of root and symlinks resolving outside root are
// rejected: a repository cannot make the hub read files outside its checkout.
func safeJoin(root, base, rel string) (string, error) {
	if rel == "" {
		return "", fmt.Errorf("empty path")
	}
	if filepath.IsAbs(rel) || strings.HasPrefix(rel, "/") {
		return "", fmt.Errorf("%q is absolute: paths must be relative to the bundle", rel)
	}
	joined := filepath.Join(base, filepath.FromSlash(rel))
	if !within(root, joined) {
		return "", fmt.Errorf("%q leaves the repository", rel)
	}
	resolved, err := filepath.EvalSymlinks(joined)
	if err != nil {
		if os.IsNotExist(err) {
			return "", fmt.Errorf("%q does not exist", rel)
		}
		return "", fmt.Errorf("failed to resolve %q: %w", rel, err)
	}
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return "", fmt.Errorf("failed to resolve the checkout: %w", err)
	}
	if !within(realRoot, resolved) {
		return "", fmt.Errorf("%q is a symlink that leaves the repository", rel)
	}
	return joined, nil
}

// within reports whether path is root or below it, lexically.
func within(root, path string) bool {
	rel, err := filepath.Rel(root, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// relSlash is path relative to root, with forward slashes ("." for root).
func relSlash(root, path string) string {
	rel, err := filepath.Rel(root, path)
	if err != nil {
		return path
	}
	return filepath.ToSlash(rel)
}
