package gitsource

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// A checkout is a commit's tree written out for the renderer, read-only. The tree is the
// repository author's, so untrusted: its names, links and modes are admitted only when they
// describe plain files and links at plain paths inside the checkout, and everything is written
// through a root confined to it.

// ErrCheckoutTooLarge: a commit's files are larger than the checkout limit.
var ErrCheckoutTooLarge = errors.New("the commit's files are larger than the checkout limit")

// ErrCheckoutTooManyFiles: a commit holds more files than the checkout limit.
var ErrCheckoutTooManyFiles = errors.New("the commit holds more files than the checkout limit")

// Defaults of what one checkout may hold (the hub's --checkout-max-bytes and
// --checkout-max-files).
const (
	DefaultMaxCheckoutBytes = 256 << 20
	DefaultMaxCheckoutFiles = 50_000
)

// checkoutLimits bound one checkout, counted as its entries are read: a tree or an archive past
// them is refused before the rest of it is read or written.
type checkoutLimits struct {
	bytes int64
	files int
}

// count adds an entry of size bytes to the totals so far, refusing it past the limits.
func (l checkoutLimits) count(files *int, bytes *int64, size int64) error {
	if *files++; *files > l.files {
		return fmt.Errorf("%w (%d files, the hub's --checkout-max-files)", ErrCheckoutTooManyFiles, l.files)
	}
	if *bytes += size; size < 0 || *bytes > l.bytes {
		return fmt.Errorf("%w (%d MiB, the hub's --checkout-max-bytes)", ErrCheckoutTooLarge, l.bytes>>20)
	}
	return nil
}

// ErrTreeRefused: a commit's tree holds an entry no checkout may have.
var ErrTreeRefused = errors.New("the commit's tree is refused")

// treeEntry is a file or symbolic link of a commit's tree.
type treeEntry struct {
	name string // slash-separated, relative, clean
	mode filemode.FileMode
	size int64
	// file is the git blob; for an artifact's entry, staged is the file its bytes were
	// written to as the archive was read, data a link's target.
	file   *object.File
	staged string
	data   []byte
}

func (e treeEntry) reader() (io.ReadCloser, error) {
	switch {
	case e.file != nil:
		return e.file.Reader()
	case e.staged != "":
		return os.Open(e.staged)
	}
	return io.NopCloser(bytes.NewReader(e.data)), nil
}

func (e treeEntry) linkTarget() (string, error) {
	if e.file != nil {
		return e.file.Contents()
	}
	return string(e.data), nil
}

// treeEntries lists the files and links of a commit's tree, refusing what git itself refuses
// to check out: a name that is not a plain relative path ("..", ".", empty segments, a leading
// slash) and an entry beneath a symbolic link of the same tree (which would be written through
// the link). Submodules are left out. A tree of more than maxFiles entries is refused as soon as
// it is counted.
func treeEntries(co *object.Commit, maxFiles int) ([]treeEntry, error) {
	tree, err := co.Tree()
	if err != nil {
		return nil, fmt.Errorf("failed to read the tree of %s: %w", co.Hash, err)
	}
	var entries []treeEntry
	links := map[string]bool{}
	seen := map[string]bool{}
	err = tree.Files().ForEach(func(f *object.File) error {
		if err := checkEntryName(f.Name); err != nil {
			return err
		}
		if seen[f.Name] {
			return fmt.Errorf("%w: %q is in the tree twice", ErrTreeRefused, f.Name)
		}
		seen[f.Name] = true
		switch f.Mode {
		case filemode.Regular, filemode.Executable, filemode.Deprecated:
		case filemode.Symlink:
			links[f.Name] = true
		default:
			return nil // submodules and anything else: not part of a checkout
		}
		if len(entries) >= maxFiles {
			return fmt.Errorf("%w (%d files, the hub's --checkout-max-files)", ErrCheckoutTooManyFiles, maxFiles)
		}
		entries = append(entries, treeEntry{name: f.Name, mode: f.Mode, size: f.Size, file: f})
		return nil
	})
	if err != nil {
		if !errors.Is(err, ErrTreeRefused) && !errors.Is(err, ErrCheckoutTooManyFiles) {
			err = fmt.Errorf("%w: %v", ErrTreeRefused, err) // go-git's own checks of the names
		}
		return nil, fmt.Errorf("commit %s: %w", co.Hash, err)
	}
	if err := checkNesting(entries, links, seen); err != nil {
		return nil, fmt.Errorf("commit %s: %w", co.Hash, err)
	}
	return entries, nil
}

