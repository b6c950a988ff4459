package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/flotilla-dev/flotilla/hub/access"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/events"
	"github.com/flotilla-dev/flotilla/hub/metrics"
	"github.com/flotilla-dev/flotilla/hub/model"
	"github.com/flotilla-dev/flotilla/rollout"
)

// Writing BundleDeployments: the bundler stages revisions, the rollout, run and sequence
// controllers release them. Each deployment change is one write, and a write the cache does not
// show yet is not made twice.

// StageTarget points a deployment's staged revision at t, marking a step back as a rollback;
// with release, the agent may apply it at once (released at now). It reports whether anything
// changed.
func StageTarget(bd *v1alpha1.BundleDeployment, t model.RevisionTarget, release bool, now time.Time) bool {
	before := bd.DeepCopy()
	bd.Spec.Staged, bd.Spec.Options = t.Ref, t.Options
	switch {
	case release && (bd.Spec.Released == nil || *bd.Spec.Released != t.Ref):
		recordLastGood(bd)
		ref := t.Ref
		bd.Spec.Released, bd.Spec.Rollback, bd.Spec.ReleasedAt = &ref, false, &metav1.Time{Time: now.Truncate(time.Second)}
	case release:
		bd.Spec.Rollback = false
	case bd.Spec.Released != nil && bd.Spec.Released.Index > t.Ref.Index:
		bd.Spec.Rollback = true
	}
	return !equality.Semantic.DeepEqual(before.Spec, bd.Spec)
}

// recordLastGood keeps, before a new release, the revision the cluster ran Ready: what a
// rollback gives it back (R5.4). A revision that never was Ready there, or a restore, leaves
// the last good one as it was.
func recordLastGood(bd *v1alpha1.BundleDeployment) {
	cur := bd.Spec.Released
	if cur == nil || bd.Status.ReadyAt == nil || bd.Status.AppliedDeploymentID != cur.DeploymentID {
		return
	}
	good := *cur
	bd.Spec.LastGood = &good
}

// restoreTarget releases a deployment its last good revision again, or nothing when it has
// none (the agent removes the bundle): a rollback (R5.4). It reports whether anything changed.
func restoreTarget(bd *v1alpha1.BundleDeployment, now time.Time) bool {
	before := bd.DeepCopy()
	if g := bd.Spec.LastGood; g != nil {
		good := *g
		bd.Spec.Released = &good
	} else {
		bd.Spec.Released = nil
	}
	bd.Spec.Rollback, bd.Spec.ReleasedAt = true, &metav1.Time{Time: now.Truncate(time.Second)}
	return !equality.Semantic.DeepEqual(before.Spec, bd.Spec)
}

// Restore writes a rollback's release of the deployment's last good revision (restoreTarget).
func Restore(ctx context.Context, c client.Client, bd *v1alpha1.BundleDeployment, now time.Time) error {
	orig, bd := bd, bd.DeepCopy()
	if !restoreTarget(bd, now) {
		return nil
	}
	return UpdateDeployment(ctx, c, bd, orig)
}

