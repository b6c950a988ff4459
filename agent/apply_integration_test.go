package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/e2e/controlplane"
	"github.com/flotilla-dev/flotilla/e2e/wait"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// workload is the cluster the agent deploys to; hubAPI, a hub's API server (Flotilla's API
// alone) for what the agent reads and reports there.
var workload, hubAPI *controlplane.Cluster

func TestMain(m *testing.M) {
	os.Exit(controlplane.RunTests(m, func(ctx context.Context, env *controlplane.Environment) (err error) {
		if workload, err = env.StartCluster(ctx, controlplane.ClusterOptions{Name: "downstream", Kind: controlplane.Workload}); err != nil {
			return err
		}
		if hubAPI, err = env.StartCluster(ctx, controlplane.ClusterOptions{Name: "hub", Kind: controlplane.Bare}); err != nil {
			return err
		}
		return controlplane.InstallFlotillaAPI(ctx, hubAPI.Config())
	}))
}

func objects(t *testing.T, docs ...string) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for _, d := range docs {
		js, err := yaml.YAMLToJSON([]byte(d))
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(js); err != nil {
			t.Fatal(err)
		}
		out = append(out, u)
	}
	return out
}

func deploymentYAML(ns, name string, replicas int, neverReady bool) string {
	label := ""
	if neverReady {
		label = ", " + controlplane.NeverReadyLabel + `: "true"`
	}
	return `apiVersion: apps/v1
kind: Deployment
metadata: {name: ` + name + `, namespace: ` + ns + `}
spec:
  replicas: ` + string(rune('0'+replicas)) + `
  selector: {matchLabels: {app: ` + name + `}}
  template:
    metadata: {labels: {app: ` + name + label + `}}
    spec: {containers: [{name: app, image: example.invalid/app:1}]}
`
}

// waitHealthy waits until the inventory is ready (readiness comes from the cluster's
// controllers and simulated nodes, so it takes a moment), or fails with what is not.
func waitHealthy(t *testing.T, a *Applier, inv Inventory, opts Options) {
	t.Helper()
	var last []ResourceStatus
	var err error
	wait.Until(t, "the inventory is ready", 30*time.Second, func() bool {
		last, err = a.Health(context.Background(), inv, opts)
		return err == nil && len(last) == 0
	}, func() string { return fmt.Sprintf("not ready: %+v (health: %v)", last, err) })
}

