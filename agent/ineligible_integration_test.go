package agent

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/bdstate"
	"github.com/flotilla-dev/flotilla/hub/contentstore"
	"github.com/flotilla-dev/flotilla/rollout"
)

// R1.15: a revision that uses an API the cluster does not serve is applied not at all, not in
// part: the agent says which APIs are missing (bounded, whatever the revision holds) and the
// cluster keeps running, and reporting, the revision before. Once the cluster serves the API
// (here a CRD installed by its operator), the next resync applies the revision.
func TestR1_15_AnAgentReportsWhatItsClusterDoesNotServeAndKeepsWhatRuns(t *testing.T) {
	ctx := context.Background()
	const bundleNS, clusterNS, workloadNS = "fleet-ineligible", "cluster-ineligible", "ineligible"
	hubClient, local := deployerNamespaces(t, bundleNS, clusterNS, workloadNS)
	store := contentstore.Store{Client: hubClient}
	revision := func(index int64, docs ...string) v1alpha1.RevisionRef {
		id := fmt.Sprintf("content-%d", index)
		if _, err := store.Put(ctx, bundleNS, id, []byte(strings.Join(docs, "---\n"))); err != nil {
			t.Fatal(err)
		}
		return v1alpha1.RevisionRef{Index: index, ContentID: id, DeploymentID: fmt.Sprintf("deployment-%d", index)}
	}
	web := func(image string) string {
		return strings.Replace(deploymentYAML(workloadNS, "web", 1, false), "example.invalid/app:1", image, 1)
	}
	gadget := fmt.Sprintf("apiVersion: gadgets.r115.example/v1\nkind: Gadget\nmetadata: {name: g, namespace: %s}\n", workloadNS)
	// Twelve more kinds nobody serves, one with an apiVersion far longer than a status admits:
	// what the agent reports must still be written.
	var unserved []string
	for i := range 12 {
		group := fmt.Sprintf("k%02d.r115.example", i)
		if i == 0 {
			group = strings.Repeat("x", 600) + ".example"
		}
		unserved = append(unserved, fmt.Sprintf("apiVersion: %s/v1\nkind: Thing\nmetadata: {name: t, namespace: %s}\n", group, workloadNS))
	}
	r1 := revision(1, web("example.invalid/app:1"))
	r2 := revision(2, web("example.invalid/app:2"), gadget)
	r3 := revision(3, append([]string{web("example.invalid/app:3")}, unserved...)...)

	bd := &v1alpha1.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Name: bundleNS + "-web", Namespace: clusterNS},
		Spec: v1alpha1.BundleDeploymentSpec{Bundle: "web", BundleNamespace: bundleNS, Staged: r1, Released: &r1}}
	agent := newAgentPlay(t, hubClient, local, "flotilla-ineligible", bd)
	read, reconcileUntil := agent.read, agent.until
	release := func(r v1alpha1.RevisionRef) {
		now := read()
		now.Spec.Staged, now.Spec.Released = r, &r
		if err := hubClient.Update(ctx, now); err != nil {
			t.Fatal(err)
		}
	}
	image := func() string {
		d, err := local.AppsV1().Deployments(workloadNS).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return d.Spec.Template.Spec.Containers[0].Image
	}
	reconcileUntil("revision 1 is Ready", func(bd *v1alpha1.BundleDeployment) bool {
		return bd.Status.AppliedDeploymentID == r1.DeploymentID && bd.Status.Ready
	})

	release(r2)
	got := reconcileUntil("revision 2 is found ineligible", func(bd *v1alpha1.BundleDeployment) bool { return bd.Status.Ineligible != nil })
	if ie := got.Status.Ineligible; ie.DeploymentID != r2.DeploymentID || !slices.Equal(ie.UnservedAPIs, []string{"gadgets.r115.example/v1 Gadget"}) {
		t.Errorf("ineligible %+v, want deployment-2 lacking gadgets.r115.example/v1 Gadget", ie)
	}
	applied := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.AppliedCondition)
	if applied == nil || applied.Status != metav1.ConditionFalse || applied.Reason != v1alpha1.APINotServedReason || !strings.Contains(applied.Message, "does not serve gadgets.r115.example/v1 Gadget") {
		t.Errorf("Applied condition %+v, want False, %s, naming the API", applied, v1alpha1.APINotServedReason)
	}
	if got.Status.AppliedDeploymentID != r1.DeploymentID || !got.Status.Ready || image() != "example.invalid/app:1" {
		t.Errorf("applied %s, ready %v, image %s: want revision 1 still running, Ready, untouched", got.Status.AppliedDeploymentID, got.Status.Ready, image())
	}
	if d := bdstate.Deployment(got); !d.Ineligible() || d.ApplyFailed || d.Applied != 1 || rollout.ClusterState(d, 2) != rollout.ErrApplied {
		t.Errorf("the hub reads %+v (state %s): want ineligible for 2, running 1, not a failed apply", d, rollout.ClusterState(d, 2))
	}

	// The cluster's operator installs the API: the revision applies at the next resync.
	operator, err := NewApplier(workload.Config())
	if err != nil {
		t.Fatal(err)
	}
	crd := `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gadgets.gadgets.r115.example}
spec:
  group: gadgets.r115.example
  names: {kind: Gadget, plural: gadgets, singular: gadget}
  scope: Namespaced
  versions: [{name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}]
`
	if res, err := operator.Apply(ctx, objects(t, crd), nil, Options{Owner: "cluster-operator"}); err != nil || res.Err() != nil {
		t.Fatalf("installing the CRD: %v %v", err, res.Err())
	}
	got = reconcileUntil("revision 2 applies once the cluster serves its API", func(bd *v1alpha1.BundleDeployment) bool {
		return bd.Status.AppliedDeploymentID == r2.DeploymentID
	})
	if got.Status.Ineligible != nil || image() != "example.invalid/app:2" {
		t.Errorf("ineligible %+v, image %s after the apply: want cleared and revision 2 running", got.Status.Ineligible, image())
	}

	// A revision built to overflow the report: twelve missing kinds, one of 600 characters.
	release(r3)
	got = reconcileUntil("revision 3 is found ineligible", func(bd *v1alpha1.BundleDeployment) bool {
		return bd.Status.Ineligible != nil && bd.Status.Ineligible.DeploymentID == r3.DeploymentID
	})
	apis := got.Status.Ineligible.UnservedAPIs
	if len(apis) != maxUnservedAPIs || slices.ContainsFunc(apis, func(s string) bool { return len(s) > maxUnservedAPILen }) {
		t.Errorf("%d APIs reported (longest within %d: %v), want %d", len(apis), maxUnservedAPILen, !slices.ContainsFunc(apis, func(s string) bool { return len(s) > maxUnservedAPILen }), maxUnservedAPIs)
	}
	if got.Status.AppliedDeploymentID != r2.DeploymentID || image() != "example.invalid/app:2" {
		t.Errorf("applied %s, image %s: want revision 2 untouched", got.Status.AppliedDeploymentID, image())
	}
}
