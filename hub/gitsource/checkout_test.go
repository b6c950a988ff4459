package gitsource

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// node is an entry of a tree built object by object, as a hostile remote can send it: any
// name (with "..", "/", empty), any mode, duplicates.
type node struct {
	name     string
	mode     filemode.FileMode
	content  string
	children []node
}

func writeBlob(t testing.TB, s storer.EncodedObjectStorer, content string) plumbing.Hash {
	obj := s.NewEncodedObject()
	obj.SetType(plumbing.BlobObject)
	w, _ := obj.Writer()
	_, _ = w.Write([]byte(content))
	_ = w.Close()
	h, err := s.SetEncodedObject(obj)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func writeNodes(t testing.TB, s storer.EncodedObjectStorer, nodes []node) plumbing.Hash {
	// In git's order (a tree's name sorts as if it ended in a slash); duplicates stay.
	nodes = slices.Clone(nodes)
	key := func(n node) string {
		if n.mode == filemode.Dir {
			return n.name + "/"
		}
		return n.name
	}
	sort.SliceStable(nodes, func(i, j int) bool { return key(nodes[i]) < key(nodes[j]) })
	tree := &object.Tree{}
	for _, n := range nodes {
		e := object.TreeEntry{Name: n.name, Mode: n.mode}
		if n.mode == filemode.Dir {
			e.Hash = writeNodes(t, s, n.children)
		} else {
			e.Hash = writeBlob(t, s, n.content)
		}
		tree.Entries = append(tree.Entries, e)
	}
	obj := s.NewEncodedObject()
	if err := tree.Encode(obj); err != nil {
		t.Fatal(err)
	}
	h, err := s.SetEncodedObject(obj)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// hostileCommit writes a commit of the tree into the client's cache of repo, as if fetched.
func hostileCommit(t testing.TB, c *Client, repo Repo, nodes []node) string {
	r, err := git.PlainInit(filepath.Join(c.repoDir(repo), "repo.git"), true)
	if errors.Is(err, git.ErrRepositoryAlreadyExists) {
		r, err = git.PlainOpen(filepath.Join(c.repoDir(repo), "repo.git"))
	}
	if err != nil {
		t.Fatal(err)
	}
	sig := object.Signature{Name: "mallory", Email: "m@example.invalid", When: time.Unix(1700000000, 0)}
	co := &object.Commit{Author: sig, Committer: sig, Message: "hostile", TreeHash: writeNodes(t, r.Storer, nodes)}
	obj := r.Storer.NewEncodedObject()
	if err := co.Encode(obj); err != nil {
		t.Fatal(err)
	}
	h, err := r.Storer.SetEncodedObject(obj)
	if err != nil {
		t.Fatal(err)
	}
	return h.String()
}

func file(name, content string) node {
	return node{name: name, mode: filemode.Regular, content: content}
}
func link(name, target string) node { return node{name: name, mode: filemode.Symlink, content: target} }
func dir(name string, children ...node) node {
	return node{name: name, mode: filemode.Dir, children: children}
}

// assertNothingOutside fails the test when anything was written to outside, or anywhere in the
// cache but the repository's objects and its checkouts.
func assertNothingOutside(t testing.TB, c *Client, outside string) {
	t.Helper()
	entries, _ := os.ReadDir(outside)
	for _, e := range entries {
		t.Errorf("written outside the cache: %s", e.Name())
	}
	_ = filepath.WalkDir(c.CacheDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(c.CacheDir, filepath.Dir(p))
		parts := strings.Split(filepath.ToSlash(rel), "/")
		// repos/<hash>/{repo.git,checkouts}/…
		if !d.IsDir() && (len(parts) < 3 || parts[0] != "repos" || parts[2] != "repo.git" && parts[2] != "checkouts") {
			t.Errorf("written in the cache outside a repository's objects and checkouts: %s", p)
		}
		return nil
	})
}

// The reproduced attack and its neighbours: a tree with a link to an absolute path and an
// entry beneath it wrote through the link; names that leave the tree; duplicates. Each is
// refused, and nothing lands outside the checkout.
func TestHostileTreesWriteNothingOutsideTheCheckout(t *testing.T) {
	for _, c := range []struct {
		name  string
		tree  func(outside string) []node
		error string
	}{
		{"an entry beneath a link to an absolute path", func(outside string) []node {
			return []node{link("escape", outside), dir("escape", file("planted.yaml", "kind: ConfigMap\n"))}
		}, `"escape/planted.yaml" is beneath the symbolic link "escape"`},
		{"an entry beneath a link inside the tree", func(string) []node {
			return []node{dir("real", file("a.yaml", "a: 1\n")), link("alias", "real"), dir("alias", file("b.yaml", "b: 2\n"))}
		}, `"alias/b.yaml" is beneath the symbolic link "alias"`},
		{"an entry beneath a relative link leaving the tree", func(string) []node {
			return []node{link("up", "../../../../../.."), dir("up", file("x", "x"))}
		}, `is beneath the symbolic link "up"`},
		{"a name that climbs out", func(string) []node { return []node{dir("..", file("planted.yaml", "x"))} }, `".."`},
		{"a name with a slash", func(string) []node { return []node{file("a/../../planted.yaml", "x")} }, `"a/../../planted.yaml"`},
		{"a name that is a dot", func(string) []node { return []node{dir(".", file("x", "x"))} }, `"."`},
		{"a name with a slash beside the directory it names", func(string) []node {
			return []node{file("a/b.yaml", "x"), dir("a", file("b.yaml", "y"))}
		}, `"a/b.yaml" is in the tree twice`},
		{"a file twice", func(string) []node { return []node{file("a.yaml", "one"), file("a.yaml", "two")} }, `"a.yaml" is in the tree twice`},
		{"a file and a directory of one name", func(string) []node { return []node{file("a", "x"), dir("a", file("b", "y"))} }, `"a/b" is beneath the file "a"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl := newClient(t)
			outside := t.TempDir()
			repo := Repo{URL: "https://git.example.invalid/mallory/repo.git"}
			commit := hostileCommit(t, cl, repo, c.tree(outside))
			_, err := cl.Checkout(context.Background(), repo, commit)
			if err == nil || !errors.Is(err, ErrTreeRefused) || !strings.Contains(err.Error(), c.error) {
				t.Errorf("checkout: %v, want %q", err, c.error)
			}
			assertNothingOutside(t, cl, outside)
		})
	}
}

// A checkout already on disk is served only as the commit's tree: a file planted in it (as the
// attack above planted one in another tenant's checkout), or a link changed, is found and the
// checkout written again.
func TestACheckoutIsVerifiedBeforeItIsServed(t *testing.T) {
	cl := newClient(t)
	repo := Repo{URL: "https://git.example.invalid/team/repo.git"}
	commit := hostileCommit(t, cl, repo, []node{dir("app", file("cm.yaml", "kind: ConfigMap\n"), link("values.yaml", "cm.yaml"))})
	out, err := cl.Checkout(context.Background(), repo, commit)
	if err != nil {
		t.Fatal(err)
	}
	for _, tamper := range []struct {
		name string
		do   func() error
	}{
		{"a planted manifest", func() error {
			_ = os.Chmod(filepath.Join(out, "app"), 0o755)
			return os.WriteFile(filepath.Join(out, "app", "planted.yaml"), []byte("kind: Secret\n"), 0o444)
		}},
		{"a link turned elsewhere", func() error {
			_ = os.Remove(filepath.Join(out, "app", "values.yaml"))
			return os.Symlink("/etc/passwd", filepath.Join(out, "app", "values.yaml"))
		}},
		{"a file rewritten", func() error {
			p := filepath.Join(out, "app", "cm.yaml")
			_ = os.Chmod(p, 0o644)
			return os.WriteFile(p, []byte("kind: Secret\nstringData: {}\n"), 0o444)
		}},
	} {
		if err := tamper.do(); err != nil {
			t.Fatalf("%s: %v", tamper.name, err)
		}
		again, err := cl.Checkout(context.Background(), repo, commit)
		if err != nil || again != out {
			t.Fatalf("%s: checkout %s, %v", tamper.name, again, err)
		}
		if _, err := os.Lstat(filepath.Join(out, "app", "planted.yaml")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: the planted file is served: %v", tamper.name, err)
		}
		if target, err := os.Readlink(filepath.Join(out, "app", "values.yaml")); err != nil || target != "cm.yaml" {
			t.Errorf("%s: the link is %q (%v)", tamper.name, target, err)
		}
		if data, err := os.ReadFile(filepath.Join(out, "app", "cm.yaml")); err != nil || string(data) != "kind: ConfigMap\n" {
			t.Errorf("%s: cm.yaml is %q (%v)", tamper.name, data, err)
		}
	}
}

// The cache of a repository nothing checked out for MaxIdle goes; one in use stays.
func TestIdleRepositoryCachesAreSwept(t *testing.T) {
	cl := newClient(t)
	cl.MaxIdle = time.Hour
	old, used := Repo{URL: "https://git.example.invalid/old.git"}, Repo{URL: "https://git.example.invalid/used.git"}
	oldCommit := hostileCommit(t, cl, old, []node{file("a.yaml", "a: 1\n")})
	if _, err := cl.Checkout(context.Background(), old, oldCommit); err != nil {
		t.Fatal(err)
	}
	// Two hours ago, every part of it.
	past := time.Now().Add(-2 * time.Hour)
	_ = filepath.WalkDir(cl.repoDir(old), func(p string, _ fs.DirEntry, _ error) error { return os.Chtimes(p, past, past) })
	usedCommit := hostileCommit(t, cl, used, []node{file("b.yaml", "b: 1\n")})
	cl.swept = time.Time{}
	if _, err := cl.Checkout(context.Background(), used, usedCommit); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cl.repoDir(old)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the idle repository's cache is still there: %v", err)
	}
	if _, err := os.Stat(cl.repoDir(used)); err != nil {
		t.Errorf("the used repository's cache went: %v", err)
	}
}

// Past MaxCacheBytes the caches of the repositories used longest ago go, until the cache fits;
// the one about to be checked out stays whatever its age.
func TestRepositoryCachesAreEvictedBySize(t *testing.T) {
	cl := newClient(t)
	repos := map[string]Repo{}
	for i, name := range []string{"oldest", "older", "recent"} {
		repos[name] = Repo{URL: "https://git.example.invalid/" + name + ".git"}
		commit := hostileCommit(t, cl, repos[name], []node{file("a.yaml", strings.Repeat("a", 64<<10))})
		cl.swept = time.Now() // no sweep while the cache is built
		if _, err := cl.Checkout(context.Background(), repos[name], commit); err != nil {
			t.Fatal(err)
		}
		at := time.Now().Add(time.Duration(i-3) * time.Hour)
		_ = filepath.WalkDir(cl.repoDir(repos[name]), func(p string, _ fs.DirEntry, _ error) error { return os.Chtimes(p, at, at) })
	}
	// Room for two repositories' caches: the oldest goes, though a week has not passed.
	next := hostileCommit(t, cl, repos["recent"], []node{file("b.yaml", "b: 1\n")})
	cl.MaxCacheBytes = diskUsage(cl.repoDir(repos["older"])) + diskUsage(cl.repoDir(repos["recent"]))
	cl.swept = time.Time{}
	if _, err := cl.Checkout(context.Background(), repos["recent"], next); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{"oldest": false, "older": true, "recent": true} {
		_, err := os.Stat(cl.repoDir(repos[name]))
		if exists := err == nil; exists != want {
			t.Errorf("the cache of %s: exists %v, want %v", name, exists, want)
		}
	}
}

// FuzzHostileTrees checks out trees of any names, modes, links and nesting: whatever the tree,
// nothing is written outside its checkout, and a checkout that succeeds holds exactly the tree.
// Each line of the input is an entry: a mode letter (f file, x executable, l link, m submodule)
// and a path whose segments nest trees; a link's target follows a tab.
func FuzzHostileTrees(f *testing.F) {
	for _, seed := range []string{
		"lescape\tOUTSIDE\nfescape/planted.yaml",
		"fapp/fleet.yaml\nlapp/values.yaml\tfleet.yaml",
		"l.\t..\nf./x",
		"f../../x",
		"lup\t../../..\nfup/x\nfup/y/z",
		"fa\nfa/b",
		"ma\nfa/b",
		"fapp\\/x",
		"lapp/a\tOUTSIDE/secret\nfapp/b",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, input string) {
		cl := &Client{CacheDir: t.TempDir()}
		outside := t.TempDir()
		repo := Repo{URL: "https://git.example.invalid/fuzz.git"}
		commit := hostileCommit(t, cl, repo, parseNodes(strings.ReplaceAll(input, "OUTSIDE", outside)))
		out, err := cl.Checkout(context.Background(), repo, commit)
		assertNothingOutside(t, cl, outside)
		if err != nil {
			return
		}
		// Every link of the checkout is one the tree has, and the checkout is the tree.
		r, _ := git.PlainOpen(filepath.Join(cl.repoDir(repo), "repo.git"))
		co, _ := r.CommitObject(plumbing.NewHash(commit))
		entries, terr := treeEntries(co, DefaultMaxCheckoutFiles)
		if terr != nil {
			t.Fatalf("checked out a tree that is refused: %v", terr)
		}
		if err := verifyCheckout(out, entries); err != nil {
			t.Errorf("the checkout is not the tree: %v", err)
		}
	})
}

// parseNodes builds nested nodes from FuzzHostileTrees's lines; "\/" is a slash inside a name.
func parseNodes(input string) []node {
	var root []node
	for _, line := range strings.Split(input, "\n") {
		if len(line) < 2 {
			continue
		}
		mode := map[byte]filemode.FileMode{'f': filemode.Regular, 'x': filemode.Executable, 'l': filemode.Symlink, 'm': filemode.Submodule}[line[0]]
		if mode == 0 {
			continue
		}
		p, target, _ := strings.Cut(line[1:], "\t")
		segs := strings.Split(strings.ReplaceAll(p, `\/`, "\x00"), "/")
		for i := range segs {
			segs[i] = strings.ReplaceAll(segs[i], "\x00", "/")
		}
		content := target
		if mode != filemode.Symlink {
			content = p
		}
		root = addNode(root, segs, node{mode: mode, content: content})
		if len(root) > 64 {
			break
		}
	}
	return root
}

func addNode(nodes []node, segs []string, leaf node) []node {
	if len(segs) == 1 {
		leaf.name = segs[0]
		return append(nodes, leaf)
	}
	for i := range nodes {
		if nodes[i].name == segs[0] && nodes[i].mode == filemode.Dir {
			nodes[i].children = addNode(nodes[i].children, segs[1:], leaf)
			return nodes
		}
	}
	return append(nodes, node{name: segs[0], mode: filemode.Dir, children: addNode(nil, segs[1:], leaf)})
}

// Credentials given in a repository's URL keep its cache apart like any others: a commit one
// tenant fetched with them is never served to another that names the URL without them (or
// with other ones).
func TestURLCredentialsKeepCachesApart(t *testing.T) {
	cl := newClient(t)
	dirs := map[string]bool{}
	for _, u := range []string{"https://git.example.invalid/team/repo.git", "https://alice:token-a@git.example.invalid/team/repo.git", "https://bob:token-b@git.example.invalid/team/repo.git"} {
		dirs[cl.repoDir(Repo{URL: u})] = true
	}
	if len(dirs) != 3 {
		t.Errorf("the same repository with different URL credentials shares a cache: %v", dirs)
	}
	if cl.repoDir(Repo{URL: "https://alice:token-a@git.example.invalid/team/repo.git"}) != cl.repoDir(Repo{URL: "https://alice:token-a@git.example.invalid/team/repo.git"}) {
		t.Errorf("the same URL gets two caches")
	}
}
