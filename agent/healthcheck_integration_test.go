package agent

import (
	"context"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/contentstore"
)

// A custom resource that reports its health only in .status.phase is Ready to kstatus at once
// (it has no conditions to read). With a fleet.yaml healthChecks rule for its kind, the agent
// holds the deployment NotReady until the phase says Running, names the object and the reason
// in the status write it makes anyway, and tells a Failed phase apart from one in progress.
func TestHealthChecksJudgeACustomResourceByItsPhaseAndNameIt(t *testing.T) {
	ctx := context.Background()
	const bundleNS, clusterNS, workloadNS = "fleet-cel", "cluster-cel", "cel-phase"
	hubClient, local := deployerNamespaces(t, bundleNS, clusterNS, workloadNS)
	manifest := `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: databases.db.example.com}
spec:
  group: db.example.com
  names: {kind: Database, plural: databases, singular: database}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
---
apiVersion: db.example.com/v1
kind: Database
metadata: {name: orders, namespace: ` + workloadNS + `}
spec: {size: 3}
`
	store := contentstore.Store{Client: hubClient}
	if _, err := store.Put(ctx, bundleNS, "content-db", []byte(manifest)); err != nil {
		t.Fatal(err)
	}
	rev := v1alpha1.RevisionRef{Index: 1, ContentID: "content-db", DeploymentID: "deployment-db"}
	bd := &v1alpha1.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Name: bundleNS + "-db", Namespace: clusterNS},
		Spec: v1alpha1.BundleDeploymentSpec{Bundle: "db", BundleNamespace: bundleNS, Staged: rev, Released: &rev,
			Options: v1alpha1.DeploymentOptions{HealthChecks: []v1alpha1.HealthCheck{{APIVersion: "db.example.com/v1", Kind: "Database",
				Current: "status.phase == 'Running'", Failed: "status.phase == 'Error'"}}}}}
	until := newAgentPlay(t, hubClient, local, "flotilla-cel", bd).until
	named := func(st *v1alpha1.BundleDeploymentStatus, says string) bool {
		for _, r := range st.NonReadyResources {
			if r.Kind == "Database" && r.Name == "orders" && r.Namespace == workloadNS && strings.Contains(r.Message, says) {
				return true
			}
		}
		return false
	}

	now := until("the database is applied and named as not ready", func(bd *v1alpha1.BundleDeployment) bool {
		return bd.Status.AppliedRevision == 1 && named(&bd.Status, "InProgress: healthChecks")
	})
	if now.Status.Ready || now.Status.ReadyAt != nil {
		t.Fatalf("Ready before the database's phase says Running: %+v", now.Status)
	}
	dyn := dynamic.NewForConfigOrDie(workload.Config())
	databases := dyn.Resource(schema.GroupVersionResource{Group: "db.example.com", Version: "v1", Resource: "databases"}).Namespace(workloadNS)
	live, err := databases.Get(ctx, "orders", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// What the rule changes: kstatus alone calls the phase-only resource Ready already.
	if rs := Readiness(live, nil); !rs.Ready {
		t.Fatalf("kstatus does not call the database Ready (%s): the test would prove nothing", rs.Message)
	}
	setPhase := func(phase string) {
		t.Helper()
		patch := fmt.Sprintf(`{"status":{"phase":%q}}`, phase)
		if _, err := databases.Patch(ctx, "orders", types.MergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
			t.Fatal(err)
		}
	}

	setPhase("Error")
	now = until("the failed phase is named", func(bd *v1alpha1.BundleDeployment) bool {
		return named(&bd.Status, "Failed: healthChecks failed (status.phase == 'Error') holds")
	})
	if now.Status.Ready {
		t.Fatalf("Ready with the database failed: %+v", now.Status)
	}

	setPhase("Running")
	now = until("Ready once the phase says Running", func(bd *v1alpha1.BundleDeployment) bool { return bd.Status.Ready })
	if now.Status.ReadyAt == nil || len(now.Status.NonReadyResources) != 0 {
		t.Errorf("Ready without a readyAt, or with objects still named: %+v", now.Status)
	}
}
