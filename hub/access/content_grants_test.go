package access

import (
	"reflect"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/flotilla-dev/flotilla/hub/model"
)

// A commit's content is granted the way that takes fewer writes: own Roles cost one write per
// cluster, a shared grant two per content.
func TestPlanGrantsTakesTheFewerWrites(t *testing.T) {
	type staged = map[string]map[string][]string
	for _, tc := range []struct {
		name   string
		staged staged
		shared map[model.ContentRef][]string
		own    map[string]map[string][]string
	}{
		{
			name:   "one bundle on three clusters: one shared grant",
			staged: staged{"a": {"fleet": {"s-1"}}, "b": {"fleet": {"s-1"}}, "c": {"fleet": {"s-1"}}},
			shared: map[model.ContentRef][]string{{Namespace: "fleet", ID: "s-1"}: {"a", "b", "c"}},
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
			shared: map[model.ContentRef][]string{{Namespace: "fleet", ID: "s-1"}: {"a", "b", "c", "d", "e"}},
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
			got := PlanGrants(tc.staged)
			if !reflect.DeepEqual(got.Shared, tc.shared) {
				t.Errorf("shared = %v, want %v", got.Shared, tc.shared)
			}
			if !reflect.DeepEqual(got.Own, tc.own) {
				t.Errorf("own = %v, want %v", got.Own, tc.own)
			}
		})
	}
}

// The agents a shared grant names are read from a set kept per binding and resourceVersion: a
// binding changed (agents added or dropped: a new resourceVersion) is read anew, and only a
// cluster's agent counts, not another subject in a cluster namespace.
func TestGrantedAgentsFollowTheBindingsVersion(t *testing.T) {
	m := &subjectSets{sets: map[types.UID]subjectSet{}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{UID: "g1", ResourceVersion: "10"},
		Subjects: []rbacv1.Subject{agentSubject("cluster-a"), {Kind: rbacv1.ServiceAccountKind, Name: "intruder", Namespace: "cluster-b"}}}
	if got := m.of(binding); !got.Has("cluster-a") || got.Has("cluster-b") {
		t.Fatalf("agents: %v, want cluster-a's alone", sets.List(got))
	}
	changed := binding.DeepCopy()
	changed.ResourceVersion, changed.Subjects = "11", []rbacv1.Subject{agentSubject("cluster-b")}
	if got := m.of(changed); got.Has("cluster-a") || !got.Has("cluster-b") {
		t.Fatalf("after the binding changed: %v, want cluster-b's alone", sets.List(got))
	}
	unversioned := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{UID: "g2"}, Subjects: []rbacv1.Subject{agentSubject("cluster-a")}}
	m.of(unversioned)
	unversioned.Subjects = nil
	if m.of(unversioned).Has("cluster-a") {
		t.Error("a binding without a resourceVersion was answered from the memo")
	}
}
