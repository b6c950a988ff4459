package access

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/model"
)

// An agent reads the Content its own deployments reference and no other. A commit grants its
// content in one of two ways, whichever takes fewer writes (PlanGrants):
//
//   - in each cluster's own Role (GrantAccess): one write per cluster, whatever the number of
//     its bundles;
//   - once per content staged for several clusters (a shared grant): a Role naming the content
//     and a RoleBinding whose subjects are the agents of those clusters, two writes per content
//     however many clusters deploy it.
//
// A fleet with one bundle per cluster pays one write per cluster the first way and two per
// revision the second; a fleet with many bundles per cluster the other way round.

// annotationGrantedAt is when the bundler last added subjects to a shared grant: the grant is
// not pruned for the prune delay after that, while the deployments it was made for are staged.
// It keeps sub-second precision: truncated to the second, a grant made late in a second could
// be pruned up to a second early, before the deployments it was made for reach the cache.
const annotationGrantedAt = "flotilla.dev/granted-at"

// annotationPrunedAt is when the pruner last dropped agents from a shared grant: it prunes
// again a prune delay later at the earliest. Its own patch wakes it, and a rollout moving
// clusters off the content one by one would otherwise have it rewrite the grant (a RoleBinding
// naming up to every agent of the fleet, a megabyte at 10,000) after each move.
const annotationPrunedAt = "flotilla.dev/pruned-at"

// annotationGrantedFor names the bundles (comma-separated, sorted) whose staging made a shared
// grant: while a bundle's wanted revision deploys the content to a cluster, the pruner keeps
// that cluster's agent, deployment written or not. A continuous rollout writes a cluster's
// deployment only when it reaches the cluster, which at fleet size is minutes after staging.
const annotationGrantedFor = "flotilla.dev/granted-for"

// DefaultGrantPruneDelay is how long a shared grant waits before it drops the agents that no
// longer deploy its content, and the whole grant when none does (Options.GrantPruneDelay).
// Pruning is not urgent (a cluster that moved on ran that content just before); waiting makes a
// rollout's many moves one write.
const DefaultGrantPruneDelay = time.Minute

// onContentRefChange calls enqueue with a deployment whose content references appeared,
// changed or went away (with the old and the new object on a change): agents' status writes do
// not change access and wake nothing.
func onContentRefChange(enqueue func(o client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request])) handler.Funcs {
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(e.Object, q)
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if model.ContentRefsChanged(e.ObjectOld, e.ObjectNew) {
				enqueue(e.ObjectOld, q)
				enqueue(e.ObjectNew, q)
			}
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(e.Object, q)
		},
	}
}

// ContentGrants is how a commit's content is granted to the agents that deploy it.
type ContentGrants struct {
	// Shared lists, per content granted once for all, the clusters it is staged for.
	Shared map[model.ContentRef][]string
	// Own lists, per cluster, the content (bundle namespace → ids) its own Role grants.
	Own map[string]map[string][]string
}

// PlanGrants decides how to grant staged (cluster → bundle namespace → content ids): each
// cluster's own Role, or shared grants for content staged for more than one cluster plus own
// Roles for the rest, whichever costs fewer writes. A tie keeps own Roles (fewer objects).
func PlanGrants(staged map[string]map[string][]string) ContentGrants {
	clustersOf := map[model.ContentRef][]string{}
	for cluster, byNS := range staged {
		for ns, ids := range byNS {
			for _, id := range ids {
				ref := model.ContentRef{Namespace: ns, ID: id}
				if !slices.Contains(clustersOf[ref], cluster) {
					clustersOf[ref] = append(clustersOf[ref], cluster)
				}
			}
		}
	}
	sharing := ContentGrants{Shared: map[model.ContentRef][]string{}, Own: map[string]map[string][]string{}}
	for ref, clusters := range clustersOf {
		if len(clusters) > 1 {
			sort.Strings(clusters)
			sharing.Shared[ref] = clusters
			continue
		}
		cluster := clusters[0]
		if sharing.Own[cluster] == nil {
			sharing.Own[cluster] = map[string][]string{}
		}
		sharing.Own[cluster][ref.Namespace] = append(sharing.Own[cluster][ref.Namespace], ref.ID)
	}
	ownRoles := ContentGrants{Own: map[string]map[string][]string{}}
	for cluster, byNS := range staged {
		if len(byNS) > 0 {
			ownRoles.Own[cluster] = byNS
		}
	}
	if 2*len(sharing.Shared)+len(sharing.Own) < len(ownRoles.Own) {
		for _, byNS := range sharing.Own {
			for ns := range byNS {
				sort.Strings(byNS[ns])
			}
		}
		return sharing
	}
	return ownRoles
}

