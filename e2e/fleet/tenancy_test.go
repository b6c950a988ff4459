package fleet

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/agent"
	"github.com/flotilla-dev/flotilla/e2e/controlplane"
	"github.com/flotilla-dev/flotilla/e2e/gitserver"
	"github.com/flotilla-dev/flotilla/hub/access"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/model"
)

// runAgentUntilItStops runs a workload cluster's agent with opts and returns a channel with
// the error it stops with (the fleet's own agent of that cluster is stopped first).
func (f *fleetEnv) runAgentUntilItStops(name string, opts agent.RunOptions) <-chan error {
	f.stop("agent " + name)
	stopped := make(chan error, 1)
	f.start("agent "+name, func(ctx context.Context) error {
		stopped <- agent.Run(ctx, opts)
		return nil
	})
	return stopped
}

// waitHeartbeat waits until a cluster's agent renews its Lease after now (it runs and is
// connected) and returns the Cluster.
func (f *fleetEnv) waitHeartbeat(cluster string) *v1alpha1.Cluster {
	f.t.Helper()
	f.waitRenewal(cluster, time.Now())
	var cl v1alpha1.Cluster
	if err := f.hub.Get(context.Background(), types.NamespacedName{Namespace: f.ns, Name: cluster}, &cl); err != nil {
		f.t.Fatal(err)
	}
	return &cl
}

// waitRenewal waits until a cluster's agent renews its Lease after since.
func (f *fleetEnv) waitRenewal(cluster string, since time.Time) {
	f.t.Helper()
	eventually(f.t, "a heartbeat of "+cluster, 30*time.Second, func() bool {
		var lease coordinationv1.Lease
		err := f.hub.Get(context.Background(), types.NamespacedName{Namespace: f.clusterNamespaces[cluster], Name: v1alpha1.AgentLeaseName}, &lease)
		return err == nil && lease.Spec.RenewTime != nil && lease.Spec.RenewTime.After(since)
	})
}

func waitStopped(t *testing.T, stopped <-chan error, within time.Duration) error {
	t.Helper()
	select {
	case err := <-stopped:
		return err
	case <-time.After(within):
		t.Fatalf("the agent still runs after %s", within)
		return nil
	}
}

// A deleted Cluster's agent loses its access at once: its identity, Roles and namespace are
// gone, its token is refused, and it stops saying it was removed. Removing a cluster from the
// fleet is not an uninstall: its workloads stay, and every other cluster keeps its own.
func TestDeletedClusterIsRevokedAndKeepsItsWorkloads(t *testing.T) {
	_, f := deployWeb(t, "defaultNamespace: revoked\n")
	ctx := context.Background()
	gone := workloads[2]
	clusterNS := f.clusterNamespaces[gone.Name]
	stopped := f.runAgentUntilItStops(gone.Name, f.agentOptions(gone))
	cl := f.waitHeartbeat(gone.Name)
	if err := f.hub.Delete(ctx, cl); err != nil {
		t.Fatal(err)
	}
	if err := waitStopped(t, stopped, 30*time.Second); !errors.Is(err, agent.ErrRemoved) {
		t.Errorf("the removed cluster's agent stopped with %v, want ErrRemoved", err)
	}
	eventually(t, "the Cluster is gone", 30*time.Second, func() bool {
		return apierrors.IsNotFound(f.hub.Get(ctx, types.NamespacedName{Namespace: f.ns, Name: gone.Name}, cl))
	})
	if err := f.hub.Get(ctx, types.NamespacedName{Namespace: clusterNS, Name: access.AgentServiceAccount}, &corev1.ServiceAccount{}); !apierrors.IsNotFound(err) {
		t.Errorf("the agent's identity remains: %v", err)
	}
	var roles rbacv1.RoleList
	if err := f.hub.List(ctx, &roles, client.HasLabels{model.LabelAgentOf}); err != nil {
		t.Fatal(err)
	}
	for _, r := range roles.Items {
		if r.Namespace == clusterNS || r.Namespace == f.ns && r.Name == "flotilla-agent-"+gone.Name {
			t.Errorf("role %s/%s of the removed cluster remains", r.Namespace, r.Name)
		}
	}
	var ns corev1.Namespace
	if err := f.hub.Get(ctx, types.NamespacedName{Name: clusterNS}, &ns); err == nil && ns.DeletionTimestamp.IsZero() {
		t.Errorf("namespace %s of the removed cluster is not being deleted", clusterNS)
	}
	var left v1alpha1.BundleDeploymentList
	if err := f.hub.List(ctx, &left, client.InNamespace(clusterNS)); err != nil || len(left.Items) != 0 {
		t.Errorf("deployments of the removed cluster remain: %d %v", len(left.Items), err)
	}
	eventually(t, "the removed agent's token is refused", 30*time.Second, func() bool {
		_, err := kubernetes.NewForConfigOrDie(f.agentConfigs[gone.Name]).CoreV1().ServiceAccounts(clusterNS).Get(ctx, access.AgentServiceAccount, metav1.GetOptions{})
		return apierrors.IsUnauthorized(err)
	})
	if d, err := kubernetes.NewForConfigOrDie(gone.Config()).AppsV1().Deployments("revoked").Get(ctx, "web", metav1.GetOptions{}); err != nil || !d.DeletionTimestamp.IsZero() {
		t.Errorf("removing the cluster from the fleet uninstalled its workload: %v", err)
	}
	if !availableEverywhere(t, "revoked", "web", "example.invalid/web:1", workloads[:2]...) {
		t.Error("another cluster lost its workload")
	}
}

