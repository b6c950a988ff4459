package plan

import (
	"context"
	"slices"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/bdstate"
	"github.com/flotilla-dev/flotilla/hub/deploy"
	"github.com/flotilla-dev/flotilla/hub/liveness"
	"github.com/flotilla-dev/flotilla/hub/model"
	"github.com/flotilla-dev/flotilla/rollout"
)

// The gather step of a continuous rollout: what the bundler and the rollout controller hand to
// rollout.Plan.

// PlanState is what the planner needs about a bundle, read from the cache, and the objects it
// was read from (the cache's own: copy before changing). Bds and Clusters are read-only: a
// Tracker keeps them for the bundle's next pass.
type PlanState struct {
	In       *rollout.Input
	Bds      map[string]*v1alpha1.BundleDeployment
	Clusters map[string]*v1alpha1.Cluster
	// Requeue is when the next cluster's heartbeat deadline passes (R1.11 needs a look then).
	Requeue time.Duration
	// clusterIn names the cluster of Clusters whose namespace (or the one it leaves) is a
	// cluster namespace: the view's index, built when first asked.
	clusterIn func(namespace string) (string, bool)
}

// GatherPlan reads the bundle's deployments and their clusters (groups, heartbeats, pause,
// dependencies) into the planner's input. Clusters named in also (the revision's targets) take
// part even before they have a deployment: they are about to be staged. With a placement, a
// cluster outside also that still has a deployment takes part as Excluded: it left the targets.
// It reads the whole fleet of the bundle; a Tracker's Gather reads only what changed.
func GatherPlan(ctx context.Context, c client.Reader, live *liveness.Liveness, now time.Time, bun *v1alpha1.Bundle, also map[string]model.RevisionTarget) (*PlanState, error) {
	groupsOf, groups, err := model.VersionedClusterGroups(ctx, c, bun.Namespace)
	if err != nil {
		return nil, err
	}
	v, err := readView(ctx, c, live, bun, also, groupsOf, groups)
	if err != nil {
		return nil, err
	}
	return v.state(ctx, c, live, now, bun)
}

// fleetView is what a planning pass reads of each cluster of a bundle, apart from what is
// judged at the pass itself (dependencies and heartbeats at its time).
type fleetView struct {
	basis    viewBasis
	groupsOf func(*v1alpha1.Cluster) map[string]map[string]string
	// order is the members by name (the planner's order: it sorts no further).
	order    []*viewMember
	members  map[string]*viewMember
	bds      map[string]*v1alpha1.BundleDeployment
	clusters map[string]*v1alpha1.Cluster
	// byAgentNamespace names the cluster of each cluster namespace (its own, and the one it
	// leaves while moving): a Lease is found by its namespace. Built when a Lease first changes.
	byAgentNamespace map[string]string
}

// viewBasis is what a view's members were read against: the bundle (its placement), the
// revision's record and the namespace's ClusterGroups. A view on another basis is read again.
type viewBasis struct {
	bundle     types.UID
	generation int64
	targetsID  string
	recorded   bool
	groups     string
}

// viewMember is a cluster as a pass plans it: the target without what is judged at each pass
// (Blocked, Offline), its groups and its heartbeats as read.
type viewMember struct {
	target    rollout.Target
	groups    []rollout.ClusterGroup
	heartbeat liveness.Heartbeat
}

func basisOf(bun *v1alpha1.Bundle, also map[string]model.RevisionTarget, groups string) viewBasis {
	b := viewBasis{bundle: bun.UID, generation: bun.Generation, recorded: also != nil, groups: groups}
	if rev := model.FindRevision(bun, model.WantedRevision(bun)); rev != nil {
		b.targetsID = rev.TargetsID
	}
	return b
}

