package bundle

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"strings"
)

// join resolves rel (a path written in a repository file) against base, a directory of the
// checkout, and returns the checkout path it names. Absolute paths, paths climbing out of the
// checkout and symlinks leading out of it are refused, and so is a path that does not exist.
func (c *Checkout) join(base, rel string) (string, error) {
	if rel == "" {
		return "", fmt.Errorf("empty path")
	}
	if filepath.IsAbs(rel) || strings.HasPrefix(rel, "/") {
		return "", fmt.Errorf("%q is absolute: paths must be relative to the bundle", rel)
	}
	joined := path.Join(base, filepath.ToSlash(rel))
	if joined == ".." || strings.HasPrefix(joined, "../") {
		return "", fmt.Errorf("%q leaves the repository", rel)
	}
	if _, err := c.Stat(joined); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("%q does not exist", rel)
		}
		return "", err
	}
	return joined, nil
}

// relSlash is path relative to root, with forward slashes ("." for root).
func relSlash(root, p string) string {
	if root == "." {
		return p
	}
	rel, err := filepath.Rel(root, p)
	if err != nil {
		return p
	}
	return filepath.ToSlash(rel)
}
