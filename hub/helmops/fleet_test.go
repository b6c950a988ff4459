package helmops

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/bundle"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// The fleet.yaml of a HelmOp's version is read by the same decoder as a repository's: the chart
// is pinned to the version (and an OCI chart to the digest verified), the values, namespaces
// and strategy are the HelmOp's.
func TestFleetFilePinsTheVersionAndKeepsTheHelmOpsSettings(t *testing.T) {
	zero := intstr.FromInt32(0)
	for _, tc := range []struct {
		name    string
		op      v1alpha1.HelmOpSpec
		version Version
		want    func(*testing.T, *bundle.FleetYAML)
		err     string
	}{
		{"a Helm repository's chart", v1alpha1.HelmOpSpec{
			Helm:             v1alpha1.HelmOpChart{Repo: "https://charts.example.com/stable", Chart: "web", Version: "~1.0", Values: &runtime.RawExtension{Raw: []byte(`{"replicas":3,"image":{"tag":"v2"}}`)}},
			DefaultNamespace: "web", RolloutStrategy: &v1alpha1.RolloutStrategy{MaxUnavailable: &zero, Partitions: []v1alpha1.Partition{{Name: "canary", ClusterMatch: v1alpha1.ClusterMatch{ClusterName: "c1"}}}},
		}, Version{Version: "1.0.3", Digest: "abc"}, func(t *testing.T, f *bundle.FleetYAML) {
			h := f.Helm
			if h.Repo != "https://charts.example.com/stable" || h.Chart != "web" || h.Version != "1.0.3" || h.ReleaseName != "op" {
				t.Errorf("helm: %+v", h)
			}
			if h.Values["replicas"] != float64(3) || h.Values["image"].(map[string]any)["tag"] != "v2" {
				t.Errorf("values: %v", h.Values)
			}
			if f.DefaultNamespace != "web" || f.RolloutStrategy == nil || len(f.RolloutStrategy.Partitions) != 1 || f.RolloutStrategy.Partitions[0].ClusterName != "c1" {
				t.Errorf("options %+v, strategy %+v", f.Options, f.RolloutStrategy)
			}
		}, ""},
		{"an OCI chart, pinned to its digest", v1alpha1.HelmOpSpec{
			Helm:         v1alpha1.HelmOpChart{Repo: "oci://registry.example.com/charts/", Chart: "web", ReleaseName: "shop"},
			StagedUpdate: &v1alpha1.StagedUpdateRef{Strategy: "rings", AutoRun: true},
		}, Version{Version: "2.1.0", Digest: "sha256:" + strings.Repeat("a", 64)}, func(t *testing.T, f *bundle.FleetYAML) {
			if h := f.Helm; h.Chart != "oci://registry.example.com/charts/web" || h.Version != "2.1.0@sha256:"+strings.Repeat("a", 64) || h.Repo != "" || h.ReleaseName != "shop" {
				t.Errorf("helm: %+v", h)
			}
			if f.StagedUpdate == nil || f.StagedUpdate.Strategy != "rings" || !f.StagedUpdate.AutoRun {
				t.Errorf("stagedUpdate: %+v", f.StagedUpdate)
			}
		}, ""},
		{"an OCI chart without a digest is not pinned to a tag", v1alpha1.HelmOpSpec{Helm: v1alpha1.HelmOpChart{Repo: "oci://registry.example.com/charts/web"}},
			Version{Version: "2.1.0"}, nil, "no digest to pin"},
		{"values that are not an object", v1alpha1.HelmOpSpec{Helm: v1alpha1.HelmOpChart{Repo: "https://charts.example.com", Chart: "web", Values: &runtime.RawExtension{Raw: []byte(`[1]`)}}},
			Version{Version: "1.0.0"}, nil, "spec.helm.values"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			op := &v1alpha1.HelmOp{ObjectMeta: metav1.ObjectMeta{Name: "op", Namespace: "fleet"}, Spec: tc.op}
			data, err := fleetFile(op, tc.version)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one naming %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var f bundle.FleetYAML
			if err := yaml.UnmarshalStrict(data, &f); err != nil {
				t.Fatalf("the fleet.yaml does not decode as a repository's would: %v\n%s", err, data)
			}
			tc.want(t, &f)
		})
	}
}

// The view the bundler renders: the HelmOp's targets and history, and its chart credentials
// sent to its own chart server only.
func TestRepoViewSendsCredentialsToTheChartServerOnly(t *testing.T) {
	op := &v1alpha1.HelmOp{ObjectMeta: metav1.ObjectMeta{Name: "op", Namespace: "fleet"}, Spec: v1alpha1.HelmOpSpec{
		Helm: v1alpha1.HelmOpChart{Repo: "oci://registry.example.com/charts", Chart: "web"}, HelmSecretRef: &v1alpha1.LocalObjectReference{Name: "login"},
		Targets: []v1alpha1.Target{{Name: "all", ClusterMatch: v1alpha1.ClusterMatch{ClusterGroup: "prod"}}}, Paused: true}}
	view := repoView(op)
	if view.Spec.HelmRepoURL != "oci://registry.example.com/charts" || view.Spec.HelmSecretRef.Name != "login" || !view.Spec.Paused || view.Spec.Targets[0].ClusterGroup != "prod" || len(view.Spec.Paths) != 0 {
		t.Errorf("view: %+v", view.Spec)
	}
	op.Spec.HelmSecretRef = nil
	if view := repoView(op); view.Spec.HelmRepoURL != "" {
		t.Errorf("without credentials the view names a server for them: %q", view.Spec.HelmRepoURL)
	}
	if got := chartRef(op); got != "oci://registry.example.com/charts/web" {
		t.Errorf("chartRef %q", got)
	}
	if got := constraint(op); got != "*" {
		t.Errorf("the empty range is %q, want the newest release", got)
	}
}
