package sources

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
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
	"github.com/flotilla-dev/flotilla/hub/access"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/contentstore"
	"github.com/flotilla-dev/flotilla/hub/deploy"
	"github.com/flotilla-dev/flotilla/hub/events"
	"github.com/flotilla-dev/flotilla/hub/liveness"
	"github.com/flotilla-dev/flotilla/hub/model"
)

// Bundler turns a GitRepo's new commit into Bundles with a new revision (and its record of
// what each targeted cluster is to run) and their Content, grants the agents that content, and
// writes the BundleDeployments the commit changes at once: those the planner releases straight
// away (staged and released in one write), the staging of paused bundles and clusters, and, for
// staged runs and sequences, the deployments of clusters that have none yet. Releasing the rest
// (staged and released in one write from the revision's record) is the rollout controllers'
// decision, not the bundler's.
type Bundler struct {
	Client client.Client
	// Shard is the hub shard whose GitRepos this bundler renders; uncached reads, outside the
	// default shard, the Bundles another shard held before a GitRepo moved here.
	Shard     model.Shard
	Uncached  client.Reader
	Content   *contentstore.Store
	Revisions *model.RevisionStore
	Released  *deploy.Releases
	Staging   *deploy.StagingNow
	Writes    deploy.WriteSlots
	Charts    *bundle.ChartFetcher
	// Live says which clusters' agents are online (R1.11).
	Live *liveness.Liveness
	// Sandbox runs the template engines out of the hub's process (bundle.Sandbox).
	Sandbox *bundle.Sandbox
	// RenderBudget bounds the rendering of one commit of a GitRepo, all bundles and clusters
	// together (Options.RenderBudget).
	RenderBudget time.Duration
	// CrossNamespaceRefs lets valuesFrom name other namespaces (Options.AllowCrossNamespaceRefs).
	CrossNamespaceRefs bool
	historyLimit       int
	// Now is the time releases are decided and recorded at: the rollout controllers' clock
	// (Options.Clock), so that a release the bundler makes dates as theirs do.
	Now func() time.Time
	// Checkout returns a directory holding a commit of a GitRepo's repository: older
	// revisions are rendered from their own commits for clusters that join (recordJoiners).
	Checkout func(ctx context.Context, repo *v1alpha1.GitRepo, commit string) (string, error)
	Recorder *events.Recorder
}

// Origin is what the bundler renders revisions of: a GitRepo, or a HelmOp seen as a repository
// of one bundle. Its settings are a GitRepo's (targets, paths, chart credentials, history);
// Object is what Events are told on, and Label the Bundles' label that names it.
type Origin struct {
	*v1alpha1.GitRepo
	Object client.Object
	Label  string
	// Revision names one of its revisions in Events: "commit 1a2b3c4", "version 1.2.0".
	Revision func(id string) string
	// Checkout returns a directory holding an older revision, for clusters that join a
	// sequence group or staged run still on it (recordJoiners); nil: none is rendered again.
	Checkout func(ctx context.Context, id string) (string, error)
}

// GitRepoOrigin is a GitRepo as the bundler sees it.
func (b *Bundler) GitRepoOrigin(repo *v1alpha1.GitRepo) Origin {
	o := Origin{GitRepo: repo, Object: repo, Label: model.LabelGitRepo, Revision: func(id string) string { return "commit " + model.ShortCommit(id) }}
	if b.Checkout != nil {
		o.Checkout = func(ctx context.Context, commit string) (string, error) { return b.Checkout(ctx, repo, commit) }
	}
	return o
}

// OnCommit renders a GitRepo's commit (its CommitHandler).
func (b *Bundler) OnCommit(ctx context.Context, repo *v1alpha1.GitRepo, checkout, commit string) error {
	return b.OnRevision(ctx, b.GitRepoOrigin(repo), checkout, commit)
}

