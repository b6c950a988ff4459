package hub

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"sort"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/flotilla-dev/flotilla/bundle"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/contentstore"
	"github.com/flotilla-dev/flotilla/hub/events"
	"github.com/flotilla-dev/flotilla/hub/gitsource"
	"github.com/flotilla-dev/flotilla/rollout"
)

// Labels the hub puts on what it creates.
const (
	LabelGitRepo         = "flotilla.dev/gitrepo"
	LabelBundle          = "flotilla.dev/bundle"
	LabelBundleNamespace = "flotilla.dev/bundle-namespace"
	LabelCluster         = "flotilla.dev/cluster"
)

// RenderError is a commit, or some bundles of it, that does not render: it names the file and
// field. The last good revision of each bundle that failed stays deployed.
type RenderError struct {
	Err error
	// Partial: the commit's other bundles rendered and roll out; the commit is the GitRepo's.
	Partial bool
}

func (e *RenderError) Error() string { return e.Err.Error() }
func (e *RenderError) Unwrap() error { return e.Err }

// bundler turns a GitRepo's new commit into Bundles with a new revision (and its record of
// what each targeted cluster is to run) and their Content, and writes the BundleDeployments the
// commit changes at once: those the planner releases straight away (staged and released in one
// write) and, for paused bundles and clusters, staged runs and sequences, the staging of every
// targeted cluster. Releasing the rest is the rollout controllers' decision, not the bundler's.
type bundler struct {
	client client.Client
	// shard is the hub shard whose GitRepos this bundler renders; uncached reads, outside the
	// default shard, the Bundles another shard held before a GitRepo moved here.
	shard     shard
	uncached  client.Reader
	content   *contentstore.Store
	revisions *revisionStore
	released  *releases
	staging   *stagingNow
	writes    writeSlots
	charts    *bundle.ChartFetcher
	// live says which clusters' agents are online (R1.11).
	live *liveness
	// sandbox runs the template engines out of the hub's process (bundle.Sandbox).
	sandbox *bundle.Sandbox
	// renderBudget bounds the rendering of one commit of a GitRepo, all bundles and clusters
	// together (Options.RenderBudget).
	renderBudget time.Duration
	// crossNamespaceRefs lets valuesFrom name other namespaces (Options.AllowCrossNamespaceRefs).
	crossNamespaceRefs bool
	historyLimit       int
	now                func() time.Time
	// checkout returns a directory holding a commit of a GitRepo's repository: older
	// revisions are rendered from their own commits for clusters that join (recordJoiners).
	checkout func(ctx context.Context, repo *v1alpha1.GitRepo, commit string) (string, error)
	recorder *events.Recorder
}

// DefaultRenderBudget is Options.RenderBudget's default: five renders at the sandbox's
// default deadline.
const DefaultRenderBudget = 5 * time.Minute

// errRenderBudget is the cause of a commit's renders stopped at its render budget.
var errRenderBudget = errors.New("render budget spent")

// stageWorkers is how many clusters have their deployments staged at once.
const stageWorkers = 8

func (b *bundler) onCommit(ctx context.Context, repo *v1alpha1.GitRepo, checkout, commit string) error {
	sources, err := bundle.Discover(checkout, repo.Name, repo.Spec.Paths)
	if err != nil {
		return &RenderError{Err: err}
	}
	clusters, err := b.targets(ctx, repo.Namespace)
	if err != nil {
		return err
	}
	all, failed, err := b.render(ctx, repo, checkout, sources, clusters)
	if err != nil {
		return err
	}
	keys := make([]types.NamespacedName, len(all))
	for i, r := range all {
		keys[i] = types.NamespacedName{Namespace: repo.Namespace, Name: r.src.Name}
	}
	b.staging.begin(keys)
	defer b.staging.end(keys)
	// Everything rendered: only now write, so a broken commit changes nothing.
	plans, err := b.record(ctx, repo, commit, all)
	if err != nil {
		return err
	}
	// Told as decided, before the writes: the rollout controller, which may report a pause on
	// what is written meanwhile, tells its story after this one.
	recordStaged(b.recorder, repo, commit, plans)
	for _, p := range plans {
		if p.decision != nil {
			recordReleases(b.recorder, p.bundle, p.bundle.Spec.LatestRevision, p.decision, func(c string) bool { _, staged := p.want[c]; return p.release[c] && staged })
		}
	}
	if err := b.writeStaging(ctx, clusters, plans); err != nil {
		return err
	}
	if err := b.removeStale(ctx, repo, sources); err != nil {
		return err
	}
	return b.commitFailures(ctx, repo, commit, failed, len(all))
}

