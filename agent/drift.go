package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
)

// Drift compares each object as the bundle wants it with the live one: a server-side apply in
// dry-run mode shows what applying would change; any difference outside status and metadata
// bookkeeping (and outside opts.ComparePatches) is drift. Missing objects are drift too.
func (a *Applier) Drift(ctx context.Context, objs []*unstructured.Unstructured, opts Options) ([]ResourceStatus, error) {
	var drifted []ResourceStatus
	for _, o := range objs {
		m, err := a.mapping(o.GroupVersionKind())
		if err != nil {
			return nil, err
		}
		ns := o.GetNamespace()
		if m.Scope.Name() == "namespace" && ns == "" {
			ns = orDefault(opts.DefaultNamespace, "default")
		}
		ri := a.resource(m, ns)
		if opts.Owner != "" {
			o = o.DeepCopy()
			markOwner(o, opts.Owner) // as applied: the mark is part of what the bundle wants
		}
		live, want, err := a.liveAndWanted(ctx, ri, o)
		if apierrors.IsNotFound(err) {
			drifted = append(drifted, ResourceStatus{Object: MetaOf(o), Message: "missing"})
			continue
		}
		if err != nil {
			return nil, err
		}
		if fields := differences(comparable(live, opts, o), comparable(want, opts, o)); len(fields) > 0 {
			drifted = append(drifted, ResourceStatus{Object: MetaOf(o), Message: "modified: " + strings.Join(fields, ", ")})
		}
	}
	sort.Slice(drifted, func(i, j int) bool { return drifted[i].Object.String() < drifted[j].Object.String() })
	return drifted, nil
}

// liveAndWanted reads the live object and what applying o would make of it, from the same
// resourceVersion: controllers write to objects all the time (a Deployment's revision
// annotation), and comparing two different versions would report their writes as drift.
func (a *Applier) liveAndWanted(ctx context.Context, ri dynamic.ResourceInterface, o *unstructured.Unstructured) (live, want *unstructured.Unstructured, err error) {
	data, err := json.Marshal(o.Object)
	if err != nil {
		return nil, nil, err
	}
	force := true
	for attempt := 0; attempt < 5; attempt++ {
		if live, err = ri.Get(ctx, o.GetName(), metav1.GetOptions{}); err != nil {
			return nil, nil, err
		}
		want, err = ri.Patch(ctx, o.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: FieldManager, Force: &force, DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return nil, nil, fmt.Errorf("failed to dry-run %s %s: %w", o.GetKind(), o.GetName(), err)
		}
		if want.GetResourceVersion() == live.GetResourceVersion() {
			return live, want, nil
		}
	}
	return live, want, nil
}

// comparable strips what changes without anyone deploying anything, and the excluded pointers.
func comparable(u *unstructured.Unstructured, opts Options, desired *unstructured.Unstructured) map[string]any {
	c := u.DeepCopy().Object
	delete(c, "status")
	for _, f := range []string{"managedFields", "resourceVersion", "generation", "uid", "creationTimestamp"} {
		unstructured.RemoveNestedField(c, "metadata", f)
	}
	for _, p := range opts.ComparePatches {
		if (p.APIVersion != "" && p.APIVersion != desired.GetAPIVersion()) || (p.Kind != "" && p.Kind != desired.GetKind()) ||
			(p.Name != "" && p.Name != desired.GetName()) || (p.Namespace != "" && p.Namespace != desired.GetNamespace()) {
			continue
		}
		for _, ptr := range p.JSONPointers {
			fields := strings.Split(strings.TrimPrefix(ptr, "/"), "/")
			for i := range fields {
				fields[i] = strings.ReplaceAll(strings.ReplaceAll(fields[i], "~1", "/"), "~0", "~")
			}
			unstructured.RemoveNestedField(c, fields...)
		}
	}
	return c
}

// differences lists the top-level paths (two levels deep) where a and b differ.
func differences(a, b map[string]any) []string {
	var out []string
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	for k := range keys {
		am, aok := a[k].(map[string]any)
		bm, bok := b[k].(map[string]any)
		if aok && bok {
			for _, sub := range differences(am, bm) {
				out = append(out, k+"."+strings.SplitN(sub, ".", 2)[0])
			}
			continue
		}
		if !equality.Semantic.DeepEqual(a[k], b[k]) {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return dedupe(out)
}

func dedupe(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}
