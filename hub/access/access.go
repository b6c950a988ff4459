package access

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/liveness"
	"github.com/flotilla-dev/flotilla/hub/model"
	"github.com/flotilla-dev/flotilla/hub/reconciler"
)

// AgentServiceAccount is the identity of a cluster's agent, in the cluster's namespace.
const AgentServiceAccount = v1alpha1.AgentServiceAccountName

// AccessReconciler admits every Cluster (its namespace, see AdmitCluster) and gives its agent
// exactly what it needs on the hub: read its own BundleDeployments and write their status (in
// the cluster's namespace), renew its own token, read the Content those deployments reference
// (by name), and read and heartbeat its own Cluster. Nothing else: not other clusters'
// namespaces, not Secrets, not other Content. Content shared by many clusters may be granted to
// them all at once instead (content_grants.go). A deleted Cluster loses all of it at once
// (revokeAccess), before its finalizer goes.
type AccessReconciler struct {
	Client client.Client
	// Uncached reads shared grants past the cache before content goes into a cluster's own
	// Role (see referencedContent).
	Uncached client.Reader
	// Heartbeats creates the agent's Lease with the interval and deadline the cluster asks.
	Heartbeats *liveness.Liveness
}

// ClusterFinalizer holds a deleted Cluster until its agent's access is revoked. The
// cluster-access controller adds it; registration creates its Clusters with it, which saves
// each registered cluster that write.
const ClusterFinalizer = "flotilla.dev/cluster-access"

// accessCoalesce is how long a BundleDeployment change waits before its cluster's Roles are
// recomputed. Staging a commit touches every bundle of a cluster in a burst; one Role write
// for the burst instead of one per bundle is what keeps the API server's load per revision flat.
// Agents retry unreadable content every second, so the delay costs at most that.
const accessCoalesce = 500 * time.Millisecond

func (r *AccessReconciler) Setup(mgr ctrl.Manager) error {
	byContentChange := onContentRefChange(func(o client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		if req, ok := clusterOf(o); ok {
			q.AddAfter(req, accessCoalesce)
		}
	})
	return ctrl.NewControllerManagedBy(mgr).Named("cluster-access").
		For(&v1alpha1.Cluster{}, builder.WithPredicates(accessChanged{})).
		Watches(&v1alpha1.BundleDeployment{}, byContentChange).
		Complete(r.Controller())
}

// accessChanged passes the Cluster changes access and the agent's Lease depend on (the spec
// holds the heartbeat interval): not the status writes of agents and of the hub's summaries.
type accessChanged struct{ predicate.Funcs }

func (accessChanged) Update(e event.UpdateEvent) bool {
	return model.ClusterUpdated(e, func(o, n *v1alpha1.Cluster) bool {
		return o.Generation != n.Generation || o.Status.Namespace != n.Status.Namespace || o.Status.PreviousNamespace != n.Status.PreviousNamespace ||
			o.Status.AgentNamespace != n.Status.AgentNamespace || !n.DeletionTimestamp.IsZero() ||
			!slices.Equal(o.Finalizers, n.Finalizers) || o.Annotations[v1alpha1.ClientIDAnnotation] != n.Annotations[v1alpha1.ClientIDAnnotation]
	})
}

// clusterOf names the Cluster a BundleDeployment is staged for: bundles target the Clusters of
// their own namespace, so the labels the bundler sets are the Cluster's key.
func clusterOf(o client.Object) (reconcile.Request, bool) {
	name, ns := o.GetLabels()[model.LabelCluster], o.GetLabels()[model.LabelBundleNamespace]
	if name == "" || ns == "" {
		return reconcile.Request{}, false
	}
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}, true
}

func (r *AccessReconciler) Controller() reconciler.Status[v1alpha1.Cluster, *v1alpha1.Cluster] {
	// Conditional: the Cluster's conditions have other writers (cluster-status, removals).
	return reconciler.Status[v1alpha1.Cluster, *v1alpha1.Cluster]{Client: r.Client, Lock: true, Step: r.step, Finalizer: ClusterFinalizer, Finalize: r.revoke}
}

