package agent

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// jwt is a token with the given claims and no valid signature: the agent only reads its own
// token's times.
func jwt(iat, exp int64) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256"}`)) + "." + enc([]byte(fmt.Sprintf(`{"iat":%d,"exp":%d,"sub":"x"}`, iat, exp))) + ".c2ln"
}

func TestRenewalSchedule(t *testing.T) {
	issued := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	week := jwt(issued.Unix(), issued.Add(7*24*time.Hour).Unix())
	cases := []struct {
		name        string
		token       string
		renewBefore time.Duration
		at          time.Time
		ok          bool
	}{
		{"a third of the lifetime is left by default", week, 0, issued.Add(7 * 24 * time.Hour * 2 / 3), true},
		{"an explicit margin", week, time.Hour, issued.Add(7*24*time.Hour - time.Hour), true},
		{"a token that is no JWT is never renewed", "opaque-token", 0, time.Time{}, false},
		{"a JWT without expiry is never renewed", base64.RawURLEncoding.EncodeToString([]byte(`{}`)) + "." + base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"x"}`)) + ".x", 0, time.Time{}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			at, lifetime, ok := renewal(c.token, c.renewBefore)
			if ok != c.ok || !at.Equal(c.at) || ok && lifetime != 7*24*time.Hour {
				t.Errorf("renewal = %v, %v, %v; want %v, 168h, %v", at, lifetime, ok, c.at, c.ok)
			}
		})
	}
	if !expired(jwt(1, 2), time.Now()) || expired(week, issued.Add(time.Hour)) || expired("opaque-token", time.Now()) {
		t.Error("expired: an expired JWT is expired, a valid one and an opaque token are not")
	}
}

// A renewed token is used from the next request on by every client made from the agent's
// config: no restart, no gap.
func TestRenewedTokenIsUsedAtOnce(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"Namespace","apiVersion":"v1","metadata":{"name":"x"}}`))
	}))
	defer srv.Close()
	holder := &tokenHolder{}
	cfg := renewingConfig(&rest.Config{Host: srv.URL, BearerToken: "first"}, holder)
	cs := kubernetes.NewForConfigOrDie(cfg)
	for _, next := range []string{"", "second"} {
		if next != "" {
			holder.set(next)
		}
		if _, err := cs.CoreV1().Namespaces().Get(context.Background(), "x", metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 || seen[0] != "Bearer first" || seen[1] != "Bearer second" {
		t.Errorf("authorization headers %q, want the first token, then the renewed one", seen)
	}
}
