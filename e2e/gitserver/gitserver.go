// Package gitserver runs real git servers on loopback for tests: a gitrepo.Repo (a bare
// repository with a work tree to commit from, driven by the git CLI) served over smart HTTP
// (git http-backend through net/http/cgi, with optional basic auth) or SSH (golang.org/x/crypto/ssh
// running git upload-pack). Failures fail the test; every server stops when the test ends.
package gitserver

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/crypto/ssh"

	"github.com/flotilla-dev/flotilla/e2e/gitrepo"
)

// T is what the servers need of their test: testing.TB has it all.
type T interface {
	Helper()
	TempDir() string
	Fatalf(format string, args ...any)
	Fatal(args ...any)
	Cleanup(func())
}

// Upstream is a gitrepo.Repo for tests: every failure fails the test, and what it serves stops with
// the test.
type Upstream struct {
	*gitrepo.Repo
	t T
}

// New creates an empty repository whose default branch is main.
func New(t T) *Upstream {
	t.Helper()
	r, err := gitrepo.Init(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return &Upstream{Repo: r, t: t}
}

// Git runs the git CLI in dir and returns its trimmed output.
func (u *Upstream) Git(dir string, args ...string) string {
	u.t.Helper()
	out, err := u.Repo.Git(dir, args...)
	if err != nil {
		u.t.Fatal(err)
	}
	return out
}

// Commit writes files on a branch, commits and pushes; it returns the commit.
func (u *Upstream) Commit(branch string, files map[string]string) string {
	u.t.Helper()
	commit, err := u.Repo.Commit(branch, files)
	if err != nil {
		u.t.Fatal(err)
	}
	return commit
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
	switch {
	case annotated && u.Signing != nil:
		u.Git(u.Work, "tag", "-s", "-m", name, name)
	case annotated:
		u.Git(u.Work, "tag", "-a", "-m", name, name)
	default:
		u.Git(u.Work, "tag", name)
	}
	u.Git(u.Work, "push", "-q", "origin", name)
}

// ServeHTTP serves the repository over smart HTTP on loopback until the test ends, with
// basic auth when user is set. The server's URL ends in a path of its own (so
// srv.URL+"/repo.git" names the repository), and a request outside it is refused, not served
// nor counted: the hubs of a test package share one API server, where earlier tests' GitRepos
// still name the loopback addresses of their servers, and a port the system hands out again
// would otherwise serve, and count, polls that are not this test's.
func (u *Upstream) ServeHTTP(user, pass string) *httptest.Server {
	u.t.Helper()
	h, err := u.Handler(user, pass)
	if err != nil {
		u.t.Fatal(err)
	}
	prefix := OwnPath()
	srv := httptest.NewServer(http.StripPrefix(prefix, h))
	srv.URL += prefix
	u.t.Cleanup(srv.Close)
	return srv
}

// OwnPath is a path no other server of the process serves: "/" and a random name.
func OwnPath() string { return "/" + strings.ToLower(rand.Text()) }

// pathOf is the path srv.URL ends in (ServeHTTP's own path).
func pathOf(srv *httptest.Server) string {
	u, err := url.Parse(srv.URL)
	if err != nil {
		return ""
	}
	return u.Path
}

// ServeHTTPS is ServeHTTP over TLS with a certificate for 127.0.0.1; it also returns the CA
// certificate (PEM) to trust.
func (u *Upstream) ServeHTTPS() (*httptest.Server, []byte) {
	u.t.Helper()
	plain := u.ServeHTTP("", "")
	plain.Close()
	srv := httptest.NewTLSServer(plain.Config.Handler)
	srv.URL += pathOf(plain)
	u.t.Cleanup(srv.Close)
	return srv, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
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