// OnRevision renders a revision of a source from its checkout into Bundles and stages what it
// changes; an error keeps what was deployed.
func (b *Bundler) OnRevision(ctx context.Context, repo Origin, checkout, commit string) error {
	sources, err := discover(checkout, repo)
	if err != nil {
		return &RenderError{Err: err}
	}
	clusters, err := b.Targets(ctx, repo.Namespace)
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
	b.Staging.Begin(keys)
	defer b.Staging.End(keys)
	// Everything rendered: only now write, so a broken commit changes nothing.
	plans, grants, err := b.record(ctx, repo, commit, all, clusters)
	if err != nil {
		return err
	}
	// Told as decided, before the writes: the rollout controller, which may report a pause on
	// what is written meanwhile, tells its story after this one.
	recordStaged(b.Recorder, repo, commit, plans)
	for _, p := range plans {
		if p.decision != nil {
			deploy.RecordReleases(b.Recorder, p.bundle, p.bundle.Spec.LatestRevision, p.decision, func(c string) bool { _, staged := p.want[c]; return p.release[c] && staged })
		}
	}
	if err := b.writeStaging(ctx, clusters, plans, grants); err != nil {
		return err
	}
	if err := b.removeStale(ctx, repo, sources); err != nil {
		return err
	}
	return b.commitFailures(ctx, repo, commit, failed, len(all))
}

// recordStaged tells, in one Event on the GitRepo, which bundles a commit gave a new revision:
// a commit of fifty bundles is one Event, not fifty.
func recordStaged(rec *events.Recorder, repo Origin, commit string, plans []staging) {
	obj, rev := repo.Object, repo.Revision(commit)
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
		rec.Normal(obj, v1alpha1.EventRevisionStaged, "%s: %s staged for %d clusters", rev, staged[0], clusters)
	default:
		slices.Sort(staged)
		rec.Normal(obj, v1alpha1.EventRevisionStaged, "%s: new revisions of %d bundles staged: %s", rev, len(staged), model.ListSome(staged, 10))
	}
}

