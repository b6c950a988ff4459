package gitsource

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/Masterminds/semver/v3"
	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"github.com/go-git/go-git/v5/storage/memory"
	"github.com/go-logr/logr"
)

// Repo is what a GitRepo follows.
type Repo struct {
	URL string
	// At most one of Branch, Revision (tag or commit) and Semver (a tag constraint); none means
	// the remote's default branch.
	Branch, Revision, Semver string
	Auth                     *Auth
	// Verify, when set, is what the commits or tags deployed must be signed with.
	Verify *Verification
	// SignedTags: the tags it follows must be signed (its verification asks for Tag; the keys
	// are read only at checkout). Resolve then takes a semver tag's version from the name its
	// tag object was signed with, not from the ref it was pushed under.
	SignedTags bool
}

// Ref is a resolved reference.
type Ref struct {
	// Name is the full reference name (refs/heads/main, refs/tags/v1.2.0), or the commit itself.
	Name   string
	Commit string
	// Tag is the annotated tag object the remote lists under Name; empty for a lightweight
	// tag, a branch or a commit.
	Tag string
}

// ShortName is the reference's name for people: main, v1.2.0.
func (r Ref) ShortName() string { return plumbing.ReferenceName(r.Name).Short() }

// Client resolves and checks out repositories. Safe for concurrent use; work on one repository
// is serialised.
type Client struct {
	// CacheDir holds one bare repository per URL and the checkouts of recent commits.
	CacheDir string
	// KeepCheckouts is how many checkouts of one repository stay on disk; default 3.
	KeepCheckouts int
	// Timeout bounds one remote operation as a whole; default DefaultTimeout. A large fetch
	// over a slow link has this long.
	Timeout time.Duration
	// StallTimeout bounds the silence within one (transport.go): connecting, and every read
	// and write of an HTTP(S) operation, must make progress within it; default
	// DefaultStallTimeout. A server that hangs holds a poll worker this long, not Timeout. Over
	// SSH it bounds connecting.
	StallTimeout time.Duration
	// MaxCheckoutBytes bounds the files of one checkout; default DefaultMaxCheckoutBytes. A
	// commit holding more is refused rather than filling the hub's disk.
	MaxCheckoutBytes int64
	// MaxCheckoutFiles bounds the files and links of one checkout; default
	// DefaultMaxCheckoutFiles. Counted as the tree or archive is read.
	MaxCheckoutFiles int
	// MaxObjectBytes bounds one object of a fetch (a file, a tree), inflated; default
	// DefaultMaxObjectBytes. Read from each object's header as the pack arrives: go-git holds
	// an object whole in memory to store it, so this bounds what a fetch costs the hub.
	MaxObjectBytes int64
	// MaxPackObjects bounds the objects of one fetch; default DefaultMaxPackObjects.
	MaxPackObjects int
	// MaxIdle is how long the cache of a repository nothing checked out stays; default a week.
	MaxIdle time.Duration
	// MaxCacheBytes bounds the cache on disk, every repository together; default
	// DefaultMaxCacheBytes. Past it, the caches of the repositories used longest ago go (their
	// next sync fetches again).
	MaxCacheBytes int64
	// Log tells of checkouts found tampered with; default none.
	Log logr.Logger

	mu    sync.Mutex
	locks map[string]*sync.Mutex
	swept time.Time
}

var commitSHA = regexp.MustCompile(`^[0-9a-f]{40}$`)

// Resolve lists the remote's references (no objects are transferred, but the tag objects of a
// repository with SignedTags) and returns the commit the repository wants: the branch head, the
// pinned tag or commit, or the newest tag satisfying the semver constraint.
func (c *Client) Resolve(ctx context.Context, repo Repo) (Ref, error) {
	if IsOCI(repo.URL) {
		return c.resolveOCI(ctx, repo)
	}
	listed, err := c.resolveListed(ctx, repo)
	if err != nil || repo.Semver == "" || !repo.SignedTags {
		return firstOf(listed, err)
	}
	// A tag pushed under another name (refs/tags/v1.0.0:refs/tags/v9.9.9) carries the signature
	// of the release it copies: its version is the name it was signed with.
	for _, ref := range listed {
		if ref.Tag == "" {
			return ref, nil // refused by VerifyTag, loudly: a lightweight tag carries no signature
		}
		tag, err := c.tagObject(ctx, repo, ref)
		if err != nil {
			return Ref{}, err
		}
		if "refs/tags/"+tag.Name == ref.Name {
			return ref, nil
		}
		c.Log.Info("a tag whose signed object names another tag is not a candidate", "repo", SanitizeURL(repo.URL), "tag", ref.ShortName(), "signedAs", tag.Name)
	}
	return Ref{}, fmt.Errorf("no tag satisfies %q under the name it was signed with: %w", repo.Semver, ErrRefNotFound)
}

