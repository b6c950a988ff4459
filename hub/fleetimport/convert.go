package fleetimport

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// FleetGroup is the API group of Fleet's objects.
const FleetGroup = "fleet.cattle.io"

// Result is an import: Flotilla's objects, the Secrets they name (namespace/name), and the
// report of what was not carried over as it was.
type Result struct {
	Objects []client.Object
	Secrets []string
	Report  Report
}

// Convert converts Fleet's objects into Flotilla's. Objects of other groups, and Fleet's kinds
// that are its own state (Bundles, BundleDeployments, Contents …), are reported, not converted.
func Convert(objs []*unstructured.Unstructured) Result {
	var res Result
	res.Report.Imported = map[string]int{}
	secrets := map[string]bool{}
	for _, u := range objs {
		before := len(res.Report.Findings)
		convertOne(u, &res, secrets)
		// One object's findings in the order of their fields: a report reads the same each time.
		mine := res.Report.Findings[before:]
		sort.SliceStable(mine, func(i, j int) bool { return mine[i].Field < mine[j].Field })
	}
	for s := range secrets {
		res.Secrets = append(res.Secrets, s)
	}
	sort.Strings(res.Secrets)
	return res
}

// convertOne converts one object into res.
func convertOne(u *unstructured.Unstructured, res *Result, secrets map[string]bool) {
	gvk := u.GroupVersionKind()
	id := fmt.Sprintf("%s %s", gvk.Kind, objectName(u))
	if gvk.Group != FleetGroup {
		res.Report.add(id, "apiVersion", Dropped, "%s is not Fleet's (%s): not imported", u.GetAPIVersion(), FleetGroup)
		return
	}
	var out client.Object
	switch gvk.Kind {
	case "GitRepo":
		out = gitRepo(u, id, &res.Report, secrets)
	case "ClusterGroup":
		out = clusterGroup(u, id, &res.Report)
	case "GitRepoRestriction":
		out = restriction(u, id, &res.Report)
	case "HelmOp":
		out = helmOp(u, id, &res.Report, secrets)
	case "BundleNamespaceMapping":
		res.Report.add(id, "kind", Dropped, "Flotilla's bundles deploy to the clusters of their own namespace only: register the clusters in the GitRepos' namespace, or move the GitRepos to the clusters' namespace")
	case "Bundle", "BundleDeployment", "Content", "ClusterRegistration", "ImageScan":
		res.Report.add(id, "kind", Dropped, "Fleet's own state, made again by Flotilla from what it imports: not imported")
	default:
		res.Report.add(id, "kind", Dropped, "not a kind the importer knows: not imported")
	}
	if out != nil {
		res.Objects = append(res.Objects, out)
		res.Report.Imported[gvk.Kind]++
	}
}

func objectName(u *unstructured.Unstructured) string {
	if u.GetNamespace() == "" {
		return u.GetName()
	}
	return u.GetNamespace() + "/" + u.GetName()
}

// fields is one map of an object, remembering what was read: what is left is reported.
type fields struct {
	m    map[string]any
	read map[string]bool
}

func fieldsOf(m map[string]any) *fields { return &fields{m: m, read: map[string]bool{}} }

func (f *fields) take(key string) (any, bool) {
	v, ok := f.m[key]
	if ok {
		f.read[key] = true
	}
	return v, ok
}

// takeAll takes keys, those present, into a map for decode.
func (f *fields) takeAll(keys []string) map[string]any {
	taken := map[string]any{}
	for _, k := range keys {
		if v, ok := f.take(k); ok {
			taken[k] = v
		}
	}
	return taken
}

// drop takes the fields of dropped that are present and reports each with what to do instead.
func (f *fields) drop(dropped map[string]string, id, prefix string, r *Report) {
	for k, instead := range dropped {
		if _, ok := f.take(k); ok {
			r.add(id, prefix+k, Dropped, "%s", instead)
		}
	}
}

// reportRest reports every field not read: none that the documentation of Fleet's kind has.
func (f *fields) reportRest(id, prefix, kind string, r *Report) {
	for _, k := range f.rest() {
		r.add(id, prefix+k, Dropped, "not a field of Fleet's %s as documented: not carried over", kind)
	}
}