// UpdateDeployment writes a deployment's spec change. bd is the cached deployment with the
// change applied: while no other write came after the cache's copy, a full update of it is the
// API server's cheapest write of an existing object (2.66 ms against 3.29 ms for the patch,
// BenchmarkWriteKinds), and what the update leaves out of the request (managed fields, status)
// the server keeps. When another write came first (a conflict), the fields that changed are
// patched (deploymentPatch): a JSON patch built from them, as diffing whole objects for a merge
// patch cost the hub more CPU than any other step of a release.
//
// Both writes are conditional on the deployment's spec being the one the decision was made
// on: the update by its resourceVersion, the patch by its generation (which the agents' status
// reports leave alone). Two hubs that both think they lead, or a hub acting on a stale cache,
// cannot release over each other's write: the second one fails with a conflict and plans
// again from what is there.
func UpdateDeployment(ctx context.Context, c client.Client, bd, orig *v1alpha1.BundleDeployment) error {
	// Deployments from before removals were confirmed get the finalizer with their next write.
	controllerutil.AddFinalizer(bd, v1alpha1.UninstallFinalizer)
	err := c.Update(ctx, bd) // a failed update leaves bd as it was
	if apierrors.IsConflict(err) {
		var patch []byte
		if patch, err = json.Marshal(deploymentPatch(bd, orig)); err == nil {
			err = c.Patch(ctx, bd, client.RawPatch(types.JSONPatchType, patch))
		}
		if apierrors.IsInvalid(err) {
			// The generation test failed: another write changed the spec first.
			err = apierrors.NewConflict(v1alpha1.GroupVersion.WithResource("bundledeployments").GroupResource(), bd.Name, fmt.Errorf("its spec changed after generation %d", orig.Generation))
		}
	}
	if err != nil {
		return fmt.Errorf("failed to update %s in %s: %w", bd.Spec.Bundle, bd.Namespace, err)
	}
	if bd.Spec.Released != nil && (orig.Spec.Released == nil || *orig.Spec.Released != *bd.Spec.Released) {
		metrics.ReleasesWritten.
			Inc()
	}
	return nil
}

// patchOp is one JSON patch operation.
type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// deploymentPatch lists the operations that turn orig into bd, on condition that its spec is
// still orig's (its generation): the fields StageTarget sets,
// each replaced whole ("add" replaces what is there), options and the rollback mark only when
// they changed, and the labels if they changed. A rollback mark that goes is removed, not
// written false: every later write of the deployment would carry the field.
func deploymentPatch(bd, orig *v1alpha1.BundleDeployment) []patchOp {
	ops := []patchOp{{"test", "/metadata/generation", orig.Generation}, {"add", "/spec/staged", bd.Spec.Staged}}
	switch {
	case bd.Spec.Released != nil:
		ops = append(ops, patchOp{"add", "/spec/released", bd.Spec.Released})
	case orig.Spec.Released != nil:
		ops = append(ops, patchOp{Op: "remove", Path: "/spec/released"})
	}
	if bd.Spec.ReleasedAt != nil && !bd.Spec.ReleasedAt.Equal(orig.Spec.ReleasedAt) {
		ops = append(ops, patchOp{"add", "/spec/releasedAt", bd.Spec.ReleasedAt})
	}
	if bd.Spec.LastGood != nil && (orig.Spec.LastGood == nil || *orig.Spec.LastGood != *bd.Spec.LastGood) {
		ops = append(ops, patchOp{"add", "/spec/lastGood", bd.Spec.LastGood})
	}
	if !equality.Semantic.DeepEqual(orig.Spec.Options, bd.Spec.Options) {
		ops = append(ops, patchOp{"add", "/spec/options", bd.Spec.Options})
	}
	switch {
	case bd.Spec.Rollback && !orig.Spec.Rollback:
		ops = append(ops, patchOp{"add", "/spec/rollback", true})
	case !bd.Spec.Rollback && orig.Spec.Rollback:
		ops = append(ops, patchOp{Op: "remove", Path: "/spec/rollback"})
	}
	if !equality.Semantic.DeepEqual(orig.Labels, bd.Labels) {
		ops = append(ops, patchOp{"add", "/metadata/labels", bd.Labels})
	}
	if !slices.Equal(orig.Finalizers, bd.Finalizers) {
		ops = append(ops, patchOp{"add", "/metadata/finalizers", bd.Finalizers})
	}
	return ops
}