func TestApplyPruneAndHealth(t *testing.T) {
	a, err := NewApplier(workload.Config())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	opts := Options{NamespaceLabels: map[string]string{"team": "web"}, Owner: "shop-web"}
	first := objects(t, deploymentYAML("shop", "web", 2, false),
		"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: shop}\ndata: {mode: blue}\n")
	res, err := a.Apply(ctx, first, nil, opts)
	if err != nil || res.Err() != nil {
		t.Fatalf("apply: %v %v", err, res.Err())
	}
	if got := strings.Join(res.Inventory.Strings(), " "); got != "shop_settings__ConfigMap shop_web_apps_Deployment" {
		t.Errorf("inventory %q", got)
	}
	cs := kubernetes.NewForConfigOrDie(workload.Config())
	ns, err := cs.CoreV1().Namespaces().Get(ctx, "shop", metav1.GetOptions{})
	if err != nil || ns.Labels["team"] != "web" {
		t.Fatalf("namespace not created with its labels: %v %v", ns.Labels, err)
	}
	waitHealthy(t, a, res.Inventory, opts)
	// The ConfigMap leaves the bundle: pruned. With keepResources it would stay.
	second := objects(t, deploymentYAML("shop", "web", 2, false))
	res2, err := a.Apply(ctx, second, res.Inventory, opts)
	if err != nil || res2.Err() != nil || len(res2.Pruned) != 1 {
		t.Fatalf("apply 2: %v %v pruned %v", err, res2.Err(), res2.Pruned)
	}
	if _, err := cs.CoreV1().ConfigMaps("shop").Get(ctx, "settings", metav1.GetOptions{}); err == nil {
		t.Errorf("pruned ConfigMap still exists")
	}
	third := objects(t, deploymentYAML("shop", "web", 2, false), "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: kept, namespace: shop}\n")
	res3, _ := a.Apply(ctx, third, res2.Inventory, opts)
	if _, err := a.Apply(ctx, second, res3.Inventory, Options{KeepResources: true, Owner: "shop-web"}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ConfigMaps("shop").Get(ctx, "kept", metav1.GetOptions{}); err != nil {
		t.Errorf("keepResources: ConfigMap was deleted: %v", err)
	}
}

func TestNeverReadyDeploymentIsReported(t *testing.T) {
	a, _ := NewApplier(workload.Config())
	ctx := context.Background()
	res, err := a.Apply(ctx, objects(t, deploymentYAML("broken", "api", 1, true)), nil, Options{Owner: "broken"})
	if err != nil || res.Err() != nil {
		t.Fatal(err, res.Err())
	}
	// Once the Deployment's controller has observed it and its pods exist, it must still be
	// unready.
	cs := kubernetes.NewForConfigOrDie(workload.Config())
	var d *appsv1.Deployment
	wait.Until(t, "the Deployment's controller observed it", 30*time.Second, func() bool {
		d, err = cs.AppsV1().Deployments("broken").Get(ctx, "api", metav1.GetOptions{})
		return err == nil && d.Status.ObservedGeneration == d.Generation && d.Status.Replicas == 1
	}, func() string { return fmt.Sprintf("%+v (read: %v)", d, err) })
	notReady, err := a.Health(ctx, res.Inventory, Options{})
	if err != nil || len(notReady) != 1 || !strings.Contains(notReady[0].Message, "InProgress") {
		t.Fatalf("never-ready deployment: %+v %v", notReady, err)
	}
}

func TestDriftDetectionAndCorrection(t *testing.T) {
	a, _ := NewApplier(workload.Config())
	ctx := context.Background()
	desired := objects(t, deploymentYAML("drift", "svc", 2, false), "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: conf, namespace: drift}\ndata: {a: \"1\"}\n")
	if res, err := a.Apply(ctx, desired, nil, Options{Owner: "drift"}); err != nil || res.Err() != nil {
		t.Fatal(err, res.Err())
	}
	if d, err := a.Drift(ctx, desired, Options{Owner: "drift"}); err != nil || len(d) != 0 {
		t.Fatalf("fresh apply reports drift: %+v %v", d, err)
	}
	// Someone scales the Deployment and edits the ConfigMap by hand.
	cs := kubernetes.NewForConfigOrDie(workload.Config())
	if _, err := cs.AppsV1().Deployments("drift").Patch(ctx, "svc", types.MergePatchType, []byte(`{"spec":{"replicas":5}}`), metav1.PatchOptions{FieldManager: "kubectl-edit"}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ConfigMaps("drift").Patch(ctx, "conf", types.MergePatchType, []byte(`{"data":{"a":"2"}}`), metav1.PatchOptions{FieldManager: "kubectl-edit"}); err != nil {
		t.Fatal(err)
	}
	d, err := a.Drift(ctx, desired, Options{Owner: "drift"})
	if err != nil || len(d) != 2 || !strings.Contains(d[0].Message, "data.a") || !strings.Contains(d[1].Message, "spec.replicas") {
		t.Fatalf("drift: %+v %v", d, err)
	}
	// comparePatches: replicas are someone else's business (an autoscaler).
	ignore := Options{Owner: "drift", ComparePatches: []ComparePatch{{Kind: "Deployment", JSONPointers: []string{"/spec/replicas"}}}}
	if d, _ := a.Drift(ctx, desired, ignore); len(d) != 1 || d[0].Object.Kind != "ConfigMap" {
		t.Errorf("with comparePatches: %+v", d)
	}
	// A patch for another apiVersion of the kind does not match.
	other := Options{Owner: "drift", ComparePatches: []ComparePatch{{APIVersion: "apps/v1beta2", Kind: "Deployment", JSONPointers: []string{"/spec/replicas"}}}}
	if d, _ := a.Drift(ctx, desired, other); len(d) != 2 {
		t.Errorf("a comparePatch of another apiVersion excluded a field: %+v", d)
	}
	// correctDrift: applying again restores the bundle's values.
	if res, err := a.Apply(ctx, desired, nil, Options{Owner: "drift"}); err != nil || res.Err() != nil {
		t.Fatal(err, res.Err())
	}
	if d, _ := a.Drift(ctx, desired, Options{Owner: "drift"}); len(d) != 0 {
		t.Errorf("drift after correction: %+v", d)
	}
	if cm, _ := cs.CoreV1().ConfigMaps("drift").Get(ctx, "conf", metav1.GetOptions{}); cm.Data["a"] != "1" {
		t.Errorf("ConfigMap not corrected: %v", cm.Data)
	}
}

func TestCRDAndCustomResourceInOneApply(t *testing.T) {
	a, _ := NewApplier(workload.Config())
	ctx := context.Background()
	crd := `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  names: {kind: Widget, plural: widgets, singular: widget}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
`
	widget := "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w1, namespace: widgets}\nspec: {size: 3}\n"
	// The custom resource comes first in the list: the engine applies the CRD before it.
	res, err := a.Apply(ctx, objects(t, widget, crd), nil, Options{Owner: "widgets"})
	if err != nil || res.Err() != nil {
		t.Fatalf("apply: %v %v", err, res.Err())
	}
	// A custom resource with conditions: Ready=False is unready, unless ignored.
	live := objects(t, "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w1, namespace: widgets, generation: 1}\nstatus:\n  observedGeneration: 1\n  conditions: [{type: Ready, status: \"False\", reason: Waiting, message: waiting for a dependency}]\n")[0]
	if rs := Readiness(live, nil); rs.Ready || !strings.Contains(rs.Message, "waiting for a dependency") {
		t.Errorf("Ready=False widget: %+v", rs)
	}
	if rs := Readiness(live, []map[string]string{{"type": "Ready", "reason": "Waiting"}}); !rs.Ready {
		t.Errorf("ignored condition still makes it unready: %+v", rs)
	}
}

// An object that exists and is not the deployment's is never taken over unless the bundle says
// takeOwnership, and prune deletes only what carries the deployment's mark, never a protected
// namespace: whatever the bundles on a cluster do, they cannot take or delete what is not theirs.
func TestApplyTakesNothingAndPrunesNothingThatIsNotTheDeployments(t *testing.T) {
	a, err := NewApplier(workload.Config())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(workload.Config())
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "safe"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Made by another tool.
	if _, err := cs.CoreV1().ConfigMaps("safe").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "theirs"}, Data: map[string]string{"owner": "someone"}},
		metav1.CreateOptions{FieldManager: "kubectl-create"}); err != nil {
		t.Fatal(err)
	}
	cm := func(name, value string) string {
		return "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: " + name + ", namespace: safe}\ndata: {owner: " + value + "}\n"
	}
	data := func(name string) (string, string) {
		got, err := cs.CoreV1().ConfigMaps("safe").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return "", ""
		}
		return got.Data["owner"], got.Annotations[OwnerAnnotation]
	}

	res, err := a.Apply(ctx, objects(t, cm("theirs", "bundle-a"), cm("shared", "bundle-a")), nil, Options{Owner: "a"})
	if err != nil || res.Err() == nil || !strings.Contains(res.Err().Error(), "ConfigMap safe/theirs: it exists and was not created by this bundle: set takeOwnership") {
		t.Fatalf("another tool's object: %v %v", err, res.Err())
	}
	if v, mark := data("theirs"); v != "someone" || mark != "" {
		t.Errorf("another tool's object was changed: owner %q, mark %q", v, mark)
	}
	if strings.Contains(strings.Join(res.Inventory.Strings(), " "), "theirs") {
		t.Errorf("an object never applied is in the inventory: %v", res.Inventory)
	}
	invA := res.Inventory

	// Another bundle naming bundle a's object is refused too.
	resB, err := a.Apply(ctx, objects(t, cm("shared", "bundle-b")), nil, Options{Owner: "b"})
	if err != nil || resB.Err() == nil || !strings.Contains(resB.Err().Error(), `belongs to the deployment "a"`) {
		t.Fatalf("another bundle's object: %v %v", err, resB.Err())
	}
	if v, mark := data("shared"); v != "bundle-a" || mark != "a" {
		t.Errorf("bundle a's object changed: owner %q, mark %q", v, mark)
	}

	// With takeOwnership, bundle b adopts it; bundle a dropping it afterwards deletes nothing.
	if resB, err = a.Apply(ctx, objects(t, cm("shared", "bundle-b")), nil, Options{Owner: "b", TakeOwnership: true}); err != nil || resB.Err() != nil {
		t.Fatalf("takeOwnership: %v %v", err, resB.Err())
	}
	if res, err = a.Apply(ctx, nil, invA, Options{Owner: "a"}); err != nil || res.Err() != nil || len(res.Pruned) != 0 {
		t.Fatalf("bundle a's prune: %v %v, pruned %v", err, res.Err(), res.Pruned)
	}
	if v, mark := data("shared"); v != "bundle-b" || mark != "b" {
		t.Errorf("bundle a pruned what bundle b adopted: owner %q, mark %q", v, mark)
	}

	// A Role named a_b deploys, is inventoried, and is pruned when it leaves.
	role := "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: a_b, namespace: safe}\nrules: []\n"
	res, err = a.Apply(ctx, objects(t, role), nil, Options{Owner: "rbac"})
	if err != nil || res.Err() != nil {
		t.Fatalf("role a_b: %v %v", err, res.Err())
	}
	inv, err := ParseObjMeta(res.Inventory.Strings()[0])
	if err != nil || inv.Name != "a_b" {
		t.Fatalf("inventory of role a_b: %+v %v", inv, err)
	}
	if res, err = a.Apply(ctx, nil, Inventory{inv}, Options{Owner: "rbac"}); err != nil || res.Err() != nil || len(res.Pruned) != 1 {
		t.Fatalf("pruning role a_b: %v %v %v", err, res.Err(), res.Pruned)
	}

	// Namespaces a bundle drops are deleted, except protected ones: the cluster's own (default,
	// here adopted with takeOwnership) and those the operator protects.
	nsYAML := func(name string) string { return "apiVersion: v1\nkind: Namespace\nmetadata: {name: " + name + "}\n" }
	opts := Options{Owner: "namespaces", TakeOwnership: true, Protected: []string{"team-shared"}}
	res, err = a.Apply(ctx, objects(t, nsYAML("default"), nsYAML("team-shared"), nsYAML("scratch")), nil, opts)
	if err != nil || res.Err() != nil {
		t.Fatalf("namespaces: %v %v", err, res.Err())
	}
	if res, err = a.Apply(ctx, nil, res.Inventory, opts); err != nil || res.Err() != nil {
		t.Fatalf("dropping the namespaces: %v %v", err, res.Err())
	}
	if got := strings.Join(res.Pruned.Strings(), " "); got != "_scratch__Namespace" {
		t.Errorf("pruned %q, want only the unprotected namespace", got)
	}
	for _, ns := range []string{"default", "team-shared"} {
		got, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if err != nil || got.DeletionTimestamp != nil {
			t.Errorf("protected namespace %s: %v, deleting %v", ns, err, got.DeletionTimestamp)
		}
	}
}

