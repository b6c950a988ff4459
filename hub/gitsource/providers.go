package gitsource

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// provider is one git host's webhook dialect: how its deliveries are recognized, how they are
// signed, and where a push event says which ref of which repository moved.
type provider interface {
	name() string
	// detects reports whether a delivery's headers are this provider's.
	detects(h http.Header) bool
	// verify checks a delivery against a subscriber's secret.
	verify(h http.Header, body []byte, secret string) bool
	// parse reads a push (or tag) event; ignore says why another event is not one.
	parse(h http.Header, body []byte) (p Push, ignore string, err error)
}

// providers in the order their headers are checked: Bitbucket Server's event key is also a
// Bitbucket Cloud header, so it comes first.
var providers = []provider{
	// GitHub: only the SHA-256 signature is accepted, not the legacy SHA-1 X-Hub-Signature.
	giteaLike{provider: "github", event: "X-GitHub-Event", signature: hmacSHA256{header: "X-Hub-Signature-256", prefix: "sha256="}},
	gitlab{},
	giteaLike{provider: "gitea", event: "X-Gitea-Event", signature: hmacSHA256{header: "X-Gitea-Signature"}},
	giteaLike{provider: "gogs", event: "X-Gogs-Event", signature: hmacSHA256{header: "X-Gogs-Signature"}},
	bitbucketServer{},
	bitbucketCloud{},
	registryEvents{},
}

// detect returns the provider a delivery's headers name, or nil.
func detect(h http.Header) provider {
	for _, p := range providers {
		if p.detects(h) {
			return p
		}
	}
	return nil
}

// readPush parses a delivery and checks that a push names a ref and a repository.
func readPush(from provider, h http.Header, body []byte) (Push, string, error) {
	p, ignore, err := from.parse(h, body)
	p.Provider = from.name()
	if err != nil || ignore != "" {
		return p, ignore, err
	}
	if p.Ref == "" {
		return p, "", errors.New("no pushed ref")
	}
	if len(p.URLs) == 0 || strings.Join(p.URLs, "") == "" {
		return p, "", errors.New("no repository URL")
	}
	return p, "", nil
}

func decode(body []byte, into any) error {
	if err := json.Unmarshal(body, into); err != nil {
		return fmt.Errorf("invalid JSON: %w", err)
	}
	return nil
}

// hmacSHA256 is a signature: the hex HMAC-SHA256 of the body in a header, after a prefix.
type hmacSHA256 struct{ header, prefix string }

