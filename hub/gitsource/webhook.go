package gitsource

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/go-logr/logr"
)

// Push is what a webhook delivery says happened: a push of Ref to the repository reachable at
// URLs. The commit in the payload is never used: the poller resolves the ref itself.
type Push struct {
	Provider string
	URLs     []string
	// Ref is the full ref name: refs/heads/<branch> or refs/tags/<tag>.
	Ref string
}

// Branch and Tag return the pushed branch or tag, or "".
func (p Push) Branch() string {
	b, _ := strings.CutPrefix(p.Ref, "refs/heads/")
	return onlyIf(b, p.Ref)
}
func (p Push) Tag() string { t, _ := strings.CutPrefix(p.Ref, "refs/tags/"); return onlyIf(t, p.Ref) }

func onlyIf(short, full string) string {
	if short == full {
		return ""
	}
	return short
}

// Subscriber is a GitRepo that listens for webhooks.
type Subscriber struct {
	// Key identifies the GitRepo (namespace/name).
	Key string
	Repo
	// Secret verifies deliveries for this subscriber alone.
	Secret string
	// AllowUnsigned lets deliveries without a valid signature trigger this subscriber (the
	// GitRepo opted out of verification). Without it, a subscriber with no Secret is never
	// triggered by a webhook.
	AllowUnsigned bool
}

// accepts reports whether a delivery may trigger the subscriber: signed with its own secret,
// or the subscriber opted out of verification.
func (s Subscriber) accepts(h http.Header, body []byte, verify verifier) bool {
	if s.Secret != "" && verify(h, body, s.Secret) {
		return true
	}
	return s.AllowUnsigned
}

// wants reports whether a push concerns the subscriber's branch, tag or semver channel.
func (s Subscriber) wants(p Push) bool {
	switch {
	case p.Tag() != "":
		return s.Semver != "" || (s.Revision != "" && s.Revision == p.Tag())
	case p.Branch() != "":
		return s.Semver == "" && s.Revision == "" && (s.Branch == "" || s.Branch == p.Branch())
	}
	return false
}

// Receiver is the HTTP endpoint for push and tag webhooks of GitHub, GitLab, Bitbucket Cloud,
// Bitbucket Server, Gitea and Gogs. Each subscriber checks a delivery with its own secret, so
// that one GitRepo's secret never decides for another: a delivery triggers the subscribers it
// is validly signed for (or token, for GitLab), and those that opted out of verification. One
// that triggers none is refused with 401, whether or not any GitRepo follows the repository;
// no response names a GitRepo.
type Receiver struct {
	// Subscribers returns the GitRepos following a normalized repository URL (NormalizeURL).
	Subscribers func(normalizedURL string) []Subscriber
	// Notify is called for every subscriber a valid delivery concerns.
	Notify func(s Subscriber, p Push)
	// MaxBody bounds a delivery's size; default 1 MiB.
	MaxBody int64
	// Log records, at V(1), each delivery and which GitRepos it triggered or why it was
	// refused; default discards. Responses name no GitRepo; the operator's log does.
	Log logr.Logger
}

// ServeHTTP handles one delivery.
func (rc *Receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "webhooks are POSTed", http.StatusMethodNotAllowed)
		return
	}
	limit := rc.MaxBody
	if limit <= 0 {
		limit = 1 << 20
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		http.Error(w, "failed to read the delivery", http.StatusBadRequest)
		return
	}
	if int64(len(body)) > limit {
		http.Error(w, fmt.Sprintf("delivery larger than %d bytes", limit), http.StatusRequestEntityTooLarge)
		return
	}
	provider, verify := detect(r.Header)
	if provider == "" {
		http.Error(w, "unknown webhook provider: expected a GitHub, GitLab, Bitbucket, Gitea or Gogs event header", http.StatusBadRequest)
		return
	}
	push, ignore, err := parsePush(provider, r.Header, body)
	if err != nil {
		http.Error(w, provider+" payload: "+err.Error(), http.StatusBadRequest)
		return
	}
	if ignore != "" {
		writeJSON(w, http.StatusOK, map[string]any{"ignored": ignore})
		return
	}
	seen := map[string]bool{}
	var subs []Subscriber
	for _, u := range push.URLs {
		n := NormalizeURL(u)
		if n == "" || seen[n] {
			continue
		}
		seen[n] = true
		subs = append(subs, rc.Subscribers(n)...)
	}
	var accepted []Subscriber
	for _, s := range subs {
		if s.accepts(r.Header, body, verify) {
			accepted = append(accepted, s)
		}
	}
	if len(accepted) == 0 {
		rc.Log.V(1).Info("webhook delivery refused: no GitRepo accepts its signature", "provider", provider, "ref", push.Ref, "followers", len(subs))
		http.Error(w, "invalid or missing webhook signature", http.StatusUnauthorized)
		return
	}
	var triggered []string
	for _, s := range accepted {
		if s.wants(push) {
			rc.Notify(s, push)
			triggered = append(triggered, s.Key)
		}
	}
	rc.Log.V(1).Info("webhook delivery accepted", "provider", provider, "ref", push.Ref, "triggered", triggered)
	writeJSON(w, http.StatusAccepted, map[string]any{"provider": provider, "ref": push.Ref})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