// revoke takes a deleted Cluster's access away (revokeAccess).
func (r *AccessReconciler) revoke(ctx context.Context, c *v1alpha1.Cluster) (reconciler.Outcome, error) {
	if err := revokeAccess(ctx, r.Client, c); err != nil {
		return reconciler.Outcome{}, err
	}
	log.FromContext(ctx).Info("cluster deleted: its agent's identity, roles, deployments and namespace are removed", "cluster", c.Namespace+"/"+c.Name, "namespace", c.Status.Namespace)
	return reconciler.Outcome{Done: true}, nil
}

// step admits a Cluster (its namespace), finishes a move, grants its agent what its
// deployments need and keeps its Lease. The Admitted condition is present only while
// admission fails (as kstatus' Stalled is): an admitted cluster costs no write for it.
func (r *AccessReconciler) step(ctx context.Context, c, orig *v1alpha1.Cluster) (reconciler.Outcome, error) {
	err := AdmitCluster(ctx, r.Client, c)
	// Admission and a move are ordered protocols that record each step themselves: what they
	// wrote is the status as read from now on.
	orig.Status = *c.Status.DeepCopy()
	var conflict *NamespaceConflictError
	switch {
	case errors.As(err, &conflict):
		log.FromContext(ctx).Info("cluster not admitted: its namespace belongs to another", "cluster", c.Namespace+"/"+c.Name, "namespace", conflict.Namespace, "owner", conflict.Owner)
		model.
			// Nothing to retry: the namespace stays its owner's until an operator acts.
			SetCondition(&c.Status.Conditions, metav1.Condition{Type: v1alpha1.AdmittedCondition, Status: metav1.ConditionFalse,
				Reason: v1alpha1.NamespaceConflictReason, Message: err.Error(), ObservedGeneration: c.Generation})
		return reconciler.Outcome{}, nil
	case err != nil:
		return reconciler.Outcome{}, err
	}
	meta.RemoveStatusCondition(&c.Status.Conditions, v1alpha1.AdmittedCondition)
	moved := c.Status.PreviousNamespace != "" && c.Status.AgentNamespace == c.Status.Namespace
	if err := finishMove(ctx, r.Client, c); err != nil {
		return reconciler.Outcome{}, err
	}
	orig.Status.PreviousNamespace = c.Status.PreviousNamespace
	if err := GrantAccessWith(ctx, r.Client, c, nil, AccessRewrite{resync: moved, Live: r.Uncached}); err != nil {
		return reconciler.Outcome{}, err
	}
	return reconciler.Outcome{}, r.Heartbeats.EnsureLease(ctx, r.Client, c)
}

// revokeAccess removes everything a deleted Cluster's agent could use on the hub: its identity
// first (every token it holds stops working), then its Roles in the fleet and bundle
// namespaces, its deployments and its namespace.
func revokeAccess(ctx context.Context, c client.Client, cl *v1alpha1.Cluster) error {
	for _, ns := range []string{cl.Status.Namespace, cl.Status.PreviousNamespace} {
		if ns == "" {
			continue
		}
		if err := removeClusterNamespace(ctx, c, ns); err != nil {
			return fmt.Errorf("failed to revoke the access of cluster %s: %w", cl.Name, err)
		}
	}
	var roles rbacv1.RoleList
	if err := c.List(ctx, &roles, client.MatchingLabels{model.LabelAgentOf: model.AgentOf(cl)}); err != nil {
		return fmt.Errorf("failed to list the roles of cluster %s: %w", cl.Name, err)
	}
	for i := range roles.Items {
		role := &roles.Items[i]
		binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name, Namespace: role.Namespace}}
		if err := c.Delete(ctx, binding); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("failed to delete role binding %s/%s: %w", role.Namespace, role.Name, err)
		}
		if err := c.Delete(ctx, role); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("failed to delete role %s/%s: %w", role.Namespace, role.Name, err)
		}
	}
	return nil
}

// agentSubjects are the identities of a cluster's agent: the one of its namespace, and while
// the cluster moves, the one of the namespace it moves from.
func agentSubjects(cl *v1alpha1.Cluster) []rbacv1.Subject {
	out := []rbacv1.Subject{agentSubject(cl.Status.Namespace)}
	if prev := cl.Status.PreviousNamespace; prev != "" {
		out = append(out, agentSubject(prev))
	}
	return out
}

