package notify

import (
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/model"
)

// CommitState is a commit status's state, in the forges' common terms.
type CommitState string

const (
	CommitPending CommitState = "pending"
	CommitSuccess CommitState = "success"
	CommitFailure CommitState = "failure"
)

// MaxDescription bounds a status's description (GitHub's limit).
const MaxDescription = 140

// CommitStatus is one status of one commit: what the forge shows beside it.
type CommitStatus struct {
	SHA         string
	Context     string
	State       CommitState
	Description string
}

// BundleCommitStatus is how a bundle's newest commit stands: pending while its revision rolls
// out, success once it completed (every targeted cluster Ready), failure when it failed, was
// rolled back (R5.6) or does not render. ok is false while the bundle has no commit yet.
func BundleCommitStatus(b *v1alpha1.Bundle) (CommitStatus, bool) {
	st := &b.Status
	context := "flotilla/" + b.Name
	if rf := st.RenderFailure; rf != nil {
		return CommitStatus{SHA: rf.Commit, Context: context, State: CommitFailure, Description: describe("does not render: " + rf.Message)}, true
	}
	if st.Commit == "" || st.ReleasingRevision == 0 {
		return CommitStatus{}, false
	}
	s := CommitStatus{SHA: st.Commit, Context: context, State: CommitPending,
		Description: describe(fmt.Sprintf("revision %d rolling out: %s clusters ready", st.ReleasingRevision, orDash(st.Display.ReadyClusters)))}
	if o := st.Outcome; o != nil && o.Revision == st.ReleasingRevision {
		switch o.Outcome {
		case v1alpha1.OutcomeCompleted:
			s.State, s.Description = CommitSuccess, describe(fmt.Sprintf("revision %d completed: %s clusters ready", o.Revision, orDash(st.Display.ReadyClusters)))
		case v1alpha1.OutcomeFailed, v1alpha1.OutcomeRolledBack:
			// What a person acts on first, within the forge's 140 characters: the rule and
			// the clusters, then the message.
			why := fmt.Sprintf("revision %d %s", o.Revision, o.Outcome)
			if f := o.Failure; f != nil {
				if f.Rule != "" {
					why += " (" + f.Rule + ")"
				}
				if len(f.Clusters) > 0 {
					why += " on " + abbreviate(f.Clusters, 3)
				}
				if f.Message != "" {
					why += ": " + f.Message
				}
			}
			s.State, s.Description = CommitFailure, describe(why)
		}
	}
	return s, true
}

// GitRepoCommitStatus is the one status of a GitRepo's commit over its bundles at that commit:
// failure when one failed, pending while one rolls out, success once all completed.
func GitRepoCommitStatus(repo *v1alpha1.GitRepo, bundles []v1alpha1.Bundle) (CommitStatus, bool) {
	if repo.Status.Commit == "" {
		return CommitStatus{}, false
	}
	s := CommitStatus{SHA: repo.Status.Commit, Context: "flotilla/" + repo.Name, State: CommitSuccess}
	var pending, failed []string
	done := 0
	for i := range bundles {
		bs, ok := BundleCommitStatus(&bundles[i])
		if !ok || bs.SHA != repo.Status.Commit {
			continue // a bundle this commit did not change reports on its own commit
		}
		switch bs.State {
		case CommitFailure:
			failed = append(failed, bundles[i].Name+": "+bs.Description)
		case CommitPending:
			pending = append(pending, bundles[i].Name)
		default:
			done++
		}
	}
	switch {
	case len(failed) > 0:
		s.State, s.Description = CommitFailure, describe(fmt.Sprintf("%d bundles failed: %s", len(failed), strings.Join(failed, "; ")))
	case len(pending) > 0:
		s.State, s.Description = CommitPending, describe(fmt.Sprintf("%d bundles rolling out: %s", len(pending), strings.Join(pending, ", ")))
	case done == 0:
		return CommitStatus{}, false
	default:
		s.Description = describe(fmt.Sprintf("%d bundles completed", done))
	}
	return s, true
}

// CommitStatuses are the statuses a GitRepo's spec.commitStatus asks for now.
func CommitStatuses(repo *v1alpha1.GitRepo, bundles []v1alpha1.Bundle) []CommitStatus {
	if repo.Spec.CommitStatus == nil {
		return nil
	}
	if repo.Spec.CommitStatus.Scope == v1alpha1.CommitStatusPerGitRepo {
		if s, ok := GitRepoCommitStatus(repo, bundles); ok {
			return []CommitStatus{s}
		}
		return nil
	}
	var out []CommitStatus
	for i := range bundles {
		if s, ok := BundleCommitStatus(&bundles[i]); ok {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b CommitStatus) int { return strings.Compare(a.Context, b.Context) })
	return out
}

// abbreviate lists up to n names, then how many more.
func abbreviate(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:n], ", ") + fmt.Sprintf(" and %d more", len(names)-n)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func describe(s string) string { return truncate(model.Unlinked(s), MaxDescription-len("…")) }

// RepositoryPath is a repository's path on its forge from its URL: owner/name (a GitLab
// project's full path), without ".git".
func RepositoryPath(repo string) (string, error) {
	var path string
	if u, err := url.Parse(repo); err == nil && u.Scheme != "" && u.Host != "" {
		path = u.Path
	} else if _, p, ok := strings.Cut(repo, ":"); ok && strings.Contains(repo, "@") {
		path = p // scp-like git@host:owner/name.git
	}
	path = strings.TrimSuffix(strings.Trim(path, "/"), ".git")
	if !strings.Contains(path, "/") {
		return "", fmt.Errorf("%q has no owner/name path: set spec.commitStatus.repository", repo)
	}
	return path, nil
}