func ContentGrantName(id string) string { return "flotilla-content-" + id }

// agentSubject is the identity of the agent of the cluster whose namespace is clusterNS.
func agentSubject(clusterNS string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: AgentServiceAccount, Namespace: clusterNS}
}

// SharedGrant is a content granted once to the agents of several clusters.
type SharedGrant struct {
	Ref model.ContentRef
	// Bundles are those whose staging grants it (see annotationGrantedFor).
	Bundles []string
	// ClusterNamespaces are the namespaces of the clusters whose agents read it.
	ClusterNamespaces []string
}

// GrantShared lets the agents of the grant's clusters read its content: it creates the
// content's Role and RoleBinding, or adds the agents and bundles its RoleBinding lacks.
// Nothing is written when every agent and bundle is named already.
func GrantShared(ctx context.Context, c client.Client, g SharedGrant, now time.Time) error {
	name := ContentGrantName(g.Ref.ID)
	key := types.NamespacedName{Namespace: g.Ref.Namespace, Name: name}
	var binding rbacv1.RoleBinding
	err := c.Get(ctx, key, &binding)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	subjects := slices.Clone(binding.Subjects) // binding may be the cache's
	for _, ns := range g.ClusterNamespaces {
		if s := agentSubject(ns); !slices.Contains(subjects, s) {
			subjects = append(subjects, s)
		}
	}
	had := grantedFor(&binding)
	bundles := sets.New(had...).Insert(g.Bundles...)
	annotations := map[string]string{annotationGrantedAt: now.UTC().Format(time.RFC3339Nano)}
	if bundles.Len() > 0 {
		annotations[annotationGrantedFor] = strings.Join(sets.List(bundles), ",")
	}
	if apierrors.IsNotFound(err) {
		names, err := contentNames(ctx, c, g.Ref)
		if err != nil {
			return err
		}
		labels := map[string]string{model.LabelContentGrant: g.Ref.ID}
		role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: g.Ref.Namespace, Labels: labels},
			Rules: []rbacv1.PolicyRule{contentRule(names)}}
		if err := c.Create(ctx, role); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("failed to create role %s/%s: %w", g.Ref.Namespace, name, err)
		}
		binding = rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: g.Ref.Namespace, Labels: labels, Annotations: annotations},
			Subjects: subjects, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name}}
		if err := c.Create(ctx, &binding); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("failed to create role binding %s/%s: %w", g.Ref.Namespace, name, err)
		}
		return nil
	}
	if len(subjects) == len(binding.Subjects) && bundles.Len() == len(had) {
		return nil
	}
	patched := binding.DeepCopy()
	patched.Subjects = subjects
	if patched.Annotations == nil {
		patched.Annotations = map[string]string{}
	}
	maps.Copy(patched.Annotations, annotations)
	if err := c.Patch(ctx, patched, client.MergeFromWithOptions(&binding, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("failed to grant %s to more agents: %w", key, err)
	}
	return nil
}

// grantedFor lists the bundles a shared grant was made for.
func grantedFor(binding *rbacv1.RoleBinding) []string {
	if v := binding.Annotations[annotationGrantedFor]; v != "" {
		return strings.Split(v, ",")
	}
	return nil
}

// sharedGrantCovers reports whether the shared grant of ref names the agent of the cluster
// whose namespace is clusterNS (one cache read, not copied: a grant of a 10,000-cluster fleet
// names 10,000 agents, and every release asks).
func sharedGrantCovers(ctx context.Context, c client.Reader, ref model.ContentRef, clusterNS string) bool {
	var binding rbacv1.RoleBinding
	if err := c.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ContentGrantName(ref.ID)}, &binding, client.UnsafeDisableDeepCopy); err != nil {
		return false
	}
	return grantedAgents.of(&binding).Has(clusterNS)
}

