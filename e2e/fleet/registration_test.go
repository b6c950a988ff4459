package fleet

import (
	"bytes"
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/agent"
	"github.com/flotilla-dev/flotilla/agent/kube"
	"github.com/flotilla-dev/flotilla/e2e/controlplane"
	"github.com/flotilla-dev/flotilla/e2e/gitserver"
	"github.com/flotilla-dev/flotilla/hub"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/clusters"
	"github.com/flotilla-dev/flotilla/hub/operate"
	"github.com/flotilla-dev/flotilla/manifests"
)

// Registration: a ClusterRegistrationToken yields what an agent needs; the agent registers; the
// hub creates the Cluster, its namespace and credentials sealed to the agent's key; the agent
// then deploys with them. The hub runs as the chart installs it, told where agents reach it
// (agentAPIServer), and connected itself at an address no agent can use.
func TestAgentRegistersWithAToken(t *testing.T) {
	up := gitserver.New(t)
	up.Commit("main", map[string]string{"web/fleet.yaml": "defaultNamespace: registered\n", "web/deployment.yaml": webManifest("example.invalid/web:1")})
	srv := up.ServeHTTP("", "")
	f := startFleetWith(t, func(f *fleetEnv) {
		opts := chartHub(t, f.ns, map[string]any{"agentAPIServer": map[string]any{"url": hubCluster.ExternalHost, "caCert": string(hubCluster.CA())}})
		if opts.Server != hubCluster.ExternalHost || !bytes.Equal(opts.CACert, hubCluster.CA()) {
			t.Fatalf("the chart runs the hub with agent address %q and CA %q", opts.Server, opts.CACert)
		}
		own := hubOptions(t)
		opts.Config, opts.StatusDelay, opts.Version = own.Config, time.Second, hubVersion
		f.start("hub", func(ctx context.Context) error { return hub.Run(ctx, opts) })
	})
	ctx := context.Background()
	tok := &v1alpha1.ClusterRegistrationToken{ObjectMeta: metav1.ObjectMeta{Name: "new-clusters", Namespace: f.ns}}
	if err := f.hub.Create(ctx, tok); err != nil {
		t.Fatal(err)
	}
	var secret corev1.Secret
	eventually(t, "the token's secret", 30*time.Second, func() bool {
		return f.hub.Get(ctx, types.NamespacedName{Namespace: f.ns, Name: tok.Name}, tok) == nil && tok.Status.SecretName != "" &&
			f.hub.Get(ctx, types.NamespacedName{Namespace: f.ns, Name: tok.Status.SecretName}, &secret) == nil
	})
	// The token gives agents the address they reach the hub at, not the hub's own, and the CA
	// the chart was given.
	if got := string(secret.Data[clusters.RegistrationServer]); got != hubCluster.ExternalHost || got == hubCluster.Host {
		t.Errorf("the token gives agents %q, want the hub's external address %s", got, hubCluster.ExternalHost)
	}
	if got := secret.Data[clusters.RegistrationCA]; !bytes.Equal(got, hubCluster.CA()) {
		t.Errorf("the token gives agents the CA %q, want the hub cluster's", got)
	}
	// What the registration token alone can do: not read secrets.
	regCfg := &rest.Config{Host: string(secret.Data[clusters.RegistrationServer]), BearerToken: string(secret.Data[clusters.RegistrationToken]),
		TLSClientConfig: rest.TLSClientConfig{CAData: secret.Data[clusters.RegistrationCA]}}
	if _, err := kubernetes.NewForConfigOrDie(regCfg).CoreV1().Secrets(f.ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the registration token lists secrets: %v", err)
	}
	// `flotilla agent install` prints the cluster's manifest; applied there, the agent finds its
	// bootstrap Secret, registers, and keeps the credentials it is granted.
	w := workloads[0]
	manifest, err := operate.AgentManifest(ctx, f.hub, operate.AgentInstall{Namespace: f.ns, Token: "new-clusters", ClusterName: "joined", ClusterLabels: map[string]string{"tier": "joined"}})
	if err != nil {
		t.Fatal(err)
	}
	applied, err := controlplane.Apply(ctx, w.Config(), manifest)
	if err != nil {
		t.Fatalf("apply the agent manifest: %v", err)
	}
	local := kubernetes.NewForConfigOrDie(w.Config())
	t.Cleanup(func() {
		_ = local.CoreV1().Namespaces().Delete(context.Background(), "flotilla-system", metav1.DeleteOptions{})
		_ = local.RbacV1().ClusterRoleBindings().Delete(context.Background(), "flotilla-agent", metav1.DeleteOptions{})
	})
	kinds := map[string]bool{}
	for _, o := range applied {
		kinds[o.GetKind()] = true
	}
	for _, k := range []string{"Namespace", "ServiceAccount", "ClusterRoleBinding", "Deployment", "Secret"} {
		if !kinds[k] {
			t.Errorf("the agent manifest has no %s", k)
		}
	}
	boot := agent.BootstrapOptions{Namespace: "flotilla-system", BootstrapSecret: "flotilla-agent-bootstrap"}
	agentLocal, err := kube.NewLocal(w.Config())
	if err != nil {
		t.Fatal(err)
	}
	reg, err := agent.Bootstrap(ctx, agentLocal, boot)
	if err != nil {
		t.Fatalf("bootstrap: %v", err)
	}
	// The bootstrap Secret, whose registration token would register any cluster until it
	// expires, is gone once the agent keeps credentials of its own.
	if _, err := local.CoreV1().Secrets("flotilla-system").Get(ctx, "flotilla-agent-bootstrap", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the bootstrap secret is still on the cluster: %v", err)
	}
	// A restart uses the kept credentials: no second registration.
	again, err := agent.Bootstrap(ctx, agentLocal, boot)
	if err != nil || again.Namespace != reg.Namespace || again.HubConfig.BearerToken != reg.HubConfig.BearerToken {
		t.Errorf("restart: %+v %v, want the kept credentials of %+v", again, err, reg)
	}
	// It registered, and runs, through the address the token gave it: the hub's own address is
	// valid only under the in-cluster name, which no agent is given.
	if reg.HubConfig.Host != hubCluster.ExternalHost || reg.HubConfig.ServerName != "" || hubCluster.ExternalConnections() == 0 {
		t.Errorf("the agent reaches the hub at %s (server name %q, %d connections through the external address), want %s",
			reg.HubConfig.Host, reg.HubConfig.ServerName, hubCluster.ExternalConnections(), hubCluster.ExternalHost)
	}
	var regs v1alpha1.ClusterRegistrationList
	if err := f.hub.List(ctx, &regs, client.InNamespace(f.ns)); err != nil || len(regs.Items) != 1 {
		t.Errorf("registrations: %d %v, want exactly 1", len(regs.Items), err)
	}
	var cl v1alpha1.Cluster
	if err := f.hub.Get(ctx, types.NamespacedName{Namespace: f.ns, Name: "joined"}, &cl); err != nil || cl.Labels["tier"] != "joined" || cl.Status.Namespace != reg.Namespace {
		t.Fatalf("cluster: %+v %v", cl, err)
	}
	opts := agent.RunOptions{HubConfig: reg.HubConfig, LocalConfig: w.Config(), Namespace: reg.Namespace, ClusterName: reg.ClusterName, ClusterNamespace: reg.ClusterNamespace,
		StateNamespace: "flotilla-joined-" + f.ns, HeartbeatInterval: 2 * time.Second, ResyncInterval: 2 * time.Second}
	f.start("registered agent", func(ctx context.Context) error { return agent.Run(ctx, opts) })
	createRepo(t, f, srv.URL+"/repo.git", map[string]string{"tier": "joined"})
	eventually(t, "the registered cluster runs the workload", 90*time.Second, func() bool {
		return deploymentAvailable(t, w, "registered", "web", "example.invalid/web:1")
	})
	// With the default --events=warnings a healthy rollout writes no Event per cluster: the
	// agent reported the deployment Ready, with which it would have told RevisionApplied and
	// RevisionReady.
	var bds v1alpha1.BundleDeploymentList
	eventually(t, "the registered cluster reports its deployment Ready", 30*time.Second, func() bool {
		err := f.hub.List(ctx, &bds, client.InNamespace(reg.Namespace))
		return err == nil && len(bds.Items) == 1 && bds.Items[0].Status.Ready
	})
	if told := eventsOf(t, f, reg.Namespace, agent.EventsController); told.Count("revision 1") != 0 {
		t.Errorf("a healthy rollout wrote Events in the cluster's namespace with the default level:\n%s", told)
	}
	// The agent's credentials reach its own namespace and nothing else.
	if _, err := kubernetes.NewForConfigOrDie(reg.HubConfig).CoreV1().Secrets(reg.Namespace).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("registered agent lists secrets: %v", err)
	}
}