func firstOf(refs []Ref, err error) (Ref, error) {
	if err != nil {
		return Ref{}, err
	}
	return refs[0], nil
}

// resolveListed resolves from the remote's list of references alone: the one ref a branch, a
// pinned tag or a commit names, or every tag satisfying the semver constraint, newest first.
func (c *Client) resolveListed(ctx context.Context, repo Repo) ([]Ref, error) {
	if commitSHA.MatchString(repo.Revision) {
		return []Ref{{Name: repo.Revision, Commit: repo.Revision}}, nil
	}
	refs, err := c.list(ctx, repo)
	if err != nil {
		return nil, err
	}
	byName := map[string]string{}
	var head string
	for _, r := range refs {
		switch r.Type() {
		case plumbing.HashReference:
			byName[r.Name().String()] = r.Hash().String()
		case plumbing.SymbolicReference:
			if r.Name() == plumbing.HEAD {
				head = r.Target().String()
			}
		}
	}
	// An annotated tag's commit is its peeled entry, "<tag>^{}"; the entry itself is the tag
	// object.
	refOf := func(name string) (Ref, bool) {
		if peeled, ok := byName[name+"^{}"]; ok {
			return Ref{Name: name, Commit: peeled, Tag: byName[name]}, true
		}
		h, ok := byName[name]
		return Ref{Name: name, Commit: h}, ok
	}
	switch {
	case repo.Semver != "":
		return tagsSatisfying(byName, refOf, repo.Semver)
	case repo.Revision != "":
		if ref, ok := refOf("refs/tags/" + repo.Revision); ok {
			return []Ref{ref}, nil
		}
		return nil, fmt.Errorf("tag %q: %w", repo.Revision, ErrRefNotFound)
	}
	name := head
	if repo.Branch != "" {
		name = "refs/heads/" + repo.Branch
	}
	if name == "" {
		return nil, fmt.Errorf("the remote advertises no default branch; set branch: %w", ErrRefNotFound)
	}
	h, ok := byName[name]
	if !ok {
		return nil, fmt.Errorf("branch %q: %w", strings.TrimPrefix(name, "refs/heads/"), ErrRefNotFound)
	}
	return []Ref{{Name: name, Commit: h}}, nil
}

// tagsSatisfying are the tags satisfying a semver constraint, newest first.
func tagsSatisfying(byName map[string]string, refOf func(string) (Ref, bool), constraint string) ([]Ref, error) {
	c, err := semver.NewConstraint(constraint)
	if err != nil {
		return nil, fmt.Errorf("invalid semver constraint %q: %w", constraint, err)
	}
	type tag struct {
		name string
		v    *semver.Version
	}
	var tags []tag
	for name := range byName {
		short, ok := strings.CutPrefix(name, "refs/tags/")
		if !ok || strings.HasSuffix(short, "^{}") {
			continue
		}
		v, err := semver.NewVersion(short)
		if err != nil || !c.Check(v) {
			continue
		}
		tags = append(tags, tag{name, v})
	}
	if len(tags) == 0 {
		return nil, fmt.Errorf("no tag satisfies %q: %w", constraint, ErrRefNotFound)
	}
	sort.Slice(tags, func(i, j int) bool { return tags[j].v.LessThan(tags[i].v) })
	out := make([]Ref, 0, len(tags))
	for _, t := range tags {
		ref, _ := refOf(t.name)
		out = append(out, ref)
	}
	return out, nil
}

func (c *Client) list(ctx context.Context, repo Repo) ([]*plumbing.Reference, error) {
	auth, err := repo.Auth.method(repo.URL, c.knownHostsDir(), c.stallTimeout())
	if err != nil {
		return nil, err
	}
	remote := git.NewRemote(memory.NewStorage(), &config.RemoteConfig{Name: "origin", URLs: []string{repo.URL}})
	ctx, cancel := c.remote(ctx)
	defer cancel()
	opts := &git.ListOptions{Auth: auth, PeelingOption: git.AppendPeeled}
	if repo.Auth != nil {
		opts.CABundle, opts.InsecureSkipTLS = repo.Auth.CABundle, repo.Auth.InsecureSkipTLSVerify
	}
	refs, err := remote.ListContext(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("failed to list %s: %w", SanitizeURL(repo.URL), err)
	}
	return refs, nil
}

