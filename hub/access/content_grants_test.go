package access

import (
	"reflect"
	"testing"

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