// An agent uninstalls a deployment that leaves the hub only while its cluster is a member of the
// fleet: deployments that go with a Cluster being deleted (here held by another finalizer, the
// hub stopped, so the agent's access lasts) leave the workload in place, and the agent stops
// with ErrRemoved.
func TestAgentDoesNotUninstallForAClusterBeingRemoved(t *testing.T) {
	_, f := deployWeb(t, "defaultNamespace: leaving\n")
	ctx := context.Background()
	w := workloads[1]
	f.stop("hub")
	stopped := f.runAgentUntilItStops(w.Name, f.agentOptions(w))
	cl := f.waitHeartbeat(w.Name)
	const hold = "test.flotilla.dev/hold"
	if err := f.hub.Patch(ctx, cl, client.RawPatch(types.JSONPatchType, []byte(`[{"op":"add","path":"/metadata/finalizers/-","value":"`+hold+`"}]`))); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The hub's finalizer and this one go; the hub is not running to revoke anything.
		_ = f.hub.Patch(context.Background(), cl, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
	})
	if err := f.hub.Delete(ctx, cl); err != nil {
		t.Fatal(err)
	}
	bd := deploymentOn(t, f, w.Name)
	if err := f.hub.Delete(ctx, &bd); err != nil {
		t.Fatal(err)
	}
	if err := waitStopped(t, stopped, 30*time.Second); !errors.Is(err, agent.ErrRemoved) {
		t.Errorf("the agent of a cluster being deleted stopped with %v, want ErrRemoved", err)
	}
	if d, err := kubernetes.NewForConfigOrDie(w.Config()).AppsV1().Deployments("leaving").Get(ctx, "web", metav1.GetOptions{}); err != nil || !d.DeletionTimestamp.IsZero() {
		t.Errorf("the agent uninstalled the workload of a cluster being removed: %v", err)
	}
	if _, err := kubernetes.NewForConfigOrDie(w.Config()).CoreV1().ConfigMaps("flotilla-"+f.ns).Get(ctx, "inventory-"+bd.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("the inventory of the kept workload is gone: %v", err)
	}
}