func (c *Client) timeout() time.Duration {
	if c.Timeout > 0 {
		return c.Timeout
	}
	return DefaultTimeout
}

// remote is the context of one remote operation: bounded as a whole by Timeout, its
// connections by StallTimeout.
func (c *Client) remote(ctx context.Context) (context.Context, context.CancelFunc) {
	useStallBoundTransports()
	return context.WithTimeout(withStallTimeout(ctx, c.stallTimeout()), c.timeout())
}

func (c *Client) stallTimeout() time.Duration {
	if c.StallTimeout > 0 {
		return c.StallTimeout
	}
	return DefaultStallTimeout
}

func (c *Client) knownHostsDir() string { return filepath.Join(c.CacheDir, "known_hosts") }

// repoDir is the cache of a repository as reached with its credentials. Repositories are kept
// apart by credential identity as well as URL: what one GitRepo fetched with its credentials is
// never served to another that has not proven access with its own (a pinned commit is served
// from the cache without asking the remote).
func (c *Client) repoDir(repo Repo) string {
	// Credentials in the URL itself (https://user:token@host/…) are credentials too.
	var userinfo string
	if u, err := url.Parse(repo.URL); err == nil && u.User != nil {
		userinfo = u.User.String()
	}
	sum := sha256.Sum256([]byte(SanitizeURL(repo.URL) + "\x00" + repo.Auth.identity() + "\x00" + userinfo))
	return filepath.Join(c.CacheDir, "repos", hex.EncodeToString(sum[:12]))
}

func (c *Client) lock(key string) func() {
	c.mu.Lock()
	if c.locks == nil {
		c.locks = map[string]*sync.Mutex{}
	}
	l, ok := c.locks[key]
	if !ok {
		l = &sync.Mutex{}
		c.locks[key] = l
	}
	c.mu.Unlock()
	l.Lock()
	return l.Unlock
}

// Checkout returns a read-only directory holding the tree of commit, fetching it first when the
// cache does not have it. Fetches are shallow for branch and tag heads, and incremental: objects
// already in the cache are not transferred again.
func (c *Client) Checkout(ctx context.Context, repo Repo, commit string) (string, error) {
	if IsOCI(repo.URL) {
		if !ociHex.MatchString(commit) {
			return "", fmt.Errorf("%q is not an artifact digest", commit)
		}
		return c.checkoutOCI(ctx, repo, commit)
	}
	if !commitSHA.MatchString(commit) {
		return "", fmt.Errorf("%q is not a commit id", commit)
	}
	dir := c.repoDir(repo)
	c.sweep(time.Now(), dir)
	defer c.lock(dir)()
	if err := c.refusal(repo, commit); err != nil {
		return "", err
	}
	out, err := c.checkoutCommit(ctx, dir, repo, commit)
	return out, c.remember(repo, commit, err)
}

// checkoutCommit is Checkout of a git commit, the cache's lock held.
func (c *Client) checkoutCommit(ctx context.Context, dir string, repo Repo, commit string) (string, error) {
	out := filepath.Join(dir, "checkouts", commit)
	r, err := c.openCache(dir, repo)
	if err != nil {
		return "", err
	}
	if _, err := r.CommitObject(plumbing.NewHash(commit)); err != nil {
		if err := c.fetch(ctx, r, repo, commit); err != nil {
			return "", err
		}
	}
	co, err := r.CommitObject(plumbing.NewHash(commit))
	if err != nil {
		return "", fmt.Errorf("commit %s of %s: %w", commit, SanitizeURL(repo.URL), ErrRefNotFound)
	}
	if v := repo.Verify; v != nil && v.Commit {
		// Before anything of the commit is written: an unverified commit is never checked out,
		// and a checkout on disk from before serves only a commit that verifies now.
		if err := v.Keys.VerifyCommit(co); err != nil {
			return "", err
		}
	}
	entries, err := treeEntries(co, c.limits().files)
	if err != nil {
		return "", err
	}
	if _, err := os.Lstat(out); err == nil {
		// Served only as the commit's tree: a checkout that holds anything else (a file
		// planted, a link changed) is written again.
		err := verifyCheckout(out, entries)
		if err == nil {
			now := time.Now()
			_ = os.Chtimes(out, now, now) // recency for eviction
			return out, nil
		}
		c.Log.Info("a checkout on disk is not its commit's tree: it is written again", "repo", SanitizeURL(repo.URL), "commit", commit, "reason", err.Error())
		if err := removeCheckout(out); err != nil {
			return "", fmt.Errorf("failed to replace the checkout of %s: %w", commit, err)
		}
	}
	if err := writeTree(entries, filepath.Join(dir, "checkouts"), commit, c.limits()); err != nil {
		return "", err
	}
	c.evict(filepath.Join(dir, "checkouts"))
	return out, nil
}

