package gitsource

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
)

// ErrRevisionNotFound: a revision names no commit of the repository.
var ErrRevisionNotFound = errors.New("no such revision")

// CheckoutLocal writes the tree of rev (a branch, tag, commit or any revision git accepts, such
// as HEAD~1) of the repository at repoPath, bare or not, into a new directory under dir, with
// the same admission of names, links and modes and the same size limit as Checkout (limit 0:
// 256 MiB). It returns that directory and the commit. Nothing is fetched: what the repository
// does not hold is ErrRevisionNotFound.
func CheckoutLocal(repoPath, rev, dir string, limit int64) (string, string, error) {
	r, err := git.PlainOpenWithOptions(repoPath, &git.PlainOpenOptions{DetectDotGit: true})
	if errors.Is(err, git.ErrRepositoryNotExists) {
		r, err = git.PlainOpen(repoPath) // a bare repository: the directory is the git directory
	}
	if err != nil {
		return "", "", fmt.Errorf("%s: not a git repository: %w", repoPath, err)
	}
	hash, err := r.ResolveRevision(plumbing.Revision(rev))
	if err != nil {
		return "", "", fmt.Errorf("%s: %q: %w", repoPath, rev, ErrRevisionNotFound)
	}
	co, err := r.CommitObject(*hash)
	if err != nil {
		return "", "", fmt.Errorf("%s: %q is not a commit: %w", repoPath, rev, ErrRevisionNotFound)
	}
	limits := (&Client{MaxCheckoutBytes: limit}).limits()
	entries, err := treeEntries(co, limits.files)
	if err != nil {
		return "", "", err
	}
	if err := writeTree(entries, dir, co.Hash.String(), limits); err != nil {
		return "", "", err
	}
	return filepath.Join(dir, co.Hash.String()), co.Hash.String(), nil
}

// RemoveCheckout removes a directory holding checkouts, read-only as they are.
func RemoveCheckout(dir string) error { return removeCheckout(dir) }