// checkNesting refuses an entry beneath a symbolic link or a file of the same tree (it would be
// written through the link).
func checkNesting(entries []treeEntry, links, seen map[string]bool) error {
	for _, e := range entries {
		for dir := path.Dir(e.name); dir != "."; dir = path.Dir(dir) {
			if links[dir] {
				return fmt.Errorf("%w: %q is beneath the symbolic link %q", ErrTreeRefused, e.name, dir)
			}
			if seen[dir] {
				return fmt.Errorf("%w: %q is beneath the file %q", ErrTreeRefused, e.name, dir)
			}
		}
	}
	return nil
}

// checkEntryName admits a tree entry's name only as a plain relative path.
func checkEntryName(name string) error {
	if name == "" || strings.HasPrefix(name, "/") || path.Clean(name) != name || strings.ContainsRune(name, 0) {
		return fmt.Errorf("%w: %q is not a path inside the repository", ErrTreeRefused, name)
	}
	for _, seg := range strings.Split(name, "/") {
		if seg == "." || seg == ".." {
			return fmt.Errorf("%w: %q is not a path inside the repository", ErrTreeRefused, name)
		}
	}
	return nil
}

// writeTree extracts entries into checkouts/<commit>, read-only, through a root confined to the
// new checkout: no name or link of the tree makes it write anywhere else. Symbolic links are
// written as they are (the renderer reads through a view confined to the checkout). A tree
// whose files hold more than limit bytes is refused.
func writeTree(entries []treeEntry, checkouts, commit string, limits checkoutLimits) error {
	if err := os.MkdirAll(checkouts, 0o755); err != nil {
		return fmt.Errorf("failed to create checkout dir: %w", err)
	}
	tmp, err := os.MkdirTemp(checkouts, ".tmp-")
	if err != nil {
		return fmt.Errorf("failed to create checkout dir: %w", err)
	}
	defer removeCheckout(tmp)
	root, err := os.OpenRoot(tmp)
	if err != nil {
		return fmt.Errorf("failed to create checkout dir: %w", err)
	}
	defer root.Close()
	var files int
	var total int64
	for _, e := range entries {
		if err := limits.count(&files, &total, e.size); err != nil {
			return fmt.Errorf("failed to check out %s: %w", commit, err)
		}
		if err := writeEntry(root, e); err != nil {
			return fmt.Errorf("failed to check out %s: %s: %w", commit, e.name, err)
		}
	}
	if err := os.Rename(tmp, filepath.Join(checkouts, commit)); err != nil {
		return fmt.Errorf("failed to check out %s: %w", commit, err)
	}
	return nil
}

