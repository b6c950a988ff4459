package v1alpha1_test

// Integration tests: the generated CRDs on a real kube-apiserver. They prove that the schema
// and CEL rules reject bad objects with a message naming the field, that the samples are
// accepted, and that printer columns reach kubectl's table output.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/e2e/controlplane"
	"github.com/flotilla-dev/flotilla/hub/fleetimport"
	"github.com/flotilla-dev/flotilla/manifests"
)

var hub *controlplane.Cluster

// TestMain starts a bare hub cluster with the CRDs installed for the whole package.
func TestMain(m *testing.M) {
	os.Exit(controlplane.RunTests(m, func(ctx context.Context, env *controlplane.Environment) (err error) {
		if hub, err = env.StartCluster(ctx, controlplane.ClusterOptions{Name: "hub", Kind: controlplane.Bare}); err != nil {
			return err
		}
		return controlplane.InstallFlotillaAPI(ctx, hub.Config())
	}))
}

// newNamespace creates a namespace of its own for one test.
func newNamespace(t *testing.T) string {
	t.Helper()
	cs, err := kubernetes.NewForConfig(hub.Config())
	if err != nil {
		t.Fatal(err)
	}
	ns, err := cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "test-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("failed to create namespace: %v", err)
	}
	return ns.Name
}

// resourceFor maps a document's kind to its resource, the lower-case plural.
func resourceFor(obj *unstructured.Unstructured) dynamic.NamespaceableResourceInterface {
	client := dynamic.NewForConfigOrDie(hub.Config())
	gvk := obj.GroupVersionKind()
	return client.Resource(schema.GroupVersionResource{Group: gvk.Group, Version: gvk.Version, Resource: plural(gvk.Kind)})
}

// plural is the resource name of one of our kinds (none is irregular).
func plural(kind string) string {
	lower := strings.ToLower(kind)
	if strings.HasSuffix(lower, "y") {
		return strings.TrimSuffix(lower, "y") + "ies"
	}
	return lower + "s"
}

func decode(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	obj := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(doc), &obj.Object); err != nil {
		t.Fatalf("bad test document: %v\n%s", err, doc)
	}
	return obj
}

func create(t *testing.T, ns, doc string) (*unstructured.Unstructured, error) {
	t.Helper()
	obj := decode(t, doc)
	return resourceFor(obj).Namespace(ns).Create(t.Context(), obj, metav1.CreateOptions{})
}

func TestSamplesAreAccepted(t *testing.T) {
	samples, err := manifests.Samples()
	if err != nil {
		t.Fatal(err)
	}
	if len(samples) < 12 {
		t.Fatalf("expected a sample for each of the 12 kinds, found %d", len(samples))
	}
	ns := newNamespace(t)
	for name, doc := range samples {
		if _, err := create(t, ns, string(doc)); err != nil {
			t.Errorf("sample %s rejected: %v", name, err)
		}
	}
}