// recordStaged tells, in one Event on the GitRepo, which bundles a commit gave a new revision:
// a commit of fifty bundles is one Event, not fifty.
func recordStaged(rec *events.Recorder, repo *v1alpha1.GitRepo, commit string, plans []staging) {
	var staged []string
	clusters := 0
	for _, p := range plans {
		if p.newRevision {
			staged = append(staged, fmt.Sprintf("%s revision %d", p.bundle.Name, p.bundle.Spec.LatestRevision))
			clusters = max(clusters, len(p.recorded))
		}
	}
	switch len(staged) {
	case 0:
	case 1:
		rec.Normal(repo, v1alpha1.EventRevisionStaged, "commit %s: %s staged for %d clusters", shortCommit(commit), staged[0], clusters)
	default:
		slices.Sort(staged)
		rec.Normal(repo, v1alpha1.EventRevisionStaged, "commit %s: new revisions of %d bundles staged: %s", shortCommit(commit), len(staged), listSome(staged, 10))
	}
}

// rendered is one bundle of a commit, rendered for each cluster it targets.
type rendered struct {
	src     *bundle.Source
	targets map[string]*bundle.Rendered // cluster → render
	// clusters are what each target was rendered for.
	clusters map[string]bundle.Target
	// restrictions are the namespace's FleetRestrictions, which every deployment carries.
	restrictions []v1alpha1.DeploymentRestriction
}

// render renders every bundle for every cluster it targets. A bundle that does not render for
// one of them is left out and returned among the failed, as Fleet fails that bundle alone: the
// commit's other bundles roll out. Any other error (the API server's) is the commit's.
func (b *bundler) render(ctx context.Context, repo *v1alpha1.GitRepo, checkout string, sources []bundle.Source, clusters []targetCluster) ([]rendered, []bundleFailure, error) {
	rr, err := b.newRepoRenderer(ctx, repo, checkout)
	if err != nil {
		return nil, nil, err
	}
	defer rr.Close()
	// The commit's renders share one budget: a repository whose bundles each take the sandbox's
	// whole deadline holds its poll worker for the budget, not for as many deadlines as it has
	// bundles. Bundles not rendered within it fail alone and render again at the next poll.
	budget, spent := context.WithTimeoutCause(ctx, positiveOr(b.renderBudget, DefaultRenderBudget), errRenderBudget)
	defer spent()
	all := make([]rendered, 0, len(sources))
	var failed []bundleFailure
	for i := range sources {
		src := &sources[i]
		if err := b.ownName(ctx, repo, src); err != nil {
			failed = append(failed, bundleFailure{name: src.Name, err: err})
			continue
		}
		spentNow := func() bool { return ctx.Err() == nil && context.Cause(budget) == errRenderBudget }
		if spentNow() {
			failed = append(failed, b.overBudget(src))
			continue
		}
		r, err := rr.renderAll(budget, repo, src, clusters)
		var renderErr *RenderError
		switch {
		case err != nil && spentNow():
			failed = append(failed, b.overBudget(src))
		case errors.As(err, &renderErr):
			failed = append(failed, bundleFailure{name: src.Name, err: renderErr})
		case err != nil:
			return nil, nil, err
		default:
			all = append(all, r)
		}
	}
	return all, failed, nil
}

// overBudget is the failure of a bundle the commit's render budget did not reach, or stopped.
func (b *bundler) overBudget(src *bundle.Source) bundleFailure {
	return bundleFailure{name: src.Name, err: &RenderError{Err: fmt.Errorf("bundle %s (%s): not rendered: the commit's render budget of %s was spent (--render-budget); it is rendered again at the next poll",
		src.Name, src.Dir, positiveOr(b.renderBudget, DefaultRenderBudget))}}
}

// ownName refuses a bundle whose name is another GitRepo's Bundle's in the namespace:
// fleet.yaml's name is the repository author's, and never takes another GitRepo's Bundle over.
// A Bundle of no GitRepo (made by hand) is not taken over either.
func (b *bundler) ownName(ctx context.Context, repo *v1alpha1.GitRepo, src *bundle.Source) *RenderError {
	var bun v1alpha1.Bundle
	if err := b.client.Get(ctx, types.NamespacedName{Namespace: repo.Namespace, Name: src.Name}, &bun); err != nil {
		return nil // none (or unreadable: stage reads it again)
	}
	if owner := bun.Labels[LabelGitRepo]; owner != repo.Name {
		return nameTaken(src, owner)
	}
	return nil
}

func nameTaken(src *bundle.Source, owner string) *RenderError {
	by := "no GitRepo"
	if owner != "" {
		by = "GitRepo " + owner
	}
	return &RenderError{Err: fmt.Errorf("bundle %s (%s): the name is taken by a Bundle of %s in this namespace: give the bundle another name in %s",
		src.Name, src.Dir, by, orDefault(src.FleetFile, path.Join(src.Dir, bundle.FleetFileName)))}
}

// bundleFailure is a bundle of a commit that does not render.
type bundleFailure struct {
	name string
	err  *RenderError
}