// secretRef carries a Fleet field naming a Secret over as Flotilla's reference to it, and lists
// the Secret among those to bring over.
func (f *fields) secretRef(fleetName, ours, namespace string, into map[string]any, secrets map[string]bool, id string, r *Report) {
	v, ok := f.take(fleetName)
	if name, isString := v.(string); ok && isString && name != "" {
		into[ours] = map[string]any{"name": name}
		secrets[namespace+"/"+name] = true
		r.add(id, "spec."+fleetName, Renamed, "spec.%s.name", ours)
	}
}

// fleetDefaultTarget writes out the target Fleet gives an object without targets, its cluster
// group "default": Flotilla's deploys nowhere without them.
func fleetDefaultTarget(targets *[]v1alpha1.Target, kind, id string, r *Report) {
	if len(*targets) > 0 {
		return
	}
	*targets = []v1alpha1.Target{{Name: "default", ClusterMatch: v1alpha1.ClusterMatch{ClusterGroup: "default"}}}
	r.add(id, "spec.targets", Changed, "none: Fleet deploys such a %s to the cluster group \"default\", so its target is written out (import that ClusterGroup too)", kind)
}

// rest is what was not read, sorted.
func (f *fields) rest() []string {
	var keys []string
	for k := range f.m {
		if !f.read[k] {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

// serverFields are what the API server sets on every object: no part of what a person wrote.
var serverFields = []string{"uid", "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "managedFields", "selfLink"}

// metadata carries over what a person sets on an object: name, namespace (Fleet's workspace),
// labels and annotations but kubectl's record of its last apply.
func metadata(u *unstructured.Unstructured, id string, r *Report) metav1.ObjectMeta {
	m, _ := u.Object["metadata"].(map[string]any)
	meta := fieldsOf(m)
	for _, k := range append(slices.Clone(serverFields), "name", "namespace", "labels", "annotations") {
		meta.take(k)
	}
	out := metav1.ObjectMeta{Name: u.GetName(), Namespace: u.GetNamespace(), Labels: u.GetLabels()}
	for k, v := range u.GetAnnotations() {
		if k == "kubectl.kubernetes.io/last-applied-configuration" {
			continue
		}
		if out.Annotations == nil {
			out.Annotations = map[string]string{}
		}
		out.Annotations[k] = v
	}
	for _, k := range meta.rest() {
		r.add(id, "metadata."+k, Dropped, "not carried over: Flotilla sets its own")
	}
	return out
}

// spec is the object's spec, or its top-level fields for kinds that keep them there.
func spec(u *unstructured.Unstructured) map[string]any {
	if s, ok := u.Object["spec"].(map[string]any); ok {
		return s
	}
	return map[string]any{}
}

// decode converts the fields taken into Flotilla's type by their JSON, strictly: a value of the
// wrong shape is reported, not guessed at.
func decode(from map[string]any, into any) error {
	data, err := json.Marshal(from)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	return dec.Decode(into)
}

// gitRepoSame are the fields of Fleet's GitRepo that Flotilla's has under the same name and with
// the same meaning.
var gitRepoSame = []string{"repo", "branch", "revision", "paths", "paused", "pollingInterval", "disablePolling", "insecureSkipTLSVerify", "caBundle",
	"helmRepoURLRegex", "targetNamespace", "serviceAccount", "keepResources", "deleteNamespace", "correctDrift", "forceSyncGeneration", "targets"}

// gitRepoRefs are Fleet's GitRepo fields naming a Secret, and Flotilla's reference for each.
var gitRepoRefs = map[string]string{"clientSecretName": "secretRef", "helmSecretName": "helmSecretRef", "webhookSecret": "webhookSecretRef"}

// gitRepoDropped are Fleet's GitRepo fields Flotilla has no place for, and what to do instead.
var gitRepoDropped = map[string]string{
	"helmSecretNameForPaths": "Flotilla takes one helmSecretRef per GitRepo, sent only to the hosts helmRepoURLRegex allows: split the paths that need other credentials into GitRepos of their own",
	"ociRegistrySecret":      "Flotilla keeps rendered bundles as Content in the hub's API server and needs no OCI storage",
	"imageScanInterval":      "Flotilla does not scan image registries: pin images in git and change them by commits",
	"imageScanCommit":        "Flotilla does not scan image registries: pin images in git and change them by commits",
}

func gitRepo(u *unstructured.Unstructured, id string, r *Report, secrets map[string]bool) client.Object {
	out := &v1alpha1.GitRepo{TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "GitRepo"}, ObjectMeta: metadata(u, id, r)}
	s := fieldsOf(spec(u))
	same := s.takeAll(gitRepoSame)
	for fleetName, ours := range gitRepoRefs {
		s.secretRef(fleetName, ours, u.GetNamespace(), same, secrets, id, r)
	}
	s.drop(gitRepoDropped, id, "spec.", r)
	if v, ok := s.take("bundles"); ok {
		bundlePaths(v, same, id, r)
	}
	s.reportRest(id, "spec.", "GitRepo", r)
	if err := decode(same, &out.Spec); err != nil {
		r.add(id, "spec", Dropped, "does not convert (%v): the GitRepo is not imported", err)
		return nil
	}
	fleetDefaultTarget(&out.Spec.Targets, "GitRepo", id, r)
	return out
}

// bundlePaths carries Fleet's bundles list over as paths: each entry's base directory. Its
// options files have no place (a bundle's fleet.yaml holds its options).
func bundlePaths(v any, into map[string]any, id string, r *Report) {
	entries, _ := v.([]any)
	var paths []any
	if existing, ok := into["paths"].([]any); ok {
		paths = existing
	}
	for i, e := range entries {
		entry, _ := e.(map[string]any)
		base, _ := entry["base"].(string)
		if base == "" {
			r.add(id, fmt.Sprintf("spec.bundles[%d]", i), Dropped, "no base directory: not carried over")
			continue
		}
		paths = append(paths, base)
		if opts, _ := entry["options"].(string); opts != "" {
			r.add(id, fmt.Sprintf("spec.bundles[%d].options", i), Dropped, "%s: Flotilla reads a bundle's options from its fleet.yaml: move them into %s/fleet.yaml", opts, base)
		}
	}
	into["paths"] = paths
	r.add(id, "spec.bundles", Changed, "spec.paths: the bundles' base directories, where Flotilla finds each bundle by its fleet.yaml")
}

func clusterGroup(u *unstructured.Unstructured, id string, r *Report) client.Object {
	out := &v1alpha1.ClusterGroup{TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "ClusterGroup"}, ObjectMeta: metadata(u, id, r)}
	s := fieldsOf(spec(u))
	selector, ok := s.take("selector")
	s.reportRest(id, "spec.", "ClusterGroup", r)
	if !ok || selector == nil {
		r.add(id, "spec.selector", Dropped, "none: in Fleet such a group has no cluster, in Flotilla a group needs a selector: the group is not imported")
		return nil
	}
	if err := decode(map[string]any{"selector": selector}, &out.Spec); err != nil {
		r.add(id, "spec.selector", Dropped, "does not convert (%v): the group is not imported", err)
		return nil
	}
	return out
}

// restrictionSame are the fields of Fleet's GitRepoRestriction (kept at its top level) that
// Flotilla's FleetRestriction has in its spec with the same meaning.
var restrictionSame = []string{"allowedRepoPatterns", "allowedServiceAccounts", "defaultServiceAccount", "allowedTargetNamespaces"}

var restrictionDropped = map[string]string{
	"allowedClientSecretNames":       "Flotilla's GitRepos name their credentials in their own namespace, which RBAC guards: no list of allowed Secrets",
	"defaultClientSecretName":        "name the Secret in each GitRepo's secretRef",
	"allowedTargetNamespaceSelector": "list the namespaces, or glob patterns of them, in allowedTargetNamespaces",
}

func restriction(u *unstructured.Unstructured, id string, r *Report) client.Object {
	out := &v1alpha1.FleetRestriction{TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "FleetRestriction"}, ObjectMeta: metadata(u, id, r)}
	top := fieldsOf(u.Object)
	for _, k := range []string{"apiVersion", "kind", "metadata", "status"} {
		top.take(k)
	}
	same := top.takeAll(restrictionSame)
	top.drop(restrictionDropped, id, "", r)
	top.reportRest(id, "", "GitRepoRestriction", r)
	if err := decode(same, &out.Spec); err != nil {
		r.add(id, "", Dropped, "does not convert (%v): the restriction is not imported", err)
		return nil
	}
	r.add(id, "kind", Renamed, "FleetRestriction (its fields under spec)")
	return out
}

// helmOpSame are the fields of Fleet's HelmOp that Flotilla's has under the same name and with the
// same meaning; helmChartSame those of its helm options.
var (
	helmOpSame    = []string{"defaultNamespace", "namespace", "pollingInterval", "rolloutStrategy", "paused"}
	helmChartSame = []string{"repo", "chart", "version", "releaseName", "values"}
	// targetMatch are the fields of a target that select clusters: all a Flotilla target has.
	targetMatch = []string{"name", "clusterName", "clusterSelector", "clusterGroup", "clusterGroupSelector"}
)

// notInHelmOp is why a bundle option of Fleet's HelmOp has no place in Flotilla's.
const notInHelmOp = "Flotilla's HelmOp deploys a chart with its values only: a GitRepo whose fleet.yaml names the chart takes this option"

func helmOp(u *unstructured.Unstructured, id string, r *Report, secrets map[string]bool) client.Object {
	out := &v1alpha1.HelmOp{TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "HelmOp"}, ObjectMeta: metadata(u, id, r)}
	s := fieldsOf(spec(u))
	same := s.takeAll(helmOpSame)
	s.secretRef("helmSecretName", "helmSecretRef", u.GetNamespace(), same, secrets, id, r)
	if _, ok := s.take("insecureSkipTLSVerify"); ok {
		r.add(id, "spec.insecureSkipTLSVerify", Dropped, "Flotilla verifies the chart server's certificate: give its CA in spec.caBundle")
	}
	helmSpec, _ := s.m["helm"].(map[string]any)
	s.take("helm")
	helm := fieldsOf(helmSpec)
	chart := helm.takeAll(helmChartSame)
	// Fleet names an OCI chart in chart, without a repository; Flotilla's repo is the chart's
	// oci:// reference.
	if ref, _ := chart["chart"].(string); chart["repo"] == nil && strings.HasPrefix(ref, "oci://") {
		chart["repo"] = ref
		delete(chart, "chart")
		r.add(id, "spec.helm.chart", Changed, "spec.helm.repo: Flotilla names an OCI chart by its reference in repo")
	}
	for _, k := range helm.rest() {
		r.add(id, "spec.helm."+k, Dropped, "%s", notInHelmOp)
	}
	same["helm"] = chart
	if v, ok := s.take("targets"); ok {
		same["targets"] = matchOnly(v, id, r)
	}
	for _, k := range s.rest() {
		r.add(id, "spec."+k, Dropped, "%s", notInHelmOp)
	}
	if err := decode(same, &out.Spec); err != nil {
		r.add(id, "spec", Dropped, "does not convert (%v): the HelmOp is not imported", err)
		return nil
	}
	if out.Spec.Helm.Repo == "" {
		r.add(id, "spec.helm.repo", Dropped, "none: Flotilla's HelmOp needs the chart's Helm repository or oci:// reference; the HelmOp is not imported")
		return nil
	}
	fleetDefaultTarget(&out.Spec.Targets, "HelmOp", id, r)
	return out
}

// matchOnly keeps of each of Fleet's bundle targets what selects clusters; a target's options
// (a customization of the bundle for its clusters) are reported.
func matchOnly(v any, id string, r *Report) []any {
	targets, _ := v.([]any)
	var out []any
	for i, t := range targets {
		m, _ := t.(map[string]any)
		f := fieldsOf(m)
		out = append(out, f.takeAll(targetMatch))
		for _, k := range f.rest() {
			r.add(id, fmt.Sprintf("spec.targets[%d].%s", i, k), Dropped, "a HelmOp's targets only select clusters in Flotilla: a fleet.yaml's targetCustomizations (a GitRepo) take per-target options")
		}
	}
	return out
}
