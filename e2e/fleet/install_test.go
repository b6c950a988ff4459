package fleet

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/e2e/controlplane"
	"github.com/flotilla-dev/flotilla/hub"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/model"
	"github.com/flotilla-dev/flotilla/hub/report"
	"github.com/flotilla-dev/flotilla/manifests"
)

// loadChart reads one of manifests/charts as Helm loads a chart directory.
func loadChart(t *testing.T, name string) *chart.Chart {
	t.Helper()
	root := "charts/" + name
	var files []*loader.BufferedFile
	err := fs.WalkDir(manifests.Charts, root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(manifests.Charts, p)
		files = append(files, &loader.BufferedFile{Name: strings.TrimPrefix(p, root+"/"), Data: data})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	c, err := loader.LoadFiles(files)
	if err != nil {
		t.Fatalf("chart %s: %v", name, err)
	}
	return c
}

// renderChart renders a chart as `helm install --dry-run` does, CRDs included.
func renderChart(c *chart.Chart, namespace string, values map[string]any) (string, error) {
	install := action.NewInstall(&action.Configuration{})
	install.ClientOnly, install.DryRun, install.IncludeCRDs, install.Replace = true, true, true, true
	install.ReleaseName, install.Namespace = c.Name(), namespace
	rel, err := install.Run(c, values)
	if err != nil {
		return "", err
	}
	return rel.Manifest, nil
}

func ensureNamespace(t *testing.T, ns string) {
	t.Helper()
	_, err := kubernetes.NewForConfigOrDie(hubCluster.Config()).CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

func byKind(objs []*unstructured.Unstructured) map[string][]*unstructured.Unstructured {
	out := map[string][]*unstructured.Unstructured{}
	for _, o := range objs {
		out[o.GetKind()] = append(out[o.GetKind()], o)
	}
	return out
}

func names(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.GetName())
	}
	return out
}

// dashboardValues enable the hub chart's dashboard behind a proxy named auth-proxy.
var dashboardValues = map[string]any{"dashboard": map[string]any{"enabled": true, "tlsSecret": "dashboard-tls",
	"proxy": map[string]any{"caSecret": "auth-proxy-ca", "allowedNames": []any{"auth-proxy"}, "groups": []any{"release-managers"}}}}

// dashboardRules are the rules the hub chart grants the dashboard's account.
func dashboardRules(t *testing.T) []rbacv1.PolicyRule {
	t.Helper()
	stream, err := renderChart(loadChart(t, "flotilla-hub"), "flotilla-system", dashboardValues)
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(stream, "\n---") {
		var role rbacv1.ClusterRole
		if err := yaml.Unmarshal([]byte(doc), &role); err == nil && role.Kind == "ClusterRole" && strings.Contains(role.Name, "dashboard") {
			return role.Rules
		}
	}
	t.Fatal("the hub chart grants the dashboard no ClusterRole")
	return nil
}

