package agent

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"golang.org/x/oauth2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"

	"github.com/flotilla-dev/flotilla/agent/kube"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// An agent's hub token is short-lived (a week by default) and renewed by the agent itself, with
// the identity it has, well before it expires: a TokenRequest for its own ServiceAccount, which
// its Role allows and nothing else. Requests pick up the new token at once, so renewal costs no
// gap, and every agent renews on its own schedule rather than all on one day.

// ErrRemoved: the hub revoked this agent's access (its Cluster was deleted, or an approved
// registration replaced its agent). The agent stops; it registers again only when told to.
var ErrRemoved = errors.New("this cluster was removed from the fleet: the hub revoked the agent's credentials")

// ErrCredentialsExpired: the agent's hub token expired before it could renew it (the agent was
// stopped too long). The agent registers again, which an operator approves.
var ErrCredentialsExpired = errors.New("the agent's hub credentials expired")

// Credentials are what an agent holds on the hub: its token and the namespace its identity and
// deployments are in.
type Credentials struct {
	Token     string
	Namespace string
}

// tokenHolder serves the current token to every request the agent makes to the hub.
type tokenHolder struct {
	mu    sync.RWMutex
	token string
}

func (h *tokenHolder) Token() (*oauth2.Token, error) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return &oauth2.Token{AccessToken: h.token, TokenType: "Bearer"}, nil
}

func (h *tokenHolder) get() string {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.token
}

func (h *tokenHolder) set(token string) {
	h.mu.Lock()
	h.token = token
	h.mu.Unlock()
}

// renewingConfig is base with its bearer token served by h: a renewed token is used from the
// next request on, by every client made from the config.
func renewingConfig(base *rest.Config, h *tokenHolder) *rest.Config {
	cfg := rest.CopyConfig(base)
	h.set(cfg.BearerToken)
	cfg.BearerToken, cfg.BearerTokenFile = "", ""
	cfg.WrapTransport = transport.TokenSourceWrapTransport(h)
	return cfg
}

// tokenTimes reads when a token was issued and expires from its JWT claims (the agent's own
// token: nothing is verified, only read). ok is false for a token that is not a JWT.
func tokenTimes(token string) (issued, expires time.Time, ok bool) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return time.Time{}, time.Time{}, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}, time.Time{}, false
	}
	var claims struct {
		IssuedAt  int64 `json:"iat"`
		ExpiresAt int64 `json:"exp"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil || claims.ExpiresAt == 0 {
		return time.Time{}, time.Time{}, false
	}
	return time.Unix(claims.IssuedAt, 0), time.Unix(claims.ExpiresAt, 0), true
}

// expired reports whether token's expiry has passed.
func expired(token string, now time.Time) bool {
	_, exp, ok := tokenTimes(token)
	return ok && !now.Before(exp)
}

// renewal says when to renew token: once renewBefore is left of its lifetime (default a third
// of it). A token without expiry is never renewed.
func renewal(token string, renewBefore time.Duration) (at time.Time, lifetime time.Duration, ok bool) {
	iat, exp, ok := tokenTimes(token)
	if !ok {
		return time.Time{}, 0, false
	}
	lifetime = exp.Sub(iat)
	if renewBefore <= 0 {
		renewBefore = lifetime / 3
	}
	return exp.Add(-renewBefore), lifetime, true
}

// requestToken asks the hub, with the agent's current identity, for a token of the agent
// identity in namespace: its own (renewal), or the one of the namespace its cluster moves to.
// How long it may live is the hub's to say: the admission policy
// flotilla-agent-token-lifetime-is-the-hubs refuses a longer one as Invalid, and the agent asks
// again for half as long, down to the shortest token the API server issues, so that an operator
// shortening --agent-token-ttl costs running agents nothing.
func requestToken(ctx context.Context, hub *kube.Hub, namespace string, lifetime time.Duration) (string, error) {
	for {
		token, err := hub.RequestToken(ctx, namespace, v1alpha1.AgentServiceAccountName, int64(lifetime.Seconds()))
		if apierrors.IsInvalid(err) && lifetime/2 >= minTokenLifetime {
			lifetime /= 2
			continue
		}
		if err != nil {
			return "", fmt.Errorf("failed to request a hub token in %s: %w", namespace, err)
		}
		return token, nil
	}
}

// minTokenLifetime is the shortest token lifetime the API server issues.
const minTokenLifetime = 10 * time.Minute
