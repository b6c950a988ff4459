package agent

import (
	"context"
	"fmt"
	"sort"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

// ResourceStatus is one object's readiness.
type ResourceStatus struct {
	Object  ObjMeta
	Ready   bool
	Message string
}

// Health reads every object of the inventory and computes its readiness with kstatus: built-in
// kinds by their rules, custom resources by their Ready/Reconciling/Stalled conditions, anything
// else as ready once it exists. Conditions matching opts.IgnoreConditions are disregarded.
// It returns the objects that are not ready, sorted.
func (a *Applier) Health(ctx context.Context, inv Inventory, opts Options) ([]ResourceStatus, error) {
	var notReady []ResourceStatus
	for _, o := range inv {
		m, err := a.mapper.RESTMapping(o.GroupKind())
		if err != nil {
			notReady = append(notReady, ResourceStatus{Object: o, Message: "kind not served: " + err.Error()})
			continue
		}
		live, err := a.resource(m, o.Namespace).Get(ctx, o.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			notReady = append(notReady, ResourceStatus{Object: o, Message: "missing"})
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("failed to read %s %s/%s: %w", o.Kind, o.Namespace, o.Name, err)
		}
		rs := Readiness(live, opts.IgnoreConditions)
		if rs.Ready && opts.WaitForJobs {
			rs = jobCompleted(live)
		}
		if !rs.Ready {
			notReady = append(notReady, rs)
		}
	}
	sort.Slice(notReady, func(i, j int) bool { return notReady[i].Object.String() < notReady[j].Object.String() })
	return notReady, nil
}

// Readiness computes one live object's readiness (kstatus), after removing ignored conditions.
func Readiness(live *unstructured.Unstructured, ignore []map[string]string) ResourceStatus {
	obj := live
	if len(ignore) > 0 {
		obj = live.DeepCopy()
		conds, found, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
		if found {
			kept := conds[:0]
			for _, c := range conds {
				if m, ok := c.(map[string]any); ok && ignored(m, ignore) {
					continue
				}
				kept = append(kept, c)
			}
			_ = unstructured.SetNestedSlice(obj.Object, kept, "status", "conditions")
		}
	}
	res, err := status.Compute(obj)
	rs := ResourceStatus{Object: MetaOf(live)}
	switch {
	case err != nil:
		rs.Message = "cannot compute status: " + err.Error()
	case res.Status == status.CurrentStatus:
		rs.Ready = true
	default:
		rs.Message = fmt.Sprintf("%s: %s", res.Status, res.Message)
	}
	return rs
}

// jobCompleted is a Job's readiness under waitForJobs: ready once its Complete condition holds.
// Other objects are ready.
func jobCompleted(live *unstructured.Unstructured) ResourceStatus {
	rs := ResourceStatus{Object: MetaOf(live), Ready: true}
	if live.GroupVersionKind().GroupKind() != (schema.GroupKind{Group: "batch", Kind: "Job"}) {
		return rs
	}
	conds, _, _ := unstructured.NestedSlice(live.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == "Complete" && m["status"] == "True" {
			return rs
		}
	}
	rs.Ready, rs.Message = false, "InProgress: Job not complete yet (waitForJobs)"
	return rs
}

func ignored(cond map[string]any, ignore []map[string]string) bool {
	for _, rule := range ignore {
		match := len(rule) > 0
		for k, v := range rule {
			if fmt.Sprint(cond[k]) != v {
				match = false
				break
			}
		}
		if match {
			return true
		}
	}
	return false
}
