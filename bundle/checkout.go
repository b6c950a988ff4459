package bundle

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// Checkout is the read-only view of one checkout through which everything a repository
// provides is read: fleet.yaml, paths globs, chart directories, values files, Kustomize roots
// and manifests. The operating system confines it to the checkout's directory (os.Root), and
// every name is resolved link by link first, so that a symlink whose target leaves the
// checkout, at any depth and however it is reached, is refused with an EscapeError naming the
// link. Symlinks whose targets stay inside the checkout work as they do in git.
type Checkout struct {
	dir  string
	root *os.Root
	// decryptor decrypts the SOPS files ReadPlain reads; nil: they are an error.
	decryptor *Decryptor
}

// OpenCheckout opens the checkout at dir.
func OpenCheckout(dir string) (*Checkout, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("failed to resolve %s: %w", dir, err)
	}
	if info, err := os.Stat(abs); err != nil || !info.IsDir() {
		return nil, fmt.Errorf("%s is not a directory", dir)
	}
	root, err := os.OpenRoot(abs)
	if err != nil {
		return nil, fmt.Errorf("failed to open the checkout %s: %w", dir, err)
	}
	return &Checkout{dir: abs, root: root}, nil
}

// Close releases the checkout's directory handle.
func (c *Checkout) Close() error { return c.root.Close() }

// Dir is the checkout's directory on disk.
func (c *Checkout) Dir() string { return c.dir }

// EscapeError says that a path of the repository reaches outside the checkout.
type EscapeError struct {
	// Path is the repository path (slash-separated, relative to the checkout) that leaves it:
	// the symlink, or the path that climbs out with "..".
	Path string
	// Target is the symlink's target, if Path is a symlink.
	Target string
}

func (e *EscapeError) Error() string {
	if e.Target == "" {
		return fmt.Sprintf("%s leaves the repository", e.Path)
	}
	return fmt.Sprintf("%s is a symlink to %q, which leaves the repository", e.Path, e.Target)
}

// maxLinks bounds the symlinks followed while resolving one name, as the kernel does.
const maxLinks = 40

// Resolve returns the name the checkout's files are actually at for name (slash-separated,
// relative to the checkout): every symlink on the way is followed, and one that leaves the
// checkout, or an absolute one, is an EscapeError. A missing component ends the resolution
// where it stands (the caller's read then fails with fs.ErrNotExist).
func (c *Checkout) Resolve(name string) (string, error) {
	if path.IsAbs(name) || filepath.IsAbs(name) {
		return "", &EscapeError{Path: name}
	}
	rest := strings.Split(path.Clean("/" + filepath.ToSlash(name))[1:], "/")
	resolved := ""
	links := 0
	for len(rest) > 0 {
		part := rest[0]
		rest = rest[1:]
		if part == "" || part == "." {
			continue
		}
		next := path.Join(resolved, part)
		info, err := c.root.Lstat(orDot(next))
		if errors.Is(err, fs.ErrNotExist) {
			return path.Join(append([]string{next}, rest...)...), nil
		}
		if err != nil {
			return "", err
		}
		if info.Mode()&fs.ModeSymlink == 0 {
			resolved = next
			continue
		}
		if links++; links > maxLinks {
			return "", fmt.Errorf("%s: too many levels of symbolic links", name)
		}
		target, err := c.root.Readlink(next)
		if err != nil {
			return "", err
		}
		if path.IsAbs(filepath.ToSlash(target)) {
			return "", &EscapeError{Path: next, Target: target}
		}
		joined := path.Join(resolved, filepath.ToSlash(target))
		if joined == ".." || strings.HasPrefix(joined, "../") {
			return "", &EscapeError{Path: next, Target: target}
		}
		// The target is resolved again from the root: it may hold links of its own.
		rest = append(strings.Split(joined, "/"), rest...)
		resolved = ""
	}
	return orDot(resolved), nil
}

func orDot(p string) string {
	if p == "" {
		return "."
	}
	return p
}

// Stat describes name, following symlinks inside the checkout.
func (c *Checkout) Stat(name string) (fs.FileInfo, error) {
	real, err := c.Resolve(name)
	if err != nil {
		return nil, err
	}
	return c.root.Stat(real)
}

// ReadFile reads the regular file at name, failing when it holds more than limit bytes.
func (c *Checkout) ReadFile(name string, limit int64) ([]byte, error) {
	real, err := c.Resolve(name)
	if err != nil {
		return nil, err
	}
	f, err := c.root.Open(real)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, unwrapPathError(err))
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", name)
	}
	return readAllLimited(io.Reader(f), limit, name)
}

