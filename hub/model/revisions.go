package model

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/flotilla-dev/flotilla/bundle"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/bdstate"
	"github.com/flotilla-dev/flotilla/hub/contentstore"
)

// A revision is immutable (ROLLOUT.md §0): what it deploys to each cluster is recorded when it is
// created, so that a rollback, a run for an older index or a sequence group still on an older
// revision deploys exactly what was rendered then, without the old commit or the charts it used.

// RevisionTarget is what a revision deploys to one cluster.
type RevisionTarget struct {
	Ref     v1alpha1.RevisionRef       `json:"ref"`
	Options v1alpha1.DeploymentOptions `json:"options"`
}

// RevisionTargets maps cluster names to what the revision deploys there.
type RevisionTargets map[string]RevisionTarget

// RevisionStore keeps revision targets in the content store, stored once per distinct map and
// cached by id: a stored map never changes.
type RevisionStore struct {
	Content *contentstore.Store

	mu    sync.Mutex
	cache map[string]RevisionTargets // id → targets; bounded by maxCachedRevisions
	// firsts memoizes since per bundle history (the ids of its records, in order): the run and
	// sequence controllers ask on every report, the history changes with commits and joins.
	firsts map[string]map[string]int64
}

const maxCachedRevisions = 256

// Put stores the targets and returns the id a BundleRevision records.
func (s *RevisionStore) Put(ctx context.Context, namespace string, t RevisionTargets) (string, error) {
	data, err := json.Marshal(t) // map keys are sorted: equal maps give equal ids
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(data)
	id := "t-" + hex.EncodeToString(sum[:])[:32]
	if _, err := s.Content.Put(ctx, namespace, id, data); err != nil {
		return "", fmt.Errorf("failed to store revision targets: %w", err)
	}
	s.remember(id, t)
	return id, nil
}

// Targets reads what revision index of the bundle deploys per cluster.
func (s *RevisionStore) Targets(ctx context.Context, bun *v1alpha1.Bundle, index int64) (RevisionTargets, error) {
	return s.read(ctx, bun, index, true)
}

// Peek is targets for a reader outside the rollout's path (the content collector, which reads
// every revision of every history): what it reads is not remembered, so it never evicts the
// revisions the rollout controllers are working on.
func (s *RevisionStore) Peek(ctx context.Context, bun *v1alpha1.Bundle, index int64) (RevisionTargets, error) {
	return s.read(ctx, bun, index, false)
}

func (s *RevisionStore) read(ctx context.Context, bun *v1alpha1.Bundle, index int64, remember bool) (RevisionTargets, error) {
	rev := FindRevision(bun, index)
	if rev == nil {
		return nil, &MissingRevisionError{fmt.Sprintf("revision %d of bundle %s is not in its history (%s)", index, bun.Name, historyRange(bun))}
	}
	if rev.TargetsID == "" {
		return nil, &MissingRevisionError{fmt.Sprintf("revision %d of bundle %s has no recorded targets; it cannot be deployed again", index, bun.Name)}
	}
	s.mu.Lock()
	t, ok := s.cache[rev.TargetsID]
	s.mu.Unlock()
	if ok {
		return t, nil
	}
	data, err := s.Content.Get(ctx, bun.Namespace, rev.TargetsID)
	if err != nil {
		return nil, fmt.Errorf("revision %d of bundle %s: %w", index, bun.Name, err)
	}
	if err := json.Unmarshal(data, &t); err != nil {
		return nil, fmt.Errorf("revision %d of bundle %s: corrupt targets: %w", index, bun.Name, err)
	}
	if remember {
		s.remember(rev.TargetsID, t)
	}
	return t, nil
}

// Since maps each cluster to the oldest revision of the bundle's history rendered for it. A
// cluster that joined the targets has no rendering of the revisions before (unless
// recordJoiners could add one): the planners skip it for those (rollout: Since).
func (s *RevisionStore) Since(ctx context.Context, bun *v1alpha1.Bundle) (map[string]int64, error) {
	var key strings.Builder
	key.WriteString(bun.Namespace + "/" + bun.Name)
	for _, rev := range bun.Spec.Revisions {
		key.WriteString("|" + rev.TargetsID)
	}
	s.mu.Lock()
	out, ok := s.firsts[key.String()]
	s.mu.Unlock()
	if ok {
		return out, nil
	}
	out = map[string]int64{}
	for _, rev := range bun.Spec.Revisions {
		if rev.TargetsID == "" {
			continue
		}
		t, err := s.Targets(ctx, bun, rev.Index)
		if err != nil {
			return nil, err
		}
		for name := range t {
			if first, ok := out[name]; !ok || rev.Index < first {
				out[name] = rev.Index
			}
		}
	}
	s.mu.Lock()
	if s.firsts == nil || len(s.firsts) >= maxCachedRevisions {
		s.firsts = map[string]map[string]int64{}
	}
	s.firsts[key.String()] = out
	s.mu.Unlock()
	return out, nil
}

// MissingRevisionError is a revision that cannot be deployed: retrying does not help.
type MissingRevisionError struct{ msg string }

func (e *MissingRevisionError) Error() string { return e.msg }

func (s *RevisionStore) remember(id string, t RevisionTargets) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cache == nil || len(s.cache) >= maxCachedRevisions {
		s.cache = map[string]RevisionTargets{}
	}
	s.cache[id] = t
}

func FindRevision(bun *v1alpha1.Bundle, index int64) *v1alpha1.BundleRevision {
	for i := range bun.Spec.Revisions {
		if bun.Spec.Revisions[i].Index == index {
			return &bun.Spec.Revisions[i]
		}
	}
	return nil
}

func historyRange(bun *v1alpha1.Bundle) string {
	n := len(bun.Spec.Revisions)
	if n == 0 {
		return "it has none"
	}
	return fmt.Sprintf("kept: %d to %d", bun.Spec.Revisions[0].Index, bun.Spec.Revisions[n-1].Index)
}

// WantedRevision is the index a bundle rolls out: the rollback target when set, else the latest.
func WantedRevision(bun *v1alpha1.Bundle) int64 {
	if bun.Spec.TargetRevision != nil {
		return *bun.Spec.TargetRevision
	}
	return bun.Spec.LatestRevision
}

// DeploymentState is a cluster's state (§0) for what its bundle rolls out there. A continuous
// rollout stages a cluster only when it reaches it, so the bundle's revision is the measure;
// staged runs and sequences stage every revision at once, so the deployment's own is.
func DeploymentState(bun *v1alpha1.Bundle, bd *v1alpha1.BundleDeployment) v1alpha1.ClusterState {
	return bdstate.State(bd, MeasuredRevision(bun, bd))
}

func MeasuredRevision(bun *v1alpha1.Bundle, bd *v1alpha1.BundleDeployment) int64 {
	if bun == nil || bun.Spec.StagedUpdate != nil || bun.Spec.Sequence != nil {
		return bd.Spec.Staged.Index
	}
	return WantedRevision(bun)
}

// RecordedTargets is what a revision renders to each cluster, as its record keeps it.
func RecordedTargets(index int64, rendered map[string]*bundle.Rendered, restrictions []v1alpha1.DeploymentRestriction) (RevisionTargets, error) {
	out := RevisionTargets{}
	for cluster, res := range rendered {
		t := RevisionTarget{Ref: v1alpha1.RevisionRef{Index: index, ContentID: res.ContentID, DeploymentID: res.DeploymentID}}
		t.Options = deploymentOptions(res.Options)
		if len(restrictions) > 0 {
			t.Options.Restrictions = restrictions
		}
		out[cluster] = t
	}
	return out, nil
}