// GrantAccess writes the Roles of a cluster's agent: its deployments, its Cluster, and the
// Content its deployments reference plus staging (bundle namespace → content ids), which the
// bundler passes just before it stages them: the agent can read a revision's content as soon
// as it sees the revision, and a commit costs one Role write per cluster, not one per bundle.
// Content a shared grant gives the agent already is left out (see PlanGrants).
//
// A Role that already grants at least the content needed is left alone: the content of the
// revision a cluster ran before stays readable until its next Role write (the next revision),
// which saves a second write per cluster and revision.
func GrantAccess(ctx context.Context, c client.Client, cl *v1alpha1.Cluster, staging map[string][]string) error {
	return GrantAccessWith(ctx, c, cl, staging, AccessRewrite{})
}

// AccessRewrite is what the access reconciler asks of GrantAccess beyond the bundler's grants.
type AccessRewrite struct {
	// resync rewrites the subjects of existing bindings (they change only when a cluster moves).
	resync bool
	// live, when set, confirms with an uncached read that no shared grant covers content about
	// to be written into the cluster's own Role. The reconciler runs a moment after the
	// bundler staged a commit, and the cache may not hold the commit's shared grants yet:
	// content written into a Role stays there until the cluster's next revision.
	Live client.Reader
}

// GrantAccessWith is GrantAccess as the access reconciler runs it: bindings' subjects are
// rewritten when asked or while the cluster is moving.
func GrantAccessWith(ctx context.Context, c client.Client, cl *v1alpha1.Cluster, staging map[string][]string, rewrite AccessRewrite) error {
	ns := cl.Status.Namespace
	if ns == "" {
		return nil
	}
	subjects := agentSubjects(cl)
	resync := rewrite.resync || cl.Status.PreviousNamespace != ""
	labels := map[string]string{model.LabelAgentOf: model.AgentOf(cl)}
	if err := grantAgent(ctx, c, cl, ns, subjects, resync); err != nil {
		return err
	}
	// In the Cluster's namespace: its own Cluster, for heartbeats.
	rules := []rbacv1.PolicyRule{
		{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"clusters"}, ResourceNames: []string{cl.Name}, Verbs: []string{"get"}},
		{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"clusters/status"}, ResourceNames: []string{cl.Name}, Verbs: []string{"get", "update", "patch"}},
	}
	// Content referenced by its deployments, by name, per bundle namespace.
	contents, err := referencedContent(ctx, c, rewrite.Live, cl, staging)
	if err != nil {
		return err
	}
	roleName := AgentRoleName(cl)
	for bundleNS, names := range contents {
		nsRules := []rbacv1.PolicyRule{contentRule(names)}
		if bundleNS == cl.Namespace {
			nsRules = append(nsRules, rules...)
		}
		if err := EnsureRole(ctx, c, RoleSpec{Ns: bundleNS, Name: roleName, labels: labels, Rules: nsRules, Subjects: subjects, resync: resync}); err != nil {
			return err
		}
	}
	if _, ok := contents[cl.Namespace]; !ok {
		if err := EnsureRole(ctx, c, RoleSpec{Ns: cl.Namespace, Name: roleName, labels: labels, Rules: rules, Subjects: subjects, resync: resync}); err != nil {
			return err
		}
	}
	return nil
}

// grantAgent writes the agent's Role in a cluster namespace: its deployments, their status,
// a token for its own identity there (renewal, and the move into a new namespace), the
// renewal of its Lease (the heartbeat; the hub creates it, see EnsureLease) and its Events.
func grantAgent(ctx context.Context, c client.Client, cl *v1alpha1.Cluster, ns string, subjects []rbacv1.Subject, resync bool) error {
	return EnsureRole(ctx, c, RoleSpec{Ns: ns, Name: AgentServiceAccount, labels: map[string]string{model.LabelAgentOf: model.AgentOf(cl)}, Subjects: subjects, resync: resync, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"bundledeployments"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"bundledeployments/status"}, Verbs: []string{"get", "update", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, ResourceNames: []string{AgentServiceAccount}, Verbs: []string{"create"}},
		{APIGroups: []string{coordinationv1.GroupName}, Resources: []string{"leases"}, ResourceNames: []string{v1alpha1.AgentLeaseName}, Verbs: []string{"get", "update"}},
		// Its Events (drift corrected), in its own namespace only; it reads none.
		{APIGroups: []string{eventsv1.GroupName}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
	}})
}