// Objects an older agent applied carry no mark: they are still pruned when they leave the
// bundle, a Deployment included (its controller writes its status and revision annotation).
func TestPruneRemovesWhatAnAgentAppliedBeforeTheMark(t *testing.T) {
	a, err := NewApplier(workload.Config())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	old := objects(t, deploymentYAML("legacy", "web", 1, false), "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: conf, namespace: legacy}\ndata: {a: b}\n",
		"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: empty, namespace: legacy}\n")
	// Applied as the agent applied before marks: its field manager, no annotation.
	for _, o := range old {
		m, err := a.mapping(o.GroupVersionKind())
		if err != nil {
			t.Fatal(err)
		}
		if err := a.ensureNamespace(ctx, "legacy", Options{}); err != nil {
			t.Fatal(err)
		}
		if err := a.applyOne(ctx, o, m); err != nil {
			t.Fatal(err)
		}
	}
	waitHealthy(t, a, NewInventory(old), Options{})
	res, err := a.Apply(ctx, nil, NewInventory(old), Options{Owner: "legacy"})
	if err != nil || res.Err() != nil || len(res.Pruned) != 3 {
		t.Fatalf("prune: %v %v, pruned %v", err, res.Err(), res.Pruned)
	}
}

// A deployment whose objects its options do not allow applies nothing, and says which objects
// and why: cluster-scoped objects under a forced namespace (as Fleet fails them), and objects
// outside a FleetRestriction, cluster-scoped kinds judged by what the cluster serves or by a
// CustomResourceDefinition of the same set.
func TestDisallowedObjectsApplyNothing(t *testing.T) {
	a, err := NewApplier(workload.Config())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(workload.Config())
	cm := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: restricted-cm, namespace: tenant-x}\ndata: {a: b}\n"
	role := "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: restricted-role}\nrules: []\n"
	crd := `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gadgets.restricted.example.com}
spec:
  group: restricted.example.com
  names: {kind: Gadget, plural: gadgets}
  scope: Cluster
  versions: [{name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}]
`
	gadget := "apiVersion: restricted.example.com/v1\nkind: Gadget\nmetadata: {name: g}\n"
	tenant := v1alpha1.DeploymentRestriction{Name: "tenant", AllowedNamespaces: []string{"tenant-*"}, AllowedClusterScopedKinds: []string{"apiextensions.k8s.io/CustomResourceDefinition"}}
	cases := []struct {
		name string
		objs []string
		opts Options
		want []string
	}{
		{"forced namespace", []string{cm, role}, Options{TargetNamespace: "tenant-x"},
			[]string{`ClusterRole restricted-role is cluster-scoped, but the bundle forces namespace "tenant-x"`}},
		{"namespace outside the restriction", []string{strings.Replace(cm, "tenant-x", "kube-system", 1)}, Options{Restrictions: []v1alpha1.DeploymentRestriction{tenant}},
			[]string{`ConfigMap restricted-cm: namespace "kube-system" is not allowed (FleetRestriction tenant)`}},
		{"cluster-scoped kind the cluster serves", []string{cm, role}, Options{Restrictions: []v1alpha1.DeploymentRestriction{tenant}},
			[]string{"ClusterRole restricted-role: cluster-scoped kind rbac.authorization.k8s.io/ClusterRole is not allowed (FleetRestriction tenant)"}},
		{"cluster-scoped kind of a CRD in the same set", []string{crd, gadget}, Options{Restrictions: []v1alpha1.DeploymentRestriction{tenant}},
			[]string{"Gadget g: cluster-scoped kind restricted.example.com/Gadget is not allowed"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.opts.Owner = "restricted"
			res, err := a.Apply(ctx, objects(t, c.objs...), nil, c.opts)
			var restricted *RestrictedError
			if !errors.As(err, &restricted) || res != nil {
				t.Fatalf("apply: %v, %+v; want a RestrictedError", err, res)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q lacks %q", err, w)
				}
			}
		})
	}
	// Nothing of any of them was applied.
	for what, err := range map[string]error{
		"the ConfigMap":      getErr(cs.CoreV1().ConfigMaps("tenant-x").Get(ctx, "restricted-cm", metav1.GetOptions{})),
		"the namespace":      getErr(cs.CoreV1().Namespaces().Get(ctx, "tenant-x", metav1.GetOptions{})),
		"the ClusterRole":    getErr(cs.RbacV1().ClusterRoles().Get(ctx, "restricted-role", metav1.GetOptions{})),
		"the CRD":            cs.RESTClient().Get().AbsPath("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gadgets.restricted.example.com").Do(ctx).Error(),
		"the kube-system CM": getErr(cs.CoreV1().ConfigMaps("kube-system").Get(ctx, "restricted-cm", metav1.GetOptions{})),
	} {
		if !apierrors.IsNotFound(err) {
			t.Errorf("%s exists (%v)", what, err)
		}
	}
	// Allowed objects apply.
	allowed := Options{Owner: "restricted", Restrictions: []v1alpha1.DeploymentRestriction{tenant}}
	res, err := a.Apply(ctx, objects(t, cm), nil, allowed)
	if err != nil || res.Err() != nil {
		t.Fatalf("allowed objects: %v %v", err, res.Err())
	}
	t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(context.Background(), "tenant-x", metav1.DeleteOptions{}) })
}

