// Package gitserver runs real git servers on loopback for tests: a bare repository with a work
// tree to commit from (driven by the git CLI, which only tests use), served over smart HTTP
// (git http-backend through net/http/cgi, with optional basic auth) or SSH (golang.org/x/crypto/ssh
// running git upload-pack). Every server stops when the test ends.
package gitserver

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/crypto/ssh"
)

// T is what the servers need of their user: testing.TB has it all; the quickstart passes its own.
type T interface {
	Helper()
	TempDir() string
	Fatalf(format string, args ...any)
	Fatal(args ...any)
	Cleanup(func())
}

// Upstream is a bare repository with a work tree to commit from, driven by the git CLI (test
// tooling only: the product speaks git through go-git).
type Upstream struct {
	t T
	// Bare is the bare repository, <root>/repo.git.
	Bare string
	// Work is a clone to commit from.
	Work string
	// refReads counts the ref advertisements served over HTTP: one per poll of a client.
	refReads atomic.Int64
}

// RefReads is how many times a client read the repository's refs over HTTP (a poll, or the
// start of a fetch): a test waits for polls with it instead of sleeping.
func (u *Upstream) RefReads() int64 { return u.refReads.Load() }

// New creates an empty repository whose default branch is main.
func New(t T) *Upstream {
	t.Helper()
	root := t.TempDir()
	u := &Upstream{t: t, Bare: filepath.Join(root, "repo.git"), Work: filepath.Join(root, "work")}
	u.Git(root, "init", "-q", "--bare", "-b", "main", u.Bare)
	u.Git(root, "clone", "-q", u.Bare, u.Work)
	u.Git(u.Work, "checkout", "-q", "-b", "main")
	return u
}

// Git runs the git CLI in dir and returns its trimmed output.
func (u *Upstream) Git(dir string, args ...string) string {
	u.t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com", "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		u.t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// Commit writes files on a branch, commits and pushes; it returns the commit.
func (u *Upstream) Commit(branch string, files map[string]string) string {
	u.t.Helper()
	if out := u.Git(u.Work, "branch", "--list", branch); out == "" {
		u.Git(u.Work, "checkout", "-q", "-b", branch)
	} else {
		u.Git(u.Work, "checkout", "-q", branch)
	}
	for name, content := range files {
		p := filepath.Join(u.Work, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			u.t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			u.t.Fatal(err)
		}
	}
	u.Git(u.Work, "add", "-A")
	u.Git(u.Work, "commit", "-q", "--allow-empty", "-m", "change")
	u.Git(u.Work, "push", "-q", "-f", "origin", branch)
	return u.Git(u.Work, "rev-parse", "HEAD")
}

// Link makes name a symlink to target in the work tree; the next Commit records it as git
// records any symlink (its target as written, absolute or relative).
func (u *Upstream) Link(name, target string) {
	u.t.Helper()
	p := filepath.Join(u.Work, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		u.t.Fatal(err)
	}
	_ = os.Remove(p)
	if err := os.Symlink(target, p); err != nil {
		u.t.Fatal(err)
	}
}

// Tag tags HEAD of the work tree and pushes the tag.
func (u *Upstream) Tag(name string, annotated bool) {
	u.t.Helper()
	if annotated {
		u.Git(u.Work, "tag", "-a", "-m", name, name)
	} else {
		u.Git(u.Work, "tag", name)
	}
	u.Git(u.Work, "push", "-q", "origin", name)
}

// ServeHTTP serves the repository over smart HTTP (git http-backend through net/http/cgi),
// with basic auth when user is set.
func (u *Upstream) ServeHTTP(user, pass string) *httptest.Server {
	u.t.Helper()
	backend := &cgi.Handler{
		Path: gitHTTPBackend(u.t),
		Root: "/",
		Env:  []string{"GIT_PROJECT_ROOT=" + filepath.Dir(u.Bare), "GIT_HTTP_EXPORT_ALL=1", "GIT_CONFIG_NOSYSTEM=1"},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if user != "" {
			if u, p, ok := r.BasicAuth(); !ok || u != user || p != pass {
				w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
		}
		if strings.HasSuffix(r.URL.Path, "/info/refs") {
			u.refReads.Add(1)
		}
		backend.ServeHTTP(w, r)
	}))
	u.t.Cleanup(srv.Close)
	return srv
}