// An Alert's providerRef has no namespace: strict validation refuses one, and without it the
// API server drops it, so the alert names a provider of its own namespace whatever it was
// sent with.
func TestAnAlertCannotNameAnotherNamespacesProvider(t *testing.T) {
	ns := newNamespace(t)
	obj := decode(t, "apiVersion: flotilla.dev/v1alpha1\nkind: Alert\nmetadata: {name: a}\nspec: {providerRef: {name: p, namespace: other}, eventSources: [{kind: Bundle}]}")
	alerts := resourceFor(obj).Namespace(ns)
	if _, err := alerts.Create(t.Context(), obj.DeepCopy(), metav1.CreateOptions{FieldValidation: "Strict"}); err == nil || !strings.Contains(err.Error(), `unknown field "spec.providerRef.namespace"`) {
		t.Errorf("strict create: %v, want the namespace refused", err)
	}
	got, err := alerts.Create(t.Context(), obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ref, _, _ := unstructured.NestedStringMap(got.Object, "spec", "providerRef"); len(ref) != 1 || ref["name"] != "p" {
		t.Errorf("providerRef %v as stored, want its name alone", ref)
	}
}

// TestInvalidObjectsAreRejected creates one bad object per rule. Each must fail, and the
// message must name the field and say what is wrong.
func TestInvalidObjectsAreRejected(t *testing.T) {
	const gv = "apiVersion: flotilla.dev/v1alpha1\n"
	cases := []struct {
		name string
		doc  string
		want []string // substrings of the error message
	}{
		{"gitrepo without repo", gv + "kind: GitRepo\nmetadata: {name: a}\nspec: {branch: main}",
			[]string{"spec.repo", "Required value"}},
		{"gitrepo with ftp url", gv + "kind: GitRepo\nmetadata: {name: a}\nspec: {repo: 'ftp://example.com/x'}",
			[]string{"spec.repo", "must be an http(s):// or ssh:// URL, user@host:path, or oci://registry/path"}},
		{"gitrepo with branch and revision", gv + "kind: GitRepo\nmetadata: {name: a}\nspec: {repo: 'https://example.com/x', branch: main, revision: v1}",
			[]string{"spec", "set at most one of branch, revision and semver"}},
		{"gitrepo verifying with two key lists", gv + "kind: GitRepo\nmetadata: {name: a}\nspec: {repo: 'https://example.com/x', verify: {secretRef: {name: k}, configMapRef: {name: k}}}",
			[]string{"spec.verify", "exactly one of secretRef and configMapRef"}},
		{"gitrepo verifying with no key list", gv + "kind: GitRepo\nmetadata: {name: a}\nspec: {repo: 'https://example.com/x', verify: {mode: Tag}}",
			[]string{"spec.verify", "exactly one of secretRef and configMapRef"}},
		{"gitrepo verifying in an unknown mode", gv + "kind: GitRepo\nmetadata: {name: a}\nspec: {repo: 'https://example.com/x', verify: {mode: Author, secretRef: {name: k}}}",
			[]string{"spec.verify.mode", "Unsupported value"}},
		{"gitrepo polling below 1s", gv + "kind: GitRepo\nmetadata: {name: a}\nspec: {repo: 'https://example.com/x', pollingInterval: 100ms}",
			[]string{"spec.pollingInterval", "at least 1s"}},
		{"gitrepo target without selector", gv + "kind: GitRepo\nmetadata: {name: a}\nspec: {repo: 'https://example.com/x', targets: [{name: x}]}",
			[]string{"spec.targets[0]", "a target needs"}},
		{"gitrepo sync window kind", gv + "kind: GitRepo\nmetadata: {name: a}\nspec: {repo: 'https://example.com/x', syncWindows: [{kind: Maybe, schedule: '@daily', duration: 1h}]}",
			[]string{"spec.syncWindows[0].kind", "Unsupported value"}},
		{"R3.13 window schedule that is no cron", gv + "kind: Cluster\nmetadata: {name: a}\nspec: {maintenanceWindow: {schedule: 'every night', duration: 2h}}",
			[]string{"spec.maintenanceWindow.schedule", "should match"}},
		{"R3.13 window time zone that is no zone name", gv + "kind: Cluster\nmetadata: {name: a}\nspec: {maintenanceWindow: {schedule: '0 2 * * *', duration: 2h, timeZone: 'local time'}}",
			[]string{"spec.maintenanceWindow.timeZone", "should match"}},
		{"R3.13 window duration that is no duration", gv + "kind: Cluster\nmetadata: {name: a}\nspec: {maintenanceWindow: {schedule: '0 2 * * *', duration: 'two hours'}}",
			[]string{"spec.maintenanceWindow.duration"}},
		{"gitrepo sync schedule that is no cron", gv + "kind: GitRepo\nmetadata: {name: a}\nspec: {repo: 'https://example.com/x', syncSchedule: {cron: '*/5 * * *'}}",
			[]string{"spec.syncSchedule.cron", "should match"}},
		{"gitrepo sync window schedule that is no cron", gv + "kind: GitRepo\nmetadata: {name: a}\nspec: {repo: 'https://example.com/x', syncWindows: [{kind: Deny, schedule: 'weekends', duration: 48h}]}",
			[]string{"spec.syncWindows[0].schedule", "should match"}},
		{"R1.2 percent above 100", gv + "kind: Bundle\nmetadata: {name: a}\nspec: {rolloutStrategy: {maxUnavailable: '150%'}}",
			[]string{"spec.rolloutStrategy.maxUnavailable", "percentage from 0% to 100%"}},
		{"R1.2 negative integer", gv + "kind: Bundle\nmetadata: {name: a}\nspec: {rolloutStrategy: {maxUnavailablePartitions: -1}}",
			[]string{"spec.rolloutStrategy.maxUnavailablePartitions", "non-negative"}},
		{"R1.3 partition without selector", gv + "kind: Bundle\nmetadata: {name: a}\nspec: {rolloutStrategy: {partitions: [{name: p1}]}}",
			[]string{"spec.rolloutStrategy.partitions[0]", "a partition needs"}},
		{"R1.1 maxNew zero", gv + "kind: Bundle\nmetadata: {name: a}\nspec: {rolloutStrategy: {maxNew: 0}}",
			[]string{"spec.rolloutStrategy.maxNew", "greater than or equal to 1"}},
		{"R2.3 maxSurge zero", gv + "kind: Bundle\nmetadata: {name: a}\nspec: {placement: {type: PickAll, rollingUpdate: {maxSurge: 0}}}",
			[]string{"spec.placement.rollingUpdate.maxSurge", "zero would block"}},
		{"R2.3 maxUnavailable 0%", gv + "kind: Bundle\nmetadata: {name: a}\nspec: {placement: {type: PickAll, rollingUpdate: {maxUnavailable: '0%'}}}",
			[]string{"spec.placement.rollingUpdate.maxUnavailable", "zero would block"}},
		{"R2.1 PickN without number", gv + "kind: Bundle\nmetadata: {name: a}\nspec: {placement: {type: PickN}}",
			[]string{"spec.placement", "numberOfClusters is required when type is PickN"}},
		{"R2.1 affinity with PickFixed", gv + "kind: Bundle\nmetadata: {name: a}\nspec: {placement: {type: PickFixed, clusterNames: [x], affinity: {clusterAffinity: {}}}}",
			[]string{"spec.placement", "affinity is not valid with type PickFixed"}},
		{"R2.1 preferred affinity with PickAll", gv + "kind: Bundle\nmetadata: {name: a}\nspec: {placement: {type: PickAll, affinity: {clusterAffinity: {preferredDuringSchedulingIgnoredDuringExecution: [{weight: 1, preference: {}}]}}}}",
			[]string{"spec.placement", "only valid with type PickN"}},
		{"R2.1 affinity weight above 100", gv + "kind: Bundle\nmetadata: {name: a}\nspec: {placement: {type: PickN, numberOfClusters: 1, affinity: {clusterAffinity: {preferredDuringSchedulingIgnoredDuringExecution: [{weight: 101, preference: {}}]}}}}",
			[]string{"spec.placement.affinity.clusterAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight", "less than or equal to 100"}},
		{"R2.1 PickFixed without names", gv + "kind: Bundle\nmetadata: {name: a}\nspec: {placement: {type: PickFixed}}",
			[]string{"spec.placement", "clusterNames is required"}},
		{"R2.1 unknown placement type", gv + "kind: Bundle\nmetadata: {name: a}\nspec: {placement: {type: PickSome}}",
			[]string{"spec.placement.type", "Unsupported value"}},
		{"bundle with two strategies", gv + "kind: Bundle\nmetadata: {name: a}\nspec: {rolloutStrategy: {}, sequence: {name: s}}",
			[]string{"spec", "choose at most one of rolloutStrategy"}},
		{"bundle deployment index zero", gv + "kind: BundleDeployment\nmetadata: {name: a}\nspec: {bundle: b, bundleNamespace: apps, staged: {index: 0, contentID: c, deploymentID: d}}",
			[]string{"spec.staged.index", "greater than or equal to 1"}},
		{"bundle deployment released ahead of staged", gv + "kind: BundleDeployment\nmetadata: {name: a}\nspec: {bundle: b, bundleNamespace: apps, staged: {index: 1, contentID: c, deploymentID: d}, released: {index: 2, contentID: c, deploymentID: d}}",
			[]string{"spec", "released must not be newer than staged"}},
		{"cluster heartbeat deadline too short", gv + "kind: Cluster\nmetadata: {name: a}\nspec: {heartbeatDeadline: 1s}",
			[]string{"spec.heartbeatDeadline", "at least 5s"}},
		{"R3.13 exclusion ending before it starts", gv + "kind: Cluster\nmetadata: {name: a}\nspec: {exclusions: [{start: '2026-02-01T00:00:00Z', end: '2026-01-01T00:00:00Z'}]}",
			[]string{"spec.exclusions[0]", "end must be after start"}},
		{"cluster group without selector", gv + "kind: ClusterGroup\nmetadata: {name: a}\nspec: {}",
			[]string{"spec.selector", "Required value"}},
		{"registration token ttl", gv + "kind: ClusterRegistrationToken\nmetadata: {name: a}\nspec: {ttl: 10s}",
			[]string{"spec.ttl", "at least 1m"}},
		{"registration without client id", gv + "kind: ClusterRegistration\nmetadata: {name: a}\nspec: {clusterName: x, publicKey: YQ==}",
			[]string{"spec.clientID", "Required value"}},
		{"analysis provider with both kinds", gv + "kind: AnalysisProvider\nmetadata: {name: a}\nspec: {prometheus: {address: 'http://p:9090'}, http: {url: 'http://v'}}",
			[]string{"spec", "set exactly one of prometheus and http"}},
		{"analysis provider address that is no URL", gv + "kind: AnalysisProvider\nmetadata: {name: a}\nspec: {prometheus: {address: 'file:///etc/passwd'}}",
			[]string{"spec.prometheus.address", "should match"}},
		{"notification provider address that is no URL", gv + "kind: NotificationProvider\nmetadata: {name: a}\nspec: {type: slack, address: 'file:///etc/passwd'}",
			[]string{"spec.address", "should match"}},
		{"generic-hmac provider without its key", gv + "kind: NotificationProvider\nmetadata: {name: a}\nspec: {type: generic-hmac, address: 'https://hooks.example'}",
			[]string{"generic-hmac signs with the hmacKey of secretRef"}},
		{"notification provider of an unknown type", gv + "kind: NotificationProvider\nmetadata: {name: a}\nspec: {type: smtp, address: 'https://hooks.example'}",
			[]string{"spec.type", "Unsupported value"}},
		{"alert without sources", gv + "kind: Alert\nmetadata: {name: a}\nspec: {providerRef: {name: p}, eventSources: []}",
			[]string{"spec.eventSources", "at least 1"}},
		{"analysis task without checks", gv + "kind: StagedUpdateStrategy\nmetadata: {name: a}\nspec: {stages: [{name: s, labelSelector: {}, afterStageTasks: [{type: Analysis}]}]}",
			[]string{"analysis is required for an Analysis task"}},
		{"analysis check on an approval", gv + "kind: StagedUpdateStrategy\nmetadata: {name: a}\nspec: {stages: [{name: s, labelSelector: {}, afterStageTasks: [{type: Approval, analysis: [{name: e, provider: p, query: up, condition: 'result > 0.0'}]}]}]}",
			[]string{"valid only there and for TimedWait"}},
		{"two analysis tasks after a stage", gv + "kind: StagedUpdateStrategy\nmetadata: {name: a}\nspec: {stages: [{name: s, labelSelector: {}, afterStageTasks: [{type: Analysis, analysis: [{name: e, provider: p, query: up, condition: 'result > 0.0'}]}, {type: Analysis, analysis: [{name: f, provider: p, query: up, condition: 'result > 0.0'}]}]}]}",
			[]string{"at most one task of each type"}},
		{"analysis check naming an address for its provider", gv + "kind: RolloutSequence\nmetadata: {name: a}\nspec: {groups: [{name: g, clusterSelector: {}, analysis: [{name: e, provider: 'http://127.0.0.1:9/x', query: up, condition: 'result > 0.0'}]}]}",
			[]string{"spec.groups[0].analysis[0].provider", "should match"}},
		{"R3.1 strategy without stages", gv + "kind: StagedUpdateStrategy\nmetadata: {name: a}\nspec: {stages: []}",
			[]string{"spec.stages", "at least 1 items"}},
		{"R3.4 two before-stage tasks", gv + "kind: StagedUpdateStrategy\nmetadata: {name: a}\nspec: {stages: [{name: s, labelSelector: {}, beforeStageTasks: [{type: Approval}, {type: Approval}]}]}",
			[]string{"spec.stages[0].beforeStageTasks", "must have at most 1 item"}},
		{"R3.4 timed wait before a stage", gv + "kind: StagedUpdateStrategy\nmetadata: {name: a}\nspec: {stages: [{name: s, labelSelector: {}, beforeStageTasks: [{type: TimedWait, waitTime: 1h}]}]}",
			[]string{"spec.stages[0].beforeStageTasks", "not TimedWait"}},
		{"R3.4 two timed waits after a stage", gv + "kind: StagedUpdateStrategy\nmetadata: {name: a}\nspec: {stages: [{name: s, labelSelector: {}, afterStageTasks: [{type: TimedWait, waitTime: 1h}, {type: TimedWait, waitTime: 2h}]}]}",
			[]string{"spec.stages[0].afterStageTasks", "at most one task of each type"}},
		{"R3.4 timed wait without wait time", gv + "kind: StagedUpdateStrategy\nmetadata: {name: a}\nspec: {stages: [{name: s, labelSelector: {}, afterStageTasks: [{type: TimedWait}]}]}",
			[]string{"spec.stages[0].afterStageTasks[0]", "waitTime is required for TimedWait"}},
		{"R3.3 max concurrency zero", gv + "kind: StagedUpdateStrategy\nmetadata: {name: a}\nspec: {stages: [{name: s, labelSelector: {}, maxConcurrency: 0}]}",
			[]string{"spec.stages[0].maxConcurrency", "at least 1"}},
		{"R3.5 more than 50 groups", gv + "kind: StagedUpdateStrategy\nmetadata: {name: a}\nspec: {stages: [{name: s, labelSelector: {}, groups: [" + groups(51) + "]}]}",
			[]string{"spec.stages[0].groups", "must have at most 50 items"}},
		{"R3.12 scheduled start with both forms", gv + "kind: StagedUpdateStrategy\nmetadata: {name: a}\nspec: {stages: [{name: s, labelSelector: {}, beforeStageTasks: [{type: ScheduledStart, scheduledStart: {at: '2026-01-01T00:00:00Z', timeOfDay: '09:00'}}]}]}",
			[]string{"spec.stages[0].beforeStageTasks[0].scheduledStart", "set either at, or timeOfDay"}},
		{"R3.6 stage selected twice", gv + "kind: StagedUpdateStrategy\nmetadata: {name: a}\nspec: {stages: [{name: s, labelSelector: {}, selector: 'env=prod'}]}",
			[]string{"spec.stages[0]", "exactly one of labelSelector and selector"}},
		{"R3.6 group selected by nothing", gv + "kind: StagedUpdateStrategy\nmetadata: {name: a}\nspec: {stages: [{name: s, selector: 'env=prod', groups: [{name: g}]}]}",
			[]string{"spec.stages[0].groups[0]", "exactly one of labelSelector and selector"}},
		{"R3.6 sequence group selected twice", gv + "kind: RolloutSequence\nmetadata: {name: a}\nspec: {groups: [{name: a, clusterGroup: a, selector: 'env=dev'}]}",
			[]string{"spec.groups[0]", "exactly one of clusterSelector, selector and clusterGroup"}},
		{"R3.7 unknown run state", gv + "kind: StagedUpdateRun\nmetadata: {name: a}\nspec: {bundle: b, strategy: s, state: Pause}",
			[]string{"spec.state", "Unsupported value"}},
		{"approval gate", gv + "kind: ApprovalRequest\nmetadata: {name: a}\nspec: {run: r, stage: s, gate: During}",
			[]string{"spec.gate", "Unsupported value"}},
		{"R4.1 two first groups", gv + "kind: RolloutSequence\nmetadata: {name: a}\nspec: {groups: [{name: a, clusterGroup: a}, {name: b, clusterGroup: b}]}",
			[]string{"spec", "exactly one group must have no upstream"}},
		{"R4.1 branch", gv + "kind: RolloutSequence\nmetadata: {name: a}\nspec: {groups: [{name: a, clusterGroup: a}, {name: b, upstream: a, clusterGroup: b}, {name: c, upstream: a, clusterGroup: c}]}",
			[]string{"spec", "sequences do not branch"}},
		{"R4.1 unknown upstream", gv + "kind: RolloutSequence\nmetadata: {name: a}\nspec: {groups: [{name: a, clusterGroup: a}, {name: b, upstream: zz, clusterGroup: b}]}",
			[]string{"spec", "every upstream must name another group"}},
		{"content without data", gv + "kind: Content\nmetadata: {name: a}\ncontentID: a\nchunk: 0\n",
			[]string{"data", "Required value"}},
		{"R4.2 soak above 30 days", gv + "kind: RolloutSequence\nmetadata: {name: a}\nspec: {groups: [{name: a, clusterGroup: a, soak: 800h}]}",
			[]string{"spec.groups[0].soak", "between 0 and 30 days"}},
		{"R5.3 unknown onFailure", gv + "kind: Bundle\nmetadata: {name: a}\nspec: {rolloutStrategy: {onFailure: Revert}}",
			[]string{"spec.rolloutStrategy.onFailure", "Unsupported value"}},
		{"R5.2 unknown onRegression", gv + "kind: RolloutSequence\nmetadata: {name: a}\nspec: {onRegression: Retry, groups: [{name: a, clusterGroup: a}]}",
			[]string{"spec.onRegression", "Unsupported value"}},
		{"R5.3 zero failureTimeout", gv + "kind: Bundle\nmetadata: {name: a}\nspec: {placement: {type: PickAll, rollingUpdate: {failureTimeout: 0s}}}",
			[]string{"spec.placement.rollingUpdate.failureTimeout", "must be above 0"}},
		{"R5.1 negative health window", gv + "kind: Bundle\nmetadata: {name: a}\nspec: {rolloutStrategy: {healthWindow: -1m}}",
			[]string{"spec.rolloutStrategy.healthWindow", "must not be negative"}},
		{"R5.3 failureTimeout on a staged strategy", gv + "kind: StagedUpdateStrategy\nmetadata: {name: a}\nspec: {failureTimeout: 5m, stages: [{name: s, labelSelector: {}}]}",
			[]string{"spec", "a staged run times clusters out with clusterTimeout"}},
		{"R5.5 retry of revision zero", gv + "kind: Bundle\nmetadata: {name: a}\nspec: {retry: {revision: 0, at: '2026-01-01T00:00:00Z'}}",
			[]string{"spec.retry.revision", "greater than or equal to 1"}},
	}
	ns := newNamespace(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := create(t, ns, tc.doc)
			if err == nil {
				t.Fatalf("object was accepted:\n%s", tc.doc)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not mention %q:\n%v", w, err)
				}
			}
		})
	}
}