// selfSubject is who a hub token authenticates as.
func selfSubject(t *testing.T, token string) string {
	t.Helper()
	cfg := rest.AnonymousClientConfig(hubCluster.Config())
	cfg.BearerToken = token
	review, err := kubernetes.NewForConfigOrDie(cfg).AuthenticationV1().SelfSubjectReviews().Create(context.Background(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return "error: " + err.Error()
	}
	return review.Status.UserInfo.Username
}

// An agent renews its hub token itself, with its own identity, and keeps working on the new
// one without a gap; an agent whose token expired stops and says so, touching nothing.
func TestAgentRenewsItsCredentialsAndStopsOnExpiredOnes(t *testing.T) {
	_, f := deployWeb(t, "defaultNamespace: renewed\n")
	w := workloads[0]
	kept := make(chan agent.Credentials, 8)
	opts := f.agentOptions(w)
	opts.RenewBefore, opts.TokenLifetime = 2*time.Hour, 3*time.Hour // the 1h token renews at once, the renewed one not again
	opts.OnCredentials = func(_ context.Context, c agent.Credentials) error { kept <- c; return nil }
	stopped := f.runAgentUntilItStops(w.Name, opts)
	var renewed agent.Credentials
	select {
	case renewed = <-kept:
	case err := <-stopped:
		t.Fatalf("the agent stopped: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the agent did not renew its credentials")
	}
	identity := "system:serviceaccount:" + f.clusterNamespaces[w.Name] + ":" + access.AgentServiceAccount
	if renewed.Token == f.agentConfigs[w.Name].BearerToken || renewed.Namespace != f.clusterNamespaces[w.Name] || selfSubject(t, renewed.Token) != identity {
		t.Fatalf("renewed credentials: namespace %q, same token %v, identity %q; want a new token of %s", renewed.Namespace, renewed.Token == f.agentConfigs[w.Name].BearerToken, selfSubject(t, renewed.Token), identity)
	}
	f.waitRenewal(w.Name, time.Now()) // the agent heartbeats with the renewed token
	select {
	case c := <-kept:
		t.Errorf("the renewed token (3h, renewed 2h before expiry) was renewed again at once: %q", c.Namespace)
	default:
	}

	// A token that expired (the agent was stopped too long): refused by the hub, and the
	// agent stops with ErrCredentialsExpired rather than retrying forever.
	claims, _ := base64.RawURLEncoding.DecodeString(strings.Split(f.agentConfigs[w.Name].BearerToken, ".")[1])
	expired := strings.Replace(string(claims), `"exp":`, `"exp":1,"was":`, 1)
	forged := strings.Split(f.agentConfigs[w.Name].BearerToken, ".")
	forged[1] = base64.RawURLEncoding.EncodeToString([]byte(expired))
	old := f.agentOptions(w)
	old.HubConfig = rest.CopyConfig(old.HubConfig)
	old.HubConfig.BearerToken = strings.Join(forged, ".")
	f.stop("agent " + w.Name)
	if err := waitStopped(t, f.runAgentUntilItStops(w.Name, old), 30*time.Second); !errors.Is(err, agent.ErrCredentialsExpired) {
		t.Errorf("an agent with an expired token stopped with %v, want ErrCredentialsExpired", err)
	}
	if !deploymentAvailable(t, w, "renewed", "web", "example.invalid/web:1") {
		t.Error("the workload changed")
	}
}

// Tokens are the hub's to give, on the API server (manifests/policies): an agent asking for a
// longer token than the hub issues is refused and renews with a shorter one, never longer than
// the hub's recorded lifetime; the hub's own identity gets tokens of agents and nothing else,
// so a hub that is tricked or taken cannot become another ServiceAccount. Nothing refused was
// issued.
func TestTokensAreTheHubsToGive(t *testing.T) {
	_, f := deployWeb(t, "defaultNamespace: tokens\n")
	w := workloads[0]
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(hubCluster.Config())
	record, err := cs.CoreV1().ConfigMaps(controlplane.HubNamespace).Get(ctx, v1alpha1.HubRecordConfigMap, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	limit, err := strconv.ParseInt(record.Data[v1alpha1.HubRecordAgentTokenSeconds], 10, 64)
	if err != nil || limit <= 0 {
		t.Fatalf("the hub's record holds no agent token lifetime: %v (%v)", record.Data, err)
	}

	// Asked directly, as the agent, for a second more than the hub gives: refused.
	agentHub := kubernetes.NewForConfigOrDie(f.agentConfigs[w.Name])
	longer := limit + 1
	tr, err := agentHub.CoreV1().ServiceAccounts(f.clusterNamespaces[w.Name]).CreateToken(ctx, v1alpha1.AgentServiceAccountName,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &longer}}, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "as the hub issues them") || (tr != nil && tr.Status.Token != "") {
		t.Fatalf("an agent asking for a %ds token: %v, want it refused as Invalid and no token", longer, err)
	}

	// The agent, told to ask for thirty days, renews anyway, within the hub's lifetime.
	kept := make(chan agent.Credentials, 8)
	opts := f.agentOptions(w)
	opts.RenewBefore, opts.TokenLifetime = 60*24*time.Hour, 30*24*time.Hour
	opts.OnCredentials = func(_ context.Context, c agent.Credentials) error { kept <- c; return nil }
	stopped := f.runAgentUntilItStops(w.Name, opts)
	select {
	case renewed := <-kept:
		claims, _ := base64.RawURLEncoding.DecodeString(strings.Split(renewed.Token, ".")[1])
		var times struct{ Iat, Exp int64 }
		if err := json.Unmarshal(claims, &times); err != nil || times.Exp-times.Iat > limit || times.Exp <= times.Iat {
			t.Errorf("the renewed token lives %ds (%v); want at most the hub's %ds", times.Exp-times.Iat, err, limit)
		}
	case err := <-stopped:
		t.Fatalf("the agent stopped: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the agent did not renew its credentials")
	}

	// The hub's identity asks for a token of another account of a fleet namespace (one a
	// tenant's automation might run as): refused.
	if _, err := cs.CoreV1().ServiceAccounts(f.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "deployer"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	asHub := kubernetes.NewForConfigOrDie(asTheHub(hubCluster.Config()))
	tr, err = asHub.CoreV1().ServiceAccounts(f.ns).CreateToken(ctx, "deployer", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "the hub issues tokens for agents") || (tr != nil && tr.Status.Token != "") {
		t.Errorf("the hub asking for a token of %s/deployer: %v, want it refused and no token", f.ns, err)
	}
	if tr, err := asHub.CoreV1().ServiceAccounts(f.clusterNamespaces[w.Name]).CreateToken(ctx, v1alpha1.AgentServiceAccountName, &authenticationv1.TokenRequest{}, metav1.CreateOptions{}); err != nil || selfSubject(t, tr.Status.Token) != "system:serviceaccount:"+f.clusterNamespaces[w.Name]+":"+v1alpha1.AgentServiceAccountName {
		t.Errorf("the hub could not issue a token of the agent it serves: %v", err)
	}
}

// The hub reads Secrets only in fleet namespaces (manifests/rbac/secrets.yaml): a GitRepo in a
// namespace the install did not open, naming its git credentials, is told the hub may not read
// them, fetches nothing and shows nothing of the Secret; once the namespace is opened as a
// fleet namespace, the same GitRepo syncs.
func TestHubReadsSecretsOnlyInFleetNamespaces(t *testing.T) {
	f := startFleet(t)
	ctx := context.Background()
	const password = "outside-namespace-password-7f3a"
	up := gitserver.New(t)
	up.Commit("main", map[string]string{"web/fleet.yaml": "defaultNamespace: outside\n", "web/deployment.yaml": webManifest("example.invalid/web:1")})
	srv := up.ServeHTTP("git", password)
	outside := f.ns + "-outside"
	cs := kubernetes.NewForConfigOrDie(hubCluster.Config())
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: outside}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(context.Background(), outside, metav1.DeleteOptions{}) })
	if _, err := cs.CoreV1().Secrets(outside).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds"},
		StringData: map[string]string{"username": "git", "password": password}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	repo := &v1alpha1.GitRepo{ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: outside}, Spec: v1alpha1.GitRepoSpec{
		Repo: srv.URL + "/repo.git", PollingInterval: &metav1.Duration{Duration: time.Second}, SecretRef: &v1alpha1.LocalObjectReference{Name: "creds"},
		Targets: []v1alpha1.Target{{ClusterMatch: v1alpha1.ClusterMatch{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}}}},
	}}
	if err := f.hub.Create(ctx, repo); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(repo)
	var cond *metav1.Condition
	eventually(t, "the GitRepo outside the fleet namespaces says its Secret is not the hub's to read", 60*time.Second, func() bool {
		if err := f.hub.Get(ctx, key, repo); err != nil {
			return false
		}
		cond = meta.FindStatusCondition(repo.Status.Conditions, v1alpha1.ReadyCondition)
		return cond != nil && cond.Status == metav1.ConditionFalse && strings.Contains(cond.Message, "forbidden")
	}, func() string { return fmt.Sprintf("status: %+v", repo.Status) })
	var bundles v1alpha1.BundleList
	if err := f.hub.List(ctx, &bundles, client.InNamespace(outside)); err != nil || len(bundles.Items) > 0 || repo.Status.Commit != "" {
		t.Errorf("a GitRepo whose credentials the hub may not read fetched commit %q and made %d bundles (%v)", repo.Status.Commit, len(bundles.Items), err)
	}
	if raw, _ := json.Marshal(repo.Status); strings.Contains(string(raw), password) {
		t.Errorf("the Secret's password is in the GitRepo's status: %s", raw)
	}

	grantSecrets(t, outside)
	eventually(t, "the GitRepo syncs once its namespace is a fleet namespace", 90*time.Second, func() bool {
		return f.hub.Get(ctx, key, repo) == nil && repo.Status.Commit != ""
	}, func() string { return fmt.Sprintf("status: %+v", repo.Status) })
}

