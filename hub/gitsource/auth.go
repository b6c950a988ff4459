package gitsource

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/flotilla-dev/flotilla/bundle/scrub"
)

// Auth is how to reach a repository.
type Auth struct {
	// Username and Password for HTTPS basic auth; a token goes in Password.
	Username, Password string
	// SSHPrivateKey (PEM) and its passphrase, for ssh:// and scp-like URLs.
	SSHPrivateKey []byte
	SSHPassphrase string
	// KnownHosts is required with an SSH key: host keys are checked strictly.
	KnownHosts []byte
	// CABundle is trusted for HTTPS in addition to the system roots.
	CABundle []byte
	// InsecureSkipTLSVerify turns TLS verification off. Explicit opt-in only.
	InsecureSkipTLSVerify bool
}

// Secrets are the credentials' values, for scrubbing what a fetch's errors say.
func (a *Auth) Secrets() *scrub.Secrets {
	s := &scrub.Secrets{}
	if a != nil {
		s.Add(a.Password, string(a.SSHPrivateKey), a.SSHPassphrase)
	}
	return s
}

// identity is a digest of everything that decides what the remote lets a client see: two
// GitRepos share a cache only when their credentials are the same ("anonymous" without any).
// The credentials themselves are never stored.
func (a *Auth) identity() string {
	if a == nil || a.Username == "" && a.Password == "" && len(a.SSHPrivateKey) == 0 {
		return "anonymous"
	}
	h := sha256.New()
	for _, part := range [][]byte{[]byte(a.Username), []byte(a.Password), a.SSHPrivateKey, []byte(a.SSHPassphrase), a.KnownHosts, a.CABundle, []byte(fmt.Sprint(a.InsecureSkipTLSVerify))} {
		fmt.Fprintf(h, "%d:", len(part))
		h.Write(part)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Secret keys read by AuthFromSecret (those of kubernetes.io/basic-auth and
// kubernetes.io/ssh-auth Secrets, plus known_hosts and token).
const (
	SecretUsername   = "username"
	SecretPassword   = "password"
	SecretToken      = "token"
	SecretSSHKey     = "ssh-privatekey"
	SecretPassphrase = "passphrase"
	SecretKnownHosts = "known_hosts"
	SecretCABundle   = "cacerts"
)

// AuthFromSecret builds Auth from a Secret's data.
func AuthFromSecret(data map[string][]byte) (*Auth, error) {
	a := &Auth{Username: string(data[SecretUsername]), Password: string(data[SecretPassword]),
		SSHPrivateKey: data[SecretSSHKey], SSHPassphrase: string(data[SecretPassphrase]),
		KnownHosts: data[SecretKnownHosts], CABundle: data[SecretCABundle]}
	if tok := data[SecretToken]; len(tok) > 0 {
		a.Password = string(tok)
		if a.Username == "" {
			a.Username = "git" // any non-empty user name: hosts read the token
		}
	}
	if len(a.SSHPrivateKey) > 0 && len(a.KnownHosts) == 0 {
		return nil, errors.New("the secret has an ssh-privatekey but no known_hosts: host keys are always checked")
	}
	return a, nil
}

// method returns the go-git auth method for a URL; over SSH, connecting gives up after
// connect (the stall timeout: go-git's SSH transport takes no dialer, so a stalled session is
// bounded by the operation's whole timeout).
func (a *Auth) method(url, knownHostsDir string, connect time.Duration) (transport.AuthMethod, error) {
	if a == nil {
		return nil, nil
	}
	ep, err := transport.NewEndpoint(url)
	if err != nil {
		return nil, fmt.Errorf("invalid repository URL: %w", err)
	}
	switch ep.Protocol {
	case "ssh":
		if len(a.SSHPrivateKey) == 0 {
			return nil, errors.New("an ssh URL needs a secret with ssh-privatekey and known_hosts")
		}
		user := ep.User
		if user == "" {
			user = "git"
		}
		keys, err := gitssh.NewPublicKeys(user, a.SSHPrivateKey, a.SSHPassphrase)
		if err != nil {
			return nil, fmt.Errorf("invalid ssh-privatekey: %w", err)
		}
		cb, err := knownHostsCallback(a.KnownHosts, knownHostsDir)
		if err != nil {
			return nil, err
		}
		keys.HostKeyCallback = cb
		return connectBoundKeys{PublicKeys: keys, connect: connect}, nil
	case "http", "https":
		if a.Username == "" && a.Password == "" {
			return nil, nil
		}
		return &githttp.BasicAuth{Username: a.Username, Password: a.Password}, nil
	}
	return nil, nil
}

// knownHostsCallback checks host keys strictly against known_hosts content (hashed entries and
// markers included), keeping the file under dir named by its hash.
func knownHostsCallback(content []byte, dir string) (ssh.HostKeyCallback, error) {
	if len(content) == 0 {
		return nil, errors.New("known_hosts is empty: host keys are always checked")
	}
	if dir == "" {
		dir = os.TempDir()
	}
	sum := sha256.Sum256(content)
	path := filepath.Join(dir, "known_hosts-"+hex.EncodeToString(sum[:8]))
	if _, err := os.Stat(path); err != nil {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("failed to store known_hosts: %w", err)
		}
		if err := os.WriteFile(path, content, 0o600); err != nil {
			return nil, fmt.Errorf("failed to store known_hosts: %w", err)
		}
	}
	cb, err := knownhosts.New(path)
	if err != nil {
		return nil, fmt.Errorf("invalid known_hosts: %w", err)
	}
	return func(hostname string, remote net.Addr, key ssh.PublicKey) error {
		if err := cb(hostname, remote, key); err != nil {
			return &HostKeyError{Host: hostname, Err: err}
		}
		return nil
	}, nil
}

// HostKeyError is a host key that known_hosts does not vouch for.
type HostKeyError struct {
	Host string
	Err  error
}

func (e *HostKeyError) Error() string {
	return fmt.Sprintf("host key of %s is not in known_hosts: %v", e.Host, e.Err)
}
func (e *HostKeyError) Unwrap() error { return e.Err }

// connectBoundKeys are SSH keys whose connections give up connecting after connect.
type connectBoundKeys struct {
	*gitssh.PublicKeys
	connect time.Duration
}

func (k connectBoundKeys) ClientConfig() (*ssh.ClientConfig, error) {
	cfg, err := k.PublicKeys.ClientConfig()
	if cfg != nil {
		cfg.Timeout = k.connect
	}
	return cfg, err
}
