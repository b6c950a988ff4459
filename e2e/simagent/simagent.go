// Package simagent is what the benchmarks' and the fault suite's simulated agents write: an
// agent's report of a release applied and ready, as one status patch.
package simagent

import (
	"encoding/json"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// Report sets what an agent reports once bd's release is applied and ready.
func Report(bd *v1alpha1.BundleDeployment) {
	now := metav1.Now()
	bd.Status.AppliedRevision, bd.Status.AppliedDeploymentID, bd.Status.AppliedAt = bd.Spec.Released.Index, bd.Spec.Released.DeploymentID, &now
	bd.Status.Ready, bd.Status.State = true, v1alpha1.StateReady
}

// StatusPatch writes bd's status as a merge patch built from the status alone: simulated agents
// spend no CPU diffing whole objects (real agents do that on their own clusters, not beside
// the hub and the API server).
func StatusPatch(bd *v1alpha1.BundleDeployment) client.Patch {
	data, err := json.Marshal(map[string]any{"status": bd.Status})
	if err != nil {
		panic(err) // a status always marshals
	}
	return client.RawPatch(types.MergePatchType, data)
}