func (s hmacSHA256) verify(h http.Header, body []byte, secret string) bool {
	got, ok := strings.CutPrefix(h.Get(s.header), s.prefix)
	if !ok || got == "" {
		return false
	}
	sig, err := hex.DecodeString(got)
	if err != nil {
		return false
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	return hmac.Equal(sig, mac.Sum(nil))
}

// giteaLike is GitHub and the hosts that speak its dialect (Gitea, Gogs): push and create
// events, the repository's clone, SSH and web URLs.
type giteaLike struct {
	provider, event string
	signature       hmacSHA256
}

func (g giteaLike) name() string               { return g.provider }
func (g giteaLike) detects(h http.Header) bool { return h.Get(g.event) != "" }
func (g giteaLike) verify(h http.Header, body []byte, secret string) bool {
	return g.signature.verify(h, body, secret)
}

func (g giteaLike) parse(h http.Header, body []byte) (Push, string, error) {
	var p Push
	switch event := h.Get(g.event); event {
	case "ping":
		return p, "ping", nil
	case "push", "create":
	default:
		return p, "event " + event, nil
	}
	var pl struct {
		Ref     string `json:"ref"`
		RefType string `json:"ref_type"`
		Repo    struct {
			CloneURL string `json:"clone_url"`
			SSHURL   string `json:"ssh_url"`
			HTMLURL  string `json:"html_url"`
		} `json:"repository"`
	}
	if err := decode(body, &pl); err != nil {
		return p, "", err
	}
	p.Ref = pl.Ref
	if h.Get(g.event) == "create" && pl.RefType == "tag" {
		p.Ref = "refs/tags/" + pl.Ref
	}
	p.URLs = []string{pl.Repo.CloneURL, pl.Repo.SSHURL, pl.Repo.HTMLURL}
	return p, "", nil
}

// gitlab signs with a shared token, not a signature.
type gitlab struct{}

func (gitlab) name() string               { return "gitlab" }
func (gitlab) detects(h http.Header) bool { return h.Get("X-Gitlab-Event") != "" }
func (gitlab) verify(h http.Header, _ []byte, secret string) bool {
	return subtle.ConstantTimeCompare([]byte(h.Get("X-Gitlab-Token")), []byte(secret)) == 1
}

func (gitlab) parse(h http.Header, body []byte) (Push, string, error) {
	var p Push
	if ev := h.Get("X-Gitlab-Event"); ev != "Push Hook" && ev != "Tag Push Hook" {
		return p, "event " + ev, nil
	}
	var pl struct {
		Ref     string `json:"ref"`
		Project struct {
			HTTP   string `json:"git_http_url"`
			SSH    string `json:"git_ssh_url"`
			WebURL string `json:"web_url"`
		} `json:"project"`
	}
	if err := decode(body, &pl); err != nil {
		return p, "", err
	}
	p.Ref, p.URLs = pl.Ref, []string{pl.Project.HTTP, pl.Project.SSH, pl.Project.WebURL}
	return p, "", nil
}

// bitbucketSignature is how both Bitbucket products sign deliveries.
var bitbucketSignature = hmacSHA256{header: "X-Hub-Signature", prefix: "sha256="}

// bitbucketCloud: repo:push events, the first change that is not a deletion.
type bitbucketCloud struct{}

func (bitbucketCloud) name() string               { return "bitbucket" }
func (bitbucketCloud) detects(h http.Header) bool { return h.Get("X-Event-Key") != "" }
func (bitbucketCloud) verify(h http.Header, body []byte, secret string) bool {
	return bitbucketSignature.verify(h, body, secret)
}

func (bitbucketCloud) parse(h http.Header, body []byte) (Push, string, error) {
	var p Push
	if h.Get("X-Event-Key") != "repo:push" {
		return p, "event " + h.Get("X-Event-Key"), nil
	}
	var pl struct {
		Repository struct {
			FullName string `json:"full_name"`
			Links    struct {
				HTML struct {
					Href string `json:"href"`
				} `json:"html"`
			} `json:"links"`
		} `json:"repository"`
		Push struct {
			Changes []struct {
				New *struct {
					Type string `json:"type"`
					Name string `json:"name"`
				} `json:"new"`
			} `json:"changes"`
		} `json:"push"`
	}
	if err := decode(body, &pl); err != nil {
		return p, "", err
	}
	for _, c := range pl.Push.Changes {
		if c.New == nil {
			continue // a deletion
		}
		kind := "refs/heads/"
		if c.New.Type == "tag" {
			kind = "refs/tags/"
		}
		p.Ref = kind + c.New.Name
		break
	}
	p.URLs = []string{pl.Repository.Links.HTML.Href}
	if pl.Repository.FullName != "" {
		p.URLs = append(p.URLs, "https://bitbucket.org/"+pl.Repository.FullName)
	}
	return p, "", nil
}

// bitbucketServer (Data Center): repo:refs_changed events, the first change that is not a
// deletion, the repository's clone links.
type bitbucketServer struct{}

func (bitbucketServer) name() string { return "bitbucket-server" }
func (bitbucketServer) detects(h http.Header) bool {
	return h.Get("X-Event-Key") == "repo:refs_changed"
}
func (bitbucketServer) verify(h http.Header, body []byte, secret string) bool {
	return bitbucketSignature.verify(h, body, secret)
}

func (bitbucketServer) parse(_ http.Header, body []byte) (Push, string, error) {
	var p Push
	var pl struct {
		Repository struct {
			Links struct {
				Clone []struct {
					Href string `json:"href"`
				} `json:"clone"`
			} `json:"links"`
		} `json:"repository"`
		Changes []struct {
			Ref struct {
				ID string `json:"id"`
			} `json:"ref"`
			Type string `json:"type"`
		} `json:"changes"`
	}
	if err := decode(body, &pl); err != nil {
		return p, "", err
	}
	for _, c := range pl.Changes {
		if c.Type != "DELETE" {
			p.Ref = c.Ref.ID
			break
		}
	}
	for _, l := range pl.Repository.Links.Clone {
		p.URLs = append(p.URLs, l.Href)
	}
	return p, "", nil
}

// registryEvents: the push notifications of an OCI registry speaking the CNCF distribution
// registry's format (Content-Type application/vnd.docker.distribution.events.v1+json; GitLab's
// and most self-hosted registries send it). Such a registry sends the headers it is configured
// with: the Authorization header carries the GitRepo's webhook secret, as "Bearer <secret>" or
// bare. A pushed tag of repository path on host is a push of refs/tags/<tag> to
// oci://host/path.
type registryEvents struct{}

const distributionEvents = "application/vnd.docker.distribution.events.v1+json"

func (registryEvents) name() string { return "registry" }
func (registryEvents) detects(h http.Header) bool {
	return strings.HasPrefix(h.Get("Content-Type"), distributionEvents)
}
func (registryEvents) verify(h http.Header, _ []byte, secret string) bool {
	got := h.Get("Authorization")
	if bearer, ok := strings.CutPrefix(got, "Bearer "); ok {
		got = bearer
	}
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(secret)) == 1
}

func (registryEvents) parse(_ http.Header, body []byte) (Push, string, error) {
	var p Push
	var pl struct {
		Events []struct {
			Action string `json:"action"`
			Target struct {
				Repository string `json:"repository"`
				Tag        string `json:"tag"`
			} `json:"target"`
			Request struct {
				Host string `json:"host"`
			} `json:"request"`
		} `json:"events"`
	}
	if err := decode(body, &pl); err != nil {
		return p, "", err
	}
	for _, ev := range pl.Events {
		if ev.Action == "push" && ev.Target.Tag != "" {
			p.Ref = "refs/tags/" + ev.Target.Tag
			if ev.Request.Host != "" && ev.Target.Repository != "" {
				p.URLs = []string{OCIScheme + ev.Request.Host + "/" + ev.Target.Repository}
			}
			return p, "", nil
		}
	}
	return p, "no tag pushed", nil
}
