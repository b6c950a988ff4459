package access

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestClusterNamespaceNamesAreUniqueValidLabels(t *testing.T) {
	long := strings.Repeat("a", 63)
	pairs := [][2][2]string{
		{{"team", "prod-x"}, {"team-prod", "x"}},                     // once the same "cluster-team-prod-x"
		{{"fleet", long + "-1"}, {"fleet", long + "-2"}},             // once the same after truncation
		{{"fleet", "edge.eu.example"}, {"fleet", "edge-eu-example"}}, // dots become dashes in the readable part
	}
	for _, p := range pairs {
		a, b := ClusterNamespace(p[0][0], p[0][1]), ClusterNamespace(p[1][0], p[1][1])
		if a == b {
			t.Errorf("%s/%s and %s/%s share namespace %s", p[0][0], p[0][1], p[1][0], p[1][1], a)
		}
		for _, ns := range []string{a, b} {
			if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
				t.Errorf("%q is not a valid namespace name: %v", ns, errs)
			}
		}
	}
	if got := ClusterNamespace("fleet-default", "edge-1"); !strings.HasPrefix(got, "cluster-fleet-default-edge-1-") || got != ClusterNamespace("fleet-default", "edge-1") {
		t.Errorf("ClusterNamespace is readable and stable: %q", got)
	}
}
