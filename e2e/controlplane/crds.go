package controlplane

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/manifests"
)

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// InstallCRDs applies CustomResourceDefinition documents with server-side apply and waits until
// each is Established, so callers can create objects of the new kinds right away.
func InstallCRDs(ctx context.Context, cfg *rest.Config, docs [][]byte) error {
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("failed to create client: %w", err)
	}
	crds := client.Resource(crdResource)
	names := make([]string, 0, len(docs))
	for _, doc := range docs {
		obj := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &obj.Object); err != nil {
			return fmt.Errorf("failed to decode CRD: %w", err)
		}
		data, err := obj.MarshalJSON()
		if err != nil {
			return fmt.Errorf("failed to encode CRD %s: %w", obj.GetName(), err)
		}
		force := true
		if _, err := crds.Patch(ctx, obj.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: "flotilla-controlplane", Force: &force}); err != nil {
			return fmt.Errorf("failed to apply CRD %s: %w", obj.GetName(), err)
		}
		names = append(names, obj.GetName())
	}
	for _, name := range names {
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			crd, err := crds.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
			for _, c := range conds {
				m, _ := c.(map[string]any)
				if m["type"] == "Established" && m["status"] == "True" {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("CRD %s did not become Established: %w", name, err)
		}
	}
	return nil
}

// InstallFlotillaAPI installs what a hub's API server needs before a hub runs: Flotilla's
// CustomResourceDefinitions (waiting until each is Established) and its admission policies.
func InstallFlotillaAPI(ctx context.Context, cfg *rest.Config) error {
	crds, err := manifests.CRDs()
	if err != nil {
		return err
	}
	if err := InstallCRDs(ctx, cfg, crds); err != nil {
		return err
	}
	return InstallPolicies(ctx, cfg)
}

// InstallPolicies installs Flotilla's admission policies as manifests/hub does, with the record
// of a hub in HubNamespace they read.
func InstallPolicies(ctx context.Context, cfg *rest.Config) error {
	policies, err := manifests.Policies()
	if err != nil {
		return err
	}
	for _, p := range policies {
		if _, err := Apply(ctx, cfg, p); err != nil {
			return fmt.Errorf("failed to install the admission policies: %w", err)
		}
	}
	// What a hub installed in flotilla-system records of itself when it starts (a hub of a test
	// records in its own namespace): the agent token lifetime the policies hold agents to, the
	// hub's default.
	record := fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata: {name: %[1]s}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: %[2]s, namespace: %[1]s}\ndata: {%[3]s: \"%[4]d\"}\n",
		HubNamespace, v1alpha1.HubRecordConfigMap, v1alpha1.HubRecordAgentTokenSeconds, int64(v1alpha1.DefaultAgentTokenTTL.Seconds()))
	if _, err := Apply(ctx, cfg, []byte(record)); err != nil {
		return fmt.Errorf("failed to record the hub's agent token lifetime: %w", err)
	}
	return nil
}

// HubNamespace is where an installed hub runs and keeps its record (the admission policies
// read it there).
const HubNamespace = "flotilla-system"