// grantedAgents are the cluster namespaces whose agents shared grants name, by grant: a
// release asks whether its cluster's agent is named, and scanning a RoleBinding of 10,000
// subjects for each of 10,000 releases cost seconds of the hub's CPU per revision. A binding's
// subjects at one resourceVersion never change, so the set is kept until the binding does.
var grantedAgents = &subjectSets{sets: map[types.UID]subjectSet{}}

// subjectSets memoises the agents a RoleBinding names, per binding (UID) and resourceVersion.
type subjectSets struct {
	mu   sync.Mutex
	sets map[types.UID]subjectSet
}

type subjectSet struct {
	resourceVersion string
	agents          sets.Set[string]
}

// maxSubjectSets bounds the memo: shared grants are one per content in use, a few per bundle;
// beyond it the memo starts again (a deleted grant's set is never read again).
const maxSubjectSets = 4096

func (m *subjectSets) of(binding *rbacv1.RoleBinding) sets.Set[string] {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.sets[binding.UID]; ok && s.resourceVersion == binding.ResourceVersion && binding.ResourceVersion != "" {
		return s.agents
	}
	agents := sets.New[string]()
	for _, s := range binding.Subjects {
		if s == agentSubject(s.Namespace) {
			agents.Insert(s.Namespace)
		}
	}
	if len(m.sets) >= maxSubjectSets {
		clear(m.sets)
	}
	m.sets[binding.UID] = subjectSet{resourceVersion: binding.ResourceVersion, agents: agents}
	return agents
}

// contentRule allows reading the named Content objects. names must not be empty: a rule
// without names would allow every Content.
func contentRule(names []string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"contents"}, ResourceNames: names, Verbs: []string{"get"}}
}

// contentNames lists the Content objects of ref: the head and its further chunks. Content not
// stored (yet) has just the head's name.
func contentNames(ctx context.Context, c client.Reader, ref model.ContentRef) ([]string, error) {
	var head v1alpha1.Content
	if err := c.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.ID}, &head); err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("failed to read content %s: %w", ref, err)
	}
	names := []string{ref.ID}
	for i := 1; i < int(head.Chunks); i++ {
		names = append(names, fmt.Sprintf("%s-%d", ref.ID, i))
	}
	return names, nil
}

// ContentGrantReconciler prunes shared grants: it drops the agents of clusters that neither
// have a deployment referencing the content nor are to get it from the wanted revision of a
// bundle the grant was made for, and the grant once no agent is left.
type ContentGrantReconciler struct {
	Client    client.Client
	Revisions *model.RevisionStore
	Now       func() time.Time
	Delay     time.Duration
}

func (r *ContentGrantReconciler) Setup(mgr ctrl.Manager) error {
	isGrant := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetLabels()[model.LabelContentGrant] != "" })
	return ctrl.NewControllerManagedBy(mgr).Named("content-grant").
		For(&rbacv1.RoleBinding{}, builder.WithPredicates(isGrant)).
		Watches(&v1alpha1.BundleDeployment{}, onContentRefChange(func(o client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			for _, ref := range model.ContentRefsOf(o) {
				q.AddAfter(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ref.Namespace, Name: ContentGrantName(ref.ID)}}, r.Delay)
			}
		})).
		Complete(r)
}