func getErr[T any](_ T, err error) error { return err }

func jobYAML(name, image string) string {
	return `apiVersion: batch/v1
kind: Job
metadata: {name: ` + name + `, namespace: jobs}
spec:
  template:
    metadata: {labels: {app: ` + name + `}}
    spec: {restartPolicy: Never, containers: [{name: main, image: ` + image + `}]}
`
}

// force: a Job whose template changed (immutable) is refused in place, and replaced with
// force: deleted and created anew.
func TestForceReplacesAnObjectWithAnImmutableChange(t *testing.T) {
	a, err := NewApplier(workload.Config())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(workload.Config())
	if res, err := a.Apply(ctx, objects(t, jobYAML("migrate", "example.invalid/migrate:1")), nil, Options{Owner: "jobs"}); err != nil || res.Err() != nil {
		t.Fatal(err, res.Err())
	}
	before, err := cs.BatchV1().Jobs("jobs").Get(ctx, "migrate", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	changed := objects(t, jobYAML("migrate", "example.invalid/migrate:2"))
	res, err := a.Apply(ctx, changed, nil, Options{Owner: "jobs"})
	if err != nil || res.Err() == nil || !strings.Contains(res.Err().Error(), "field is immutable") {
		t.Fatalf("without force: %v %v, want the API server's refusal", err, res.Err())
	}
	if j, _ := cs.BatchV1().Jobs("jobs").Get(ctx, "migrate", metav1.GetOptions{}); j.UID != before.UID {
		t.Fatalf("without force the Job was replaced")
	}
	if res, err := a.Apply(ctx, changed, nil, Options{Owner: "jobs", Force: true}); err != nil || res.Err() != nil {
		t.Fatalf("with force: %v %v", err, res.Err())
	}
	after, err := cs.BatchV1().Jobs("jobs").Get(ctx, "migrate", metav1.GetOptions{})
	if err != nil || after.UID == before.UID || after.Spec.Template.Spec.Containers[0].Image != "example.invalid/migrate:2" {
		t.Errorf("with force: the Job is %v (uid %s, was %s), want a new one with image 2", err, after.UID, before.UID)
	}
}

// timeoutSeconds: an apply that cannot finish in time fails, and says it was the timeout.
func TestTimeoutBoundsAnApply(t *testing.T) {
	a, err := NewApplier(workload.Config())
	if err != nil {
		t.Fatal(err)
	}
	res, err := a.Apply(context.Background(), objects(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: slow, namespace: timeouts}\n"), nil, Options{Owner: "timeouts", Timeout: time.Nanosecond})
	if err != nil || res.Err() == nil || !strings.Contains(res.Err().Error(), "apply did not finish within 1ns (timeoutSeconds)") {
		t.Errorf("apply past its timeout: %v %v", err, res.Err())
	}
	cs := kubernetes.NewForConfigOrDie(workload.Config())
	if _, err := cs.CoreV1().ConfigMaps("timeouts").Get(context.Background(), "slow", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the ConfigMap was applied after the timeout: %v", err)
	}
}

// waitForJobs: a running Job is ready by kstatus, and not ready until it completes with
// waitForJobs.
func TestWaitForJobsHoldsReadinessUntilTheJobCompletes(t *testing.T) {
	a, err := NewApplier(workload.Config())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	res, err := a.Apply(ctx, objects(t, jobYAML("report", "example.invalid/report:1")), nil, Options{Owner: "jobs-wait"})
	if err != nil || res.Err() != nil {
		t.Fatal(err, res.Err())
	}
	waitHealthy(t, a, res.Inventory, Options{}) // without waitForJobs, a started Job is ready
	nr, err := a.Health(ctx, res.Inventory, Options{WaitForJobs: true})
	if err != nil || len(nr) != 1 || !strings.Contains(nr[0].Message, "Job not complete yet (waitForJobs)") {
		t.Errorf("with waitForJobs a running Job is ready: %+v %v", nr, err)
	}
}

func TestJobCompletedReadsTheCompleteCondition(t *testing.T) {
	job := func(conds string) *unstructured.Unstructured {
		return objects(t, "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j, namespace: n}\nstatus: {conditions: ["+conds+"]}\n")[0]
	}
	for _, c := range []struct {
		name  string
		obj   *unstructured.Unstructured
		ready bool
	}{
		{"complete", job(`{type: Complete, status: "True"}`), true},
		{"running", job(""), false},
		{"failed", job(`{type: Failed, status: "True"}`), false},
		{"complete condition not true", job(`{type: Complete, status: "False"}`), false},
		{"not a Job", objects(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: n}\n")[0], true},
	} {
		if got := jobCompleted(c.obj); got.Ready != c.ready {
			t.Errorf("%s: ready %t, want %t (%s)", c.name, got.Ready, c.ready, got.Message)
		}
	}
}