// The Helm charts render with the Helm SDK and every object they hold is accepted by a real API
// server: the hub's with all CRDs (identical to manifests/crds), its RBAC, admission policies,
// Deployment and webhook Service; the agent's with its bootstrap Secret, which refuses to render
// without the registration values.
func TestHelmChartsInstall(t *testing.T) {
	ctx := context.Background()
	hubChart := loadChart(t, "flotilla-hub")
	stream, err := renderChart(hubChart, "flotilla-chart", map[string]any{
		"image": map[string]any{"tag": "v0.9.1"}, "extraArgs": []any{"--agent-token-ttl=72h"},
		// Where agents on other clusters reach the hub, and the CA they trust for it.
		"agentAPIServer": map[string]any{"url": hubCluster.ExternalHost, "caCert": string(hubCluster.CA())},
	})
	if err != nil {
		t.Fatalf("render the hub chart: %v", err)
	}
	ensureNamespace(t, "flotilla-chart")
	t.Cleanup(func() {
		cs := kubernetes.NewForConfigOrDie(hubCluster.Config())
		_ = cs.RbacV1().ClusterRoleBindings().Delete(context.Background(), "flotilla-hub-flotilla-chart", metav1.DeleteOptions{})
		_ = cs.CoreV1().Namespaces().Delete(context.Background(), "flotilla-chart", metav1.DeleteOptions{})
		for _, binding := range []string{"flotilla-hub-secrets", "flotilla-hub-blue-secrets"} {
			_ = cs.RbacV1().RoleBindings("fleet-default").Delete(context.Background(), binding, metav1.DeleteOptions{})
		}
		// The release pointed the policies at its own namespace's hub record: back to the
		// suite's hub, whose agents renew their tokens under them.
		if err := controlplane.InstallPolicies(context.Background(), hubCluster.Config()); err != nil {
			t.Error(err)
		}
	})
	applied, err := controlplane.Apply(ctx, hubCluster.Config(), []byte(stream))
	if err != nil {
		t.Fatalf("apply the hub chart: %v", err)
	}
	kinds := byKind(applied)
	crds, _ := manifests.CRDs()
	policies, _ := manifests.Policies() // a policy and its binding per file
	if len(kinds["CustomResourceDefinition"]) != len(crds) || len(kinds["ValidatingAdmissionPolicy"]) != len(policies) || len(kinds["ValidatingAdmissionPolicyBinding"]) != len(policies) ||
		len(kinds["ClusterRole"]) != 3 || len(kinds["ClusterRoleBinding"]) != 1 || len(kinds["Deployment"]) != 1 || len(kinds["Service"]) != 2 {
		t.Errorf("the hub chart applied %d CRDs (want %d) and %d policies, %d bindings (want %d), %d roles, %d role bindings, %d deployments, %d services (webhook and metrics)",
			len(kinds["CustomResourceDefinition"]), len(crds), len(kinds["ValidatingAdmissionPolicy"]), len(kinds["ValidatingAdmissionPolicyBinding"]), len(policies),
			len(kinds["ClusterRole"]), len(kinds["ClusterRoleBinding"]), len(kinds["Deployment"]), len(kinds["Service"]))
	}
	// Secrets: none in the hub's ClusterRole; flotilla-hub-secrets bound in each fleet
	// namespace alone. The token lifetime policy reads the release's own hub record.
	if rbs := kinds["RoleBinding"]; len(rbs) != 1 || rbs[0].GetNamespace() != "fleet-default" || rbs[0].GetName() != "flotilla-hub-secrets" {
		t.Errorf("the hub chart applied role bindings %v, want flotilla-hub-secrets in fleet-default", names(rbs))
	} else if role, _, _ := unstructured.NestedString(rbs[0].Object, "roleRef", "name"); role != "flotilla-hub-secrets" {
		t.Errorf("the fleet namespace's binding grants %s", role)
	}
	for _, role := range kinds["ClusterRole"] {
		rules, _, _ := unstructured.NestedSlice(role.Object, "rules")
		for _, r := range rules {
			resources, _, _ := unstructured.NestedStringSlice(r.(map[string]any), "resources")
			if slices.Contains(resources, "secrets") && role.GetName() != "flotilla-hub-secrets" {
				t.Errorf("the ClusterRole %s grants Secrets cluster-wide", role.GetName())
			}
		}
	}
	for _, b := range kinds["ValidatingAdmissionPolicyBinding"] {
		if ns, found, _ := unstructured.NestedString(b.Object, "spec", "paramRef", "namespace"); found && ns != "flotilla-chart" {
			t.Errorf("policy binding %s reads its parameters in %s, want the release's namespace", b.GetName(), ns)
		}
	}
	// The fleet namespace the CLI defaults to, so that the README's token step works as written.
	if ns := names(kinds["Namespace"]); !slices.Contains(ns, "fleet-default") {
		t.Errorf("the hub chart creates namespaces %v, want fleet-default", ns)
	}
	if cms := kinds["ConfigMap"]; len(cms) != 1 {
		t.Errorf("the hub chart applied config maps %v, want the agents' CA", names(cms))
	} else if ca, _, _ := unstructured.NestedString(cms[0].Object, "data", "ca.crt"); ca != string(hubCluster.CA()) {
		t.Errorf("the agents' CA in %s: %q", cms[0].GetName(), ca)
	}
	for _, crd := range crds {
		found := false
		for _, f := range hubChart.CRDObjects() {
			found = found || bytes.HasSuffix(f.File.Data, crd)
		}
		if !found {
			t.Errorf("a CRD of manifests/crds is not in the chart as it is (run go generate ./...): %.80s", crd)
		}
	}
	if d := kinds["Deployment"]; len(d) == 1 {
		containers, _, _ := unstructured.NestedSlice(d[0].Object, "spec", "template", "spec", "containers")
		c := containers[0].(map[string]any)
		args, _, _ := unstructured.NestedStringSlice(c, "args")
		nonRoot, _, _ := unstructured.NestedBool(d[0].Object, "spec", "template", "spec", "securityContext", "runAsNonRoot")
		if c["image"] != "ghcr.io/flotilla-dev/flotilla-hub:v0.9.1" || !slices.Contains(args, "--agent-token-ttl=72h") || !nonRoot ||
			!slices.Contains(args, "--agent-api-server-url="+hubCluster.ExternalHost) || !slices.Contains(args, "--agent-api-server-ca=/etc/flotilla/agent-api-server/ca.crt") {
			t.Errorf("hub container: image %v, args %v, runAsNonRoot %v", c["image"], args, nonRoot)
		}
	}

	// Monitoring with the Prometheus Operator: a ServiceMonitor of the metrics Service and the
	// alert rules, whose expressions name only metrics the hub serves.
	stream, err = renderChart(hubChart, "flotilla-chart", map[string]any{"metrics": map[string]any{
		"serviceMonitor": map[string]any{"enabled": true}, "prometheusRule": map[string]any{"enabled": true, "gitRepoNotReadyFor": "20m"}}})
	if err != nil {
		t.Fatalf("render the hub chart with monitoring: %v", err)
	}
	for _, want := range []string{"kind: ServiceMonitor", "kind: PrometheusRule", "alert: FlotillaGitRepoNotReady", "for: 20m", "flotilla_gitrepo_info{ready=\"false\"}",
		"flotilla_bundle_info{outcome=~\"Failed|RolledBack\"}", "flotilla_clusters{state=\"Offline\"}", "{{ $labels.gitrepo }}"} {
		if !strings.Contains(stream, want) {
			t.Errorf("the monitoring objects lack %q", want)
		}
	}

	// A release of another shard beside it: its own Deployment, account and binding; the
	// cluster-wide objects are the default shard's release's.
	stream, err = renderChart(hubChart, "flotilla-chart", map[string]any{"shard": "blue"})
	if err != nil {
		t.Fatalf("render the hub chart for a shard: %v", err)
	}
	t.Cleanup(func() {
		cs := kubernetes.NewForConfigOrDie(hubCluster.Config())
		_ = cs.RbacV1().ClusterRoleBindings().Delete(context.Background(), "flotilla-hub-blue-flotilla-chart", metav1.DeleteOptions{})
	})
	if applied, err = controlplane.Apply(ctx, hubCluster.Config(), []byte(stream)); err != nil {
		t.Fatalf("apply the hub chart for a shard: %v", err)
	}
	kinds = byKind(applied)
	if len(kinds["ClusterRole"]) != 0 || len(kinds["ValidatingAdmissionPolicy"]) != 0 || len(kinds["Deployment"]) != 1 || kinds["Deployment"][0].GetName() != "flotilla-hub-blue" ||
		len(kinds["ClusterRoleBinding"]) != 1 || kinds["ClusterRoleBinding"][0].GetName() != "flotilla-hub-blue-flotilla-chart" {
		t.Errorf("a shard's release applied %d roles, %d policies, deployments %v, role bindings %v", len(kinds["ClusterRole"]), len(kinds["ValidatingAdmissionPolicy"]),
			names(kinds["Deployment"]), names(kinds["ClusterRoleBinding"]))
	} else {
		containers, _, _ := unstructured.NestedSlice(kinds["Deployment"][0].Object, "spec", "template", "spec", "containers")
		if args, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "args"); !slices.Contains(args, "--shard=blue") {
			t.Errorf("the shard's hub runs with %v, want --shard=blue", args)
		}
	}

	// The dashboard behind its proxy: refused without the proxy's CA and a serving certificate;
	// with them, a Deployment of the hub's image in dashboard mode whose account may
	// impersonate users and groups and do nothing else.
	if _, err := renderChart(hubChart, "flotilla-chart", map[string]any{"dashboard": map[string]any{"enabled": true}}); err == nil || !strings.Contains(err.Error(), "dashboard.proxy.caSecret is required") {
		t.Errorf("the dashboard without its proxy's CA: %v", err)
	}
	if _, err := renderChart(hubChart, "flotilla-chart", map[string]any{"dashboard": map[string]any{"enabled": true, "tlsSecret": "t", "proxy": map[string]any{"caSecret": "c"}}}); err == nil || !strings.Contains(err.Error(), "dashboard.proxy.allowedNames is required") {
		t.Errorf("the dashboard without its proxy's names: %v", err)
	}
	if _, err := renderChart(hubChart, "flotilla-chart", map[string]any{"dashboard": map[string]any{"enabled": true, "tlsSecret": "t",
		"proxy": map[string]any{"caSecret": "c", "allowedNames": []any{"p"}, "groups": []any{"system:masters"}}}}); err == nil || !strings.Contains(err.Error(), "never impersonates") {
		t.Errorf("the dashboard with system:masters among its groups: %v", err)
	}
	stream, err = renderChart(hubChart, "flotilla-chart", dashboardValues)
	if err != nil {
		t.Fatalf("render the hub chart with the dashboard: %v", err)
	}
	t.Cleanup(func() {
		cs := kubernetes.NewForConfigOrDie(hubCluster.Config())
		_ = cs.RbacV1().ClusterRoleBindings().Delete(context.Background(), "flotilla-hub-dashboard-flotilla-chart", metav1.DeleteOptions{})
		_ = cs.RbacV1().ClusterRoles().Delete(context.Background(), "flotilla-hub-dashboard-flotilla-chart", metav1.DeleteOptions{})
	})
	if applied, err = controlplane.Apply(ctx, hubCluster.Config(), []byte(stream)); err != nil {
		t.Fatalf("apply the hub chart with the dashboard: %v", err)
	}
	var dashboardDeployment *unstructured.Unstructured
	for _, d := range byKind(applied)["Deployment"] {
		if d.GetName() == "flotilla-hub-dashboard" {
			dashboardDeployment = d
		}
	}
	if dashboardDeployment == nil {
		t.Fatalf("no dashboard Deployment among %v", names(byKind(applied)["Deployment"]))
	}
	containers, _, _ := unstructured.NestedSlice(dashboardDeployment.Object, "spec", "template", "spec", "containers")
	args, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
	for _, want := range []string{"dashboard", "--proxy-client-ca=/etc/flotilla/dashboard-proxy/ca.crt", "--proxy-allowed-names=auth-proxy", "--proxy-allowed-groups=release-managers", "--namespace=fleet-default",
		"--tls-cert-file=/etc/flotilla/dashboard-tls/tls.crt"} {
		if !slices.Contains(args, want) {
			t.Errorf("the dashboard runs with %v, want %s", args, want)
		}
	}
	account := "system:serviceaccount:flotilla-chart:flotilla-hub-dashboard"
	reviews := kubernetes.NewForConfigOrDie(hubCluster.Config()).AuthorizationV1().SubjectAccessReviews()
	for _, tc := range []struct {
		attrs authorizationv1.ResourceAttributes
		want  bool
	}{
		{authorizationv1.ResourceAttributes{Verb: "impersonate", Resource: "users", Name: "alice"}, true},
		{authorizationv1.ResourceAttributes{Verb: "impersonate", Resource: "groups", Name: "release-managers"}, true},
		{authorizationv1.ResourceAttributes{Verb: "impersonate", Resource: "groups", Name: "system:masters"}, false},
		{authorizationv1.ResourceAttributes{Verb: "impersonate", Resource: "serviceaccounts", Namespace: "flotilla-chart", Name: "flotilla-hub"}, false},
		{authorizationv1.ResourceAttributes{Verb: "list", Group: v1alpha1.GroupVersion.Group, Resource: "bundles", Namespace: "fleet-default"}, false},
		{authorizationv1.ResourceAttributes{Verb: "patch", Group: v1alpha1.GroupVersion.Group, Resource: "approvalrequests", Subresource: "status", Namespace: "fleet-default"}, false},
		{authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: "flotilla-chart"}, false},
	} {
		allowed := func() bool {
			sar, err := reviews.Create(ctx, &authorizationv1.SubjectAccessReview{
				Spec: authorizationv1.SubjectAccessReviewSpec{User: account, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:flotilla-chart"}, ResourceAttributes: &tc.attrs}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return sar.Status.Allowed
		}
		what := fmt.Sprintf("the dashboard's account may %s %s/%s %s", tc.attrs.Verb, tc.attrs.Resource, tc.attrs.Subresource, tc.attrs.Name)
		// The authorizer learns of the chart's bindings from its own watch: what they grant is
		// waited for, and the cases refused come after those (ordered so), once it has them.
		if tc.want {
			eventually(t, what, 30*time.Second, allowed)
		} else if allowed() {
			t.Errorf("%s: true, want false", what)
		}
	}

	agentChart := loadChart(t, "flotilla-agent")
	if _, err := renderChart(agentChart, "flotilla-system", nil); err == nil || !strings.Contains(err.Error(), "registration.server is required") {
		t.Errorf("the agent chart without registration values: %v", err)
	}
	registration := map[string]any{"server": "https://hub.example:6443", "caCert": "-----BEGIN CERTIFICATE-----\n", "token": "t0ken",
		"tokenName": "new-clusters", "namespace": "fleet-default", "clusterName": "prod-eu-1"}
	stream, err = renderChart(agentChart, "agent-chart", map[string]any{"registration": registration, "protectedNamespaces": []any{"payments"}})
	if err != nil {
		t.Fatalf("render the agent chart: %v", err)
	}
	ensureNamespace(t, "agent-chart")
	applied, err = controlplane.Apply(ctx, hubCluster.Config(), []byte(stream))
	if err != nil {
		t.Fatalf("apply the agent chart: %v", err)
	}
	t.Cleanup(func() {
		cs := kubernetes.NewForConfigOrDie(hubCluster.Config())
		_ = cs.RbacV1().ClusterRoleBindings().Delete(context.Background(), "flotilla-agent-agent-chart", metav1.DeleteOptions{})
		_ = cs.CoreV1().Namespaces().Delete(context.Background(), "agent-chart", metav1.DeleteOptions{})
	})
	kinds = byKind(applied)
	if len(kinds["Secret"]) != 1 || len(kinds["Deployment"]) != 1 || len(kinds["ClusterRoleBinding"]) != 1 || len(kinds["ServiceAccount"]) != 1 {
		t.Fatalf("the agent chart applied %v", kinds)
	}
	secret, err := kubernetes.NewForConfigOrDie(hubCluster.Config()).CoreV1().Secrets("agent-chart").Get(ctx, "flotilla-agent-bootstrap", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The keys agent.Bootstrap reads.
	for key, want := range map[string]string{v1alpha1.RegistrationServerKey: "https://hub.example:6443", v1alpha1.RegistrationTokenKey: "t0ken",
		v1alpha1.RegistrationTokenNameKey: "new-clusters", v1alpha1.RegistrationNamespaceKey: "fleet-default", v1alpha1.RegistrationClusterNameKey: "prod-eu-1",
		v1alpha1.RegistrationCAKey: "-----BEGIN CERTIFICATE-----\n"} {
		if got := string(secret.Data[key]); got != want {
			t.Errorf("bootstrap secret %s = %q, want %q", key, got, want)
		}
	}
	containers, _, _ = unstructured.NestedSlice(kinds["Deployment"][0].Object, "spec", "template", "spec", "containers")
	args, _, _ = unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
	if !slices.Contains(args, "--state-namespace=agent-chart") || !slices.Contains(args, "--protected-namespaces=payments") {
		t.Errorf("agent args %v", args)
	}
}

// The hub records its version, agents report theirs, and `flotilla status` lists the clusters
// whose agent is older than the hub (one agent of the fleet runs the previous version).
func TestStatusListsAgentsOlderThanTheHub(t *testing.T) {
	f := startFleet(t)
	ctx := context.Background()
	var view string
	eventually(t, "status lists the older agent", 30*time.Second, func() bool {
		var out strings.Builder
		if err := report.Write(ctx, &out, f.hub, f.ns, ""); err != nil {
			t.Fatal(err)
		}
		view = out.String()
		return strings.Contains(view, "Agents older than the hub ("+hubVersion+"): "+f.ns+"/"+workloads[0].Name+" ("+olderAgentVersion+")")
	})
	for _, w := range workloads[1:] {
		if strings.Contains(view, f.ns+"/"+w.Name) {
			t.Errorf("status lists %s, whose agent runs the hub's version:\n%s", w.Name, view)
		}
	}
	var cm corev1.ConfigMap
	if err := f.hub.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: model.HubVersionConfigMap}, &cm); err != nil || cm.Data["version"] != hubVersion {
		t.Errorf("the hub's recorded version: %v %v", cm.Data, err)
	}
}

// chartHub renders the hub chart with values and returns the options its Deployment runs the
// hub with, parsed by the hub's own flags (hub.BindFlags) from the container's arguments. The
// files the pod mounts (the agents' CA, from the chart's ConfigMap) are written under a
// directory of the test's, where the arguments then name them; the listen addresses are turned
// off, as a test listens on loopback only, and the hub's cache is the test's.
func chartHub(t *testing.T, namespace string, values map[string]any) hub.Options {
	t.Helper()
	stream, err := renderChart(loadChart(t, "flotilla-hub"), namespace, values)
	if err != nil {
		t.Fatalf("render the hub chart: %v", err)
	}
	objs, err := controlplane.Decode([]byte(stream))
	if err != nil {
		t.Fatal(err)
	}
	kinds := byKind(objs)
	if len(kinds["Deployment"]) != 1 {
		t.Fatalf("the hub chart renders deployments %v", names(kinds["Deployment"]))
	}
	pod, _, _ := unstructured.NestedMap(kinds["Deployment"][0].Object, "spec", "template", "spec")
	container := pod["containers"].([]any)[0].(map[string]any)
	args, _, _ := unstructured.NestedStringSlice(container, "args")
	// The volumes the pod mounts from the chart's ConfigMaps, laid out under root.
	root := t.TempDir()
	configMaps := map[string]map[string]string{}
	for _, cm := range kinds["ConfigMap"] {
		data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
		configMaps[cm.GetName()] = data
	}
	volumes := map[string]map[string]string{}
	for _, v := range pod["volumes"].([]any) {
		v := v.(map[string]any)
		if name, _, _ := unstructured.NestedString(v, "configMap", "name"); name != "" {
			volumes[v["name"].(string)] = configMaps[name]
		}
	}
	mounts, _, _ := unstructured.NestedSlice(container, "volumeMounts")
	var mounted []string
	for _, m := range mounts {
		m := m.(map[string]any)
		files, ok := volumes[m["name"].(string)]
		if !ok {
			continue
		}
		dir := filepath.Join(root, m["mountPath"].(string))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		for name, data := range files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		mounted = append(mounted, m["mountPath"].(string))
	}
	for i, a := range args {
		for _, path := range mounted {
			if k, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(v, path+"/") {
				args[i] = k + "=" + filepath.Join(root, v)
			}
		}
	}
	fs := flag.NewFlagSet("flotilla-hub", flag.ContinueOnError)
	flags := hub.BindFlags(fs, func(k string) string { return map[string]string{"POD_NAMESPACE": namespace}[k] })
	if err := fs.Parse(args); err != nil {
		t.Fatalf("the hub's flags refuse the chart's arguments %v: %v", args, err)
	}
	opts, err := flags.Options()
	if err != nil {
		t.Fatalf("the chart's arguments %v: %v", args, err)
	}
	opts.WebhookAddr, opts.MetricsAddr, opts.HealthAddr, opts.CacheDir = "", "0", "", t.TempDir()
	return opts
}