// WriteDeployment stages t on the bundle's deployment in the cluster's namespace, creating it
// if bd is nil, and releases it too when release is set; it returns the deployment as written.
// bd itself is not changed (it may be the cache's). Nothing is written when nothing changes; a
// cluster not admitted yet has no namespace to stage into.
func WriteDeployment(ctx context.Context, c client.Client, bun *v1alpha1.Bundle, cl *v1alpha1.Cluster, bd *v1alpha1.BundleDeployment, t model.RevisionTarget, release bool, now time.Time) (*v1alpha1.BundleDeployment, error) {
	if cl.Status.Namespace == "" {
		return bd, nil
	}
	labels := map[string]string{model.LabelBundle: bun.Name, model.LabelBundleNamespace: bun.Namespace, model.LabelCluster: cl.Name}
	model.InheritShard(labels, bun.Labels)
	if bd == nil {
		bd = &v1alpha1.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Name: model.DeploymentName(bun.Namespace, bun.Name), Namespace: cl.Status.Namespace, Labels: labels,
			Finalizers: []string{v1alpha1.UninstallFinalizer}},
			Spec: v1alpha1.BundleDeploymentSpec{Bundle: bun.Name, BundleNamespace: bun.Namespace}}
		StageTarget(bd, t, release, now)
		err := c.Create(ctx, bd)
		if !apierrors.IsAlreadyExists(err) {
			if err != nil {
				return nil, fmt.Errorf("failed to create %s in %s: %w", bun.Name, cl.Status.Namespace, err)
			}
			if release {
				metrics.ReleasesWritten.
					Inc()
			}
			return bd, nil
		}
		// Another shard's until now (its GitRepo moved to this one): adopt it, then stage on it.
		live := &v1alpha1.BundleDeployment{}
		if err := model.Adopt(ctx, c, nil, client.ObjectKeyFromObject(bd), live, bun.Labels); err != nil {
			return nil, fmt.Errorf("failed to adopt %s in %s: %w", bun.Name, cl.Status.Namespace, err)
		}
		bd = live
	}
	orig, bd := bd, bd.DeepCopy()
	bd.Labels = labels
	if StageTarget(bd, t, release, now) || !equality.Semantic.DeepEqual(orig.Labels, bd.Labels) {
		return bd, UpdateDeployment(ctx, c, bd, orig)
	}
	return bd, nil
}

// GrantAndWrite writes a deployment as WriteDeployment does, its agent first granted the
// content of t if bd does not stage it already: the agent can read what it is released at once.
// Content the cache shows no grant of is looked up in live (uncached) before it is written into
// the cluster's own Role: the bundler's shared grant of a commit may be a moment ahead of the
// cache, and content written into a Role stays there until the cluster's next revision.
func GrantAndWrite(ctx context.Context, c client.Client, live client.Reader, bun *v1alpha1.Bundle, cl *v1alpha1.Cluster, bd *v1alpha1.BundleDeployment, t model.RevisionTarget, release bool, now time.Time) (*v1alpha1.BundleDeployment, error) {
	// Only the default shard grants (see shard); another shard's deployments wait for it.
	ownGrants := model.Shard("").Owns(bun)
	if ownGrants && (bd == nil || bd.Spec.Staged.ContentID != t.Ref.ContentID) && !access.HasContent(ctx, c, cl, bun.Namespace, t.Ref.ContentID) &&
		(live == nil || !access.HasContent(ctx, live, cl, bun.Namespace, t.Ref.ContentID)) {
		if err := access.GrantAccessWith(ctx, c, cl, map[string][]string{bun.Namespace: {t.Ref.ContentID}}, access.AccessRewrite{Live: live}); err != nil {
			return nil, fmt.Errorf("failed to grant cluster %s its content: %w", cl.Name, err)
		}
	}
	return WriteDeployment(ctx, c, bun, cl, bd, t, release, now)
}

// Restage stages (and with release, releases) t on an existing deployment and returns it as
// written; bd itself, possibly the cache's, is not changed.
func Restage(ctx context.Context, c client.Client, bd *v1alpha1.BundleDeployment, t model.RevisionTarget, release bool, now time.Time) (*v1alpha1.BundleDeployment, error) {
	orig, bd := bd, bd.DeepCopy()
	if StageTarget(bd, t, release, now) {
		return bd, UpdateDeployment(ctx, c, bd, orig)
	}
	return bd, nil
}

