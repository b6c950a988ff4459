package gitsource

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

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
func (s Subscriber) accepts(h http.Header, body []byte, from provider) (accepted, verified bool) {
	if s.Secret != "" && from.verify(h, body, s.Secret) {
		return true, true
	}
	return s.AllowUnsigned, false
}

// wants reports whether a push concerns the subscriber's branch, tag or semver channel.
func (s Subscriber) wants(p Push) bool {
	switch {
	case p.Tag() != "":
		// An artifact source with neither follows latest.
		followsLatest := IsOCI(s.URL) && s.Semver == "" && s.Revision == "" && p.Tag() == "latest"
		return s.Semver != "" || (s.Revision != "" && s.Revision == p.Tag()) || followsLatest
	case p.Branch() != "":
		return s.Semver == "" && s.Revision == "" && (s.Branch == "" || s.Branch == p.Branch())
	}
	return false
}

// Receiver is the HTTP endpoint for push and tag webhooks of GitHub, GitLab, Bitbucket Cloud,
// Bitbucket Server, Gitea and Gogs, and for the push notifications of OCI registries. Each subscriber checks a delivery with its own secret, so
// that one GitRepo's secret never decides for another: a delivery triggers the subscribers it
// is validly signed for (or token, for GitLab), and those that opted out of verification. Only a
// delivery some GitRepo's secret verified is answered 202; any other is answered 401, whether
// or not any GitRepo follows the repository or takes unsigned deliveries (which it triggers all
// the same); no response names a GitRepo. A signed delivery sent again within the replay
// window is answered as the first was and triggers nothing.
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
	// ReplayWindow is how long a signed delivery, once it triggered a GitRepo, triggers it no
	// more when sent again; default DefaultReplayWindow.
	ReplayWindow time.Duration
	// Now is the receiver's clock; default time.Now.
	Now func() time.Time

	replays replayGuard
}

// DefaultReplayWindow: a forge's signature covers the body but carries no time, so anyone who
// saw one delivery could send it again and again, each a poll of the repository. A body that
// announced a push once announces nothing new for as long as a forge takes to deliver (and
// redeliver) it.
const DefaultReplayWindow = 10 * time.Minute

// replayGuard remembers the signed deliveries that triggered each GitRepo, by digest, for the
// replay window. It holds at most maxReplays of them: signed deliveries only, so an outsider
// cannot fill it, and past the bound it forgets the oldest, which costs a poll at most.
type replayGuard struct {
	mu   sync.Mutex
	seen map[[sha256.Size]byte]time.Time
}

const maxReplays = 1 << 16

// first reports whether the delivery body, signed for the GitRepo key, was not seen within
// window before now, and remembers it.
func (g *replayGuard) first(key string, body []byte, now time.Time, window time.Duration) bool {
	h := sha256.New()
	h.Write([]byte(key))
	h.Write([]byte{0})
	h.Write(body)
	var digest [sha256.Size]byte
	h.Sum(digest[:0])
	g.mu.Lock()
	defer g.mu.Unlock()
	if at, ok := g.seen[digest]; ok && now.Sub(at) < window {
		return false
	}
	if g.seen == nil {
		g.seen = map[[sha256.Size]byte]time.Time{}
	}
	if len(g.seen) >= maxReplays {
		oldest, oldestAt := [sha256.Size]byte{}, now
		for d, at := range g.seen {
			if now.Sub(at) >= window {
				delete(g.seen, d)
			} else if at.Before(oldestAt) {
				oldest, oldestAt = d, at
			}
		}
		if len(g.seen) >= maxReplays {
			delete(g.seen, oldest)
		}
	}
	g.seen[digest] = now
	return true
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
	from := detect(r.Header)
	if from == nil {
		http.Error(w, "unknown webhook provider: expected a GitHub, GitLab, Bitbucket, Gitea or Gogs event header, or a registry's distribution events", http.StatusBadRequest)
		return
	}
	provider := from.name()
	push, ignore, err := readPush(from, r.Header, body)
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
	now, window := time.Now(), rc.ReplayWindow
	if rc.Now != nil {
		now = rc.Now()
	}
	if window <= 0 {
		window = DefaultReplayWindow
	}
	var triggered, replayed []string
	verified := false
	for _, s := range subs {
		ok, signed := s.accepts(r.Header, body, from)
		verified = verified || signed
		switch {
		case !ok || !s.wants(push):
		case signed && !rc.replays.first(s.Key, body, now, window):
			// Each replica keeps its own record: a replay sent to every replica costs a
			// poll in each at most, once per window.
			replayed = append(replayed, s.Key)
		default:
			rc.Notify(s, push)
			triggered = append(triggered, s.Key)
		}
	}
	if !verified {
		// The answer depends on the signature alone: a delivery no secret verified gets 401
		// whether no GitRepo follows its repository, some refuse it, or some that take
		// unsigned deliveries were triggered by it, so that answers tell nothing of which
		// repositories the hub follows or what they accept. The log tells the operator.
		rc.Log.V(1).Info("webhook delivery not verified by any GitRepo's secret", "provider", provider, "ref", push.Ref, "followers", len(subs), "triggeredUnsigned", triggered)
		http.Error(w, "invalid or missing webhook signature", http.StatusUnauthorized)
		return
	}
	rc.Log.V(1).Info("webhook delivery accepted", "provider", provider, "ref", push.Ref, "triggered", triggered, "replayed", replayed)
	writeJSON(w, http.StatusAccepted, map[string]any{"provider": provider, "ref": push.Ref})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// HostOf is the server of a repository URL (https, ssh, scp-like or oci): its host and port
// as written, in lower case; empty when the URL names none.
func HostOf(raw string) string {
	raw = strings.TrimSpace(raw)
	if !strings.Contains(raw, "://") {
		rest := raw[strings.LastIndex(raw, "@")+1:] // scp-like: user@host:owner/repo.git
		host, _, ok := strings.Cut(rest, ":")
		if !ok {
			return ""
		}
		return strings.ToLower(host)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return strings.ToLower(u.Host)
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
	path = strings.TrimPrefix(path, "scm/") // Bitbucket Server's HTTP clone path
	// Lower case throughout: hosting services treat owner and repository names
	// case-insensitively, and a false match only costs one extra poll (the payload is not
	// trusted anyway).
	return strings.ToLower(host + "/" + path)
}
