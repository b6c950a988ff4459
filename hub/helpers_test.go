package hub

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/e2e/wait"
)

func hmacHex(secret, body string) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(body))
	return hex.EncodeToString(mac.Sum(nil))
}

// deliverPush posts a GitHub push delivery of body to a hub's webhook endpoint, signed with
// secret (unsigned when empty), and returns the response's status and body.
func deliverPush(t testing.TB, endpoint, body, secret string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, endpoint, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-GitHub-Event", "push")
	if secret != "" {
		req.Header.Set("X-Hub-Signature-256", "sha256="+hmacHex(secret, body))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}

// waitUntil is how the hub's tests wait (package e2e/wait): up to 30 s, failing with what
// it waited for and what show returns, the objects it waited on.
func waitUntil(t testing.TB, what string, cond func() bool, show ...func() string) {
	t.Helper()
	wait.Until(t, what, 30*time.Second, cond, show...)
}

// waitForObject waits until the object at key satisfies cond and returns it; on time out it
// shows the object as last read.
func waitForObject[T any, PT interface {
	*T
	client.Object
}](t testing.TB, c client.Reader, key types.NamespacedName, what string, cond func(PT) bool) PT {
	t.Helper()
	obj := PT(new(T))
	var readErr error
	waitUntil(t, what, func() bool {
		readErr = c.Get(context.Background(), key, obj)
		return readErr == nil && cond(obj)
	}, func() string {
		data, _ := yaml.Marshal(obj)
		return fmt.Sprintf("%T %s (last read: %v):\n%s", obj, key, readErr, data)
	})
	return obj
}