// A FleetRestriction is enforced on the cluster: the agent applies as the service account the
// restriction names, so downstream RBAC bounds a bundle, and refuses cluster-scoped kinds the
// restriction does not allow, applying nothing of that bundle. An allowed bundle deploys.
func TestFleetRestrictionIsEnforcedOnTheCluster(t *testing.T) {
	f := startFleet(t)
	ctx := context.Background()
	w := workloads[0]
	local := kubernetes.NewForConfigOrDie(w.Config())
	state, allowedNS, deniedNS, clusterRole := "flotilla-"+f.ns, f.ns+"-a", f.ns+"-b", "tenant-reader-"+f.ns
	t.Cleanup(func() {
		for _, ns := range []string{allowedNS, deniedNS} {
			_ = local.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
		}
		_ = local.RbacV1().ClusterRoles().Delete(context.Background(), clusterRole, metav1.DeleteOptions{})
		_ = local.RbacV1().ClusterRoleBindings().Delete(context.Background(), clusterRole, metav1.DeleteOptions{})
	})
	// Downstream, the tenant's service account may read namespaces and manage ConfigMaps in
	// one namespace.
	for _, ns := range []string{state, allowedNS, deniedNS} {
		if _, err := local.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	sa := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: "tenant-deployer", Namespace: state}
	for _, err := range []error{
		createErr(local.CoreV1().ServiceAccounts(state).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa.Name}}, metav1.CreateOptions{})),
		createErr(local.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: clusterRole},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get"}}}}, metav1.CreateOptions{})),
		createErr(local.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: clusterRole}, Subjects: []rbacv1.Subject{sa},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole}}, metav1.CreateOptions{})),
		createErr(local.RbacV1().Roles(allowedNS).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "deployer"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"*"}}}}, metav1.CreateOptions{})),
		createErr(local.RbacV1().RoleBindings(allowedNS).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "deployer"}, Subjects: []rbacv1.Subject{sa},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "deployer"}}, metav1.CreateOptions{})),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := f.hub.Create(ctx, &v1alpha1.FleetRestriction{ObjectMeta: metav1.ObjectMeta{Name: "tenant", Namespace: f.ns}, Spec: v1alpha1.FleetRestrictionSpec{
		AllowedTargetNamespaces: []string{f.ns + "-*"}, DefaultServiceAccount: sa.Name}}); err != nil {
		t.Fatal(err)
	}
	cm := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {color: blue}\n"
	up := gitserver.New(t)
	up.Commit("main", map[string]string{
		"allowed/fleet.yaml": "defaultNamespace: " + allowedNS + "\n", "allowed/cm.yaml": cm,
		"unbound/fleet.yaml": "defaultNamespace: " + deniedNS + "\n", "unbound/cm.yaml": cm,
		"scoped/fleet.yaml": "defaultNamespace: " + allowedNS + "\n", "scoped/cm.yaml": strings.Replace(cm, "settings", "scoped", 1),
		"scoped/role.yaml": "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: " + clusterRole + "-escalated}\nrules: [{apiGroups: ['*'], resources: ['*'], verbs: ['*']}]\n",
	})
	createRepo(t, f, up.ServeHTTP("", "").URL+"/repo.git", map[string]string{"index": "0"})
	applied := func(bundle string) *metav1.Condition {
		var bd v1alpha1.BundleDeployment
		if err := f.hub.Get(ctx, types.NamespacedName{Namespace: f.clusterNamespaces[w.Name], Name: model.DeploymentName(f.ns, "shop-"+bundle)}, &bd); err != nil {
			return nil
		}
		return meta.FindStatusCondition(bd.Status.Conditions, v1alpha1.AppliedCondition)
	}
	eventually(t, "the allowed bundle is applied as the tenant", 60*time.Second, func() bool {
		c := applied("allowed")
		return c != nil && c.Status == metav1.ConditionTrue
	})
	if _, err := local.CoreV1().ConfigMaps(allowedNS).Get(ctx, "settings", metav1.GetOptions{}); err != nil {
		t.Errorf("the allowed ConfigMap: %v", err)
	}
	eventually(t, "downstream RBAC refuses the bundle its service account may not deploy", 60*time.Second, func() bool {
		c := applied("unbound")
		return c != nil && c.Status == metav1.ConditionFalse && strings.Contains(c.Message, "forbidden") && strings.Contains(c.Message, sa.Name)
	})
	eventually(t, "the agent refuses a cluster-scoped kind the restriction does not allow", 60*time.Second, func() bool {
		c := applied("scoped")
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == v1alpha1.RestrictedReason && strings.Contains(c.Message, "ClusterRole "+clusterRole+"-escalated") &&
			strings.Contains(c.Message, "FleetRestriction tenant")
	})
	for what, err := range map[string]error{
		"the ConfigMap in the namespace the service account may not write": getErr(local.CoreV1().ConfigMaps(deniedNS).Get(ctx, "settings", metav1.GetOptions{})),
		"the escalating ClusterRole":                                       getErr(local.RbacV1().ClusterRoles().Get(ctx, clusterRole+"-escalated", metav1.GetOptions{})),
		"the refused bundle's ConfigMap":                                   getErr(local.CoreV1().ConfigMaps(allowedNS).Get(ctx, "scoped", metav1.GetOptions{})),
	} {
		if !apierrors.IsNotFound(err) {
			t.Errorf("%s exists on the cluster (%v)", what, err)
		}
	}

	// A bundle that asks for its namespace to go with it (deleteNamespace) is removed as the
	// tenant's service account, which may not delete namespaces: its own objects go, the
	// namespace and what others deployed there stay.
	cleanup := gitserver.New(t)
	cleanup.Commit("main", map[string]string{
		"removable/fleet.yaml": "defaultNamespace: " + allowedNS + "\ndeleteNamespace: true\n",
		"removable/cm.yaml":    strings.Replace(cm, "settings", "removable", 1),
	})
	removable := &v1alpha1.GitRepo{ObjectMeta: metav1.ObjectMeta{Name: "cleanup", Namespace: f.ns}, Spec: v1alpha1.GitRepoSpec{
		Repo: cleanup.ServeHTTP("", "").URL + "/repo.git", PollingInterval: &metav1.Duration{Duration: time.Second},
		Targets: []v1alpha1.Target{{ClusterMatch: v1alpha1.ClusterMatch{ClusterName: w.Name}}}}}
	if err := f.hub.Create(ctx, removable); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the deleteNamespace bundle is applied as the tenant", 60*time.Second, func() bool {
		_, err := local.CoreV1().ConfigMaps(allowedNS).Get(ctx, "removable", metav1.GetOptions{})
		return err == nil
	})
	if err := f.hub.Delete(ctx, removable); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the deleteNamespace bundle is removed from the cluster", 60*time.Second, func() bool {
		var bd v1alpha1.BundleDeployment
		err := f.hub.Get(ctx, types.NamespacedName{Namespace: f.clusterNamespaces[w.Name], Name: model.DeploymentName(f.ns, "cleanup-removable")}, &bd)
		_, cmErr := local.CoreV1().ConfigMaps(allowedNS).Get(ctx, "removable", metav1.GetOptions{})
		return apierrors.IsNotFound(err) && apierrors.IsNotFound(cmErr)
	})
	ns, err := local.CoreV1().Namespaces().Get(ctx, allowedNS, metav1.GetOptions{})
	if err != nil || ns.DeletionTimestamp != nil {
		t.Errorf("namespace %s was deleted with the agent's rights: %v, deleted at %v", allowedNS, err, ns.GetDeletionTimestamp())
	}
	if _, err := local.CoreV1().ConfigMaps(allowedNS).Get(ctx, "settings", metav1.GetOptions{}); err != nil {
		t.Errorf("another bundle's ConfigMap in that namespace: %v", err)
	}
}

