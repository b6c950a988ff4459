package gitsource

import (
	"crypto/ed25519"
	"crypto/rand"
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
	"testing"

	"golang.org/x/crypto/ssh"
)

// upstream is a bare repository with a work tree to commit from, driven by the git CLI (test
// tooling only: the product speaks git through go-git).
type upstream struct {
	t    *testing.T
	bare string // <root>/repo.git
	work string
}

func newUpstream(t *testing.T) *upstream {
	t.Helper()
	root := t.TempDir()
	u := &upstream{t: t, bare: filepath.Join(root, "repo.git"), work: filepath.Join(root, "work")}
	u.git(root, "init", "-q", "--bare", "-b", "main", u.bare)
	u.git(root, "clone", "-q", u.bare, u.work)
	u.git(u.work, "checkout", "-q", "-b", "main")
	return u
}

func (u *upstream) git(dir string, args ...string) string {
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

// commit writes files on a branch, commits and pushes; it returns the commit.
func (u *upstream) commit(branch string, files map[string]string) string {
	u.t.Helper()
	if out := u.git(u.work, "branch", "--list", branch); out == "" {
		u.git(u.work, "checkout", "-q", "-b", branch)
	} else {
		u.git(u.work, "checkout", "-q", branch)
	}
	for name, content := range files {
		p := filepath.Join(u.work, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			u.t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			u.t.Fatal(err)
		}
	}
	u.git(u.work, "add", "-A")
	u.git(u.work, "commit", "-q", "--allow-empty", "-m", "change")
	u.git(u.work, "push", "-q", "-f", "origin", branch)
	return u.git(u.work, "rev-parse", "HEAD")
}

func (u *upstream) tag(name string, annotated bool) {
	u.t.Helper()
	if annotated {
		u.git(u.work, "tag", "-a", "-m", name, name)
	} else {
		u.git(u.work, "tag", name)
	}
	u.git(u.work, "push", "-q", "origin", name)
}

// serveHTTP serves the repository over smart HTTP (git http-backend through net/http/cgi),
// with basic auth when user is set.
func (u *upstream) serveHTTP(user, pass string) *httptest.Server {
	u.t.Helper()
	backend := &cgi.Handler{
		Path: gitHTTPBackend(u.t),
		Root: "/",
		Env:  []string{"GIT_PROJECT_ROOT=" + filepath.Dir(u.bare), "GIT_HTTP_EXPORT_ALL=1", "GIT_CONFIG_NOSYSTEM=1"},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if user != "" {
			if u, p, ok := r.BasicAuth(); !ok || u != user || p != pass {
				w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
		}
		backend.ServeHTTP(w, r)
	}))
	u.t.Cleanup(srv.Close)
	return srv
}

func gitHTTPBackend(t *testing.T) string {
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

// sshServer serves git-upload-pack over SSH on loopback, for one client key.
type sshServer struct {
	addr      string
	hostKey   ssh.Signer
	clientKey []byte // PEM
	ln        net.Listener
	wg        sync.WaitGroup
}

func (u *upstream) serveSSH() *sshServer {
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
	s := &sshServer{addr: ln.Addr().String(), hostKey: hostSigner, clientKey: pemEncode(block), ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			s.wg.Add(1)
			go func() { defer s.wg.Done(); s.handle(conn, cfg, filepath.Dir(u.bare)) }()
		}
	}()
	u.t.Cleanup(func() { ln.Close(); s.wg.Wait() })
	return s
}

func (s *sshServer) handle(conn net.Conn, cfg *ssh.ServerConfig, root string) {
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

// knownHosts is a known_hosts line for the server.
func (s *sshServer) knownHosts() []byte {
	host, port, _ := net.SplitHostPort(s.addr)
	return []byte(fmt.Sprintf("[%s]:%s %s", host, port, ssh.MarshalAuthorizedKey(s.hostKey.PublicKey())))
}

func (s *sshServer) url() string { return "ssh://git@" + s.addr + "/repo.git" }
