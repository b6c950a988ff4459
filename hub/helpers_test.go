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

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	rbacv1 "k8s.io/api/rbac/v1"

	authorizationv1 "k8s.io/api/authorization/v1"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/e2e/wait"
	"github.com/flotilla-dev/flotilla/hub/access"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/model"
	"sigs.k8s.io/controller-runtime/pkg/cache"
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

// agentMayRead asks the hub's authorizer whether the agent of the cluster whose namespace is
// clusterNS may read the Content named name.
func agentMayRead(t *testing.T, c client.Client, clusterNS, bundleNS, name string) bool {
	t.Helper()
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   "system:serviceaccount:" + clusterNS + ":" + access.AgentServiceAccount,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + clusterNS, "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: bundleNS, Verb: "get",
			Group: v1alpha1.GroupVersion.Group, Resource: "contents", Name: name},
	}}
	if err := c.Create(context.Background(), sar); err != nil {
		t.Fatal(err)
	}
	return sar.Status.Allowed
}

// revisionRef is a revision of the given index whose content and deployment ids derive from id.
func revisionRef(index int64, id string) v1alpha1.RevisionRef {
	return v1alpha1.RevisionRef{Index: index, ContentID: "c-" + id, DeploymentID: "d-" + id}
}

// staleGrants reads as a cache that has not seen the shared grants yet.
type staleGrants struct{ client.Client }

func (s staleGrants) Get(ctx context.Context, key client.ObjectKey, o client.Object, opts ...client.GetOption) error {
	if _, ok := o.(*rbacv1.RoleBinding); ok {
		return apierrors.NewNotFound(rbacv1.Resource("rolebindings"), key.Name)
	}
	return s.Client.Get(ctx, key, o, opts...)
}

// indexedClient is a client that reads, as the hub's controllers do, from an informer cache
// with the hub's field indexes, and writes to the API server. The cache stops with the test.
func indexedClient(t *testing.T) client.Client {
	t.Helper()
	scheme, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	cfg := hubCluster.Config()
	informers, err := cache.New(cfg, cache.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := model.IndexDeployments(ctx, informers); err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = informers.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	if !informers.WaitForCacheSync(ctx) {
		t.Fatal("the test's cache did not sync")
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme, Cache: &client.CacheOptions{Reader: informers}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// cacheShows waits until cached reads each object (named by namespace and name) at the
// resource version the API server has now.
func cacheShows(t *testing.T, live, cached client.Client, objs ...client.Object) {
	t.Helper()
	ctx := context.Background()
	for _, o := range objs {
		key := client.ObjectKeyFromObject(o)
		if err := live.Get(ctx, key, o); err != nil {
			t.Fatalf("%T %s: %v", o, key, err)
		}
		want := o.GetResourceVersion()
		waitUntil(t, fmt.Sprintf("the cache shows %T %s at version %s", o, key, want), func() bool {
			return cached.Get(ctx, key, o) == nil && o.GetResourceVersion() == want
		})
	}
}