func (r *ContentGrantReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var binding rbacv1.RoleBinding
	if err := r.Client.Get(ctx, req.NamespacedName, &binding); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	id := binding.Labels[model.LabelContentGrant]
	if id == "" {
		return ctrl.Result{}, nil
	}
	for _, at := range []string{annotationGrantedAt, annotationPrunedAt} {
		if t, err := time.Parse(time.RFC3339Nano, binding.Annotations[at]); err == nil {
			if wait := t.Add(r.Delay).Sub(r.Now()); wait > 0 {
				return ctrl.Result{RequeueAfter: wait}, nil
			}
		}
	}
	ref := model.ContentRef{Namespace: binding.Namespace, ID: id}
	reading, err := r.agentsReading(ctx, ref, grantedFor(&binding))
	if err != nil {
		return ctrl.Result{}, err
	}
	kept := slices.DeleteFunc(slices.Clone(binding.Subjects), func(s rbacv1.Subject) bool { return !reading.Has(s.Namespace) || s != agentSubject(s.Namespace) })
	switch {
	case len(kept) == 0:
		for _, o := range []client.Object{&binding, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: binding.Name, Namespace: binding.Namespace}}} {
			if err := r.Client.Delete(ctx, o); client.IgnoreNotFound(err) != nil {
				return ctrl.Result{}, fmt.Errorf("failed to delete the grant of content %s: %w", id, err)
			}
		}
		// An agent that loses access says why it cannot read; the hub says why it took it.
		log.FromContext(ctx).Info("shared content grant removed: no agent needs it", "content", ref.String(), "agents", len(binding.Subjects), "bundles", grantedFor(&binding))
	case len(kept) < len(binding.Subjects):
		patched := binding.DeepCopy()
		patched.Subjects = kept
		if patched.Annotations == nil {
			patched.Annotations = map[string]string{}
		}
		patched.Annotations[annotationPrunedAt] = r.Now().UTC().Format(time.RFC3339Nano)
		if err := r.Client.Patch(ctx, patched, client.MergeFromWithOptions(&binding, client.MergeFromWithOptimisticLock{})); err != nil {
			return ctrl.Result{}, fmt.Errorf("failed to prune the grant of content %s: %w", id, err)
		}
		log.FromContext(ctx).Info("shared content grant pruned: agents that neither run the content nor are to get it dropped",
			"content", ref.String(), "dropped", len(binding.Subjects)-len(kept), "kept", len(kept), "bundles", grantedFor(&binding))
		return ctrl.Result{RequeueAfter: r.Delay}, nil // what moved meanwhile
	}
	return ctrl.Result{}, nil
}

// agentsReading lists the cluster namespaces whose agents need ref: those with a deployment
// referencing it, and those of the clusters the wanted revision of one of bundles deploys it
// to (a continuous rollout that has not reached them yet).
func (r *ContentGrantReconciler) agentsReading(ctx context.Context, ref model.ContentRef, bundles []string) (sets.Set[string], error) {
	var bds v1alpha1.BundleDeploymentList
	if err := r.Client.List(ctx, &bds, client.MatchingFields{model.DeploymentsByContent: ref.String()}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("failed to list the deployments of content %s: %w", ref.ID, err)
	}
	reading := sets.New[string]()
	for i := range bds.Items {
		reading.Insert(bds.Items[i].Namespace)
	}
	var clusterNS map[string]string // cluster name → namespace, read once when needed
	for _, name := range bundles {
		var bun v1alpha1.Bundle
		if err := r.Client.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: name}, &bun); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return nil, fmt.Errorf("failed to read bundle %s: %w", name, err)
		}
		if !bun.DeletionTimestamp.IsZero() || r.Revisions == nil {
			continue
		}
		targets, err := r.Revisions.Targets(ctx, &bun, model.WantedRevision(&bun))
		var missing *model.MissingRevisionError
		if errors.As(err, &missing) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("failed to read what bundle %s deploys: %w", name, err)
		}
		for cluster, t := range targets {
			if t.Ref.ContentID != ref.ID {
				continue
			}
			if clusterNS == nil {
				if clusterNS, err = r.clusterNamespaces(ctx, ref.Namespace); err != nil {
					return nil, err
				}
			}
			if ns := clusterNS[cluster]; ns != "" {
				reading.Insert(ns)
			}
		}
	}
	return reading, nil
}

func (r *ContentGrantReconciler) clusterNamespaces(ctx context.Context, fleetNS string) (map[string]string, error) {
	var clusters v1alpha1.ClusterList
	if err := r.Client.List(ctx, &clusters, client.InNamespace(fleetNS), client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("failed to list the clusters of %s: %w", fleetNS, err)
	}
	out := make(map[string]string, len(clusters.Items))
	for i := range clusters.Items {
		out[clusters.Items[i].Name] = clusters.Items[i].Status.Namespace
	}
	return out, nil
}