// openCache opens the bare repository of a cache, made when it is not there yet (a fresh hub,
// or one whose cache was swept); what a fetch brings into it is bounded as it arrives
// (boundedStorage). The caller holds the cache's lock.
func (c *Client) openCache(dir string, repo Repo) (*git.Repository, error) {
	storage := boundedStorage{Storage: filesystem.NewStorage(osfs.New(filepath.Join(dir, "repo.git")), cache.NewObjectLRUDefault()), limits: c.packLimits()}
	r, err := git.Init(storage, nil)
	if errors.Is(err, git.ErrRepositoryAlreadyExists) {
		r, err = git.Open(storage, nil)
	}
	if err != nil {
		return nil, fmt.Errorf("failed to open the cache of %s: %w", SanitizeURL(repo.URL), err)
	}
	if _, err := r.Remote("origin"); errors.Is(err, git.ErrRemoteNotFound) {
		// The stored URL carries no credentials; each fetch passes the real one.
		if _, err := r.CreateRemote(&config.RemoteConfig{Name: "origin", URLs: []string{SanitizeURL(repo.URL)}}); err != nil {
			return nil, fmt.Errorf("failed to prepare the cache of %s: %w", SanitizeURL(repo.URL), err)
		}
	}
	return r, nil
}

// ErrFetchInterrupted: the hub stopped twice while fetching a commit (killed for its memory,
// say): the commit is not fetched again, until the repository's ref moves to another.
var ErrFetchInterrupted = errors.New("the hub stopped while fetching this commit, twice")

// maxInterruptedFetches is how many times a fetch of one commit may be cut short by the hub
// stopping before the commit is refused.
const maxInterruptedFetches = 2

// fetch fetches commit into the cache. A journal beside the cache counts the fetches of each
// commit that began and never ended: a repository whose commit kills the hub as it is fetched
// (a blob that inflates past the hub's memory) would otherwise be fetched again after every
// restart, and every tenant would be down with it.
func (c *Client) fetch(ctx context.Context, r *git.Repository, repo Repo, commit string) error {
	journal := filepath.Join(c.repoDir(repo), "fetching-"+commit)
	begun, _ := os.ReadFile(journal)
	if len(begun) >= maxInterruptedFetches {
		return fmt.Errorf("commit %s of %s: %w (out of memory?): it is not fetched again until the branch moves; raise the hub's memory or move the branch past it", shortCommit(commit), SanitizeURL(repo.URL), ErrFetchInterrupted)
	}
	if err := os.WriteFile(journal, append(begun, '.'), 0o600); err != nil {
		return fmt.Errorf("failed to journal the fetch of %s: %w", shortCommit(commit), err)
	}
	err := c.fetchCommit(ctx, r, repo, commit)
	if rmErr := os.Remove(journal); err == nil && rmErr != nil {
		err = fmt.Errorf("failed to close the journal of the fetch of %s: %w", shortCommit(commit), rmErr)
	}
	return err
}

func (c *Client) fetchCommit(ctx context.Context, r *git.Repository, repo Repo, commit string) error {
	// Shallow fetch of the wanted ref when we know it; a pinned commit needs the history that
	// contains it, so all branches and tags are fetched in full. (The listing alone: the
	// cache's lock is held.)
	listed, err := c.resolveListed(ctx, repo)
	if ref, _ := firstOf(listed, err); err == nil && ref.Commit == commit && ref.Name != commit {
		return c.fetchRefs(ctx, r, repo, []config.RefSpec{config.RefSpec("+" + ref.Name + ":" + ref.Name)}, 1)
	}
	return c.fetchRefs(ctx, r, repo, []config.RefSpec{"+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"}, 0)
}

// fetchRefs fetches refspecs of the remote into the cache, to depth (0: all of it).
func (c *Client) fetchRefs(ctx context.Context, r *git.Repository, repo Repo, specs []config.RefSpec, depth int) error {
	auth, err := repo.Auth.method(repo.URL, c.knownHostsDir(), c.stallTimeout())
	if err != nil {
		return err
	}
	ctx, cancel := c.remote(ctx)
	defer cancel()
	opts := &git.FetchOptions{RemoteURL: repo.URL, Auth: auth, Tags: git.NoTags, Force: true, RefSpecs: specs, Depth: depth}
	if repo.Auth != nil {
		opts.CABundle, opts.InsecureSkipTLS = repo.Auth.CABundle, repo.Auth.InsecureSkipTLSVerify
	}
	if err := r.FetchContext(ctx, opts); err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
		return fmt.Errorf("failed to fetch %s: %w", SanitizeURL(repo.URL), err)
	}
	return nil
}