// renderAll renders one bundle for every cluster it targets.
func (rr *repoRenderer) renderAll(ctx context.Context, repo *v1alpha1.GitRepo, src *bundle.Source, clusters []targetCluster) (rendered, error) {
	r := rendered{src: src, targets: map[string]*bundle.Rendered{}, clusters: map[string]bundle.Target{}, restrictions: rr.policy.forDeployment()}
	for _, c := range clusters {
		res, err := rr.render(ctx, repo, src, c.target)
		if err != nil {
			return r, err
		}
		if res != nil {
			r.targets[c.cluster.Name], r.clusters[c.cluster.Name] = res, c.target
		}
	}
	return r, nil
}

// commitFailures is the error of a commit some of whose bundles do not render: each failed
// Bundle that exists records it (status.renderFailure, kept deployed at its last revision), and
// the GitRepo's Rendered condition names them all. Partial when other bundles rendered.
func (b *bundler) commitFailures(ctx context.Context, repo *v1alpha1.GitRepo, commit string, failed []bundleFailure, rendered int) error {
	if len(failed) == 0 {
		return nil
	}
	msgs := make([]string, 0, len(failed))
	var errs []error
	for _, f := range failed {
		msgs = append(msgs, f.err.Error())
		if err := b.setRenderFailure(ctx, repo, f.name, &v1alpha1.RenderFailure{Commit: commit, Message: truncate(gitsource.Sanitize(f.err.Error()), 4096)}); err != nil {
			errs = append(errs, err)
		}
	}
	slices.Sort(msgs)
	// The GitRepo's condition names a few, each Bundle its own: a condition's message is bounded.
	const named = 5
	listed := strings.Join(msgs[:min(len(msgs), named)], "; ")
	if len(msgs) > named {
		listed += fmt.Sprintf("; and %d more (each Bundle's Rendered condition says why)", len(msgs)-named)
	}
	err := &RenderError{Err: fmt.Errorf("%d of %d bundles do not render and keep their last revision: %s", len(failed), len(failed)+rendered, truncate(listed, 16384)), Partial: rendered > 0}
	if len(failed) == 1 && rendered == 0 {
		err.Err = failed[0].err.Err
	}
	if len(errs) > 0 {
		return errors.Join(append(errs, err)...)
	}
	return err
}

// setRenderFailure records on the GitRepo's Bundle that the newest commit does not render (nil:
// it does), when that changes; a Bundle that does not exist yet, or is another's, has nothing
// to record it on.
func (b *bundler) setRenderFailure(ctx context.Context, repo *v1alpha1.GitRepo, name string, failure *v1alpha1.RenderFailure) error {
	var bun v1alpha1.Bundle
	if err := b.client.Get(ctx, types.NamespacedName{Namespace: repo.Namespace, Name: name}, &bun); err != nil {
		return client.IgnoreNotFound(err)
	}
	if bun.Labels[LabelGitRepo] != repo.Name || equality.Semantic.DeepEqual(bun.Status.RenderFailure, failure) {
		return nil
	}
	orig := bun.DeepCopy()
	bun.Status.RenderFailure = failure
	if err := b.client.Status().Patch(ctx, &bun, client.MergeFrom(orig)); err != nil {
		return fmt.Errorf("failed to record the render failure of bundle %s: %w", name, client.IgnoreNotFound(err))
	}
	return nil
}

// repoRenderer renders one checkout of a repository under its namespace's restrictions.
type repoRenderer struct {
	*bundle.Renderer
	policy restrictions
}

func (b *bundler) newRepoRenderer(ctx context.Context, repo *v1alpha1.GitRepo, checkout string) (*repoRenderer, error) {
	access, err := chartAccess(ctx, b.client, repo)
	if err != nil {
		return nil, &RenderError{Err: err}
	}
	policy, err := restrictionsOf(ctx, b.client, repo.Namespace)
	if err != nil {
		return nil, err
	}
	values := &valuesResolver{client: b.client, namespace: repo.Namespace, crossNamespace: b.crossNamespaceRefs}
	renderer, err := bundle.NewRenderer(checkout, bundle.RendererOptions{Charts: b.charts.For(access), Values: values, Sandbox: b.sandbox})
	if err != nil {
		return nil, err
	}
	return &repoRenderer{Renderer: renderer, policy: policy}, nil
}

// render renders a bundle for one cluster; nil when the bundle does not target it or is not
// to be deployed there.
func (rr *repoRenderer) render(ctx context.Context, repo *v1alpha1.GitRepo, src *bundle.Source, t bundle.Target) (*bundle.Rendered, error) {
	if !selected(repo.Spec.Targets, src.Fleet.OverrideTargets, t) {
		return nil, nil
	}
	res, err := rr.Render(ctx, src, t)
	if err != nil {
		return nil, &RenderError{Err: fmt.Errorf("bundle %s for cluster %s: %w", src.Name, t.ClusterName, err)}
	}
	if res.DoNotDeploy {
		return nil, nil
	}
	if err := rr.policy.restrict(res); err != nil {
		return nil, &RenderError{Err: fmt.Errorf("bundle %s for cluster %s: %w", src.Name, t.ClusterName, err)}
	}
	return res, nil
}

