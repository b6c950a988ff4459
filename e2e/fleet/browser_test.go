package fleet

import (
	"context"
	"fmt"
	"net"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/flotilla-dev/flotilla/e2e/browser"
	"github.com/flotilla-dev/flotilla/hub"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/dashboard"
)

// serveDashboard runs `flotilla dashboard`'s server as cfg's user on a loopback port until the
// test ends, and returns the login link it prints, opening on the fleet namespace.
func serveDashboard(t *testing.T, cfg *rest.Config, ns string) string {
	t.Helper()
	return serveDashboardOf(t, cfg, ns, hubVersion)
}

// serveDashboardOf is serveDashboard with a dashboard of another version than the hub's.
func serveDashboardOf(t *testing.T, cfg *rest.Config, ns, version string) string {
	t.Helper()
	scheme, err := hub.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := dashboard.New(ctx, dashboard.Options{Config: cfg, Scheme: scheme, Namespace: ns, Version: version})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln, nil) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("dashboard: %v", err)
		}
	})
	return "http://" + ln.Addr().String() + srv.LoginPath() + "&namespace=" + ns
}

// page is one headless Chromium tab (package browser).
type page = browser.Page

func openBrowser(t *testing.T) *page { return browser.Open(t) }

// count is the JavaScript for the count of one chip state in a lane.
func count(lane, chip string) string {
	return fmt.Sprintf(`(document.querySelector('[data-lane=%q] [data-count=%q]') || {}).textContent`, lane, chip)
}

// personConfig is a hub connection as a person of its own: a ServiceAccount of the fleet
// namespace with rules there and clusterRules everywhere.
func personConfig(t *testing.T, f *fleetEnv, name string, rules, clusterRules []rbacv1.PolicyRule) (*rest.Config, string) {
	t.Helper()
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(hubCluster.Config())
	sa, err := cs.CoreV1().ServiceAccounts(f.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: f.ns}}
	if _, err := cs.RbacV1().Roles(f.ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().RoleBindings(f.ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name}, Subjects: subject}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if len(clusterRules) > 0 {
		global := f.ns + "-" + name
		if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: global}, Rules: clusterRules}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: global},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: global}, Subjects: subject}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cs.RbacV1().ClusterRoleBindings().Delete(context.Background(), global, metav1.DeleteOptions{})
			_ = cs.RbacV1().ClusterRoles().Delete(context.Background(), global, metav1.DeleteOptions{})
		})
	}
	token, err := cs.CoreV1().ServiceAccounts(f.ns).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.AnonymousClientConfig(hubCluster.Config())
	cfg.BearerToken = token.Status.Token
	rulesHeld(t, cfg, f.ns, rules)
	rulesHeld(t, cfg, "", clusterRules)
	return cfg, "system:serviceaccount:" + f.ns + ":" + name
}

// readOnly are the rules of a person who may watch the fleet and change nothing.
var (
	readFleet = []rbacv1.PolicyRule{
		{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"*"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"get", "list", "watch"}},
	}
	readDeployments = []rbacv1.PolicyRule{{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"bundledeployments"}, Verbs: []string{"get", "list", "watch"}}}
)