// AgentRoleName is the Role of a cluster's agent in its Cluster's namespace and in each bundle
// namespace it deploys from.
func AgentRoleName(cl *v1alpha1.Cluster) string { return "flotilla-agent-" + cl.Name }

// HasContent reports whether the cluster's agent may read the content already (a shared grant
// or its Role in the bundle's namespace names it, as the bundler grants a commit's content to
// every cluster it targets): checking costs a cache read or two, computing the grant a listing
// of the cluster's deployments.
func HasContent(ctx context.Context, c client.Reader, cl *v1alpha1.Cluster, bundleNS, contentID string) bool {
	return sharedGrantCovers(ctx, c, model.ContentRef{Namespace: bundleNS, ID: contentID}, cl.Status.Namespace) || ownRoleGrants(ctx, c, cl, model.ContentRef{Namespace: bundleNS, ID: contentID})
}

// ownRoleGrants reports whether the cluster's own Role in the content's namespace names it.
func ownRoleGrants(ctx context.Context, c client.Reader, cl *v1alpha1.Cluster, ref model.ContentRef) bool {
	var role rbacv1.Role
	if err := c.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: AgentRoleName(cl)}, &role); err != nil {
		return false
	}
	for _, rule := range role.Rules {
		if slices.Contains(rule.Resources, "contents") && slices.Contains(rule.ResourceNames, ref.ID) {
			return true
		}
	}
	return false
}

// referencedContent lists, per bundle namespace, the Content objects (all chunks) that the
// staged and released revisions of the cluster's BundleDeployments reference, and staging's,
// leaving out what shared grants give its agent. With live, content the cached grants do not
// cover and the cluster's Role does not name yet is looked up past the cache (see
// AccessRewrite): only content about to be written costs the read.
func referencedContent(ctx context.Context, c client.Client, live client.Reader, cl *v1alpha1.Cluster, staging map[string][]string) (map[string][]string, error) {
	ns := cl.Status.Namespace
	var bds v1alpha1.BundleDeploymentList
	if err := c.List(ctx, &bds, client.InNamespace(ns)); err != nil {
		return nil, fmt.Errorf("failed to list deployments: %w", err)
	}
	refs := map[model.ContentRef]bool{}
	for bundleNS, ids := range staging {
		for _, id := range ids {
			refs[model.ContentRef{Namespace: bundleNS, ID: id}] = true
		}
	}
	for i := range bds.Items {
		for _, ref := range model.ContentRefsOf(&bds.Items[i]) {
			refs[ref] = true
		}
	}
	out := map[string][]string{}
	for ref := range refs {
		if sharedGrantCovers(ctx, c, ref, ns) {
			continue
		}
		if live != nil && !ownRoleGrants(ctx, c, cl, ref) && sharedGrantCovers(ctx, live, ref, ns) {
			continue
		}
		names, err := contentNames(ctx, c, ref)
		if err != nil {
			return nil, err
		}
		out[ref.Namespace] = append(out[ref.Namespace], names...)
	}
	for bundleNS := range out {
		sort.Strings(out[bundleNS])
	}
	return out, nil
}

// RoleSpec is a Role with its RoleBinding.
type RoleSpec struct {
	Ns, Name string
	labels   map[string]string
	Rules    []rbacv1.PolicyRule
	Subjects []rbacv1.Subject
	// resync rewrites the subjects of an existing binding (they change only when a cluster
	// moves); otherwise a binding is written once, with its Role.
	resync bool
}

