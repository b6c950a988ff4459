package model

import (
	"fmt"
	"iter"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// BlockingObject says which object keeps a rollout's revision from Ready: of the deployments
// that applied revision and are not Ready, the first by cluster name, and the first object its
// agent named (status.nonReadyResources, reported in the write that says NotReady: naming it
// costs no write). "" when no such deployment named one. One pass, no sort: cheap at 10,000
// deployments.
func BlockingObject(revision int64, bds iter.Seq[*v1alpha1.BundleDeployment]) string {
	var first *v1alpha1.BundleDeployment
	clusters := 0
	for bd := range bds {
		st := &bd.Status
		if st.Ready || st.AppliedRevision != revision || len(st.NonReadyResources) == 0 {
			continue
		}
		clusters++
		if first == nil || bd.Labels[LabelCluster] < first.Labels[LabelCluster] {
			first = bd
		}
	}
	if first == nil {
		return ""
	}
	msg := fmt.Sprintf("not ready on %s: %s", first.Labels[LabelCluster], first.Status.NonReadyResources[0].String())
	if n := len(first.Status.NonReadyResources); n > 1 {
		msg += fmt.Sprintf(" (and %d more objects)", n-1)
	}
	if clusters > 1 {
		msg += fmt.Sprintf("; %d clusters name objects not ready", clusters)
	}
	return msg
}