// record stores each bundle's content and the record of its new revision, grants the content
// shared by several clusters, then publishes each Bundle with the new revision and decides what
// to stage. The grants come before the revision is published: a staged run's stage or a
// sequence's group that is under way releases its clusters from the record as soon as the
// revision shows, and a cluster released before its content's shared grant exists would have
// the content written into its own Role instead. Bundles are independent: several are written
// at a time.
func (b *Bundler) record(ctx context.Context, repo Origin, commit string, all []rendered, clusters []targetCluster) ([]staging, access.ContentGrants, error) {
	drafts := make([]revisionDraft, len(all))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(deploy.StageWorkers)
	for i, r := range all {
		g.Go(func() error {
			stored := map[string]bool{}
			for _, res := range r.targets {
				if stored[res.ContentID] {
					continue // every cluster that renders alike shares one content
				}
				stored[res.ContentID] = true
				if _, err := b.Content.Put(gctx, repo.Namespace, res.ContentID, res.Manifest); err != nil {
					return err
				}
			}
			var err error
			drafts[i], err = b.draft(gctx, b.Client, repo, commit, r)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, access.ContentGrants{}, err
	}
	grants, err := b.grantShared(ctx, clusters, drafts)
	if err != nil {
		return nil, grants, err
	}
	plans := make([]staging, len(all))
	g, gctx = errgroup.WithContext(ctx)
	g.SetLimit(deploy.StageWorkers)
	for i := range drafts {
		g.Go(func() error {
			d := &drafts[i]
			if err := b.publishDraft(gctx, repo, commit, all[i], d); err != nil {
				return err
			}
			var err error
			plans[i], err = b.planStaging(gctx, d.bundle, d.recorded)
			plans[i].newRevision = d.newRevision
			return err
		})
	}
	return plans, grants, g.Wait()
}

type targetCluster struct {
	cluster *v1alpha1.Cluster
	target  bundle.Target
}

// Targets lists the registered clusters of a namespace with their groups.
func (b *Bundler) Targets(ctx context.Context, namespace string) ([]targetCluster, error) {
	var clusters v1alpha1.ClusterList
	if err := b.Client.List(ctx, &clusters, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("failed to list clusters: %w", err)
	}
	groupsOf, err := model.ClusterGroups(ctx, b.Client, namespace)
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

// revisionDraft is a Bundle as a commit changes it, its revision recorded but not published yet.
type revisionDraft struct {
	// bundle is the Bundle to write; orig, as read (nil: it does not exist yet).
	bundle, orig *v1alpha1.Bundle
	targets      map[string]*bundle.Rendered
	// recorded is what the latest revision deploys to each cluster (the caller stages that per
	// cluster); newRevision, whether that revision is new.
	recorded    model.RevisionTargets
	newRevision bool
}

// draft records a new revision of the Bundle (as read from from) when any target's deployment
// changed: the record of what it deploys to each cluster is stored, the Bundle naming it is
// returned to be published.
func (b *Bundler) draft(ctx context.Context, from client.Reader, repo Origin, commit string, r rendered) (revisionDraft, error) {
	src, targets := r.src, r.targets
	var bun v1alpha1.Bundle
	key := types.NamespacedName{Namespace: repo.Namespace, Name: src.Name}
	err := from.Get(ctx, key, &bun)
	if apierrors.IsNotFound(err) && !b.Shard.FleetWide() {
		err = model.Adopt(ctx, b.Client, b.Uncached, key, &bun, repo.Labels)
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return revisionDraft{}, fmt.Errorf("failed to get bundle %s: %w", src.Name, err)
	}
	exists := err == nil
	if exists && bun.Labels[repo.Label] != repo.Name {
		return revisionDraft{}, nameTaken(src, &bun) // taken meanwhile
	}
	if exists && !bun.DeletionTimestamp.IsZero() {
		// It left the repository a moment ago and came back: it is staged again once its old
		// deployments are removed.
		return revisionDraft{}, fmt.Errorf("bundle %s is still being removed; it is rendered again once its deployments are gone", src.Name)
	}
	orig := bun.DeepCopy()
	bun.Name, bun.Namespace = src.Name, repo.Namespace
	// A deleted Bundle stays until its deployments are removed (BundleRemovalReconciler).
	controllerutil.AddFinalizer(&bun, v1alpha1.DeploymentsFinalizer)
	if bun.Labels == nil {
		bun.Labels = map[string]string{}
	}
	for k, v := range src.Fleet.Labels {
		bun.Labels[k] = v
	}
	bun.Labels[repo.Label] = repo.Name
	model.InheritShard(bun.Labels, repo.Labels)
	spec, err := bundleSpec(repo, src)
	if err != nil {
		return revisionDraft{}, &RenderError{Err: err}
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
	recorded, err := model.RecordedTargets(spec.LatestRevision, targets, r.restrictions)
	if err != nil {
		return revisionDraft{}, err
	}
	if changed {
		targetsID, err := b.Revisions.Put(ctx, repo.Namespace, recorded)
		if err != nil {
			return revisionDraft{}, err
		}
		ref := v1alpha1.RevisionRef{Index: spec.LatestRevision, ContentID: contentSet(targets), DeploymentID: aggregate}
		if regroup {
			latest.RevisionRef, latest.TargetsID = ref, targetsID
			b.recordJoiners(ctx, repo, &bun, spec.Revisions, joined, r)
		} else {
			spec.Revisions = append(spec.Revisions, v1alpha1.BundleRevision{RevisionRef: ref, Commit: commit, Created: metav1.Time{Time: b.Now().Truncate(time.Second)}, TargetsID: targetsID})
		}
		if limit := b.limit(repo); len(spec.Revisions) > limit {
			spec.Revisions = spec.Revisions[len(spec.Revisions)-limit:]
		}
	}
	bun.Spec = spec
	d := revisionDraft{bundle: &bun, targets: targets, recorded: recorded, newRevision: newRevision}
	if exists {
		d.orig = orig
	}
	return d, nil
}

// publishAttempts bounds how often a commit's Bundle is drafted again after its write found
// the Bundle changed since it was read.
const publishAttempts = 4

// publishDraft publishes d, drafting it again on the Bundle as the API server has it when the
// write finds it changed since it was read: the rollout controllers write the Bundle's status
// while a commit is rendered and granted (at 10,000 clusters, seconds), and a commit that failed
// on that conflict waited for the next poll, a minute or an hour after its webhook. A person's
// change to the spec meanwhile (a rollback, a retry) is kept: the new draft starts from it.
func (b *Bundler) publishDraft(ctx context.Context, repo Origin, commit string, r rendered, d *revisionDraft) error {
	for attempt := 1; ; attempt++ {
		err := b.publish(ctx, repo, d)
		if !apierrors.IsConflict(err) || attempt == publishAttempts {
			return err
		}
		log.FromContext(ctx).V(1).Info("bundle changed since it was read; drafting the commit again on the API server's copy",
			"source", repo.Namespace+"/"+repo.Name, "bundle", d.bundle.Name, "commit", commit, "attempt", attempt)
		if *d, err = b.draft(ctx, b.Uncached, repo, commit, r); err != nil {
			return err
		}
	}
}

// publish writes the drafted Bundle, drops the deployments of clusters no longer targeted and
// clears a render failure the Bundle showed.
func (b *Bundler) publish(ctx context.Context, repo Origin, d *revisionDraft) error {
	bun, orig := d.bundle, d.orig
	switch {
	case orig == nil:
		if err := b.Client.Create(ctx, bun); err != nil {
			return fmt.Errorf("failed to create bundle %s: %w", bun.Name, err)
		}
	case !equality.Semantic.DeepEqual(orig.Spec, bun.Spec) || !equality.Semantic.DeepEqual(orig.Labels, bun.Labels) || !slices.Equal(orig.Finalizers, bun.Finalizers):
		// Conditional on the Bundle as read: a revision recorded on a stale copy would reuse an
		// index or drop one from the history.
		if err := b.Client.Patch(ctx, bun, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			return fmt.Errorf("failed to update bundle %s: %w", bun.Name, err)
		}
	}
	if err := b.dropUntargeted(ctx, bun, d.targets); err != nil {
		return err
	}
	if bun.Status.RenderFailure != nil {
		if err := b.setRenderFailure(ctx, repo, bun.Name, nil); err != nil {
			return err
		}
	}
	return nil
}

// onlyTargetsChanged reports whether targets differ from what the latest revision recorded only
// by clusters that joined or left: every cluster in both is rendered as the revision recorded
// it. It returns the clusters that joined.
func (b *Bundler) onlyTargetsChanged(ctx context.Context, bun *v1alpha1.Bundle, latest *v1alpha1.BundleRevision, targets map[string]*bundle.Rendered) ([]string, bool) {
	before, err := b.Revisions.Targets(ctx, bun, latest.Index)
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

func (b *Bundler) limit(repo Origin) int {
	if repo.Spec.RevisionHistoryLimit != nil {
		return int(*repo.Spec.RevisionHistoryLimit)
	}
	if b.historyLimit > 0 {
		return b.historyLimit
	}
	return 10
}

// bundleSpec converts fleet.yaml's rollout settings to the Bundle's API (same JSON).
func bundleSpec(repo Origin, src *bundle.Source) (v1alpha1.BundleSpec, error) {
	f := &src.Fleet
	spec := v1alpha1.BundleSpec{Path: src.Dir, Targets: repo.Spec.Targets, Paused: f.Paused || repo.Spec.Paused}
	if repo.Label == model.LabelGitRepo {
		spec.GitRepo = repo.Name
	}
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

// removeStale deletes Bundles of the GitRepo that the commit no longer has, with their
// BundleDeployments (the agents then prune the workloads).
func (b *Bundler) removeStale(ctx context.Context, repo Origin, sources []bundle.Source) error {
	keep := map[string]bool{}
	for _, s := range sources {
		if s.Err != nil {
			// A fleet.yaml that does not decode may have named its bundle: which Bundle it
			// was is not known, so none is removed.
			return nil
		}
		keep[s.Name] = true
	}
	return RemoveBundles(ctx, b.Client, repo.Namespace, repo.Label, repo.Name, keep)
}

// RemoveBundles deletes a source's Bundles (those of namespace carrying label=name) not in keep,
// with their BundleDeployments: the agents then uninstall what those deployed (unless
// keepResources), and each deployment and Bundle goes once that is confirmed (package
// lifecycle). The hub does not count on a garbage collector.
func RemoveBundles(ctx context.Context, c client.Client, namespace, label, name string, keep map[string]bool) error {
	var bundles v1alpha1.BundleList
	if err := c.List(ctx, &bundles, client.InNamespace(namespace), client.MatchingLabels{label: name}); err != nil {
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
		bds, err := model.ListDeployments(ctx, c, bun)
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
