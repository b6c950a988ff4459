package agent

import (
	"context"
	"fmt"
	"sort"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	"github.com/flotilla-dev/flotilla/agent/healthcheck"
)

// ResourceStatus is one object's readiness.
type ResourceStatus struct {
	Object  ObjMeta
	Ready   bool
	Message string
}

// Health reads every object of the inventory and computes its readiness: by the deployment's
// CEL health check for its kind when one judges it (opts.HealthChecks), else with kstatus:
// built-in kinds by their rules, custom resources by their Ready/Reconciling/Stalled
// conditions, anything else as ready once it exists. Conditions matching opts.IgnoreConditions
// are disregarded. It returns the objects that are not ready, sorted.
func (a *Applier) Health(ctx context.Context, inv Inventory, opts Options) ([]ResourceStatus, error) {
	checks, err := compiledHealthChecks(opts.HealthChecks)
	if err != nil {
		return nil, fmt.Errorf("healthChecks%w", err)
	}
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
		var rs ResourceStatus
		if st, msg, judged := checks.Evaluate(o.GroupKind(), live.Object); judged {
			rs = ResourceStatus{Object: MetaOf(live), Ready: st == healthcheck.Current, Message: fmt.Sprintf("%s: %s", st, msg)}
		} else {
			rs = Readiness(live, opts.IgnoreConditions)
		}
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

// compiled caches the health checks of the deployments this agent runs: they are compiled once
// per distinct list, not at every look. Bounded: a full cache starts over.
var compiled = struct {
	sync.Mutex
	sets map[string]*healthcheck.Set
}{sets: map[string]*healthcheck.Set{}}

const maxCompiledSets = 64

// compiledHealthChecks compiles rules, or returns them compiled before. An error names the
// rule and field ("[0].current: …"); the hub's renderer refuses such rules, so an agent only
// meets one from a hub older than itself.
func compiledHealthChecks(rules []healthcheck.Rule) (*healthcheck.Set, error) {
	if len(rules) == 0 {
		return nil, nil
	}
	key := fmt.Sprintf("%q", rules)
	compiled.Lock()
	defer compiled.Unlock()
	if s, ok := compiled.sets[key]; ok {
		return s, nil
	}
	s, err := healthcheck.Compile(rules)
	if err != nil {
		return nil, err
	}
	if len(compiled.sets) >= maxCompiledSets {
		clear(compiled.sets)
	}
	compiled.sets[key] = s
	return s, nil
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