// record stores each bundle's content, its Bundle with the new revision, and decides what to
// stage. Bundles are independent: several are written at a time.
func (b *bundler) record(ctx context.Context, repo *v1alpha1.GitRepo, commit string, all []rendered) ([]staging, error) {
	plans := make([]staging, len(all))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(stageWorkers)
	for i, r := range all {
		g.Go(func() error {
			stored := map[string]bool{}
			for _, res := range r.targets {
				if stored[res.ContentID] {
					continue // every cluster that renders alike shares one content
				}
				stored[res.ContentID] = true
				if _, err := b.content.Put(gctx, repo.Namespace, res.ContentID, res.Manifest); err != nil {
					return err
				}
			}
			bun, recorded, newRevision, err := b.stage(gctx, repo, commit, r)
			if err != nil {
				return err
			}
			plans[i], err = b.planStaging(gctx, bun, recorded)
			plans[i].newRevision = newRevision
			return err
		})
	}
	return plans, g.Wait()
}

// writeStaging writes the deployments cluster by cluster, the agents first granted the content
// the commit brings them (planGrants: one Role write per cluster, or two writes per content
// shared by several clusters). Clusters are independent, so several are staged at once, as many
// as the client's share of API server concurrency. The grants cover the clusters the rollout
// reaches later too: their release is then one write, and their agents never wait for access.
func (b *bundler) writeStaging(ctx context.Context, clusters []targetCluster, plans []staging) error {
	staged := map[string]map[string][]string{}
	namespaceOf := map[string]string{}
	for _, c := range clusters {
		if c.cluster.Status.Namespace == "" {
			continue // not admitted: nothing is staged for it
		}
		namespaceOf[c.cluster.Name] = c.cluster.Status.Namespace
		for _, p := range plans {
			if t, ok := p.recorded[c.cluster.Name]; ok {
				if staged[c.cluster.Name] == nil {
					staged[c.cluster.Name] = map[string][]string{}
				}
				staged[c.cluster.Name][p.bundle.Namespace] = append(staged[c.cluster.Name][p.bundle.Namespace], t.Ref.ContentID)
			}
		}
	}
	grants := planGrants(staged)
	if !b.shard.fleetWide() {
		// Another shard's agents are granted by the default shard, which sees every shard's
		// deployments (their agents retry content they cannot read yet).
		grants = contentGrants{}
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(stageWorkers)
	for ref, names := range grants.shared {
		g.Go(func() error {
			agents := make([]string, len(names))
			for i, name := range names {
				agents[i] = namespaceOf[name]
			}
			return b.writes.do(gctx, func() error {
				if err := grantShared(gctx, b.client, ref, agents, b.now()); err != nil {
					return fmt.Errorf("failed to grant content %s to its clusters: %w", ref.ID, err)
				}
				return nil
			})
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	g, gctx = errgroup.WithContext(ctx)
	g.SetLimit(stageWorkers)
	for _, c := range clusters {
		if staged[c.cluster.Name] == nil {
			continue
		}
		g.Go(func() error {
			return b.writes.do(gctx, func() error {
				if own := grants.own[c.cluster.Name]; len(own) > 0 {
					if err := grantAccess(gctx, b.client, c.cluster, own); err != nil {
						return fmt.Errorf("failed to grant cluster %s its content: %w", c.cluster.Name, err)
					}
				}
				for _, p := range plans {
					t, ok := p.want[c.cluster.Name]
					if !ok {
						continue
					}
					release := p.release[c.cluster.Name]
					if _, err := writeDeployment(gctx, b.client, p.bundle, c.cluster, p.state.bds[c.cluster.Name], t, release, b.now()); err != nil {
						return err
					}
					if release {
						b.released.add(deploymentKey(p.bundle, c.cluster), t.Ref, b.now())
					}
				}
				return nil
			})
		})
	}
	return g.Wait()
}

type targetCluster struct {
	cluster *v1alpha1.Cluster
	target  bundle.Target
}

// targets lists the registered clusters of a namespace with their groups.
func (b *bundler) targets(ctx context.Context, namespace string) ([]targetCluster, error) {
	var clusters v1alpha1.ClusterList
	if err := b.client.List(ctx, &clusters, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("failed to list clusters: %w", err)
	}
	groupsOf, err := clusterGroups(ctx, b.client, namespace)
	if err != nil {
		return nil, err
	}
	out := make([]targetCluster, 0, len(clusters.Items))
	for i := range clusters.Items {
		c := &clusters.Items[i]
		t := bundle.Target{ClusterName: c.Name, Labels: c.Labels, Annotations: c.Annotations, TemplateValues: c.Spec.TemplateValues, Namespace: c.Status.Namespace, Groups: groupsOf(c)}
		out = append(out, targetCluster{cluster: c, target: t})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].cluster.Name < out[j].cluster.Name })
	return out, nil
}

// selected applies the GitRepo's targets, or fleet.yaml's overrideTargets when set.
func selected(repoTargets []v1alpha1.Target, override []bundle.TargetMatch, t bundle.Target) bool {
	matches := override
	if len(matches) == 0 {
		for _, rt := range repoTargets {
			m := bundle.TargetMatch{Name: rt.Name, ClusterName: rt.ClusterName, ClusterGroup: rt.ClusterGroup}
			m.ClusterSelector, m.ClusterGroupSelector = convertSelector(rt.ClusterSelector), convertSelector(rt.ClusterGroupSelector)
			matches = append(matches, m)
		}
	}
	for _, m := range matches {
		if t.Matches(m) {
			return true
		}
	}
	return false
}

func convertSelector(s *metav1.LabelSelector) *rollout.Selector {
	if s == nil {
		return nil
	}
	var out rollout.Selector
	data, _ := json.Marshal(s)
	_ = json.Unmarshal(data, &out)
	return &out
}

// stage records a new revision on the Bundle when any target's deployment changed and drops
// the deployments of clusters no longer targeted. It returns the Bundle, what its latest
// revision deploys to each cluster (the caller stages that per cluster), and whether that
// revision is new.
func (b *bundler) stage(ctx context.Context, repo *v1alpha1.GitRepo, commit string, r rendered) (*v1alpha1.Bundle, revisionTargets, bool, error) {
	src, targets := r.src, r.targets
	var bun v1alpha1.Bundle
	key := types.NamespacedName{Namespace: repo.Namespace, Name: src.Name}
	err := b.client.Get(ctx, key, &bun)
	if apierrors.IsNotFound(err) && !b.shard.fleetWide() {
		err = adopt(ctx, b.client, b.uncached, key, &bun, repo.Labels)
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, nil, false, fmt.Errorf("failed to get bundle %s: %w", src.Name, err)
	}
	exists := err == nil
	if exists && bun.Labels[LabelGitRepo] != repo.Name {
		return nil, nil, false, nameTaken(src, bun.Labels[LabelGitRepo]) // taken meanwhile
	}
	if exists && !bun.DeletionTimestamp.IsZero() {
		// It left the repository a moment ago and came back: it is staged again once its old
		// deployments are removed.
		return nil, nil, false, fmt.Errorf("bundle %s is still being removed; it is rendered again once its deployments are gone", src.Name)
	}
	orig := bun.DeepCopy()
	bun.Name, bun.Namespace = src.Name, repo.Namespace
	// A deleted Bundle stays until its deployments are removed (bundleRemovalReconciler).
	controllerutil.AddFinalizer(&bun, v1alpha1.DeploymentsFinalizer)
	if bun.Labels == nil {
		bun.Labels = map[string]string{}
	}
	for k, v := range src.Fleet.Labels {
		bun.Labels[k] = v
	}
	bun.Labels[LabelGitRepo] = repo.Name
	inheritShard(bun.Labels, repo.Labels)
	spec, err := bundleSpec(repo, src)
	if err != nil {
		return nil, nil, false, &RenderError{Err: err}
	}
	// What people set (a rollback, a retry) stays; the rest is what the repository says.
	spec.Revisions, spec.LatestRevision, spec.TargetRevision, spec.Retry = bun.Spec.Revisions, bun.Spec.LatestRevision, bun.Spec.TargetRevision, bun.Spec.Retry
	aggregate := aggregateID(targets)
	var latest *v1alpha1.BundleRevision
	if n := len(spec.Revisions); n > 0 {
		latest = &spec.Revisions[n-1]
	}
	changed := latest == nil || latest.DeploymentID != aggregate
	// Clusters that joined or left the targets, every other one rendered as before, change no
	// revision: a joining cluster takes the latest one, rendered for it, and gets what its
	// partition, stage or group has reached instead of sending the whole fleet a revision that
	// changes nothing for it.
	var joined []string
	regroup := false
	if changed && latest != nil {
		joined, regroup = b.onlyTargetsChanged(ctx, &bun, latest, targets)
	}
	newRevision := changed && !regroup
	if newRevision {
		spec.LatestRevision++
		spec.TargetRevision = nil // a new revision supersedes a rollback
	}
	// What the latest revision deploys to each cluster: when nothing changed, what it recorded.
	recorded, err := recordedTargets(spec.LatestRevision, targets, r.restrictions)
	if err != nil {
		return nil, nil, false, err
	}
	if changed {
		targetsID, err := b.revisions.put(ctx, repo.Namespace, recorded)
		if err != nil {
			return nil, nil, false, err
		}
		ref := v1alpha1.RevisionRef{Index: spec.LatestRevision, ContentID: contentSet(targets), DeploymentID: aggregate}
		if regroup {
			latest.RevisionRef, latest.TargetsID = ref, targetsID
			b.recordJoiners(ctx, repo, &bun, spec.Revisions, joined, r)
		} else {
			spec.Revisions = append(spec.Revisions, v1alpha1.BundleRevision{RevisionRef: ref, Commit: commit, Created: metav1.Time{Time: b.now().Truncate(time.Second)}, TargetsID: targetsID})
		}
		if limit := b.limit(repo); len(spec.Revisions) > limit {
			spec.Revisions = spec.Revisions[len(spec.Revisions)-limit:]
		}
	}
	bun.Spec = spec
	switch {
	case !exists:
		if err := b.client.Create(ctx, &bun); err != nil {
			return nil, nil, false, fmt.Errorf("failed to create bundle %s: %w", src.Name, err)
		}
	case !equality.Semantic.DeepEqual(orig.Spec, bun.Spec) || !equality.Semantic.DeepEqual(orig.Labels, bun.Labels) || !slices.Equal(orig.Finalizers, bun.Finalizers):
		// Conditional on the Bundle as read: a revision recorded on a stale copy would reuse an
		// index or drop one from the history.
		if err := b.client.Patch(ctx, &bun, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			return nil, nil, false, fmt.Errorf("failed to update bundle %s: %w", src.Name, err)
		}
	}
	if err := b.dropUntargeted(ctx, &bun, targets); err != nil {
		return nil, nil, false, err
	}
	if bun.Status.RenderFailure != nil {
		if err := b.setRenderFailure(ctx, repo, bun.Name, nil); err != nil {
			return nil, nil, false, err
		}
	}
	return &bun, recorded, newRevision, nil
}

// onlyTargetsChanged reports whether targets differ from what the latest revision recorded only
// by clusters that joined or left: every cluster in both is rendered as the revision recorded
// it. It returns the clusters that joined.
func (b *bundler) onlyTargetsChanged(ctx context.Context, bun *v1alpha1.Bundle, latest *v1alpha1.BundleRevision, targets map[string]*bundle.Rendered) ([]string, bool) {
	before, err := b.revisions.targets(ctx, bun, latest.Index)
	if err != nil {
		return nil, false // no record to compare with: a new revision, as before records
	}
	var joined []string
	for cluster, r := range targets {
		was, ok := before[cluster]
		switch {
		case !ok:
			joined = append(joined, cluster)
		case was.Ref.DeploymentID != r.DeploymentID:
			return nil, false
		}
	}
	sort.Strings(joined)
	return joined, true
}

// recordJoiners renders the older revisions of the bundle's history that a sequence group or a
// staged run still uses for clusters that joined its targets, each from its own commit, and adds
// them to those revisions' records: a joining cluster can then receive the revision its stage or
// group has reached, which need not be the latest. What the revisions deploy to the other clusters does not change. A revision that
// cannot be rendered for them (its commit is gone, or no longer renders) stays without them,
// and they wait for a newer one; that is logged, not an error of the new commit.
func (b *bundler) recordJoiners(ctx context.Context, repo *v1alpha1.GitRepo, bun *v1alpha1.Bundle, revs []v1alpha1.BundleRevision, joined []string, now rendered) {
	if b.checkout == nil || len(joined) == 0 {
		return
	}
	inUse, err := b.olderRevisionsInUse(ctx, bun)
	logger := log.FromContext(ctx).WithValues("gitrepo", repo.Namespace+"/"+repo.Name, "bundle", bun.Name)
	if err != nil {
		logger.Info("clusters that joined get the latest revision only", "clusters", joined, "reason", err.Error())
		return
	}
	for i := range revs {
		rev := &revs[i]
		if !inUse[rev.Index] || rev.Index == bun.Spec.LatestRevision || rev.TargetsID == "" || rev.Commit == "" {
			continue
		}
		if err := b.recordJoinersIn(ctx, repo, bun, rev, joined, now); err != nil {
			logger.Info("an older revision is not rendered for clusters that joined; they wait for a newer one", "revision", rev.Index, "clusters", joined, "reason", err.Error())
			continue
		}
		logger.Info("an older revision still in use rendered for clusters that joined", "revision", rev.Index, "commit", shortCommit(rev.Commit), "clusters", joined)
	}
}

// olderRevisionsInUse are the revisions a joining cluster may be given besides the latest: those
// a sequence group works on or has completed, and those of the bundle's staged runs (a rollback
// run's, say). A continuous rollout or a placement only ever gives the latest (or the pinned
// rollback revision, which keeps the clusters it was rendered for).
func (b *bundler) olderRevisionsInUse(ctx context.Context, bun *v1alpha1.Bundle) (map[int64]bool, error) {
	inUse := map[int64]bool{}
	for _, g := range bun.Status.Sequence {
		for _, r := range g.Revisions {
			if r.State != v1alpha1.SequenceIneligible && r.State != v1alpha1.SequencePending {
				inUse[r.Index] = true
			}
		}
	}
	if bun.Spec.StagedUpdate != nil {
		runs, err := runsOfBundle(ctx, b.client, bun.Namespace, bun.Name)
		if err != nil {
			return nil, err
		}
		for _, run := range runs {
			inUse[run.Status.RevisionIndex] = true
			if run.Spec.RevisionIndex != nil {
				inUse[*run.Spec.RevisionIndex] = true
			}
		}
	}
	return inUse, nil
}

func (b *bundler) recordJoinersIn(ctx context.Context, repo *v1alpha1.GitRepo, bun *v1alpha1.Bundle, rev *v1alpha1.BundleRevision, joined []string, now rendered) error {
	record, err := b.revisions.targets(ctx, bun, rev.Index)
	if err != nil {
		return err
	}
	checkout, err := b.checkout(ctx, repo, rev.Commit)
	if err != nil {
		return err
	}
	sources, err := bundle.Discover(checkout, repo.Name, repo.Spec.Paths)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(sources, func(s bundle.Source) bool { return s.Name == bun.Name })
	if i < 0 {
		return fmt.Errorf("commit %s has no bundle %s", shortCommit(rev.Commit), bun.Name)
	}
	rr, err := b.newRepoRenderer(ctx, repo, checkout)
	if err != nil {
		return err
	}
	defer rr.Close()
	added := map[string]*bundle.Rendered{}
	for _, name := range joined {
		if _, ok := record[name]; ok {
			continue
		}
		res, err := rr.render(ctx, repo, &sources[i], now.clusters[name])
		if err != nil {
			return err
		}
		if res == nil {
			continue
		}
		if _, err := b.content.Put(ctx, repo.Namespace, res.ContentID, res.Manifest); err != nil {
			return err
		}
		added[name] = res
	}
	if len(added) == 0 {
		return nil
	}
	more, err := recordedTargets(rev.Index, added, now.restrictions)
	if err != nil {
		return err
	}
	merged := maps.Clone(record)
	maps.Copy(merged, more)
	id, err := b.revisions.put(ctx, repo.Namespace, merged)
	if err != nil {
		return err
	}
	rev.TargetsID = id
	return nil
}

func (b *bundler) limit(repo *v1alpha1.GitRepo) int {
	if repo.Spec.RevisionHistoryLimit != nil {
		return int(*repo.Spec.RevisionHistoryLimit)
	}
	if b.historyLimit > 0 {
		return b.historyLimit
	}
	return 10
}

// bundleSpec converts fleet.yaml's rollout settings to the Bundle's API (same JSON).
func bundleSpec(repo *v1alpha1.GitRepo, src *bundle.Source) (v1alpha1.BundleSpec, error) {
	f := &src.Fleet
	spec := v1alpha1.BundleSpec{GitRepo: repo.Name, Path: src.Dir, Targets: repo.Spec.Targets, Paused: f.Paused || repo.Spec.Paused}
	convert := func(from, to any, field string) error {
		data, err := json.Marshal(from)
		if err == nil {
			err = json.Unmarshal(data, to)
		}
		if err != nil {
			return fmt.Errorf("%s: %s: %w", src.FleetFile, field, err)
		}
		return nil
	}
	if f.RolloutStrategy != nil {
		spec.RolloutStrategy = &v1alpha1.RolloutStrategy{}
		if err := convert(f.RolloutStrategy, spec.RolloutStrategy, "rolloutStrategy"); err != nil {
			return spec, err
		}
	}
	if f.Placement != nil {
		spec.Placement = &v1alpha1.Placement{}
		if err := convert(f.Placement, spec.Placement, "placement"); err != nil {
			return spec, err
		}
	}
	if f.StagedUpdate != nil {
		spec.StagedUpdate = &v1alpha1.StagedUpdateRef{Strategy: f.StagedUpdate.Strategy, AutoRun: f.StagedUpdate.AutoRun}
	}
	if f.Sequence != nil {
		spec.Sequence = &v1alpha1.LocalObjectReference{Name: f.Sequence.Name}
	}
	for i, d := range f.DependsOn {
		dep := v1alpha1.BundleDependency{Name: d.Name}
		if d.Selector != nil {
			dep.Selector = &metav1.LabelSelector{}
			if err := convert(d.Selector, dep.Selector, fmt.Sprintf("dependsOn[%d].selector", i)); err != nil {
				return spec, err
			}
		}
		spec.DependsOn = append(spec.DependsOn, dep)
	}
	return spec, nil
}

// aggregateID identifies what a revision deploys to all its targets.
func aggregateID(targets map[string]*bundle.Rendered) string {
	names := make([]string, 0, len(targets))
	for n := range targets {
		names = append(names, n)
	}
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		fmt.Fprintf(h, "%s=%s\n", n, targets[n].DeploymentID)
	}
	return "r-" + hex.EncodeToString(h.Sum(nil))[:32]
}

// contentSet names the distinct contents of a revision (one, when all targets render alike).
func contentSet(targets map[string]*bundle.Rendered) string {
	set := map[string]bool{}
	for _, r := range targets {
		set[r.ContentID] = true
	}
	ids := make([]string, 0, len(set))
	for id := range set {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	if len(ids) == 0 {
		return "none"
	}
	if len(ids) == 1 {
		return ids[0]
	}
	return fmt.Sprintf("%s (+%d more)", ids[0], len(ids)-1)
}

// DeploymentName is the BundleDeployment of a bundle in a cluster's namespace: names of bundles
// from different namespaces must not collide there.
func DeploymentName(bundleNamespace, bundleName string) string {
	name := bundleNamespace + "-" + bundleName
	if len(name) <= 63 {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return strings.TrimRight(name[:54], "-") + "-" + hex.EncodeToString(sum[:])[:8]
}

// staging is what a commit stages for one bundle: the revision per cluster, and the clusters
// the planner releases it to at once.
type staging struct {
	bundle *v1alpha1.Bundle
	// recorded is what the revision deploys to each cluster; want, what is written now.
	recorded, want revisionTargets
	state          *planState
	release        map[string]bool
	// decision is the planner's, for a continuous rollout: what release tells the operator.
	decision *rollout.Decision
	// newRevision: the commit made a new revision of the bundle.
	newRevision bool
}

// planStaging decides what to stage for a bundle's latest revision. A continuous rollout asks
// the planner which clusters it would release right away, so that those are staged and
// released in one write, and creates no deployment for the others yet. A rolled-back bundle
// stages nothing: its pinned revision stays.
func (b *bundler) planStaging(ctx context.Context, bun *v1alpha1.Bundle, recorded revisionTargets) (staging, error) {
	p := staging{bundle: bun}
	if bun.Spec.TargetRevision != nil {
		return p, nil
	}
	p.recorded, p.want = recorded, maps.Clone(recorded)
	var err error
	if p.state, err = gatherPlan(ctx, b.client, b.live, b.now(), bun, p.want); err != nil {
		return p, err
	}
	if bun.Spec.StagedUpdate == nil && bun.Spec.Sequence == nil {
		p.release, p.decision = releasedWithStaging(p.state, p.want)
		// A continuous rollout writes a cluster's deployment when it reaches the cluster, staged
		// and released in one write: the rollout controller does it from the revision's record.
		// Until then a cluster stays Pending (no deployment yet) or OutOfSync (its older revision
		// staged). Paused bundles and clusters are staged at once (R1.13).
		for name := range p.want {
			cl := p.state.clusters[name]
			if !p.release[name] && (p.state.bds[name] == nil || !bun.Spec.Paused && (cl == nil || !cl.Spec.Paused)) {
				delete(p.want, name)
			}
		}
	}
	return p, nil
}

// dropUntargeted deletes the bundle's BundleDeployments on clusters it no longer targets; their
// agents then remove the workload. A placement's rolling update removes them itself, within
// its availability budget once new clusters carry the workload (R2.4).
func (b *bundler) dropUntargeted(ctx context.Context, bun *v1alpha1.Bundle, targets map[string]*bundle.Rendered) error {
	if bun.Spec.Placement != nil && bun.Spec.TargetRevision == nil {
		return nil
	}
	bds, err := listDeployments(ctx, b.client, bun)
	if err != nil {
		return err
	}
	for i := range bds {
		bd := &bds[i]
		if _, ok := targets[bd.Labels[LabelCluster]]; ok || !bd.DeletionTimestamp.IsZero() {
			continue
		}
		if err := b.client.Delete(ctx, bd.DeepCopy()); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("failed to remove %s from %s: %w", bun.Name, bd.Labels[LabelCluster], err)
		}
	}
	return nil
}

// removeStale deletes Bundles of the GitRepo that the commit no longer has, with their
// BundleDeployments (the agents then prune the workloads).
func (b *bundler) removeStale(ctx context.Context, repo *v1alpha1.GitRepo, sources []bundle.Source) error {
	keep := map[string]bool{}
	for _, s := range sources {
		if s.Err != nil {
			// A fleet.yaml that does not decode may have named its bundle: which Bundle it
			// was is not known, so none is removed.
			return nil
		}
		keep[s.Name] = true
	}
	return removeBundles(ctx, b.client, repo, keep)
}

// removeBundles deletes the GitRepo's Bundles not in keep, with their BundleDeployments: the
// agents then uninstall what those deployed (unless keepResources), and each deployment and
// Bundle goes once that is confirmed (removal.go). The hub does not count on a garbage
// collector.
func removeBundles(ctx context.Context, c client.Client, repo *v1alpha1.GitRepo, keep map[string]bool) error {
	var bundles v1alpha1.BundleList
	if err := c.List(ctx, &bundles, client.InNamespace(repo.Namespace), client.MatchingLabels{LabelGitRepo: repo.Name}); err != nil {
		return fmt.Errorf("failed to list bundles: %w", err)
	}
	var errs []error
	for i := range bundles.Items {
		bun := &bundles.Items[i]
		if keep[bun.Name] {
			continue
		}
		// What is being deleted already is not deleted again: a deleted GitRepo is woken by
		// every deployment that goes.
		if bun.DeletionTimestamp.IsZero() {
			if err := c.Delete(ctx, bun); client.IgnoreNotFound(err) != nil {
				errs = append(errs, err)
			}
		}
		bds, err := listDeployments(ctx, c, bun)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for j := range bds {
			if bds[j].DeletionTimestamp.IsZero() {
				if err := c.Delete(ctx, bds[j].DeepCopy()); client.IgnoreNotFound(err) != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	return errors.Join(errs...)
}
