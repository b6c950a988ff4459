package controlplane_test

import (
	"context"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/flotilla-dev/flotilla/e2e/controlplane"
)

// A subject's Role and binding created, WaitRulesHeld returns once the authorizer grants every
// verb of it, and the subject's request goes through; a rule nobody bound keeps it waiting
// until its context ends, with the access it lacks named.
func TestWaitRulesHeldWaitsForTheAuthorizer(t *testing.T) {
	ctx := context.Background()
	cs := clientset(t)
	rules := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list"}},
		{APIGroups: []string{"apps"}, Resources: []string{"deployments/scale"}, ResourceNames: []string{"web"}, Verbs: []string{"update"}},
	}
	if _, err := cs.RbacV1().Roles("default").Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "waiter"}, Rules: rules}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().RoleBindings("default").Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "waiter"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "waiter"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "waiter"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.RbacV1().RoleBindings("default").Delete(context.Background(), "waiter", metav1.DeleteOptions{})
		_ = cs.RbacV1().Roles("default").Delete(context.Background(), "waiter", metav1.DeleteOptions{})
	})
	waiter := rest.CopyConfig(workload.Config())
	waiter.Impersonate = rest.ImpersonationConfig{UserName: "waiter"}

	held, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := controlplane.WaitRulesHeld(held, waiter, "default", rules); err != nil {
		t.Fatal(err)
	}
	if _, err := kubernetes.NewForConfigOrDie(waiter).CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("the rules are held, the subject's list: %v", err)
	}

	unbound, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	err := controlplane.WaitRulesHeld(unbound, waiter, "kube-system", rules[:1])
	if err == nil || !strings.Contains(err.Error(), `get configmaps in namespace "kube-system"`) {
		t.Errorf("a rule not bound there: %v, want the access it lacks named", err)
	}
}