func groups(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf("{name: g%d, labelSelector: {}}", i)
	}
	return strings.Join(parts, ", ")
}

// TestRunStateTransitions checks R3.7: Initialize→Run, Run→Stop and Stop→Run are allowed,
// anything else is rejected, and a finished run cannot be restarted.
func TestRunStateTransitions(t *testing.T) {
	ns := newNamespace(t)
	run, err := create(t, ns, "apiVersion: flotilla.dev/v1alpha1\nkind: StagedUpdateRun\nmetadata: {name: r}\nspec: {bundle: b, strategy: s}")
	if err != nil {
		t.Fatal(err)
	}
	if got, _, _ := unstructured.NestedString(run.Object, "spec", "state"); got != "Initialize" {
		t.Fatalf("R3.7 default state = %q, want Initialize", got)
	}
	runs := resourceFor(run).Namespace(ns)
	setState := func(state string) error {
		cur, err := runs.Get(t.Context(), "r", metav1.GetOptions{})
		if err != nil {
			return err
		}
		_ = unstructured.SetNestedField(cur.Object, state, "spec", "state")
		_, err = runs.Update(t.Context(), cur, metav1.UpdateOptions{})
		return err
	}
	steps := []struct {
		to      string
		allowed bool
	}{
		{"Stop", false}, // Initialize→Stop
		{"Run", true},
		{"Initialize", false},
		{"Stop", true},
		{"Run", true},
	}
	for _, s := range steps {
		err := setState(s.to)
		if s.allowed && err != nil {
			t.Fatalf("R3.7 change to %s rejected: %v", s.to, err)
		}
		if !s.allowed && (err == nil || !strings.Contains(err.Error(), "state may only change")) {
			t.Fatalf("R3.7 change to %s: want rejection naming the rule, got %v", s.to, err)
		}
	}
	cur, err := runs.Get(t.Context(), "r", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_ = unstructured.SetNestedField(cur.Object, "Completed", "status", "state")
	if _, err := runs.UpdateStatus(t.Context(), cur, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("failed to mark the run Completed: %v", err)
	}
	if err := setState("Stop"); err == nil || !strings.Contains(err.Error(), "a finished run cannot be restarted") {
		t.Fatalf("R3.7 finished run changed state: %v", err)
	}
	// Immutable fields.
	cur, err = runs.Get(t.Context(), "r", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_ = unstructured.SetNestedField(cur.Object, "other", "spec", "bundle")
	if _, err := runs.Update(t.Context(), cur, metav1.UpdateOptions{}); err == nil || !strings.Contains(err.Error(), "spec.bundle") {
		t.Fatalf("bundle of a run changed: %v", err)
	}
}

// TestR3_9_ApprovalRecordsNameTheirAuthorAndStay: a record of who approved or rejected a gate
// names the user who wrote it (the admission policy), one per write, and stays (the CRD's
// rules): a name typed in, a second record in the same write, a changed or withdrawn record
// are refused, and nothing of them is stored.
func TestR3_9_ApprovalRecordsNameTheirAuthorAndStay(t *testing.T) {
	ns := newNamespace(t)
	review, err := kubernetes.NewForConfigOrDie(hub.Config()).AuthenticationV1().SelfSubjectReviews().Create(t.Context(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	me := review.Status.UserInfo.Username
	ar, err := create(t, ns, "apiVersion: flotilla.dev/v1alpha1\nkind: ApprovalRequest\nmetadata: {name: r-before-s-0123abcd}\nspec: {run: r, stage: s, gate: Before, quorum: 2}")
	if err != nil {
		t.Fatal(err)
	}
	ars := resourceFor(ar).Namespace(ns)
	record := func(by string) map[string]any { return map[string]any{"by": by, "at": "2026-12-01T10:00:00Z"} }
	write := func(change func(o *unstructured.Unstructured)) error {
		t.Helper()
		live, err := ars.Get(t.Context(), ar.GetName(), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		change(live)
		_, err = ars.UpdateStatus(t.Context(), live, metav1.UpdateOptions{})
		return err
	}
	stored := func() map[string]any {
		live, err := ars.Get(t.Context(), ar.GetName(), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		st, _, _ := unstructured.NestedMap(live.Object, "status")
		return st
	}
	const forged = "under the name the API server knows them by"
	for _, tc := range []struct {
		name   string
		change func(o *unstructured.Unstructured)
		refuse string
	}{
		{"an approval in another's name", func(o *unstructured.Unstructured) {
			_ = unstructured.SetNestedSlice(o.Object, []any{record("alice")}, "status", "approvals")
		}, forged},
		{"two approvals in one write", func(o *unstructured.Unstructured) {
			_ = unstructured.SetNestedSlice(o.Object, []any{record(me), record(me + "-again")}, "status", "approvals")
		}, forged},
		{"a rejection in another's name", func(o *unstructured.Unstructured) {
			_ = unstructured.SetNestedMap(o.Object, record("alice"), "status", "rejection")
		}, forged},
		{"the old single approval in another's name", func(o *unstructured.Unstructured) {
			_ = unstructured.SetNestedMap(o.Object, record("alice"), "status", "approval")
		}, forged},
		{"one's own approval", func(o *unstructured.Unstructured) {
			_ = unstructured.SetNestedSlice(o.Object, []any{record(me)}, "status", "approvals")
		}, ""},
		{"the approval withdrawn", func(o *unstructured.Unstructured) {
			unstructured.RemoveNestedField(o.Object, "status", "approvals")
		}, "cannot be changed or withdrawn"},
		{"the approval rewritten in another's name", func(o *unstructured.Unstructured) {
			_ = unstructured.SetNestedSlice(o.Object, []any{record("alice")}, "status", "approvals")
		}, "cannot be changed or withdrawn"},
		{"one's own rejection", func(o *unstructured.Unstructured) {
			rejection := record(me)
			rejection["comment"] = "error budget spent"
			_ = unstructured.SetNestedMap(o.Object, rejection, "status", "rejection")
		}, ""},
		{"the rejection withdrawn", func(o *unstructured.Unstructured) {
			unstructured.RemoveNestedField(o.Object, "status", "rejection")
		}, "cannot be changed or withdrawn"},
	} {
		err := write(tc.change)
		switch {
		case tc.refuse == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.refuse != "" && (err == nil || !strings.Contains(err.Error(), tc.refuse)):
			t.Errorf("%s: %v, want it refused (%s)", tc.name, err, tc.refuse)
		}
	}
	st := stored()
	approvals, _, _ := unstructured.NestedSlice(st, "approvals")
	rejectedBy, _, _ := unstructured.NestedString(st, "rejection", "by")
	_, legacy := st["approval"]
	if len(approvals) != 1 || approvals[0].(map[string]any)["by"] != me || rejectedBy != me || legacy {
		t.Errorf("stored: %v; want one approval and the rejection, both %s's, nothing else", st, me)
	}
}

// TestR3_9_OnlyListedPeopleDecideAGate: a gate with approvers admits a record only from a
// listed user or a member of a listed group, and never from a system identity (a
// ServiceAccount) unless it is listed by its own name, whatever groups it is in; a gate
// without approvers still refuses system identities, so a quorum counts people. A refused
// record is not stored, and the gate keeps exactly the records of those it admitted.
func TestR3_9_OnlyListedPeopleDecideAGate(t *testing.T) {
	ns := newNamespace(t)
	cs := kubernetes.NewForConfigOrDie(hub.Config())
	// Everyone authenticated may write gates here: the approvers list is what tells them apart.
	if _, err := cs.RbacV1().Roles(ns).Create(t.Context(), &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "gates"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"flotilla.dev"}, Resources: []string{"approvalrequests", "approvalrequests/status"}, Verbs: []string{"get", "update"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().RoleBindings(ns).Create(t.Context(), &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "gates"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "gates"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:authenticated"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const robot = "system:serviceaccount:ci:release-bot"
	listed, err := create(t, ns, "apiVersion: flotilla.dev/v1alpha1\nkind: ApprovalRequest\nmetadata: {name: r-before-prod-0123abcd}\n"+
		"spec: {run: r, stage: prod, gate: Before, quorum: 3, approvers: [{user: alice}, {group: sre}, {user: 'system:serviceaccount:ci:change-bot'}]}")
	if err != nil {
		t.Fatal(err)
	}
	open, err := create(t, ns, "apiVersion: flotilla.dev/v1alpha1\nkind: ApprovalRequest\nmetadata: {name: r-before-dev-0123abcd}\nspec: {run: r, stage: dev, gate: Before}")
	if err != nil {
		t.Fatal(err)
	}
	ars := resourceFor(listed).Namespace(ns)
	// decide writes user's own approval, or rejection, on gate, as user in groups.
	decide := func(gate, user string, groups []string, field string) error {
		cfg := rest.CopyConfig(hub.Config())
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
		c := dynamic.NewForConfigOrDie(cfg).Resource(schema.GroupVersionResource{Group: "flotilla.dev", Version: "v1alpha1", Resource: "approvalrequests"}).Namespace(ns)
		live, err := c.Get(t.Context(), gate, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		record := map[string]any{"by": user, "at": "2026-12-01T10:00:00Z"}
		if field == "rejection" {
			_ = unstructured.SetNestedMap(live.Object, record, "status", "rejection")
		} else {
			records, _, _ := unstructured.NestedSlice(live.Object, "status", "approvals")
			_ = unstructured.SetNestedSlice(live.Object, append(records, record), "status", "approvals")
		}
		_, err = c.UpdateStatus(t.Context(), live, metav1.UpdateOptions{})
		return err
	}
	for _, tc := range []struct {
		name, gate, user string
		groups           []string
		field, refuse    string
	}{
		{"an unlisted user", listed.GetName(), "mallory", []string{"dev"}, "approvals", "not among the approvers"},
		{"an unlisted user rejecting", listed.GetName(), "mallory", nil, "rejection", "not among the approvers"},
		{"a robot in a listed group", listed.GetName(), robot, []string{"sre", "system:serviceaccounts"}, "approvals", "not a person"},
		{"a listed user", listed.GetName(), "alice", nil, "approvals", ""},
		{"a member of a listed group", listed.GetName(), "bob", []string{"sre"}, "approvals", ""},
		{"a robot listed by name", listed.GetName(), "system:serviceaccount:ci:change-bot", []string{"system:serviceaccounts"}, "approvals", ""},
		{"a robot on a gate open to anyone", open.GetName(), robot, []string{"system:serviceaccounts"}, "approvals", "not a person"},
		{"a person on a gate open to anyone", open.GetName(), "carol", nil, "approvals", ""},
	} {
		err := decide(tc.gate, tc.user, tc.groups, tc.field)
		switch {
		case tc.refuse == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.refuse != "" && (err == nil || !strings.Contains(err.Error(), tc.refuse)):
			t.Errorf("%s: %v, want it refused (%s)", tc.name, err, tc.refuse)
		}
	}
	for gate, want := range map[string][]string{listed.GetName(): {"alice", "bob", "system:serviceaccount:ci:change-bot"}, open.GetName(): {"carol"}} {
		live, err := ars.Get(t.Context(), gate, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		records, _, _ := unstructured.NestedSlice(live.Object, "status", "approvals")
		var by []string
		for _, r := range records {
			by = append(by, r.(map[string]any)["by"].(string))
		}
		_, rejected, _ := unstructured.NestedMap(live.Object, "status", "rejection")
		if !slices.Equal(by, want) || rejected {
			t.Errorf("gate %s stored approvals by %v (rejected: %v); want exactly %v", gate, by, rejected, want)
		}
	}
}

func TestLatestRevisionNeverDecreases(t *testing.T) {
	ns := newNamespace(t)
	b, err := create(t, ns, "apiVersion: flotilla.dev/v1alpha1\nkind: Bundle\nmetadata: {name: b}\nspec: {latestRevision: 5}")
	if err != nil {
		t.Fatal(err)
	}
	_ = unstructured.SetNestedField(b.Object, int64(4), "spec", "latestRevision")
	if _, err := resourceFor(b).Namespace(ns).Update(t.Context(), b, metav1.UpdateOptions{}); err == nil || !strings.Contains(err.Error(), "latestRevision must not decrease") {
		t.Fatalf("latestRevision decreased: %v", err)
	}
}

// Where a cluster's deployments live is set when the hub admits it, and changes only when the
// hub moves the cluster, naming the namespace it leaves as previous: no other status write
// moves or removes it.
func TestClusterNamespaceChangesOnlyByAMove(t *testing.T) {
	ns := newNamespace(t)
	c, err := create(t, ns, "apiVersion: flotilla.dev/v1alpha1\nkind: Cluster\nmetadata: {name: edge}\nspec: {}")
	if err != nil {
		t.Fatal(err)
	}
	clusters := resourceFor(c).Namespace(ns)
	_ = unstructured.SetNestedField(c.Object, "cluster-a", "status", "namespace")
	if c, err = clusters.UpdateStatus(t.Context(), c, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("admission: %v", err)
	}
	moved := c.DeepCopy()
	_ = unstructured.SetNestedField(moved.Object, "cluster-victim", "status", "namespace")
	movedFromElsewhere := moved.DeepCopy()
	_ = unstructured.SetNestedField(movedFromElsewhere.Object, "cluster-other", "status", "previousNamespace")
	removed := c.DeepCopy()
	unstructured.RemoveNestedField(removed.Object, "status", "namespace")
	for what, o := range map[string]*unstructured.Unstructured{"moved": moved, "moved naming another previous namespace": movedFromElsewhere, "removed": removed} {
		if _, err := clusters.UpdateStatus(t.Context(), o, metav1.UpdateOptions{}); err == nil || !strings.Contains(err.Error(), "status.namespace changes only when the hub moves the cluster") {
			t.Errorf("status.namespace %s: %v", what, err)
		}
	}
	move := moved.DeepCopy()
	_ = unstructured.SetNestedField(move.Object, "cluster-a", "status", "previousNamespace")
	if _, err := clusters.UpdateStatus(t.Context(), move, metav1.UpdateOptions{}); err != nil {
		t.Errorf("a move that names the namespace it leaves: %v", err)
	}
}

// TestPrinterColumns reads the server's table output, as kubectl get does, for every sample.
func TestPrinterColumns(t *testing.T) {
	samples, err := manifests.Samples()
	if err != nil {
		t.Fatal(err)
	}
	ns := newNamespace(t)
	want := map[string][]string{
		"GitRepo":                  {"Name", "Repo", "Commit", "Bundles", "Ready", "Status", "Age"},
		"Bundle":                   {"Name", "Revision", "Ready", "Status", "Age"},
		"BundleDeployment":         {"Name", "Bundle", "Staged", "Released", "Applied", "State", "Age"},
		"Cluster":                  {"Name", "Bundles-Ready", "Agent", "Status", "Age"},
		"ClusterGroup":             {"Name", "Clusters", "Clusters-Not-Ready", "Bundles-Ready", "Age"},
		"ClusterRegistrationToken": {"Name", "Secret", "Expires", "Age"},
		"ClusterRegistration":      {"Name", "Cluster", "Granted", "Age"},
		"StagedUpdateStrategy":     {"Name", "Age"},
		"StagedUpdateRun":          {"Name", "Bundle", "Strategy", "Revision", "Requested", "State", "Failures", "Age"},
		"ApprovalRequest":          {"Name", "Run", "Stage", "Gate", "Approved-By", "Rejected-By", "Age"},
		"RolloutSequence":          {"Name", "Bundles", "Ready", "Age"},
		"Content":                  {"Name", "Size", "Chunks", "Age"},
		"FleetRestriction":         {"Name", "Service-Account", "Age"},
		"AnalysisProvider":         {"Name", "Prometheus", "HTTP", "Age"},
		"NotificationProvider":     {"Name", "Type", "Ready", "Age"},
		"Alert":                    {"Name", "Provider", "Severity", "Age"},
	}
	cs := kubernetes.NewForConfigOrDie(hub.Config())
	for file, doc := range samples {
		obj, err := create(t, ns, string(doc))
		if err != nil {
			t.Fatalf("sample %s: %v", file, err)
		}
		kind := obj.GetKind()
		raw, err := cs.RESTClient().Get().AbsPath("/apis/flotilla.dev/v1alpha1/namespaces", ns, plural(kind)).
			SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(t.Context())
		if err != nil {
			t.Fatalf("%s table: %v", kind, err)
		}
		var table metav1.Table
		if err := json.Unmarshal(raw, &table); err != nil {
			t.Fatalf("%s table: %v", kind, err)
		}
		var got []string
		for _, c := range table.ColumnDefinitions {
			if c.Priority == 0 {
				got = append(got, c.Name)
			}
		}
		if strings.Join(got, ",") != strings.Join(want[kind], ",") {
			t.Errorf("%s columns = %v, want %v", kind, got, want[kind])
		}
		if len(table.Rows) != 1 {
			t.Errorf("%s table has %d rows, want 1", kind, len(table.Rows))
		}
	}
	// A column shows the object's value: the GitRepo's repo URL.
	raw, err := cs.RESTClient().Get().AbsPath("/apis/flotilla.dev/v1alpha1/namespaces", ns, "gitrepos").
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), "https://git.example.com/platform/apps.git") {
		t.Errorf("gitrepo table does not show the repo URL: %s", raw)
	}
}

// A GitRepo as Fleet's documentation writes it, with the apiVersion swapped: the fields Flotilla
// takes are accepted with Fleet's meaning; each of the fields it does not take is answered, all
// in one answer, with what replaces it; a field neither knows is named with every other one.
func TestAGitRepoWrittenForFleetIsToldWhatReplacesEachField(t *testing.T) {
	ns := newNamespace(t)
	accepted := `apiVersion: flotilla.dev/v1alpha1
kind: GitRepo
metadata: {name: fleet-written}
spec:
  repo: https://github.com/rancher/fleet-examples
  branch: master
  paths: [simple]
  targetNamespace: team-a
  serviceAccount: deployer
  keepResources: true
  deleteNamespace: true
  correctDrift: {enabled: true, force: true, keepFailHistory: true}
  disablePolling: true
  forceSyncGeneration: 2
  paused: true
  insecureSkipTLSVerify: false
  helmRepoURLRegex: "^https://charts\\.example\\.com/"
  targets:
  - name: prod
    clusterSelector: {matchLabels: {env: prod}}
  - clusterGroup: canaries
`
	if _, err := create(t, ns, accepted); err != nil {
		t.Fatalf("a GitRepo of Fleet's fields that Flotilla takes: %v", err)
	}

	refused := `apiVersion: flotilla.dev/v1alpha1
kind: GitRepo
metadata: {name: fleet-only}
spec:
  repo: https://github.com/rancher/fleet-examples
  clientSecretName: git-auth
  helmSecretName: helm-auth
  helmSecretNameForPaths: helm-paths
  webhookSecret: hook
  ociRegistrySecret: oci-storage
  imageScanInterval: 5m
  imageScanCommit: {authorName: bot, authorEmail: bot@example.com, messageTemplate: "update"}
  bundles: [{base: simple, options: simple/fleet.yaml}]
`
	_, err := create(t, ns, refused)
	if err == nil {
		t.Fatal("a GitRepo with Fleet's fields that Flotilla does not take was accepted")
	}
	for field, replacement := range map[string]string{"clientSecretName": "secretRef: {name:", "helmSecretName": "helmSecretRef: {name:",
		"helmSecretNameForPaths": "helmRepoURLRegex", "webhookSecret": "webhookSecretRef", "ociRegistrySecret": "no OCI storage",
		"imageScanInterval": "does not scan", "imageScanCommit": "does not scan", "bundles": "spec.paths"} {
		if !strings.Contains(err.Error(), field+" is Fleet's") || !strings.Contains(err.Error(), replacement) {
			t.Errorf("the answer does not tell that %s is Fleet's and what replaces it (%q): %v", field, replacement, err)
		}
	}

	unknown := decode(t, `apiVersion: flotilla.dev/v1alpha1
kind: GitRepo
metadata: {name: typos}
spec:
  repo: https://github.com/rancher/fleet-examples
  brnach: main
  pathz: [simple]
`)
	_, err = resourceFor(unknown).Namespace(ns).Create(t.Context(), unknown, metav1.CreateOptions{FieldValidation: "Strict"})
	if err == nil || !strings.Contains(err.Error(), `"spec.brnach"`) || !strings.Contains(err.Error(), `"spec.pathz"`) {
		t.Errorf("two unknown fields under strict validation: %v, want both named in one answer", err)
	}
}

// What `flotilla import fleet` makes of a Fleet installation (hub/fleetimport's fixture, written
// from Fleet's documentation) is accepted by the API server as it is, each object in a
// namespace standing in for its Fleet workspace.
func TestAnImportedFleetInstallationIsAccepted(t *testing.T) {
	data, err := os.ReadFile("../../fleetimport/testdata/fleet-installation.yaml")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := fleetimport.Decode("fleet-installation.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	res := fleetimport.Convert(objs)
	if len(res.Objects) == 0 {
		t.Fatal("nothing imported")
	}
	workspaces := map[string]string{}
	for _, obj := range res.Objects {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{Object: m}
		if workspaces[u.GetNamespace()] == "" {
			workspaces[u.GetNamespace()] = newNamespace(t)
		}
		ns := workspaces[u.GetNamespace()]
		u.SetNamespace(ns)
		if _, err := resourceFor(u).Namespace(ns).Create(t.Context(), u, metav1.CreateOptions{FieldValidation: "Strict"}); err != nil {
			t.Errorf("%s %s, imported from Fleet: %v", u.GetKind(), u.GetName(), err)
		}
	}
}
