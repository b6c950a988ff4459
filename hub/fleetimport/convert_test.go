package fleetimport

import (
	"encoding/json"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

func importFixture(t *testing.T) ([]*unstructured.Unstructured, Result) {
	t.Helper()
	data, err := os.ReadFile("testdata/fleet-installation.yaml")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Decode("testdata/fleet-installation.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	return objs, Convert(objs)
}

func find(res Result, kind, name string) any {
	for _, o := range res.Objects {
		if o.GetObjectKind().GroupVersionKind().Kind == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

func TestAFleetInstallationImports(t *testing.T) {
	objs, res := importFixture(t)
	if len(objs) != 11 {
		t.Fatalf("decoded %d objects from the List and the document after it, want 11", len(objs))
	}
	if want := map[string]int{"GitRepo": 3, "HelmOp": 2, "ClusterGroup": 1, "GitRepoRestriction": 1}; !reflect.DeepEqual(res.Report.Imported, want) {
		t.Errorf("imported %v, want %v", res.Report.Imported, want)
	}
	repo, _ := find(res, "GitRepo", "everything").(*v1alpha1.GitRepo)
	if repo == nil {
		t.Fatal("the GitRepo everything was not imported")
	}
	s := repo.Spec
	if s.SecretRef == nil || s.SecretRef.Name != "git-auth" || s.HelmSecretRef == nil || s.HelmSecretRef.Name != "helm-auth" || s.WebhookSecretRef == nil || s.WebhookSecretRef.Name != "hook" {
		t.Errorf("the Secrets it names: %+v %+v %+v", s.SecretRef, s.HelmSecretRef, s.WebhookSecretRef)
	}
	if s.TargetNamespace != "shop" || s.ServiceAccount != "deployer" || !s.KeepResources || s.CorrectDrift == nil || !s.CorrectDrift.KeepFailHistory || s.ForceSyncGeneration != 2 ||
		s.PollingInterval == nil || s.PollingInterval.Duration != 30*time.Second || len(s.Targets) != 3 || s.Targets[1].ClusterGroup != "canaries" || s.Targets[2].ClusterName != "edge-1" ||
		!slices.Equal(s.Paths, []string{"single-cluster/helm", "multi-cluster/helm"}) || string(s.CABundle) != "-----BEGIN CERTIFICATE-----\n" {
		t.Errorf("its spec: %+v", s)
	}
	if repo.Namespace != "fleet-default" || repo.Labels["team"] != "shop" || repo.Annotations["owner"] != "platform@example.com" || len(repo.Annotations) != 1 || repo.UID != "" || repo.ResourceVersion != "" {
		t.Errorf("its metadata: %+v", repo.ObjectMeta)
	}
	if want := []string{"fleet-default/chart-auth", "fleet-default/git-auth", "fleet-default/helm-auth", "fleet-default/hook"}; !slices.Equal(res.Secrets, want) {
		t.Errorf("the Secrets to bring over: %v, want %v", res.Secrets, want)
	}
	noTargets, _ := find(res, "GitRepo", "no-targets").(*v1alpha1.GitRepo)
	if noTargets == nil || len(noTargets.Spec.Targets) != 1 || noTargets.Spec.Targets[0].ClusterGroup != "default" {
		t.Errorf("a GitRepo without targets: %+v, want Fleet's default target, the cluster group default", noTargets)
	}
	listed, _ := find(res, "GitRepo", "listed-bundles").(*v1alpha1.GitRepo)
	if listed == nil || !slices.Equal(listed.Spec.Paths, []string{"single-cluster/manifests", "single-cluster/kustomize"}) {
		t.Errorf("a GitRepo listing its bundles: %+v, want their bases as paths", listed)
	}
	ingress, _ := find(res, "HelmOp", "ingress").(*v1alpha1.HelmOp)
	if ingress == nil || ingress.Spec.Helm.Repo != "https://kubernetes.github.io/ingress-nginx" || ingress.Spec.Helm.Chart != "ingress-nginx" || ingress.Spec.Helm.Version != "4.11.3" ||
		ingress.Spec.Helm.Values == nil || !strings.Contains(string(ingress.Spec.Helm.Values.Raw), `"replicaCount":2`) || ingress.Spec.HelmSecretRef == nil || ingress.Spec.HelmSecretRef.Name != "chart-auth" ||
		len(ingress.Spec.Targets) != 1 || ingress.Spec.Targets[0].ClusterSelector == nil || ingress.Spec.DefaultNamespace != "ingress" {
		t.Errorf("the HelmOp ingress: %+v", ingress)
	}
	podinfo, _ := find(res, "HelmOp", "podinfo").(*v1alpha1.HelmOp)
	if podinfo == nil || podinfo.Spec.Helm.Repo != "oci://ghcr.io/stefanprodan/charts/podinfo" || podinfo.Spec.Helm.Chart != "" || len(podinfo.Spec.Targets) != 1 {
		t.Errorf("the HelmOp of an OCI chart: %+v, want the reference as repo and Fleet's default target", podinfo)
	}
	group, _ := find(res, "ClusterGroup", "canaries").(*v1alpha1.ClusterGroup)
	if group == nil || group.Spec.Selector.MatchLabels["ring"] != "canary" || len(group.Spec.Selector.MatchExpressions) != 1 {
		t.Errorf("the ClusterGroup canaries: %+v", group)
	}
	restriction, _ := find(res, "FleetRestriction", "restriction").(*v1alpha1.FleetRestriction)
	if restriction == nil || !slices.Equal(restriction.Spec.AllowedRepoPatterns, []string{"https://github.com/team-a/.*"}) || restriction.Spec.DefaultServiceAccount != "deployer" ||
		!slices.Equal(restriction.Spec.AllowedTargetNamespaces, []string{"team-a-*"}) {
		t.Errorf("the GitRepoRestriction as a FleetRestriction: %+v", restriction)
	}

	for _, want := range []Finding{
		{Object: "GitRepo fleet-default/everything", Field: "spec.clientSecretName", Outcome: Renamed},
		{Object: "GitRepo fleet-default/everything", Field: "spec.helmSecretNameForPaths", Outcome: Dropped},
		{Object: "GitRepo fleet-default/everything", Field: "spec.ociRegistrySecret", Outcome: Dropped},
		{Object: "GitRepo fleet-default/everything", Field: "spec.imageScanCommit", Outcome: Dropped},
		{Object: "GitRepo fleet-default/everything", Field: "spec.somethingNew", Outcome: Dropped},
		{Object: "GitRepo fleet-default/everything", Field: "metadata.finalizers", Outcome: Dropped},
		{Object: "GitRepo fleet-local/no-targets", Field: "spec.targets", Outcome: Changed},
		{Object: "GitRepo fleet-default/listed-bundles", Field: "spec.bundles[1].options", Outcome: Dropped},
		{Object: "ClusterGroup fleet-default/empty", Field: "spec.selector", Outcome: Dropped},
		{Object: "HelmOp fleet-default/ingress", Field: "spec.helm.valuesFiles", Outcome: Dropped},
		{Object: "HelmOp fleet-default/ingress", Field: "spec.targets[0].helm", Outcome: Dropped},
		{Object: "HelmOp fleet-default/ingress", Field: "spec.correctDrift", Outcome: Dropped},
		{Object: "HelmOp fleet-default/ingress", Field: "spec.helmSecretName", Outcome: Renamed},
		{Object: "HelmOp fleet-local/podinfo", Field: "spec.helm.chart", Outcome: Changed},
		{Object: "GitRepoRestriction team-a/restriction", Field: "allowedClientSecretNames", Outcome: Dropped},
		{Object: "BundleNamespaceMapping team-a/mapping", Field: "kind", Outcome: Dropped},
		{Object: "Bundle fleet-default/everything-single-cluster-helm", Field: "kind", Outcome: Dropped},
		{Object: "ConfigMap fleet-default/not-fleets", Field: "apiVersion", Outcome: Dropped},
	} {
		if !slices.ContainsFunc(res.Report.Findings, func(f Finding) bool {
			return f.Object == want.Object && f.Field == want.Field && f.Outcome == want.Outcome && f.Detail != ""
		}) {
			t.Errorf("the report lacks %s %s: %s\n%s", want.Object, want.Field, want.Outcome, res.Report.Text())
		}
	}
	if !res.Report.Dropped() {
		t.Error("the report says nothing was dropped")
	}
}

// Nothing is dropped silently: every field a person wrote on a Fleet object is either in the
// imported object, under the same name and with the same value, or named in the report.
func TestNothingIsDroppedSilently(t *testing.T) {
	objs, res := importFixture(t)
	reported := func(object, field string) bool {
		return slices.ContainsFunc(res.Report.Findings, func(f Finding) bool {
			return f.Object == object && (f.Field == field || strings.HasPrefix(f.Field, field+"[") || strings.HasPrefix(f.Field, field+".") || f.Field == "kind" || f.Field == "apiVersion")
		})
	}
	for _, in := range objs {
		id := in.GetKind() + " " + objectName(in)
		var out map[string]any
		if o := find(res, in.GetKind(), in.GetName()); o != nil {
			data, _ := json.Marshal(o)
			_ = json.Unmarshal(data, &out)
		} else if o := find(res, "FleetRestriction", in.GetName()); o != nil && in.GetKind() == "GitRepoRestriction" {
			data, _ := json.Marshal(o)
			_ = json.Unmarshal(data, &out)
			out = out["spec"].(map[string]any) // its top-level fields move under spec
		}
		written := map[string]any{}
		prefix := "spec."
		switch in.GetKind() {
		case "GitRepoRestriction", "BundleNamespaceMapping":
			prefix = ""
			for k, v := range in.Object {
				if !slices.Contains([]string{"apiVersion", "kind", "metadata", "status"}, k) {
					written[k] = v
				}
			}
		default:
			written = spec(in)
		}
		outSpec, _ := out["spec"].(map[string]any)
		if prefix == "" {
			outSpec = out
		}
		for k, v := range written {
			if reflect.DeepEqual(normalize(outSpec[k]), normalize(v)) {
				continue // carried over (a default, false or empty, is carried over as absent)
			}
			if !reported(id, prefix+k) {
				t.Errorf("%s: %s%s = %v is neither in the imported object nor in the report", id, prefix, k, v)
			}
		}
		meta, _ := in.Object["metadata"].(map[string]any)
		for k := range meta {
			if slices.Contains(append(slices.Clone(serverFields), "name", "namespace", "labels", "annotations"), k) {
				continue
			}
			if !reported(id, "metadata."+k) {
				t.Errorf("%s: metadata.%s is neither imported nor reported", id, k)
			}
		}
	}
}

// normalize makes a value comparable across a round trip through a typed object: numbers as
// float64, as JSON has them, durations in one spelling, and defaults (false, 0, "", empty) left
// out, as omitempty does.
func normalize(v any) any {
	data, _ := json.Marshal(v)
	var out any
	_ = json.Unmarshal(data, &out)
	return pruneDefaults(out)
}

func pruneDefaults(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if e = pruneDefaults(e); e == nil {
				delete(x, k)
			} else {
				x[k] = e
			}
		}
		if len(x) == 0 {
			return nil
		}
	case []any:
		if len(x) == 0 {
			return nil
		}
		for i := range x {
			x[i] = pruneDefaults(x[i])
		}
	case bool:
		if !x {
			return nil
		}
	case float64:
		if x == 0 {
			return nil
		}
	case string:
		if x == "" {
			return nil
		}
		if d, err := time.ParseDuration(x); err == nil {
			return d.String() // "5m" as Fleet's user wrote it, "5m0s" as a Duration writes it
		}
	}
	return v
}