func writeEntry(root *os.Root, e treeEntry) error {
	if dir := path.Dir(e.name); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	if e.mode == filemode.Symlink {
		target, err := e.linkTarget()
		if err != nil {
			return err
		}
		return root.Symlink(target, e.name)
	}
	rd, err := e.reader()
	if err != nil {
		return err
	}
	defer rd.Close()
	w, err := root.OpenFile(e.name, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(w, rd); err != nil {
		w.Close()
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	return root.Chmod(e.name, entryPerm(e.mode))
}

func entryPerm(m filemode.FileMode) os.FileMode {
	if m == filemode.Executable {
		return 0o555
	}
	return 0o444
}

// verifyCheckout reports whether the directory dir holds exactly the entries: the same files
// (mode and size) and links (target), and nothing else.
func verifyCheckout(dir string, entries []treeEntry) error {
	want := make(map[string]treeEntry, len(entries))
	dirs := map[string]bool{".": true}
	for _, e := range entries {
		want[e.name] = e
		for d := path.Dir(e.name); d != "."; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	found := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if !dirs[rel] {
				return fmt.Errorf("%s: a directory the commit does not have", rel)
			}
			return nil
		}
		e, ok := want[rel]
		if !ok {
			return fmt.Errorf("%s: a file the commit does not have", rel)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		found++
		if e.mode == filemode.Symlink {
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if want, err := e.linkTarget(); err != nil || info.Mode()&fs.ModeSymlink == 0 || target != want {
				return fmt.Errorf("%s: not the commit's link", rel)
			}
			return nil
		}
		if !info.Mode().IsRegular() || info.Size() != e.size || info.Mode().Perm() != entryPerm(e.mode) {
			return fmt.Errorf("%s: not the commit's file", rel)
		}
		return nil
	})
	if err == nil && found != len(entries) {
		err = errors.New("files of the commit are missing")
	}
	return err
}

// removeCheckout removes a checkout, whose directories the renderer could not write to either.
func removeCheckout(dir string) error {
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o755)
		}
		return nil
	})
	return os.RemoveAll(dir)
}

// sweepEvery is how often the cache is swept.
const sweepEvery = time.Hour

// DefaultMaxCacheBytes is Client.MaxCacheBytes's default.
const DefaultMaxCacheBytes = 10 << 30

// sweep removes, at most every sweepEvery, the caches of repositories not checked out for
// MaxIdle (default a week): a GitRepo deleted or moved to another URL leaves its cache behind;
// then, while the cache is larger than MaxCacheBytes, those used longest ago. keep, the cache
// about to be used, stays.
func (c *Client) sweep(now time.Time, keep string) {
	c.mu.Lock()
	if now.Sub(c.swept) < sweepEvery {
		c.mu.Unlock()
		return
	}
	c.swept = now
	c.mu.Unlock()
	idle := c.MaxIdle
	if idle <= 0 {
		idle = 7 * 24 * time.Hour
	}
	repos := filepath.Join(c.CacheDir, "repos")
	entries, err := os.ReadDir(repos)
	if err != nil {
		return
	}
	type cached struct {
		dir  string
		used time.Time
		size int64
	}
	var kept []cached
	var total int64
	for _, e := range entries {
		dir := filepath.Join(repos, e.Name())
		unlock := c.lock(dir)
		used := lastUsed(dir)
		if used.Before(now.Add(-idle)) && dir != keep {
			if err := removeCheckout(dir); err == nil {
				c.Log.Info("removed the cache of a repository unused for a while", "cache", dir, "lastUsed", used)
			}
		} else {
			size := diskUsage(dir)
			kept, total = append(kept, cached{dir, used, size}), total+size
		}
		unlock()
	}
	limit := c.MaxCacheBytes
	if limit <= 0 {
		limit = DefaultMaxCacheBytes
	}
	slices.SortFunc(kept, func(a, b cached) int { return a.used.Compare(b.used) })
	for _, r := range kept {
		if total <= limit {
			return
		}
		if r.dir == keep {
			continue
		}
		unlock := c.lock(r.dir)
		if err := removeCheckout(r.dir); err == nil {
			total -= r.size
			c.Log.Info("removed the cache of the repository used longest ago: the cache is over its size limit", "cache", r.dir, "lastUsed", r.used, "limit", limit)
		}
		unlock()
	}
}

// diskUsage is the size of the files under dir.
func diskUsage(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// lastUsed is when a repository's cache was last checked out or fetched into.
func lastUsed(dir string) time.Time {
	var newest time.Time
	for _, p := range []string{dir, filepath.Join(dir, "repo.git"), filepath.Join(dir, "checkouts")} {
		if info, err := os.Stat(p); err == nil && info.ModTime().After(newest) {
			newest = info.ModTime()
		}
	}
	if entries, err := os.ReadDir(filepath.Join(dir, "checkouts")); err == nil {
		for _, e := range entries {
			if info, err := e.Info(); err == nil && info.ModTime().After(newest) {
				newest = info.ModTime()
			}
		}
	}
	return newest
}