// readView reads the bundle's fleet whole: its deployments and the Clusters of its namespace,
// each cluster's groups by groupsOf (of the ClusterGroups whose version is groups).
func readView(ctx context.Context, c client.Reader, live *liveness.Liveness, bun *v1alpha1.Bundle, also map[string]model.RevisionTarget,
	groupsOf func(*v1alpha1.Cluster) map[string]map[string]string, groups string) (*fleetView, error) {
	bds, clusters, err := model.ReadFleet(ctx, c, bun)
	if err != nil {
		return nil, err
	}
	// Sized for the fleet up front: a pass over 10,000 clusters otherwise grows each map a
	// dozen times (BenchmarkPlanningPass).
	taking := max(len(bds), len(also))
	v := &fleetView{basis: basisOf(bun, also, groups), groupsOf: groupsOf, order: make([]*viewMember, 0, taking),
		members: make(map[string]*viewMember, taking), bds: make(map[string]*v1alpha1.BundleDeployment, len(bds)),
		clusters: make(map[string]*v1alpha1.Cluster, taking)}
	// A cluster's deployment is the one in its namespace, or in the one it leaves (where the
	// hub writes them, model.DeploymentOn): a label naming another cluster does not make a
	// deployment that cluster's.
	byNamespace := make(map[string]*v1alpha1.BundleDeployment, len(bds))
	name := model.DeploymentName(bun.Namespace, bun.Name)
	for _, bd := range bds {
		if bd.DeletionTimestamp.IsZero() && bd.Name == name { // one being removed is no longer the rollout's
			byNamespace[bd.Namespace] = bd
		}
	}
	deploymentOn := func(cl *v1alpha1.Cluster) *v1alpha1.BundleDeployment {
		for _, ns := range [2]string{cl.Status.Namespace, cl.Status.PreviousNamespace} {
			if bd := byNamespace[ns]; ns != "" && bd != nil && bd.Labels[model.LabelCluster] == cl.Name {
				return bd
			}
		}
		return nil
	}
	members := make([]viewMember, taking) // one allocation for the fleet's
	for _, cl := range clusters {
		var m *viewMember
		if len(members) > 0 {
			m, members = &members[0], members[1:]
		}
		if m = v.put(live, bun, also, cl, deploymentOn(cl), m); m != nil {
			v.order = append(v.order, m)
		}
	}
	v.sortOrder()
	return v, nil
}

// put reads cl (with bd, its deployment, or nil) into the view, in m if given: it takes part
// when it has a deployment or the revision targets it. It returns its member, nil when it does
// not take part; the caller keeps the order and drops what the view held of cl before.
func (v *fleetView) put(live *liveness.Liveness, bun *v1alpha1.Bundle, also map[string]model.RevisionTarget, cl *v1alpha1.Cluster, bd *v1alpha1.BundleDeployment, m *viewMember) *viewMember {
	name := cl.Name
	_, targeted := also[name]
	if bd == nil && !targeted {
		return nil
	}
	// A placement removes a cluster that left the targets within its budgets (R2.4); the
	// record of the revision says which are targeted.
	excluded := bun.Spec.Placement != nil && also != nil && !targeted
	if m == nil {
		m = &viewMember{}
	}
	*m = viewMember{target: rollout.Target{Cluster: name, Labels: cl.Labels, Paused: cl.Spec.Paused, Excluded: excluded},
		heartbeat: live.Heartbeat(cl)}
	if bd != nil {
		m.target.Deployment = bdstate.Deployment(bd)
		v.bds[name] = bd
	}
	for g, gl := range v.groupsOf(cl) {
		m.target.Groups = append(m.target.Groups, g)
		m.groups = append(m.groups, rollout.ClusterGroup{Name: g, Labels: gl})
	}
	sort.Strings(m.target.Groups)
	v.members[name], v.clusters[name] = m, cl
	v.indexAgentNamespaces(cl)
	return m
}

// indexAgentNamespaces notes cl's namespaces in byAgentNamespace, once that is built. A
// namespace stays the cluster's that lives there rather than one that left it.
func (v *fleetView) indexAgentNamespaces(cl *v1alpha1.Cluster) {
	if v.byAgentNamespace == nil {
		return
	}
	if ns := cl.Status.Namespace; ns != "" {
		v.byAgentNamespace[ns] = cl.Name
	}
	if ns := cl.Status.PreviousNamespace; ns != "" {
		if other := v.clusters[v.byAgentNamespace[ns]]; other == nil || other.Status.Namespace != ns {
			v.byAgentNamespace[ns] = cl.Name
		}
	}
}

// clusterOfAgentNamespace is the cluster taking part whose namespace (or the one it leaves) is
// ns.
func (v *fleetView) clusterOfAgentNamespace(ns string) (string, bool) {
	if v.byAgentNamespace == nil {
		v.byAgentNamespace = make(map[string]string, len(v.clusters))
		for _, cl := range v.clusters {
			v.indexAgentNamespaces(cl)
		}
	}
	name, ok := v.byAgentNamespace[ns]
	return name, ok
}

// sortOrder sorts the members by name.
func (v *fleetView) sortOrder() {
	slices.SortFunc(v.order, func(a, b *viewMember) int { return strings.Compare(a.target.Cluster, b.target.Cluster) })
}

// drop takes a cluster out of the view; the caller keeps the order.
func (v *fleetView) drop(name string) {
	if cl := v.clusters[name]; cl != nil {
		for _, ns := range [2]string{cl.Status.Namespace, cl.Status.PreviousNamespace} {
			if v.byAgentNamespace[ns] == name {
				delete(v.byAgentNamespace, ns)
			}
		}
	}
	delete(v.members, name)
	delete(v.bds, name)
	delete(v.clusters, name)
}

