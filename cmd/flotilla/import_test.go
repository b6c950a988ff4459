package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/flotilla-dev/flotilla/e2e/controlplane"
	"github.com/flotilla-dev/flotilla/hub/fleetimport"
	"github.com/flotilla-dev/flotilla/hub/operate"
)

// `flotilla import fleet` writes Flotilla's objects of a Fleet installation's, ready to apply,
// and a report of what it could not carry over; the exit code says whether it dropped anything.
func TestImportFleetWritesObjectsAndAReport(t *testing.T) {
	report := filepath.Join(t.TempDir(), "report.txt")
	out, err := runCLI("import", "fleet", "-f", "../../hub/fleetimport/testdata/fleet-installation.yaml", "--report", report)
	var status *exitStatus
	if !errors.As(err, &status) || status.code != 3 {
		t.Fatalf("an installation with fields Flotilla has no place for: %v, want exit code 3", err)
	}
	objs, err := fleetimport.Decode("output", []byte(out))
	if err != nil {
		t.Fatalf("the output does not read back: %v\n%s", err, out)
	}
	kinds := map[string]int{}
	for _, o := range objs {
		if o.GetAPIVersion() != "flotilla.dev/v1alpha1" {
			t.Errorf("%s %s: apiVersion %s", o.GetKind(), o.GetName(), o.GetAPIVersion())
		}
		if _, found := o.Object["status"]; found {
			t.Errorf("%s %s carries a status", o.GetKind(), o.GetName())
		}
		kinds[o.GetKind()]++
	}
	if kinds["GitRepo"] != 3 || kinds["HelmOp"] != 2 || kinds["ClusterGroup"] != 1 || kinds["FleetRestriction"] != 1 || len(objs) != 7 {
		t.Errorf("objects written by kind: %v", kinds)
	}
	text, _ := os.ReadFile(report)
	for _, want := range []string{"imported: 1 ClusterGroup, 3 GitRepo, 1 GitRepoRestriction, 2 HelmOp", "GitRepo fleet-default/everything:", "renamed  spec.clientSecretName: spec.secretRef.name",
		"dropped  spec.ociRegistrySecret", "Secrets the imported objects name (bring them over, with their values): fleet-default/chart-auth, fleet-default/git-auth"} {
		if !strings.Contains(string(text), want) {
			t.Errorf("the report lacks %q:\n%s", want, text)
		}
	}

	clean := filepath.Join(t.TempDir(), "group.yaml")
	if err := os.WriteFile(clean, []byte("apiVersion: fleet.cattle.io/v1alpha1\nkind: ClusterGroup\nmetadata: {name: prod, namespace: fleet-default}\nspec: {selector: {matchLabels: {env: prod}}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := runCLI("import", "fleet", "-f", filepath.Dir(clean), "-o", "json"); err != nil || !strings.Contains(out, `"kind": "List"`) || !strings.Contains(out, `"env": "prod"`) {
		t.Errorf("a directory of one group, carried over whole: %v\n%s", err, out)
	}
	var in *operate.ErrInput
	if _, err := runCLI("import", "fleet", "-f", filepath.Join(t.TempDir(), "missing.yaml")); !errors.As(err, &in) || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("a file that is not there: %v, want bad input naming it", err)
	}
}

// fleetPlurals are the resources of the Fleet kinds the test hub serves.
var fleetPlurals = map[string]string{"GitRepo": "gitrepos", "ClusterGroup": "clustergroups", "GitRepoRestriction": "gitreporestrictions", "BundleNamespaceMapping": "bundlenamespacemappings"}

// fleetCRD is a CustomResourceDefinition of one of Fleet's kinds as far as the importer needs
// it: served, its fields whatever Fleet's documentation says (kept as written).
func fleetCRD(kind, plural string) []byte {
	return []byte(fmt.Sprintf(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: %[2]s.fleet.cattle.io}
spec:
  group: fleet.cattle.io
  scope: Namespaced
  names: {kind: %[1]s, plural: %[2]s, singular: %[3]s, listKind: %[1]sList}
  versions:
  - name: v1alpha1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
`, kind, plural, strings.ToLower(kind)))
}

// Read from a Fleet hub (--from-kubeconfig), the installation imports as it does from files,
// and nothing is written to the Fleet hub.
func TestImportFleetReadsAFleetHub(t *testing.T) {
	ctx := t.Context()
	env, err := controlplane.Start(ctx, controlplane.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Stop()
	fleetHub, err := env.StartCluster(ctx, controlplane.ClusterOptions{Name: "fleet-hub"})
	if err != nil {
		t.Fatal(err)
	}
	var crds [][]byte
	for kind, plural := range fleetPlurals {
		crds = append(crds, fleetCRD(kind, plural))
	}
	if err := controlplane.InstallCRDs(ctx, fleetHub.Config(), crds); err != nil {
		t.Fatal(err)
	}
	const fixture = "../../hub/fleetimport/testdata/fleet-installation.yaml"
	data, err := os.ReadFile(fixture)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := fleetimport.Decode(fixture, data)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(fleetHub.Config())
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(fleetHub.Config())
	if err != nil {
		t.Fatal(err)
	}
	var onHub []*unstructured.Unstructured
	for _, o := range objs {
		plural := fleetPlurals[o.GetKind()]
		if plural == "" {
			continue // a kind this Fleet hub does not serve
		}
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: o.GetNamespace()}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		o = o.DeepCopy()
		unstructured.RemoveNestedField(o.Object, "metadata", "uid")
		unstructured.RemoveNestedField(o.Object, "metadata", "resourceVersion")
		unstructured.RemoveNestedField(o.Object, "metadata", "creationTimestamp")
		created, err := dyn.Resource(schema.GroupVersionResource{Group: "fleet.cattle.io", Version: "v1alpha1", Resource: plural}).Namespace(o.GetNamespace()).Create(ctx, o, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		onHub = append(onHub, created)
	}
	report := filepath.Join(t.TempDir(), "report.json")
	out, err := runCLI("import", "fleet", "--from-kubeconfig", fleetHub.KubeconfigPath, "--report", report, "--report-format", "json")
	var status *exitStatus
	if !errors.As(err, &status) || status.code != 3 {
		t.Fatalf("import from the Fleet hub: %v, want exit code 3 (fields dropped)\n%s", err, out)
	}
	fromHub, err := fleetimport.Decode("output", []byte(out))
	if err != nil {
		t.Fatal(err)
	}
	want := fleetimport.Convert(onHub)
	if len(fromHub) != len(want.Objects) {
		t.Fatalf("%d objects from the hub, %d from the same objects in a file", len(fromHub), len(want.Objects))
	}
	text, _ := os.ReadFile(report)
	if !strings.Contains(string(text), `"field": "spec.ociRegistrySecret"`) || !strings.Contains(string(text), `"GitRepo": 3`) {
		t.Errorf("the JSON report:\n%s", text)
	}
	// Read only: every object on the Fleet hub as it was.
	for _, o := range onHub {
		plural := fleetPlurals[o.GetKind()]
		now, err := dyn.Resource(schema.GroupVersionResource{Group: "fleet.cattle.io", Version: "v1alpha1", Resource: plural}).Namespace(o.GetNamespace()).Get(ctx, o.GetName(), metav1.GetOptions{})
		if err != nil || now.GetResourceVersion() != o.GetResourceVersion() {
			t.Errorf("%s %s on the Fleet hub changed by the import: %v", o.GetKind(), o.GetName(), err)
		}
	}
}