func (c *Client) packLimits() packLimits {
	l := packLimits{objectBytes: c.MaxObjectBytes, objects: uint32(max(c.MaxPackObjects, 0))}
	if l.objectBytes <= 0 {
		l.objectBytes = DefaultMaxObjectBytes
	}
	if l.objects == 0 {
		l.objects = DefaultMaxPackObjects
	}
	return l
}

func (c *Client) limits() checkoutLimits {
	l := checkoutLimits{bytes: c.MaxCheckoutBytes, files: c.MaxCheckoutFiles}
	if l.bytes <= 0 {
		l.bytes = DefaultMaxCheckoutBytes
	}
	if l.files <= 0 {
		l.files = DefaultMaxCheckoutFiles
	}
	return l
}

// evict keeps the KeepCheckouts most recently used checkouts.
func (c *Client) evict(checkouts string) {
	keep := c.KeepCheckouts
	if keep <= 0 {
		keep = 3
	}
	entries, err := os.ReadDir(checkouts)
	if err != nil {
		return
	}
	type co struct {
		path string
		used time.Time
	}
	var all []co
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		all = append(all, co{filepath.Join(checkouts, e.Name()), info.ModTime()})
	}
	if len(all) <= keep {
		return
	}
	sort.Slice(all, func(i, j int) bool { return all[i].used.After(all[j].used) })
	for _, old := range all[keep:] {
		_ = os.RemoveAll(old.path)
	}
}

// VerifyTag checks, for a repository whose Verification asks for signed tags, that ref (as
// Resolve returned it) is an annotated tag signed by an allowed key and pointing at ref's
// commit. A repository following a branch or a commit has no tag to verify: that is refused too.
func (c *Client) VerifyTag(ctx context.Context, repo Repo, ref Ref) error {
	v := repo.Verify
	if v == nil || !v.Tag || IsOCI(repo.URL) {
		return nil // an artifact's signatures are checked (refused) by its checkout
	}
	refuse := func(object, reason string) error {
		return &VerificationError{Object: object, Reason: reason, Allowed: v.Keys.Names()}
	}
	name, isTag := strings.CutPrefix(ref.Name, "refs/tags/")
	if !isTag {
		return refuse("commit "+shortCommit(ref.Commit), fmt.Sprintf("the GitRepo follows %s, not a tag, and signed tags are required", ref.ShortName()))
	}
	if ref.Tag == "" {
		return refuse("tag "+name, "it is a lightweight tag, which carries no signature")
	}
	tag, err := c.tagObject(ctx, repo, ref)
	if err != nil {
		return err
	}
	if tag.Name != name {
		// Pushed under another name: the signature is the release it was made for, not this one.
		return refuse("tag "+name, fmt.Sprintf("its signed tag object names tag %q: a signed tag counts only under the name it was signed with", tag.Name))
	}
	if tag.TargetType != plumbing.CommitObject || tag.Target.String() != ref.Commit {
		return refuse("tag "+name, fmt.Sprintf("it points at %s, not at commit %s", tag.Target, shortCommit(ref.Commit)))
	}
	return v.Keys.VerifyTag(tag)
}

// tagObject reads the annotated tag object ref lists (ref.Tag), from the cache or fetched into
// it: by its hash, so a tag the remote moved since the cache fetched it is fetched again.
func (c *Client) tagObject(ctx context.Context, repo Repo, ref Ref) (*object.Tag, error) {
	dir := c.repoDir(repo)
	defer c.lock(dir)()
	r, err := c.openCache(dir, repo)
	if err != nil {
		return nil, err
	}
	hash := plumbing.NewHash(ref.Tag)
	tag, err := r.TagObject(hash)
	if errors.Is(err, plumbing.ErrObjectNotFound) {
		if err := c.fetchRefs(ctx, r, repo, []config.RefSpec{config.RefSpec("+" + ref.Name + ":" + ref.Name)}, 1); err != nil {
			return nil, err
		}
		tag, err = r.TagObject(hash)
	}
	if err != nil {
		// Not there even after the fetch: the remote moved the tag since it listed it.
		return nil, fmt.Errorf("tag %s of %s: %w", ref.ShortName(), SanitizeURL(repo.URL), err)
	}
	return tag, nil
}

func shortCommit(c string) string {
	if len(c) > 12 {
		return c[:12]
	}
	return c
}