// ServeHTTPS is ServeHTTP over TLS with a certificate for 127.0.0.1; it also returns the CA
// certificate (PEM) to trust.
func (u *Upstream) ServeHTTPS() (*httptest.Server, []byte) {
	u.t.Helper()
	plain := u.ServeHTTP("", "")
	plain.Close()
	srv := httptest.NewTLSServer(plain.Config.Handler)
	u.t.Cleanup(srv.Close)
	return srv, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
}

func gitHTTPBackend(t T) string {
	out, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Fatalf("git --exec-path: %v (install git: apt-get install git)", err)
	}
	p := filepath.Join(strings.TrimSpace(string(out)), "git-http-backend")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s missing (install git: apt-get install git)", p)
	}
	return p
}

// SSHServer serves git-upload-pack over SSH on loopback, for one client key.
type SSHServer struct {
	Addr    string
	HostKey ssh.Signer
	// ClientKey is the PEM private key the server accepts.
	ClientKey []byte
	ln        net.Listener
	wg        sync.WaitGroup
}

// ServeSSH serves the repository over SSH to one generated client key.
func (u *Upstream) ServeSSH() *SSHServer {
	u.t.Helper()
	_, hostPriv, _ := ed25519.GenerateKey(rand.Reader)
	hostSigner, err := ssh.NewSignerFromKey(hostPriv)
	if err != nil {
		u.t.Fatal(err)
	}
	clientPub, clientPriv, _ := ed25519.GenerateKey(rand.Reader)
	block, err := ssh.MarshalPrivateKey(clientPriv, "")
	if err != nil {
		u.t.Fatal(err)
	}
	allowed, _ := ssh.NewPublicKey(clientPub)
	cfg := &ssh.ServerConfig{PublicKeyCallback: func(_ ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
		if string(key.Marshal()) == string(allowed.Marshal()) {
			return nil, nil
		}
		return nil, fmt.Errorf("unknown key")
	}}
	cfg.AddHostKey(hostSigner)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		u.t.Fatal(err)
	}
	s := &SSHServer{Addr: ln.Addr().String(), HostKey: hostSigner, ClientKey: pem.EncodeToMemory(block), ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			s.wg.Add(1)
			go func() { defer s.wg.Done(); s.handle(conn, cfg, filepath.Dir(u.Bare)) }()
		}
	}()
	u.t.Cleanup(func() { ln.Close(); s.wg.Wait() })
	return s
}

func (s *SSHServer) handle(conn net.Conn, cfg *ssh.ServerConfig, root string) {
	defer conn.Close()
	_, chans, reqs, err := ssh.NewServerConn(conn, cfg)
	if err != nil {
		return
	}
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		ch, requests, err := nc.Accept()
		if err != nil {
			continue
		}
		go func() {
			defer ch.Close()
			for req := range requests {
				if req.Type != "exec" {
					_ = req.Reply(false, nil)
					continue
				}
				var payload struct{ Command string }
				_ = ssh.Unmarshal(req.Payload, &payload)
				_ = req.Reply(true, nil)
				parts := strings.SplitN(payload.Command, " ", 2)
				if len(parts) != 2 || parts[0] != "git-upload-pack" {
					_, _ = ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{1}))
					return
				}
				repo := filepath.Join(root, filepath.Base(strings.Trim(parts[1], "'\"/")))
				cmd := exec.Command("git", "upload-pack", repo)
				cmd.Stdin, cmd.Stdout, cmd.Stderr = ch, ch, io.Discard
				status := uint32(0)
				if err := cmd.Run(); err != nil {
					status = 1
				}
				_, _ = ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{status}))
				return
			}
		}()
	}
}

// KnownHosts is a known_hosts line for the server.
func (s *SSHServer) KnownHosts() []byte {
	host, port, _ := net.SplitHostPort(s.Addr)
	return []byte(fmt.Sprintf("[%s]:%s %s", host, port, ssh.MarshalAuthorizedKey(s.HostKey.PublicKey())))
}

// URL is the repository's ssh:// URL.
func (s *SSHServer) URL() string { return "ssh://git@" + s.Addr + "/repo.git" }
