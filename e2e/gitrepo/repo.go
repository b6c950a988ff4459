// Package gitrepo is a git repository driven by the git CLI and served over smart HTTP: the
// repositories the quickstart and `flotilla dev` serve on loopback, and, wrapped by
// e2e/gitserver, the ones tests push to. It returns errors and links no test tooling.
package gitrepo

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
)

// Repo is a bare repository with a work tree to commit from, driven by the git CLI, that can
// be served over smart HTTP.
type Repo struct {
	// Bare is the bare repository, <root>/repo.git.
	Bare string
	// Work is a clone to commit from.
	Work string
	// Signing, when set, signs the commits made (and the annotated tags, by their callers).
	Signing *Signing
	// refReads counts the ref advertisements served over HTTP: one per poll of a client.
	refReads atomic.Int64
}

// Signing is how git signs: its -c options (gpg.format, user.signingkey) and the environment
// the signing program needs (GNUPGHOME for gpg).
type Signing struct {
	Config []string
	Env    []string
}

// Init creates an empty repository under root whose default branch is main.
func Init(root string) (*Repo, error) {
	r := &Repo{Bare: filepath.Join(root, "repo.git"), Work: filepath.Join(root, "work")}
	for _, step := range []struct {
		dir  string
		args []string
	}{
		{root, []string{"init", "-q", "--bare", "-b", "main", r.Bare}},
		{root, []string{"clone", "-q", r.Bare, r.Work}},
		{r.Work, []string{"checkout", "-q", "-b", "main"}},
	} {
		if _, err := r.Git(step.dir, step.args...); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Git runs the git CLI in dir and returns its trimmed output.
func (r *Repo) Git(dir string, args ...string) (string, error) {
	var config, env []string
	if sg := r.Signing; sg != nil {
		for _, c := range sg.Config {
			config = append(config, "-c", c)
		}
		env = sg.Env
	}
	cmd := exec.Command("git", append(config, args...)...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com", "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("git %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// Commit writes files on a branch (the work tree as it is, with nil), commits and pushes; it
// returns the commit.
func (r *Repo) Commit(branch string, files map[string]string) (string, error) {
	out, err := r.Git(r.Work, "branch", "--list", branch)
	if err != nil {
		return "", err
	}
	checkout := []string{"checkout", "-q", branch}
	if out == "" {
		checkout = []string{"checkout", "-q", "-b", branch}
	}
	if _, err := r.Git(r.Work, checkout...); err != nil {
		return "", err
	}
	for name, content := range files {
		p := filepath.Join(r.Work, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			return "", err
		}
	}
	for _, args := range [][]string{{"add", "-A"}, r.commitArgs(), {"push", "-q", "-f", "origin", branch}} {
		if _, err := r.Git(r.Work, args...); err != nil {
			return "", err
		}
	}
	return r.Git(r.Work, "rev-parse", "HEAD")
}

func (r *Repo) commitArgs() []string {
	if r.Signing != nil {
		return []string{"commit", "-q", "-S", "--allow-empty", "-m", "change"}
	}
	return []string{"commit", "-q", "--allow-empty", "-m", "change"}
}

// Handler serves the repository over smart HTTP (git http-backend through net/http/cgi), at
// /repo.git, with basic auth when user is set.
func (r *Repo) Handler(user, pass string) (http.Handler, error) {
	backendPath, err := gitHTTPBackend()
	if err != nil {
		return nil, err
	}
	backend := &cgi.Handler{
		Path: backendPath,
		Root: "/",
		Env:  []string{"GIT_PROJECT_ROOT=" + filepath.Dir(r.Bare), "GIT_HTTP_EXPORT_ALL=1", "GIT_CONFIG_NOSYSTEM=1"},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if user != "" {
			if u, p, ok := req.BasicAuth(); !ok || u != user || p != pass {
				w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
		}
		if strings.HasSuffix(req.URL.Path, "/info/refs") {
			r.refReads.Add(1)
		}
		backend.ServeHTTP(w, req)
	}), nil
}

// RefReads is how many times a client read the repository's refs over HTTP (a poll, or the
// start of a fetch): a test waits for polls with it instead of sleeping.
func (r *Repo) RefReads() int64 { return r.refReads.Load() }

func gitHTTPBackend() (string, error) {
	out, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		return "", fmt.Errorf("git --exec-path: %w (install git: apt-get install git)", err)
	}
	p := filepath.Join(strings.TrimSpace(string(out)), "git-http-backend")
	if _, err := os.Stat(p); err != nil {
		return "", errors.New(p + " missing (install git: apt-get install git)")
	}
	return p, nil
}