// manifests/hub is what `kubectl apply -k manifests/hub` installs: the API server accepts every
// object, and the hub's ServiceAccount gets the generated ClusterRole.
func TestHubInstallManifestApplies(t *testing.T) {
	stream, err := manifests.Build("hub")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	applied, err := controlplane.Apply(ctx, hubCluster.Config(), stream)
	if err != nil {
		t.Fatal(err)
	}
	crds, _ := manifests.CRDs()
	count := map[string]int{}
	for _, o := range applied {
		count[o.GetKind()]++
	}
	if count["CustomResourceDefinition"] != len(crds) || count["Deployment"] != 1 || count["Service"] != 1 || count["ClusterRole"] != 3 || count["ClusterRoleBinding"] != 1 || count["RoleBinding"] != 1 {
		t.Errorf("applied %v; want all %d CRDs, the hub's Deployment, Service and RBAC (its role, Secrets in fleet-default alone, the metrics reader)", count, len(crds))
	}
	if rb, err := kubernetes.NewForConfigOrDie(hubCluster.Config()).RbacV1().RoleBindings("fleet-default").Get(ctx, "flotilla-hub-secrets", metav1.GetOptions{}); err != nil ||
		rb.RoleRef.Name != "flotilla-hub-secrets" || len(rb.Subjects) != 1 || rb.Subjects[0].Namespace != "flotilla-system" {
		t.Errorf("the hub's Secrets grant in fleet-default: %+v %v", rb, err)
	}
	binding, err := kubernetes.NewForConfigOrDie(hubCluster.Config()).RbacV1().ClusterRoleBindings().Get(ctx, "flotilla-hub", metav1.GetOptions{})
	if err != nil || binding.RoleRef.Name != "flotilla-hub" || len(binding.Subjects) != 1 || binding.Subjects[0].Namespace != "flotilla-system" || binding.Subjects[0].Name != "flotilla-hub" {
		t.Errorf("hub binding: %+v %v", binding, err)
	}
}
