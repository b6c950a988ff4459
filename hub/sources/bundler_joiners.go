package sources

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/flotilla-dev/flotilla/bundle"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/model"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// recordJoiners renders the older revisions of the bundle's history that a sequence group or a
// staged run still uses for clusters that joined its targets, each from its own commit, and adds
// them to those revisions' records: a joining cluster can then receive the revision its stage or
// group has reached, which need not be the latest. What the revisions deploy to the other clusters does not change. A revision that
// cannot be rendered for them (its commit is gone, or no longer renders) stays without them,
// and they wait for a newer one; that is logged, not an error of the new commit.
func (b *Bundler) recordJoiners(ctx context.Context, repo Origin, bun *v1alpha1.Bundle, revs []v1alpha1.BundleRevision, joined []string, now rendered) {
	if repo.Checkout == nil || len(joined) == 0 {
		return
	}
	inUse, err := b.olderRevisionsInUse(ctx, bun)
	logger := log.FromContext(ctx).WithValues("source", repo.Namespace+"/"+repo.Name, "bundle", bun.Name)
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
		logger.Info("an older revision still in use rendered for clusters that joined", "revision", rev.Index, "commit", model.ShortCommit(rev.Commit), "clusters", joined)
	}
}

// olderRevisionsInUse are the revisions a joining cluster may be given besides the latest: those
// a sequence group works on or has completed, and those of the bundle's staged runs (a rollback
// run's, say). A continuous rollout or a placement only ever gives the latest (or the pinned
// rollback revision, which keeps the clusters it was rendered for).
func (b *Bundler) olderRevisionsInUse(ctx context.Context, bun *v1alpha1.Bundle) (map[int64]bool, error) {
	inUse := map[int64]bool{}
	for _, g := range bun.Status.Sequence {
		for _, r := range g.Revisions {
			if r.State != v1alpha1.SequenceIneligible && r.State != v1alpha1.SequencePending {
				inUse[r.Index] = true
			}
		}
	}
	if bun.Spec.StagedUpdate != nil {
		runs, err := model.RunsOfBundle(ctx, b.Client, bun.Namespace, bun.Name)
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

func (b *Bundler) recordJoinersIn(ctx context.Context, repo Origin, bun *v1alpha1.Bundle, rev *v1alpha1.BundleRevision, joined []string, now rendered) error {
	record, err := b.Revisions.Targets(ctx, bun, rev.Index)
	if err != nil {
		return err
	}
	checkout, err := repo.Checkout(ctx, rev.Commit)
	if err != nil {
		return err
	}
	sources, err := discover(checkout, repo)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(sources, func(s bundle.Source) bool { return s.Name == bun.Name })
	if i < 0 {
		return fmt.Errorf("commit %s has no bundle %s", model.ShortCommit(rev.Commit), bun.Name)
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
		if _, err := b.Content.Put(ctx, repo.Namespace, res.ContentID, res.Manifest); err != nil {
			return err
		}
		added[name] = res
	}
	if len(added) == 0 {
		return nil
	}
	more, err := model.RecordedTargets(rev.Index, added, now.restrictions)
	if err != nil {
		return err
	}
	merged := maps.Clone(record)
	maps.Copy(merged, more)
	id, err := b.Revisions.Put(ctx, repo.Namespace, merged)
	if err != nil {
		return err
	}
	rev.TargetsID = id
	return nil
}
