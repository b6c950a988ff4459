package upgrade

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/e2e/controlplane"
	"github.com/flotilla-dev/flotilla/e2e/wait"
	"github.com/flotilla-dev/flotilla/hub"
)

var apiServer *controlplane.Cluster

func TestMain(m *testing.M) {
	os.Exit(controlplane.RunTests(m, func(ctx context.Context, env *controlplane.Environment) (err error) {
		apiServer, err = env.StartCluster(ctx, controlplane.ClusterOptions{Name: "upgrade", Kind: controlplane.Bare})
		return err
	}))
}

func readDir(t *testing.T, dir string) [][]byte {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(names)
	var out [][]byte
	for _, n := range names {
		data, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, data)
	}
	return out
}

// Objects stored under the previous release's CRDs (its samples, created then) are read and
// written again under the current CRDs and admission policies: every one decodes into the
// current Go types, and an update and a status update that change nothing are accepted.
func TestObjectsOfThePreviousReleaseSurviveTheUpgrade(t *testing.T) {
	ctx := context.Background()
	cfg := apiServer.Config()
	previous := readDir(t, "testdata/previous/crds")
	plural := plurals(t, previous)
	if err := controlplane.InstallCRDs(ctx, cfg, previous); err != nil {
		t.Fatalf("previous CRDs: %v", err)
	}
	ns := "upgrade"
	if _, err := kubernetes.NewForConfigOrDie(cfg).CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dyn := dynamic.NewForConfigOrDie(cfg)
	resource := func(o *unstructured.Unstructured) dynamic.ResourceInterface {
		gvk := o.GroupVersionKind()
		return dyn.Resource(schema.GroupVersionResource{Group: gvk.Group, Version: gvk.Version, Resource: plural[gvk.Kind]}).Namespace(ns)
	}
	var stored []*unstructured.Unstructured
	for _, doc := range readDir(t, "testdata/previous/samples") {
		o := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &o.Object); err != nil {
			t.Fatal(err)
		}
		// Created as the previous release's clients did; a CRD may still be settling.
		var created *unstructured.Unstructured
		var err error
		wait.Until(t, fmt.Sprintf("the previous sample %s %s is created", o.GetKind(), o.GetName()), 30*time.Second, func() bool {
			created, err = resource(o).Create(ctx, o, metav1.CreateOptions{})
			return err == nil
		}, func() string { return fmt.Sprintf("last error: %v", err) })
		stored = append(stored, created)
	}

	if err := controlplane.InstallFlotillaAPI(ctx, cfg); err != nil {
		t.Fatalf("current CRDs: %v", err)
	}
	scheme, err := hub.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	typed, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range stored {
		what := fmt.Sprintf("%s %s", o.GetKind(), o.GetName())
		live, err := resource(o).Get(ctx, o.GetName(), metav1.GetOptions{})
		if err != nil {
			t.Errorf("%s: read after the upgrade: %v", what, err)
			continue
		}
		obj, err := scheme.New(live.GroupVersionKind())
		if err != nil {
			t.Errorf("%s: %v", what, err)
			continue
		}
		if err := typed.Get(ctx, client.ObjectKeyFromObject(live), obj.(client.Object)); err != nil {
			t.Errorf("%s: decode into the current types: %v", what, err)
		}
		if _, err := resource(o).Update(ctx, live, metav1.UpdateOptions{}); err != nil {
			t.Errorf("%s: update after the upgrade: %v", what, err)
			continue
		}
		if _, found := live.Object["status"]; found {
			again, _ := resource(o).Get(ctx, o.GetName(), metav1.GetOptions{})
			if _, err := resource(o).UpdateStatus(ctx, again, metav1.UpdateOptions{}); err != nil {
				t.Errorf("%s: status update after the upgrade: %v", what, err)
			}
		}
	}
	if len(stored) < 12 {
		t.Errorf("only %d previous objects stored; the previous release has a sample of each of its 12 kinds", len(stored))
	}
}

// plurals are the resource names of the kinds the CRDs define.
func plurals(t *testing.T, crds [][]byte) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, doc := range crds {
		var crd struct {
			Spec struct {
				Names struct{ Kind, Plural string } `json:"names"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal(doc, &crd); err != nil {
			t.Fatal(err)
		}
		out[crd.Spec.Names.Kind] = crd.Spec.Names.Plural
	}
	return out
}