// WriteSlots bounds the deployment writes in flight, the bundler's and the rollout
// controller's together (Options.WritesInFlight): both hold the one hub.Run makes. A rollout moves on the agents' reports: a hub
// that floods the API server with releases makes every report wait behind them, and what it
// gains in releasing it loses in waiting for readiness.
type WriteSlots chan struct{}

// DefaultWritesInFlight is the hub's default bound: the client concurrency the write floor of
// the scale benchmark saturates the API server with.
const DefaultWritesInFlight = 8

// Do runs write once a slot is free. Nil slots bound nothing.
func (s WriteSlots) Do(ctx context.Context, write func() error) error {
	if s == nil {
		return write()
	}
	select {
	case s <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-s }()
	return write()
}

// Releases remembers the releases this hub wrote until its cache shows them: a pass planned on
// a cache a moment behind would otherwise write them again. One is shared by the hub: the
// bundler and the bundle-rollout controller add what they released (Add); the rollout
// controller asks before it releases (Pending), and plan.GatherPlan forgets what the cache
// shows and plans with what it does not yet (Seen, Unseen).
type Releases struct {
	mu sync.Mutex
	at map[types.NamespacedName]release
	// sweepAt is the size at which Add drops the releases past releaseMemory: a release no
	// pass asks about again (a staged run's, once the cache shows it) is dropped there.
	sweepAt int
}

type release struct {
	ref v1alpha1.RevisionRef
	at  time.Time
}

// releaseMemory is how long a release is remembered if the cache never shows it (the deployment
// was deleted meanwhile, or its event was lost to a watch restart).
const releaseMemory = 30 * time.Second

func (r *Releases) Add(key types.NamespacedName, ref v1alpha1.RevisionRef, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.at == nil {
		r.at = map[types.NamespacedName]release{}
	}
	r.at[key] = release{ref: ref, at: now}
	if len(r.at) >= r.sweepAt {
		maps.DeleteFunc(r.at, func(_ types.NamespacedName, rel release) bool { return now.Sub(rel.at) > releaseMemory })
		r.sweepAt = max(2*len(r.at), minReleaseSweep) // amortised: each release is swept over once
	}
}

// minReleaseSweep is the fewest releases remembered before Add sweeps.
const minReleaseSweep = 1024

// Pending reports whether deploymentID was released to key recently and the cache may not
// show it yet.
func (r *Releases) Pending(key types.NamespacedName, deploymentID string, now time.Time) bool {
	ref, ok := r.Unseen(key, now)
	return ok && ref.DeploymentID == deploymentID
}

// Unseen is the release written to key recently that the cache does not show yet.
func (r *Releases) Unseen(key types.NamespacedName, now time.Time) (v1alpha1.RevisionRef, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rel, ok := r.at[key]
	if ok && now.Sub(rel.at) > releaseMemory {
		delete(r.at, key)
		return v1alpha1.RevisionRef{}, false
	}
	return rel.ref, ok
}

// Forget drops the release of deploymentID to key: its write failed, and the cluster is to be
// planned again.
func (r *Releases) Forget(key types.NamespacedName, deploymentID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rel, ok := r.at[key]; ok && rel.ref.DeploymentID == deploymentID {
		delete(r.at, key)
	}
}

// Seen forgets what the cache shows released.
func (r *Releases) Seen(bd *v1alpha1.BundleDeployment) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seenLocked(client.ObjectKeyFromObject(bd), bd)
}

// SeenOf is Seen for the deployments named name whose releases are remembered, each looked up
// by its namespace in deploymentIn: a planning pass asks for the few releases in flight rather
// than offering every deployment of its bundle.
func (r *Releases) SeenOf(name string, deploymentIn func(namespace string) *v1alpha1.BundleDeployment) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for key := range r.at {
		if key.Name != name {
			continue
		}
		if bd := deploymentIn(key.Namespace); bd != nil && client.ObjectKeyFromObject(bd) == key {
			r.seenLocked(key, bd)
		}
	}
}

