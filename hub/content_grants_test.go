package hub

import (
	"context"
	"reflect"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// A commit's content is granted the way that takes fewer writes: own Roles cost one write per
// cluster, a shared grant two per content.
func TestPlanGrantsTakesTheFewerWrites(t *testing.T) {
	type staged = map[string]map[string][]string
	for _, tc := range []struct {
		name   string
		staged staged
		shared map[contentRef][]string
		own    map[string]map[string][]string
	}{
		{
			name:   "one bundle on three clusters: one shared grant",
			staged: staged{"a": {"fleet": {"s-1"}}, "b": {"fleet": {"s-1"}}, "c": {"fleet": {"s-1"}}},
			shared: map[contentRef][]string{{"fleet", "s-1"}: {"a", "b", "c"}},
			own:    map[string]map[string][]string{},
		},
		{
			name:   "two clusters: a tie keeps own Roles",
			staged: staged{"a": {"fleet": {"s-1"}}, "b": {"fleet": {"s-1"}}},
			own:    map[string]map[string][]string{"a": {"fleet": {"s-1"}}, "b": {"fleet": {"s-1"}}},
		},
		{
			name:   "three bundles on two clusters: one Role write per cluster",
			staged: staged{"a": {"fleet": {"s-1", "s-2", "s-3"}}, "b": {"fleet": {"s-1", "s-2", "s-3"}}},
			own:    map[string]map[string][]string{"a": {"fleet": {"s-1", "s-2", "s-3"}}, "b": {"fleet": {"s-1", "s-2", "s-3"}}},
		},
		{
			name:   "every cluster renders its own content",
			staged: staged{"a": {"fleet": {"s-a"}}, "b": {"fleet": {"s-b"}}, "c": {"fleet": {"s-c"}}},
			own:    map[string]map[string][]string{"a": {"fleet": {"s-a"}}, "b": {"fleet": {"s-b"}}, "c": {"fleet": {"s-c"}}},
		},
		{
			name: "content of one cluster beside shared content goes in its Role",
			staged: staged{"a": {"fleet": {"s-1", "s-only-a"}}, "b": {"fleet": {"s-1"}}, "c": {"fleet": {"s-1"}},
				"d": {"fleet": {"s-1"}}, "e": {"fleet": {"s-1"}}},
			shared: map[contentRef][]string{{"fleet", "s-1"}: {"a", "b", "c", "d", "e"}},
			own:    map[string]map[string][]string{"a": {"fleet": {"s-only-a"}}},
		},
		{
			name:   "the same id in two namespaces is two contents",
			staged: staged{"a": {"one": {"s-1"}}, "b": {"two": {"s-1"}}, "c": {"one": {"s-1"}}},
			own:    map[string]map[string][]string{"a": {"one": {"s-1"}}, "b": {"two": {"s-1"}}, "c": {"one": {"s-1"}}},
		},
		{
			name:   "a cluster with nothing staged is granted nothing",
			staged: staged{"a": {}, "b": {"fleet": {"s-1"}}},
			own:    map[string]map[string][]string{"b": {"fleet": {"s-1"}}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := planGrants(tc.staged)
			if !reflect.DeepEqual(got.shared, tc.shared) {
				t.Errorf("shared = %v, want %v", got.shared, tc.shared)
			}
			if !reflect.DeepEqual(got.own, tc.own) {
				t.Errorf("own = %v, want %v", got.own, tc.own)
			}
		})
	}
}

// agentMayRead asks the hub's authorizer whether the agent of the cluster whose namespace is
// clusterNS may read the Content named name.
func agentMayRead(t *testing.T, c client.Client, clusterNS, bundleNS, name string) bool {
	t.Helper()
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   "system:serviceaccount:" + clusterNS + ":" + AgentServiceAccount,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + clusterNS, "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: bundleNS, Verb: "get",
			Group: v1alpha1.GroupVersion.Group, Resource: "contents", Name: name},
	}}
	if err := c.Create(context.Background(), sar); err != nil {
		t.Fatal(err)
	}
	return sar.Status.Allowed
}

// staleGrants reads as a cache that has not seen the shared grants yet.
type staleGrants struct{ client.Client }

func (s staleGrants) Get(ctx context.Context, key client.ObjectKey, o client.Object, opts ...client.GetOption) error {
	if _, ok := o.(*rbacv1.RoleBinding); ok {
		return apierrors.NewNotFound(rbacv1.Resource("rolebindings"), key.Name)
	}
	return s.Client.Get(ctx, key, o, opts...)
}