type verifier func(h http.Header, body []byte, secret string) bool

// detect names the provider from its event header and returns how it signs deliveries.
func detect(h http.Header) (string, verifier) {
	switch {
	case h.Get("X-GitHub-Event") != "":
		// Only the SHA-256 signature is accepted, not the legacy SHA-1 X-Hub-Signature.
		return "github", hmacHeader("X-Hub-Signature-256", "sha256=", sha256.New)
	case h.Get("X-Gitlab-Event") != "":
		return "gitlab", func(h http.Header, _ []byte, secret string) bool {
			return subtle.ConstantTimeCompare([]byte(h.Get("X-Gitlab-Token")), []byte(secret)) == 1
		}
	case h.Get("X-Gitea-Event") != "":
		return "gitea", hmacHeader("X-Gitea-Signature", "", sha256.New)
	case h.Get("X-Gogs-Event") != "":
		return "gogs", hmacHeader("X-Gogs-Signature", "", sha256.New)
	case h.Get("X-Event-Key") == "repo:refs_changed":
		return "bitbucket-server", hmacHeader("X-Hub-Signature", "sha256=", sha256.New)
	case h.Get("X-Event-Key") != "":
		return "bitbucket", hmacHeader("X-Hub-Signature", "sha256=", sha256.New)
	}
	return "", nil
}

func hmacHeader(header, prefix string, alg func() hash.Hash) verifier {
	return func(h http.Header, body []byte, secret string) bool {
		got, ok := strings.CutPrefix(h.Get(header), prefix)
		if !ok || got == "" {
			return false
		}
		sig, err := hex.DecodeString(got)
		if err != nil {
			return false
		}
		mac := hmac.New(alg, []byte(secret))
		mac.Write(body)
		return hmac.Equal(sig, mac.Sum(nil))
	}
}

// parsePush reads the repository URLs and the ref of a push or tag event; other events are
// ignored (with the reason).
func parsePush(provider string, h http.Header, body []byte) (Push, string, error) {
	p := Push{Provider: provider}
	switch provider {
	case "github", "gitea", "gogs":
		event := h.Get("X-GitHub-Event") + h.Get("X-Gitea-Event") + h.Get("X-Gogs-Event")
		if event == "ping" {
			return p, "ping", nil
		}
		if event != "push" && event != "create" {
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
		if err := json.Unmarshal(body, &pl); err != nil {
			return p, "", fmt.Errorf("invalid JSON: %w", err)
		}
		p.Ref = pl.Ref
		if event == "create" && pl.RefType == "tag" {
			p.Ref = "refs/tags/" + pl.Ref
		}
		p.URLs = []string{pl.Repo.CloneURL, pl.Repo.SSHURL, pl.Repo.HTMLURL}
	case "gitlab":
		var pl struct {
			Ref     string `json:"ref"`
			Project struct {
				HTTP   string `json:"git_http_url"`
				SSH    string `json:"git_ssh_url"`
				WebURL string `json:"web_url"`
			} `json:"project"`
		}
		if ev := h.Get("X-Gitlab-Event"); ev != "Push Hook" && ev != "Tag Push Hook" {
			return p, "event " + ev, nil
		}
		if err := json.Unmarshal(body, &pl); err != nil {
			return p, "", fmt.Errorf("invalid JSON: %w", err)
		}
		p.Ref, p.URLs = pl.Ref, []string{pl.Project.HTTP, pl.Project.SSH, pl.Project.WebURL}
	case "bitbucket":
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
		if err := json.Unmarshal(body, &pl); err != nil {
			return p, "", fmt.Errorf("invalid JSON: %w", err)
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
	case "bitbucket-server":
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
		if err := json.Unmarshal(body, &pl); err != nil {
			return p, "", fmt.Errorf("invalid JSON: %w", err)
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
	}
	if p.Ref == "" {
		return p, "", errors.New("no pushed ref")
	}
	if len(p.URLs) == 0 || strings.Join(p.URLs, "") == "" {
		return p, "", errors.New("no repository URL")
	}
	return p, "", nil
}

// NormalizeURL reduces the https, ssh and scp-like forms of a repository URL to
// "host/owner/repo" (lower case, no user, port, scheme or .git suffix), so that a webhook
// and a GitRepo name the same repository alike.
func NormalizeURL(raw string) string {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return ""
	}
	var host, path string
	if !strings.Contains(raw, "://") {
		// scp-like: user@host:owner/repo.git
		at := strings.LastIndex(raw, "@")
		rest := raw[at+1:]
		h, p, ok := strings.Cut(rest, ":")
		if !ok {
			return ""
		}
		host, path = h, p
	} else {
		u, err := url.Parse(raw)
		if err != nil {
			return ""
		}
		host, path = u.Hostname(), u.Path
	}
	path = strings.Trim(strings.TrimSuffix(strings.Trim(path, "/"), ".git"), "/")
	if strings.HasPrefix(path, "scm/") {
		path = strings.TrimPrefix(path, "scm/") // Bitbucket Server's HTTP clone path
	}
	// Lower case throughout: hosting services treat owner and repository names
	// case-insensitively, and a false match only costs one extra poll (the payload is not
	// trusted anyway).
	return strings.ToLower(host + "/" + path)
}