func createErr[T any](_ T, err error) error { return err }
func getErr[T any](_ T, err error) error    { return err }

// A cluster admitted before namespaces were unique lives in a namespace named without a hash.
// The hub moves it to its own, owned namespace without a gap: its deployments move with their
// status (nothing is applied again, the workload keeps running), its agent follows with an
// identity it requests itself, the old namespace goes, and the next commit rolls out there.
func TestClusterInALegacyNamespaceMovesWithoutAGap(t *testing.T) {
	up, f := deployWeb(t, "defaultNamespace: moved\n")
	ctx := context.Background()
	w := workloads[2]
	current := f.clusterNamespaces[w.Name]
	f.stop("agent " + w.Name)
	f.stop("hub")

	// What an older hub left: the cluster's deployments and its agent in "cluster-<ns>-<name>".
	legacy := "cluster-" + f.ns + "-" + w.Name
	if err := f.hub.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: legacy}}); err != nil {
		t.Fatal(err)
	}
	var bds v1alpha1.BundleDeploymentList
	if err := f.hub.List(ctx, &bds, client.InNamespace(current)); err != nil || len(bds.Items) != 1 {
		t.Fatalf("deployments of %s: %d %v", w.Name, len(bds.Items), err)
	}
	original := bds.Items[0]
	moved := &v1alpha1.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Name: original.Name, Namespace: legacy, Labels: original.Labels}, Spec: original.Spec}
	if err := f.hub.Create(ctx, moved); err != nil {
		t.Fatal(err)
	}
	moved.Status = original.Status
	if err := f.hub.Status().Update(ctx, moved); err != nil {
		t.Fatal(err)
	}
	// The original deployment is still being removed from the cluster's own namespace when the
	// hub starts (a finalizer of the test's holds it): the move must wait for it, or the agent
	// would take it for its deployment there and uninstall the workload.
	const hold = "e2e.flotilla.dev/hold"
	held := original.DeepCopy()
	held.Finalizers = append(held.Finalizers, hold)
	if err := f.hub.Patch(ctx, held, client.MergeFrom(&original)); err != nil {
		t.Fatal(err)
	}
	if err := f.hub.Delete(ctx, held); err != nil {
		t.Fatal(err)
	}
	var cl v1alpha1.Cluster
	if err := f.hub.Get(ctx, types.NamespacedName{Namespace: f.ns, Name: w.Name}, &cl); err != nil {
		t.Fatal(err)
	}
	for _, patch := range []string{`{"status":{"namespace":"` + legacy + `","previousNamespace":"` + current + `"}}`, `{"status":{"previousNamespace":null}}`} {
		if err := f.hub.Status().Patch(ctx, &cl, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
			t.Fatal(err)
		}
	}
	legacyAgent := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: access.AgentServiceAccount, Namespace: legacy}
	for _, o := range []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: access.AgentServiceAccount, Namespace: legacy}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "legacy-agent", Namespace: legacy}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"flotilla.dev"}, Resources: []string{"bundledeployments"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"flotilla.dev"}, Resources: []string{"bundledeployments/status"}, Verbs: []string{"get", "update", "patch"}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "legacy-agent", Namespace: legacy}, Subjects: []rbacv1.Subject{legacyAgent},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "legacy-agent"}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "legacy-agent-" + w.Name, Namespace: f.ns}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"flotilla.dev"}, Resources: []string{"clusters"}, ResourceNames: []string{w.Name}, Verbs: []string{"get"}},
			{APIGroups: []string{"flotilla.dev"}, Resources: []string{"clusters/status"}, ResourceNames: []string{w.Name}, Verbs: []string{"get", "update", "patch"}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "legacy-agent-" + w.Name, Namespace: f.ns}, Subjects: []rbacv1.Subject{legacyAgent},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "legacy-agent-" + w.Name}},
	} {
		if err := f.hub.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	before, err := kubernetes.NewForConfigOrDie(w.Config()).AppsV1().Deployments("moved").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// The agent runs in the legacy namespace with the legacy identity; then the new hub starts.
	opts := f.agentOptions(w)
	opts.Namespace, opts.HubConfig = legacy, agentConfig(t, legacy)
	kept := make(chan agent.Credentials, 8)
	opts.OnCredentials = func(_ context.Context, c agent.Credentials) error { kept <- c; return nil }
	f.start("agent "+w.Name, func(ctx context.Context) error { return agent.Run(ctx, opts) })
	eventually(t, "the agent reports from the legacy namespace", 30*time.Second, func() bool {
		return f.hub.Get(ctx, types.NamespacedName{Namespace: f.ns, Name: w.Name}, &cl) == nil && cl.Status.AgentNamespace == legacy
	})
	f.startHub()
	eventually(t, "the hub released its own hold on the deployment being removed", 30*time.Second, func() bool {
		var bd v1alpha1.BundleDeployment
		err := f.hub.Get(ctx, client.ObjectKeyFromObject(&original), &bd)
		return err == nil && len(bd.Finalizers) == 1 && bd.Finalizers[0] == hold
	})
	if err := f.hub.Get(ctx, types.NamespacedName{Namespace: f.ns, Name: w.Name}, &cl); err != nil || cl.Status.Namespace != legacy {
		t.Errorf("the cluster moved while a deployment of its new namespace was being removed: %q (%v)", cl.Status.Namespace, err)
	}
	var removing v1alpha1.BundleDeployment
	if err := f.hub.Get(ctx, client.ObjectKeyFromObject(&original), &removing); err != nil {
		t.Fatal(err)
	}
	released := removing.DeepCopy()
	released.Finalizers = nil
	if err := f.hub.Patch(ctx, released, client.MergeFrom(&removing)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the cluster moved and its agent followed", 60*time.Second, func() bool {
		return f.hub.Get(ctx, types.NamespacedName{Namespace: f.ns, Name: w.Name}, &cl) == nil &&
			cl.Status.Namespace == current && cl.Status.PreviousNamespace == "" && cl.Status.AgentNamespace == current
	})
	select {
	case c := <-kept:
		if c.Namespace != current || selfSubject(t, c.Token) != "system:serviceaccount:"+current+":"+access.AgentServiceAccount {
			t.Errorf("the agent keeps credentials of %q as %q", c.Namespace, selfSubject(t, c.Token))
		}
	default:
		t.Error("the agent kept no credentials for the new namespace")
	}
	var ns corev1.Namespace
	if err := f.hub.Get(ctx, types.NamespacedName{Name: legacy}, &ns); err == nil && ns.DeletionTimestamp.IsZero() {
		t.Errorf("the legacy namespace %s is not being deleted", legacy)
	}
	if err := f.hub.Get(ctx, types.NamespacedName{Namespace: legacy, Name: access.AgentServiceAccount}, &corev1.ServiceAccount{}); !apierrors.IsNotFound(err) {
		t.Errorf("the legacy agent identity remains: %v", err)
	}
	after, err := kubernetes.NewForConfigOrDie(w.Config()).AppsV1().Deployments("moved").Get(ctx, "web", metav1.GetOptions{})
	if err != nil || after.UID != before.UID || after.Generation != before.Generation {
		t.Errorf("the workload was touched by the move: %v (generation %d → %d)", err, before.Generation, after.Generation)
	}
	bd := deploymentOn(t, f, w.Name)
	if bd.Namespace != current || bd.Status.AppliedAt == nil || !bd.Status.AppliedAt.Equal(original.Status.AppliedAt) {
		t.Errorf("the deployment in %s was applied again (applied at %v, before %v)", bd.Namespace, bd.Status.AppliedAt, original.Status.AppliedAt)
	}

	// The rollout goes on in the new namespace.
	up.Commit("main", map[string]string{"web/deployment.yaml": webManifest("example.invalid/web:2")})
	eventually(t, "the next commit reaches every cluster", 90*time.Second, func() bool {
		return availableEverywhere(t, "moved", "web", "example.invalid/web:2")
	})
}
