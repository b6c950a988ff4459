package agent

import (
	"strings"
	"testing"
)

func TestInventoryNamespacesForDeleteNamespace(t *testing.T) {
	inv := func(items ...string) Inventory {
		var out Inventory
		for _, s := range items {
			o, err := ParseObjMeta(s)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, o)
		}
		return out
	}
	cases := []struct {
		name   string
		inv    Inventory
		except []string
		want   string
	}{
		{"namespaces of namespaced objects, once each, sorted", inv("shop_web_apps_Deployment", "shop_cfg__ConfigMap", "billing_api_apps_Deployment"), nil, "billing shop"},
		{"a Namespace object counts by its name", inv("_tenant-a__Namespace", "_reader_rbac.authorization.k8s.io_ClusterRole"), nil, "tenant-a"},
		{"default and kube-* are never deleted", inv("default_web_apps_Deployment", "kube-system_x__ConfigMap", "kube-public_y__ConfigMap"), nil, ""},
		{"the agent's own namespace is left alone", inv("flotilla-system_a__ConfigMap", "shop_b__ConfigMap"), []string{"flotilla-system"}, "shop"},
		{"cluster-scoped objects name no namespace", inv("_reader_rbac.authorization.k8s.io_ClusterRole"), nil, ""},
	}
	for _, c := range cases {
		if got := strings.Join(c.inv.Namespaces(c.except...), " "); got != c.want {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
	}
}

// Inventory ids work for every valid name: RBAC names may hold "_" and ":", and the form is
// read back from both ends.
func TestInventoryIDsRoundTripEveryValidName(t *testing.T) {
	for _, o := range []ObjMeta{
		{Namespace: "shop", Name: "web", Group: "apps", Kind: "Deployment"},
		{Namespace: "shop", Name: "a_b", Group: "rbac.authorization.k8s.io", Kind: "Role"},
		{Name: "system:controller:x_y", Group: "rbac.authorization.k8s.io", Kind: "ClusterRole"},
		{Namespace: "shop", Name: "__", Group: "", Kind: "ConfigMap"},
		{Name: "tenant-a", Kind: "Namespace"},
	} {
		got, err := ParseObjMeta(o.String())
		if err != nil || got != o {
			t.Errorf("%q: parsed %+v, %v; want %+v", o.String(), got, err, o)
		}
	}
	for _, bad := range []string{"", "shop", "shop_web", "shop__apps_", "_a_b"} {
		if o, err := ParseObjMeta(bad); err == nil {
			t.Errorf("%q parsed as %+v", bad, o)
		}
	}
}
