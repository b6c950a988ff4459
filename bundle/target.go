package bundle

import (
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Target is the cluster a bundle is rendered for.
type Target struct {
	ClusterName string
	Labels      map[string]string
	Annotations map[string]string
	// Groups are the cluster groups the cluster belongs to, with their labels.
	Groups map[string]map[string]string
	// TemplateValues are the cluster's extra values for templating (Fleet's ClusterValues).
	TemplateValues map[string]string
	// Namespace is the cluster's namespace on the hub (Fleet's ClusterNamespace).
	Namespace string
}

// matches reports whether the target satisfies every field of m that is set.
func (t Target) matches(m TargetMatch) bool {
	if m.ClusterName == "" && m.ClusterSelector == nil && m.ClusterGroup == "" && m.ClusterGroupSelector == nil {
		return false
	}
	if m.ClusterName != "" && m.ClusterName != t.ClusterName {
		return false
	}
	if m.ClusterSelector != nil && !m.ClusterSelector.Matches(t.Labels) {
		return false
	}
	if m.ClusterGroup != "" {
		if _, ok := t.Groups[m.ClusterGroup]; !ok {
			return false
		}
	}
	if m.ClusterGroupSelector != nil {
		found := false
		for _, labels := range t.Groups {
			if m.ClusterGroupSelector.Matches(labels) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// Matches reports whether the target is selected by a fleet.yaml or GitRepo target match.
func (t Target) Matches(m TargetMatch) bool { return t.matches(m) }

// customize returns the options for a target: the first target customization that matches it
// overrides the bundle's options (Fleet's rule). It also says whether the target is excluded
// (doNotDeploy) and which customization applied.
func (f *FleetYAML) customize(t Target) (opts Options, doNotDeploy bool, applied string) {
	opts = f.Options
	for i, tc := range f.TargetCustomizations {
		if !t.matches(tc.TargetMatch) {
			continue
		}
		if tc.DoNotDeploy {
			return opts, true, tc.Name
		}
		name := tc.Name
		if name == "" {
			name = "targetCustomizations[" + strconv.Itoa(i) + "]"
		}
		return mergeOptions(opts, tc.Options), false, name
	}
	return opts, false, ""
}

// mergeOptions lays override over base: set scalars replace, maps merge, Helm values merge
// deeply, values files append.
func mergeOptions(base, over Options) Options {
	out := base
	if over.DefaultNamespace != "" {
		out.DefaultNamespace = over.DefaultNamespace
	}
	if over.Namespace != "" {
		out.Namespace = over.Namespace
	}
	out.NamespaceLabels = mergeMaps(base.NamespaceLabels, over.NamespaceLabels)
	out.NamespaceAnnotations = mergeMaps(base.NamespaceAnnotations, over.NamespaceAnnotations)
	if over.ServiceAccount != "" {
		out.ServiceAccount = over.ServiceAccount
	}
	if over.Helm != nil {
		h := Helm{}
		if base.Helm != nil {
			h = *base.Helm
		}
		o := over.Helm
		for _, p := range []struct {
			dst *string
			src string
		}{{&h.Chart, o.Chart}, {&h.Repo, o.Repo}, {&h.Version, o.Version}, {&h.ReleaseName, o.ReleaseName}} {
			if p.src != "" {
				*p.dst = p.src
			}
		}
		h.Values = mergeValues(h.Values, o.Values)
		h.ValuesFiles = append(append([]string(nil), h.ValuesFiles...), o.ValuesFiles...)
		h.ValuesFrom = append(append([]ValuesFrom(nil), h.ValuesFrom...), o.ValuesFrom...)
		h.TakeOwnership = h.TakeOwnership || o.TakeOwnership
		h.Force = h.Force || o.Force
		h.Atomic = h.Atomic || o.Atomic
		h.WaitForJobs = h.WaitForJobs || o.WaitForJobs
		if o.TimeoutSeconds != 0 {
			h.TimeoutSeconds = o.TimeoutSeconds
		}
		out.Helm = &h
	}
	if over.Kustomize != nil {
		out.Kustomize = over.Kustomize
	}
	if over.YAML != nil {
		out.YAML = over.YAML
	}
	if over.Diff != nil {
		out.Diff = over.Diff
	}
	if over.CorrectDrift != nil {
		out.CorrectDrift = over.CorrectDrift
	}
	out.KeepResources = base.KeepResources || over.KeepResources
	out.DeleteNamespace = base.DeleteNamespace || over.DeleteNamespace
	if over.Ignore != nil {
		out.Ignore = over.Ignore
	}
	if over.HealthChecks != nil {
		out.HealthChecks = over.HealthChecks
	}
	return out
}

func mergeMaps(a, b map[string]string) map[string]string {
	if len(b) == 0 {
		return a
	}
	out := maps.Clone(a)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, b)
	return out
}

// mergeValues merges Helm values: maps merge key by key, everything else in over wins.
func mergeValues(base, over map[string]any) map[string]any {
	if len(over) == 0 {
		return base
	}
	out := make(map[string]any, len(base)+len(over))
	maps.Copy(out, base)
	for k, v := range over {
		if bm, ok := out[k].(map[string]any); ok {
			if om, ok := v.(map[string]any); ok {
				out[k] = mergeValues(bm, om)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// describeMatch says what a target match selects, for messages ("clusterSelector env=dev").
func describeMatch(m TargetMatch) string {
	var parts []string
	if m.ClusterName != "" {
		parts = append(parts, "clusterName "+m.ClusterName)
	}
	if m.ClusterSelector != nil {
		parts = append(parts, "clusterSelector "+m.ClusterSelector.String())
	}
	if m.ClusterGroup != "" {
		parts = append(parts, "clusterGroup "+m.ClusterGroup)
	}
	if m.ClusterGroupSelector != nil {
		parts = append(parts, "clusterGroupSelector "+m.ClusterGroupSelector.String())
	}
	return strings.Join(parts, ", ")
}

// describeLabels lists labels as k=v, sorted; "none" when there are none.
func describeLabels(labels map[string]string) string {
	if len(labels) == 0 {
		return "none"
	}
	parts := make([]string, 0, len(labels))
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		parts = append(parts, k+"="+labels[k])
	}
	return strings.Join(parts, ",")
}

// Selected reports whether a bundle deploys to the target: fleet.yaml's overrideTargets when it
// has any, else the GitRepo's targets. No target selects no cluster.
func Selected(repoTargets, overrideTargets []TargetMatch, t Target) bool {
	matches := overrideTargets
	if len(matches) == 0 {
		matches = repoTargets
	}
	for _, m := range matches {
		if t.matches(m) {
			return true
		}
	}
	return false
}