// seenLocked forgets the release remembered for key if bd, the cache's deployment of key,
// shows it.
func (r *Releases) seenLocked(key types.NamespacedName, bd *v1alpha1.BundleDeployment) {
	if bd.Spec.Released == nil {
		return
	}
	if rel, ok := r.at[key]; ok && rel.ref.DeploymentID == bd.Spec.Released.DeploymentID {
		delete(r.at, key)
	}
}

// UnseenOf is Unseen for every deployment named name (a bundle's, in each cluster namespace),
// by cluster namespace: a planning pass looks up its few unseen releases rather than asking for
// each of its clusters.
func (r *Releases) UnseenOf(name string, now time.Time) map[string]v1alpha1.RevisionRef {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out map[string]v1alpha1.RevisionRef
	for key, rel := range r.at {
		switch {
		case key.Name != name:
		case now.Sub(rel.at) > releaseMemory:
			delete(r.at, key)
		default:
			if out == nil {
				out = map[string]v1alpha1.RevisionRef{}
			}
			out[key.Namespace] = rel.ref
		}
	}
	return out
}

// StagingNow marks the bundles the bundler is staging a commit for (Begin, End: the bundler
// alone writes it; the rollout controller reads it, Active and Done). While it writes their
// deployments, the rollout controller leaves deployments whose staging is behind to it: writing
// them too would only write the same thing twice. When a bundle's staging ends, done names it:
// the rollout controller plans what the bundler left at once, rather than when the events of
// the bundler's writes or its own retry come round.
type StagingNow struct {
	mu   sync.Mutex
	n    map[types.NamespacedName]int
	Done chan event.GenericEvent
}

func NewStagingNow() *StagingNow {
	return &StagingNow{Done: make(chan event.GenericEvent, 1024)}
}

func (s *StagingNow) Begin(keys []types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n == nil {
		s.n = map[types.NamespacedName]int{}
	}
	for _, k := range keys {
		s.n[k]++
	}
}

func (s *StagingNow) End(keys []types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		if s.n[k]--; s.n[k] <= 0 {
			delete(s.n, k)
			select {
			case s.Done <- event.GenericEvent{Object: &v1alpha1.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: k.Namespace, Name: k.Name}}}:
			default: // a full queue has this bundle's pass coming already, or the retry will
			}
		}
	}
}

func (s *StagingNow) Active(key types.NamespacedName) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n[key] > 0
}

func DeploymentKey(bun *v1alpha1.Bundle, cl *v1alpha1.Cluster) types.NamespacedName {
	return types.NamespacedName{Namespace: cl.Status.Namespace, Name: model.DeploymentName(bun.Namespace, bun.Name)}
}

// StageWorkers is how many clusters have their deployments staged at once.
const StageWorkers = 8

// RecordReleases records, for each partition a decision released clusters in, that the
// revision reached it (rollouts of several partitions). Passes releasing further batches of a partition repeat the Event, which
// the recorder counts instead of writing it again. The bundler, which releases the first
// clusters of a commit with their staging, records its releases the same way.
func RecordReleases(rec *events.Recorder, bun *v1alpha1.Bundle, revision int64, d *rollout.Decision, released func(cluster string) bool) {
	if len(d.Partitions) < 2 {
		return // one partition: its release is the revision's staging, told on the GitRepo
	}
	inPartition := map[string]int{}
	for _, c := range d.Clusters {
		if released(c.Name) {
			inPartition[c.Partition]++
		}
	}
	for _, p := range d.Partitions {
		if inPartition[p.Name] > 0 {
			rec.Normal(bun, v1alpha1.EventPartitionReleased, "revision %d released to partition %s (%d clusters, maxUnavailable %d)", revision, p.Name, len(p.Clusters), p.MaxUnavailable)
		}
	}
}