// state is the planner's input from the view, with what is judged at each pass: the bundle's
// dependencies on each cluster and each agent's heartbeats at now. Bds and Clusters are the
// view's own maps.
func (v *fleetView) state(ctx context.Context, c client.Reader, live *liveness.Liveness, now time.Time, bun *v1alpha1.Bundle) (*PlanState, error) {
	held, err := dependencyHolds(ctx, c, bun)
	if err != nil {
		return nil, err
	}
	rev := model.WantedRevision(bun)
	st := &PlanState{In: &rollout.Input{Revision: rev, Paused: bun.Spec.Paused, Now: now, Quarantine: ActiveQuarantine(bun), CompletedAt: completedAt(bun, rev),
		Targets: make([]rollout.Target, 0, len(v.order))},
		Bds: v.bds, Clusters: v.clusters, clusterIn: v.clusterOfAgentNamespace}
	in := st.In
	if in.Strategy, err = model.RolloutStrategy(bun.Spec.RolloutStrategy); err != nil {
		return nil, err
	}
	if in.Placement, err = model.Placement(bun.Spec.Placement); err != nil {
		return nil, err
	}
	for _, m := range v.order {
		t := m.target
		t.Blocked = held(t.Cluster)
		for _, g := range m.groups {
			in.Groups = appendGroup(in.Groups, g)
		}
		// A cluster that never reported is not offline, just pending.
		if ok, left, seen, reported := live.Judge(&m.heartbeat, now); ok {
			st.Requeue = model.Sooner(st.Requeue, left+time.Second)
		} else if t.Offline = reported; t.Offline && t.Deployment != nil {
			d := *t.Deployment // the view's is kept for the next pass
			MarkOffline(&d, seen)
			t.Deployment = &d
		}
		in.Targets = append(in.Targets, t)
	}
	return st, nil
}

// CountUnseen plans with the releases this hub wrote that the cache does not show yet (their
// clusters WaitApplied): a pass right after a batch must neither hand the same clusters the
// revision again nor leave them out of the partition's budget (R1.8). It looks up the few
// releases in flight by their namespace rather than visiting every cluster of the fleet: the
// targets are sorted by cluster, as a gathered state's are.
func (st *PlanState) CountUnseen(r *deploy.Releases, bun *v1alpha1.Bundle, now time.Time) {
	name := model.DeploymentName(bun.Namespace, bun.Name)
	r.SeenOf(name, func(ns string) *v1alpha1.BundleDeployment {
		if cl, ok := st.clusterIn(ns); ok {
			return st.Bds[cl]
		}
		return nil
	})
	for ns, ref := range r.UnseenOf(name, now) {
		// A release counts for the cluster whose namespace it was written to, not for one
		// that left that namespace.
		cl, ok := st.clusterIn(ns)
		if !ok || st.Clusters[cl].Status.Namespace != ns {
			continue
		}
		i, ok := slices.BinarySearchFunc(st.In.Targets, cl, func(t rollout.Target, name string) int { return strings.Compare(t.Cluster, name) })
		if !ok {
			continue
		}
		countReleased(&st.In.Targets[i], ref, now)
	}
}

// countReleased plans t as released ref at now and not applied yet.
func countReleased(t *rollout.Target, ref v1alpha1.RevisionRef, now time.Time) {
	d := rollout.Deployment{}
	if t.Deployment != nil {
		d = *t.Deployment
	}
	d.Staged, d.Released, d.Applied, d.ApplyFailed = ref.Index, ref.Index, 0, false
	d.ReleasedAt, d.WasReady, d.NotReadyAt, d.Rollback = now, false, time.Time{}, false
	t.Deployment = &d
}

// ReleasedWithStaging plans as if want were staged already and returns the clusters the planner
// releases at once, with its decision: their deployment is staged and released in one write
// instead of two.
func ReleasedWithStaging(st *PlanState, want model.RevisionTargets) (map[string]bool, *rollout.Decision) {
	in := *st.In
	in.Targets = append([]rollout.Target(nil), st.In.Targets...)
	for i := range in.Targets {
		t := &in.Targets[i]
		w, ok := want[t.Cluster]
		if !ok {
			continue
		}
		d := rollout.Deployment{}
		if t.Deployment != nil {
			d = *t.Deployment
		}
		if bd := st.Bds[t.Cluster]; bd == nil || bd.Spec.Staged != w.Ref {
			d.Staged = w.Ref.Index
		}
		t.Deployment = &d
	}
	d := rollout.Plan(&in)
	out := map[string]bool{}
	for _, name := range d.Release {
		out[name] = true
	}
	return out, d
}

func appendGroup(gs []rollout.ClusterGroup, g rollout.ClusterGroup) []rollout.ClusterGroup {
	for _, x := range gs {
		if x.Name == g.Name {
			return gs
		}
	}
	return append(gs, g)
}
