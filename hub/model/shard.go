package model

import (
	"context"
	"encoding/json"

	coordinationv1 "k8s.io/api/coordination/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// Sharding. A hub shard owns the GitRepos labelled flotilla.dev/shard with its name, and
// everything derived from them: their Bundles, BundleDeployments and Content carry the same
// label, and its caches hold nothing else of those kinds. It syncs, renders and rolls out its
// GitRepos, runs their staged runs and sequences, and removes what they leave.
//
// The default shard (no name) owns the unlabelled GitRepos and keeps the fleet-wide view
// besides: it admits clusters and grants their agents (the content of every shard's
// deployments), registers them, writes the Clusters' and groups' status and collects
// unreferenced Content, so its caches hold every shard's deployments. A GitRepo moves by
// relabelling it: the new owner adopts its objects (relabels them) as it writes them, and every
// release is conditional on the deployment as read, so the two owners of a moment never
// release over each other.
type Shard string

// ownsLabels reports whether objects with these labels belong to the shard.
func (s Shard) ownsLabels(l map[string]string) bool { return l[v1alpha1.ShardLabel] == string(s) }

// Owns reports whether o belongs to the shard.
func (s Shard) Owns(o client.Object) bool { return s.ownsLabels(o.GetLabels()) }

// FleetWide reports whether this shard keeps the fleet-wide view (the default shard).
func (s Shard) FleetWide() bool { return s == "" }

// LeaderElectionID is the Lease the shard's replicas elect their leader with.
func (s Shard) LeaderElectionID() string {
	if s == "" {
		return LeaderElectionID
	}
	return LeaderElectionID + "-" + string(s)
}

// InheritShard sets the shard label of a derived object to the one of its GitRepo (from): present
// with the same value, or absent.
func InheritShard(l map[string]string, from map[string]string) {
	if owner, ok := from[v1alpha1.ShardLabel]; ok {
		l[v1alpha1.ShardLabel] = owner
	} else {
		delete(l, v1alpha1.ShardLabel)
	}
}

// selector selects the objects of this shard by their label.
func (s Shard) selector() labels.Selector {
	if s == "" {
		req, err := labels.NewRequirement(v1alpha1.ShardLabel, selection.DoesNotExist, nil)
		if err != nil {
			panic(err) // a constant, valid label key
		}
		return labels.NewSelector().Add(*req)
	}
	return labels.SelectorFromSet(labels.Set{v1alpha1.ShardLabel: string(s)})
}

// CacheScope is what the hub's caches hold: of GitRepos, the shard's; of Bundles,
// BundleDeployments and Content, the shard's too, except in the default shard, which keeps
// every shard's; of RoleBindings, the shared content grants; of Leases, the agents'.
func (s Shard) CacheScope() map[client.Object]cache.ByObject {
	scope := map[client.Object]cache.ByObject{
		&v1alpha1.GitRepo{}: {Label: s.selector()},
		&v1alpha1.HelmOp{}:  {Label: s.selector()},
		// Grants are read uncopied (one names hundreds of agents and is read for each
		// cluster's content): readers copy before they change one.
		&rbacv1.RoleBinding{}:   {Label: labelExists(LabelContentGrant), UnsafeDisableDeepCopy: ptr.To(true)},
		&coordinationv1.Lease{}: {Label: labelExists(v1alpha1.AgentLeaseLabel)},
	}
	if !s.FleetWide() {
		for _, o := range []client.Object{&v1alpha1.Bundle{}, &v1alpha1.BundleDeployment{}, &v1alpha1.Content{}} {
			scope[o] = cache.ByObject{Label: s.selector()}
		}
	}
	return scope
}

// Elsewhere reports whether an object the shard's cache does not show exists on the API server
// (another shard's): uncached, read only when the cache says it does not exist.
func Elsewhere(ctx context.Context, uncached client.Reader, key types.NamespacedName, o client.Object) bool {
	return uncached != nil && !apierrors.IsNotFound(uncached.Get(ctx, key, o))
}

// Adopt makes the object at key this shard's: it sets the shard label to the one of its GitRepo
// (from), read into o as written. The object is read with uncached first when given (o is then
// unset when it does not exist, with its NotFound error); without, it must exist.
func Adopt(ctx context.Context, c client.Client, uncached client.Reader, key types.NamespacedName, o client.Object, from map[string]string) error {
	if uncached != nil {
		if err := uncached.Get(ctx, key, o); err != nil {
			return err
		}
	}
	owner := any(nil) // null removes the label
	if v, ok := from[v1alpha1.ShardLabel]; ok {
		owner = v
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{v1alpha1.ShardLabel: owner}}})
	if err != nil {
		return err
	}
	o.SetName(key.Name)
	o.SetNamespace(key.Namespace)
	if err := c.Patch(ctx, o, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return err
	}
	log.FromContext(ctx).Info("adopted from another shard", "object", key.String(), "shard", owner)
	return nil
}

// LeaderElectionID names the Lease the hub's replicas elect their leader with.
const LeaderElectionID = "flotilla-hub"