// EnsureRole creates a Role or updates one whose rules do not cover rules (see rulesCover). A
// new Role gets its RoleBinding and, for service-account subjects of its namespace, the
// ServiceAccount: those never change, so they are written once, not on every reconcile.
func EnsureRole(ctx context.Context, c client.Client, spec RoleSpec) error {
	ns, name := spec.Ns, spec.Name
	var role rbacv1.Role
	err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &role)
	switch {
	case apierrors.IsNotFound(err):
		for _, s := range spec.Subjects {
			// A service account is created with the Role of its own namespace: the Roles in
			// bundle namespaces then bind it without a second, failing create.
			if s.Kind != rbacv1.ServiceAccountKind || s.Namespace != ns {
				continue
			}
			sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: s.Namespace}}
			if err := c.Create(ctx, sa); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("failed to create service account %s/%s: %w", s.Namespace, s.Name, err)
			}
		}
		role = rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: spec.labels}, Rules: spec.Rules}
		if err := c.Create(ctx, &role); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("failed to create role %s/%s: %w", ns, name, err)
		}
		return bindRole(ctx, c, spec, false)
	case err != nil:
		return err
	case !rulesCover(role.Rules, spec.Rules) || !labelsCover(role.Labels, spec.labels):
		role.Rules = spec.Rules
		if role.Labels == nil {
			role.Labels = map[string]string{}
		}
		for k, v := range spec.labels {
			role.Labels[k] = v
		}
		if err := c.Update(ctx, &role); err != nil {
			return fmt.Errorf("failed to update role %s/%s: %w", ns, name, err)
		}
	}
	if spec.resync {
		return bindRole(ctx, c, spec, true)
	}
	return nil
}

// bindRole creates a Role's binding, or with replace, sets the subjects of the one there (a
// patch: the hub does not cache the bindings it writes, only shared content grants).
func bindRole(ctx context.Context, c client.Client, spec RoleSpec, replace bool) error {
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: spec.Name, Namespace: spec.Ns, Labels: spec.labels}, Subjects: spec.Subjects,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: spec.Name}}
	if replace {
		patch, err := json.Marshal(map[string]any{"subjects": spec.Subjects})
		if err != nil {
			return err
		}
		err = c.Patch(ctx, binding, client.RawPatch(types.MergePatchType, patch))
		if !apierrors.IsNotFound(err) {
			if err != nil {
				return fmt.Errorf("failed to update role binding %s/%s: %w", spec.Ns, spec.Name, err)
			}
			return nil
		}
	}
	if err := c.Create(ctx, binding); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("failed to bind role %s/%s: %w", spec.Ns, spec.Name, err)
	}
	return nil
}

func labelsCover(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// rulesCover reports whether have grants what want does and nothing of another kind: the
// same rules in the same order, each naming at least want's resource names. Extra names are
// content a cluster's previous revision used.
func rulesCover(have, want []rbacv1.PolicyRule) bool {
	if len(have) != len(want) {
		return false
	}
	for i := range want {
		h, w := have[i], want[i]
		if !equality.Semantic.DeepEqual(h.APIGroups, w.APIGroups) || !equality.Semantic.DeepEqual(h.Resources, w.Resources) ||
			!equality.Semantic.DeepEqual(h.Verbs, w.Verbs) || !equality.Semantic.DeepEqual(h.NonResourceURLs, w.NonResourceURLs) ||
			(len(h.ResourceNames) == 0) != (len(w.ResourceNames) == 0) || !sets.New(h.ResourceNames...).HasAll(w.ResourceNames...) {
			return false
		}
	}
	return true
}

// AgentConfig issues a token for a cluster's agent and returns a client config for the hub
// with it: what registration hands to the agent.
func AgentConfig(ctx context.Context, hub *rest.Config, clusterNamespace string, ttl time.Duration) (*rest.Config, error) {
	cs, err := kubernetes.NewForConfig(hub)
	if err != nil {
		return nil, err
	}
	seconds := int64(ttl.Seconds())
	tr, err := cs.CoreV1().ServiceAccounts(clusterNamespace).CreateToken(ctx, AgentServiceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &seconds}}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("failed to issue the agent's token: %w", err)
	}
	cfg := rest.AnonymousClientConfig(hub)
	cfg.BearerToken = tr.Status.Token
	return cfg, nil
}