// ReadPlain reads a file as ReadFile does, decrypting it when it is encrypted with SOPS: with
// the checkout's keys, or, without any, failing with ErrEncrypted, so that no ciphertext is
// ever deployed as if it were the file's content.
func (c *Checkout) ReadPlain(name string, limit int64) ([]byte, error) {
	data, err := c.ReadFile(name, limit)
	if err != nil {
		return nil, err
	}
	return c.plain(name, data)
}

// plain is a file's content as read, decrypted when it is a SOPS file.
func (c *Checkout) plain(name string, data []byte) ([]byte, error) {
	if !isSOPS(data) {
		return data, nil
	}
	if c.decryptor == nil {
		return nil, &FieldError{File: name, Err: ErrEncrypted}
	}
	plain, err := c.decryptor.decrypt(name, data)
	if err != nil {
		return nil, &FieldError{File: name, Message: "encrypted with SOPS: " + err.Error()}
	}
	return plain, nil
}

// unwrapPathError drops the os.PathError around err: callers name the repository path.
func unwrapPathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// IsFile reports whether name is a regular file (through symlinks inside the checkout).
func (c *Checkout) IsFile(name string) bool {
	info, err := c.Stat(name)
	return err == nil && info.Mode().IsRegular()
}

// IsDir reports whether name is a directory (through symlinks inside the checkout).
func (c *Checkout) IsDir(name string) bool {
	info, err := c.Stat(name)
	return err == nil && info.IsDir()
}

// Glob returns the names matching pattern (path.Match syntax, relative to the checkout),
// sorted. Directories are listed through the confined view, so a pattern passing through a
// symlinked directory matches only what its in-checkout target holds, and a link that leaves
// the checkout is an EscapeError.
func (c *Checkout) Glob(pattern string) ([]string, error) {
	if _, err := path.Match(pattern, ""); err != nil {
		return nil, err
	}
	parts := strings.Split(path.Clean(pattern), "/")
	matches := []string{"."}
	for _, part := range parts {
		var next []string
		for _, dir := range matches {
			if !hasMeta(part) {
				p := path.Join(dir, part)
				if _, err := c.Stat(p); err == nil {
					next = append(next, p)
				} else if escapes(err) {
					return nil, err
				}
				continue
			}
			entries, err := c.ReadDir(dir)
			if err != nil {
				continue // not a directory: nothing below it matches
			}
			for _, e := range entries {
				if ok, _ := path.Match(part, e.Name()); ok {
					next = append(next, path.Join(dir, e.Name()))
				}
			}
		}
		matches = next
	}
	sort.Strings(matches)
	return matches, nil
}

func hasMeta(s string) bool { return strings.ContainsAny(s, `*?[\`) }

// escapes reports whether err says a path leaves the checkout.
func escapes(err error) bool {
	var e *EscapeError
	return errors.As(err, &e)
}

// ReadDir lists the directory at name, sorted by name; a symlinked directory inside the
// checkout lists its target.
func (c *Checkout) ReadDir(name string) ([]fs.DirEntry, error) {
	real, err := c.Resolve(name)
	if err != nil {
		return nil, err
	}
	return fs.ReadDir(c.root.FS(), real)
}

// WalkFunc is called for every file and directory Walk reaches, with its checkout path and
// what it is (symlinks followed). err is set, and info nil, for an entry that could not be
// described, such as a symlink that leaves the checkout (an EscapeError): returning it ends
// the walk, returning nil passes over the entry. Returning fs.SkipDir for a directory skips
// its contents.
type WalkFunc func(name string, info fs.FileInfo, err error) error

// Walk visits dir and everything below it in lexical order, following symlinks that stay
// inside the checkout; a directory reached a second time through links is not entered again,
// so link cycles end.
func (c *Checkout) Walk(dir string, fn WalkFunc) error {
	var seen []fs.FileInfo
	var walk func(name string, info fs.FileInfo) error
	walk = func(name string, info fs.FileInfo) error {
		err := fn(name, info, nil)
		if !info.IsDir() || err != nil {
			if errors.Is(err, fs.SkipDir) {
				return nil
			}
			return err
		}
		for _, s := range seen {
			if os.SameFile(s, info) {
				return nil
			}
		}
		seen = append(seen, info)
		entries, err := c.ReadDir(name)
		if err != nil {
			return fn(name, nil, err)
		}
		for _, e := range entries {
			child := path.Join(name, e.Name())
			childInfo, err := c.Stat(child)
			if errors.Is(err, fs.ErrNotExist) {
				continue // a dangling link inside the checkout: nothing to read
			}
			if err != nil {
				if err := fn(child, nil, err); err != nil {
					return err
				}
				continue
			}
			if err := walk(child, childInfo); err != nil {
				return err
			}
		}
		return nil
	}
	info, err := c.Stat(dir)
	if err != nil {
		return err
	}
	return walk(path.Clean(dir), info)
}
