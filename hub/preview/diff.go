package preview

import (
	"maps"
	"reflect"
	"slices"

	"github.com/pmezard/go-difflib/difflib"
	"sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/bundle"
)

// diffContext is how many unchanged lines a diff shows around a change.
const diffContext = 3

// redacted stands for a Secret's value in a report; redactedChanged for one that differs from
// the base's value of the same key. Nothing of the value itself is shown, not even a hash: a
// short secret's hash is as good as the secret.
const (
	redacted        = "(redacted)"
	redactedChanged = "(redacted, changed)"
)

// diffObjects lists the objects the head adds, changes and removes against the base, in the
// renderer's order (group, kind, namespace, name).
func diffObjects(base, head *bundle.Rendered) []ObjectChange {
	before := map[string]bundle.Object{}
	if base != nil {
		for _, o := range base.Objects {
			before[o.ID()] = o
		}
	}
	out := []ObjectChange{}
	seen := map[string]bool{}
	if head != nil {
		for _, o := range head.Objects {
			seen[o.ID()] = true
			prev, existed := before[o.ID()]
			switch {
			case !existed:
				_, shown := redact(nil, o)
				out = append(out, objectChange(o, ObjectAdded, unified(nil, shown)))
			case !reflect.DeepEqual(prev, o):
				a, b := redact(prev, o)
				out = append(out, objectChange(o, ObjectChanged, unified(a, b)))
			}
		}
	}
	if base != nil {
		for _, o := range base.Objects {
			if !seen[o.ID()] {
				shown, _ := redact(o, nil)
				out = append(out, objectChange(o, ObjectRemoved, unified(shown, nil)))
			}
		}
	}
	return out
}

func objectChange(o bundle.Object, c Change, diff string) ObjectChange {
	return ObjectChange{APIVersion: o.APIVersion(), Kind: o.Kind(), Namespace: o.Namespace(), Name: o.Name(), Change: c, Diff: diff}
}

// diffOptions is a diff of how the agent deploys the two renders, "" when that is the same or
// one side deploys nothing (its objects say it all).
func diffOptions(base, head *bundle.Rendered) string {
	if base == nil || head == nil || reflect.DeepEqual(base.Options, head.Options) {
		return ""
	}
	return unified(base.Options, head.Options)
}

// unified is a unified diff of two values' YAML (nil: nothing).
func unified(a, b any) string {
	d := difflib.UnifiedDiff{A: yamlLines(a), B: yamlLines(b), FromFile: "base", ToFile: "head", Context: diffContext}
	text, err := difflib.GetUnifiedDiffString(d)
	if err != nil {
		return ""
	}
	return text
}

func yamlLines(v any) []string {
	if o, isObject := v.(bundle.Object); v == nil || isObject && o == nil {
		return nil
	}
	data, err := yaml.Marshal(v)
	if err != nil {
		return nil
	}
	return difflib.SplitLines(string(data))
}

// secretFields are the fields of a core Secret that hold its values.
var secretFields = []string{"data", "stringData"}

// redact returns copies of the two sides of an object (nil: absent) in which every value of a
// Secret reads redacted, or redactedChanged where the head's differs from the base's. Other
// objects are returned as they are.
func redact(base, head bundle.Object) (bundle.Object, bundle.Object) {
	if !isSecret(base) && !isSecret(head) {
		return base, head
	}
	values := func(o bundle.Object, field string) map[string]any {
		m, _ := o[field].(map[string]any)
		return m
	}
	cut := func(o, other bundle.Object, changedMark bool) bundle.Object {
		if o == nil {
			return nil
		}
		out := maps.Clone(o)
		for _, field := range secretFields {
			raw, present := o[field]
			if !present {
				continue
			}
			vals, ok := raw.(map[string]any)
			if !ok {
				out[field] = redacted
				continue
			}
			theirs := values(other, field)
			masked := make(map[string]any, len(vals))
			for _, k := range slices.Sorted(maps.Keys(vals)) {
				masked[k] = redacted
				if changedMark && other != nil {
					if prev, had := theirs[k]; had && !reflect.DeepEqual(prev, vals[k]) {
						masked[k] = redactedChanged
					}
				}
			}
			out[field] = masked
		}
		return out
	}
	return cut(base, head, false), cut(head, base, true)
}

func isSecret(o bundle.Object) bool {
	return o != nil && o.Kind() == "Secret" && o.APIVersion() == "v1"
}
