package fleet

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/flotilla-dev/flotilla/agent"
	"github.com/flotilla-dev/flotilla/e2e/gitserver"
	"github.com/flotilla-dev/flotilla/hub"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// Registration: a ClusterRegistrationToken yields what an agent needs; the agent registers; the
// hub creates the Cluster, its namespace and credentials sealed to the agent's key; the agent
// then deploys with them.
func TestAgentRegistersWithAToken(t *testing.T) {
	up := gitserver.New(t)
	up.Commit("main", map[string]string{"web/fleet.yaml": "defaultNamespace: registered\n", "web/deployment.yaml": webManifest("example.invalid/web:1")})
	srv := up.ServeHTTP("", "")
	f := startFleet(t)
	ctx := context.Background()
	tok := &v1alpha1.ClusterRegistrationToken{ObjectMeta: metav1.ObjectMeta{Name: "new-clusters", Namespace: f.ns}}
	if err := f.hub.Create(ctx, tok); err != nil {
		t.Fatal(err)
	}
	var secret corev1.Secret
	eventually(t, "the token's secret", 30*time.Second, func() bool {
		return f.hub.Get(ctx, types.NamespacedName{Namespace: f.ns, Name: "new-clusters-registration"}, &secret) == nil
	})
	// What the registration token alone can do: not read secrets.
	regCfg := &rest.Config{Host: string(secret.Data[hub.RegistrationServer]), BearerToken: string(secret.Data[hub.RegistrationToken]),
		TLSClientConfig: rest.TLSClientConfig{CAData: secret.Data[hub.RegistrationCA]}}
	if _, err := kubernetes.NewForConfigOrDie(regCfg).CoreV1().Secrets(f.ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the registration token lists secrets: %v", err)
	}
	reg, err := agent.Register(ctx, agent.RegisterOptions{Server: string(secret.Data[hub.RegistrationServer]), CA: secret.Data[hub.RegistrationCA],
		Token: string(secret.Data[hub.RegistrationToken]), Namespace: string(secret.Data[hub.RegistrationNamespace]),
		ClientID: "kube-system-uid-0001", ClusterName: "joined", ClusterLabels: map[string]string{"tier": "joined"}})
	if err != nil {
		t.Fatalf("register: %v", err)
	}
	var cl v1alpha1.Cluster
	if err := f.hub.Get(ctx, types.NamespacedName{Namespace: f.ns, Name: "joined"}, &cl); err != nil || cl.Labels["tier"] != "joined" || cl.Status.Namespace != reg.Namespace {
		t.Fatalf("cluster: %+v %v", cl, err)
	}
	w := workloads[0]
	opts := agent.RunOptions{HubConfig: reg.HubConfig, LocalConfig: w.Config(), Namespace: reg.Namespace, ClusterName: reg.ClusterName, ClusterNamespace: reg.ClusterNamespace,
		StateNamespace: "flotilla-joined-" + f.ns, HeartbeatInterval: 2 * time.Second, ResyncInterval: 2 * time.Second}
	f.start("registered agent", func(ctx context.Context) error { return agent.Run(ctx, opts) })
	createRepo(t, f, srv.URL+"/repo.git", map[string]string{"tier": "joined"})
	eventually(t, "the registered cluster runs the workload", 90*time.Second, func() bool {
		return deploymentAvailable(t, w, "registered", "web", "example.invalid/web:1")
	})
	// The agent's credentials reach its own namespace and nothing else.
	if _, err := kubernetes.NewForConfigOrDie(reg.HubConfig).CoreV1().Secrets(reg.Namespace).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("registered agent lists secrets: %v", err)
	}
}
