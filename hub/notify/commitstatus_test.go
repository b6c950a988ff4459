package notify

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/e2e/forgeserver"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/endpoint"
)

func bundleAt(name, commit string, rev int64, ready string, outcome v1alpha1.RolloutOutcome, failure string) v1alpha1.Bundle {
	b := v1alpha1.Bundle{ObjectMeta: metav1.ObjectMeta{Name: name}}
	b.Status.Commit, b.Status.ReleasingRevision, b.Status.Display.ReadyClusters = commit, rev, ready
	if outcome != "" {
		b.Status.Outcome = &v1alpha1.RolloutResult{Revision: rev, Outcome: outcome}
		if failure != "" {
			b.Status.Outcome.Failure = &v1alpha1.RevisionFailure{Message: failure}
		}
	}
	return b
}

// A commit's status follows its bundle's rollout: pending while it rolls out, success once it
// completed, failure with the reason when it failed, was rolled back or does not render; an
// outcome of an older revision says nothing of the newest. Per GitRepo: failure when one of
// the commit's bundles failed, pending while one rolls out, success once all completed.
func TestACommitStatusFollowsTheRollout(t *testing.T) {
	rendering := bundleAt("db", "c0ffee", 3, "1/2", "", "")
	rendering.Status.RenderFailure = &v1alpha1.RenderFailure{Commit: "badbad", Message: "db/fleet.yaml: helm.values: not a map"}
	rolledBack := bundleAt("web", "c0ffee", 2, "2/3", v1alpha1.OutcomeRolledBack, "partition canary failed: c1 not ready")
	rolledBack.Status.Outcome.Failure.Rule, rolledBack.Status.Outcome.Failure.Clusters = "R5.3", []string{"c1", "c2", "c4", "c9"}
	older := bundleAt("api", "c0ffee", 4, "0/2", v1alpha1.OutcomeCompleted, "")
	older.Status.Outcome.Revision = 3
	for _, tc := range []struct {
		b    v1alpha1.Bundle
		want CommitStatus
	}{
		{bundleAt("web", "c0ffee", 2, "1/3", "", ""), CommitStatus{"c0ffee", "flotilla/web", CommitPending, "revision 2 rolling out: 1/3 clusters ready"}},
		{bundleAt("web", "c0ffee", 2, "3/3", v1alpha1.OutcomeCompleted, ""), CommitStatus{"c0ffee", "flotilla/web", CommitSuccess, "revision 2 completed: 3/3 clusters ready"}},
		{rolledBack, CommitStatus{"c0ffee", "flotilla/web", CommitFailure,
			"revision 2 RolledBack (R5.3) on c1, c2, c4 and 1 more: partition canary failed: c1 not ready"}},
		{bundleAt("web", "c0ffee", 2, "2/3", v1alpha1.OutcomeFailed, ""), CommitStatus{"c0ffee", "flotilla/web", CommitFailure, "revision 2 Failed"}},
		{older, CommitStatus{"c0ffee", "flotilla/api", CommitPending, "revision 4 rolling out: 0/2 clusters ready"}},
		{rendering, CommitStatus{"badbad", "flotilla/db", CommitFailure, "does not render: db/fleet.yaml: helm.values: not a map"}},
	} {
		got, ok := BundleCommitStatus(&tc.b)
		if !ok || got != tc.want {
			t.Errorf("%s: %+v (%v), want %+v", tc.b.Name, got, ok, tc.want)
		}
	}
	if _, ok := BundleCommitStatus(&v1alpha1.Bundle{}); ok {
		t.Error("a bundle without a commit has a status")
	}
	long := bundleAt("web", "c0ffee", 2, "", v1alpha1.OutcomeFailed, strings.Repeat("x", 500))
	if got, _ := BundleCommitStatus(&long); len(got.Description) > MaxDescription {
		t.Errorf("a description of %d bytes, want at most %d", len(got.Description), MaxDescription)
	}

	repo := &v1alpha1.GitRepo{ObjectMeta: metav1.ObjectMeta{Name: "shop"}, Spec: v1alpha1.GitRepoSpec{CommitStatus: &v1alpha1.CommitStatusSpec{Scope: v1alpha1.CommitStatusPerGitRepo}}}
	repo.Status.Commit = "c0ffee"
	done := bundleAt("web", "c0ffee", 2, "3/3", v1alpha1.OutcomeCompleted, "")
	rolling := bundleAt("api", "c0ffee", 5, "1/3", "", "")
	failed := bundleAt("db", "c0ffee", 7, "0/3", v1alpha1.OutcomeFailed, "apply failed on c1")
	unchanged := bundleAt("docs", "0ld", 1, "3/3", "", "") // not changed by this commit: not counted
	for _, tc := range []struct {
		bundles []v1alpha1.Bundle
		want    CommitStatus
	}{
		{[]v1alpha1.Bundle{done, unchanged}, CommitStatus{"c0ffee", "flotilla/shop", CommitSuccess, "1 bundles completed"}},
		{[]v1alpha1.Bundle{done, rolling, unchanged}, CommitStatus{"c0ffee", "flotilla/shop", CommitPending, "1 bundles rolling out: api"}},
		{[]v1alpha1.Bundle{done, rolling, failed}, CommitStatus{"c0ffee", "flotilla/shop", CommitFailure, "1 bundles failed: db: revision 7 Failed: apply failed on c1"}},
	} {
		got := CommitStatuses(repo, tc.bundles)
		if len(got) != 1 || got[0] != tc.want {
			t.Errorf("%+v, want %+v", got, tc.want)
		}
	}
}

// Each forge gets the request its API documents, with its own authentication and states; the
// server refuses anything else, so a request it accepts is one the forge would take.
func TestEachForgeGetsItsCommitStatusRequest(t *testing.T) {
	forge := forgeserver.New(t, "s3cret")
	hc, err := endpoint.NewClient(context.Background(), nil, "", endpoint.Options{Allowed: endpoint.Policy{endpoint.MustParseAddressList("the test", "127.0.0.1")}})
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range []v1alpha1.NotificationProviderType{v1alpha1.ProviderGitHub, v1alpha1.ProviderGitLab, v1alpha1.ProviderGitea, v1alpha1.ProviderBitbucket} {
		ep := &Endpoint{Type: typ, URL: forge.URL, Token: "s3cret", Client: hc, Timeout: 5 * time.Second}
		for _, state := range []CommitState{CommitPending, CommitSuccess, CommitFailure} {
			s := CommitStatus{SHA: "c0ffee", Context: "flotilla/shop-web", State: state, Description: "revision 2 " + string(state)}
			if err := PostCommitStatus(context.Background(), ep, "team/shop", s, "https://dash.example/#/fleet"); err != nil {
				t.Errorf("%s %s: %v", typ, state, err)
			}
		}
		got := forge.Statuses(string(typ))
		want := map[v1alpha1.NotificationProviderType][]string{
			v1alpha1.ProviderGitHub: {"pending", "success", "failure"}, v1alpha1.ProviderGitea: {"pending", "success", "failure"},
			v1alpha1.ProviderGitLab: {"pending", "success", "failed"}, v1alpha1.ProviderBitbucket: {"INPROGRESS", "SUCCESSFUL", "FAILED"},
		}[typ]
		if len(got) != 3 {
			t.Fatalf("%s accepted %d statuses, want 3 (refused %d)", typ, len(got), forge.Refused())
		}
		for i, st := range got {
			if st.State != want[i] || st.Repo != "team/shop" || st.SHA != "c0ffee" || st.Context != "flotilla/shop-web" || st.URL != "https://dash.example/#/fleet" ||
				!strings.HasPrefix(st.Description, "revision 2 ") {
				t.Errorf("%s status %d: %+v, want state %s", typ, i, st, want[i])
			}
		}
	}
	wrong := &Endpoint{Type: v1alpha1.ProviderGitHub, URL: forge.URL, Token: "guess", Client: hc}
	if err := PostCommitStatus(context.Background(), wrong, "team/shop", CommitStatus{SHA: "c0ffee", Context: "x", State: CommitPending}, ""); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("a wrong token: %v, want the forge's 401", err)
	}
	if err := PostCommitStatus(context.Background(), &Endpoint{Type: v1alpha1.ProviderSlack, URL: forge.URL, Client: hc}, "team/shop", CommitStatus{SHA: "c0ffee", Context: "x", State: CommitPending}, ""); err == nil {
		t.Error("a slack provider posted a commit status")
	}
}

func TestRepositoryPath(t *testing.T) {
	for repo, want := range map[string]string{
		"https://github.com/team/shop.git":           "team/shop",
		"https://gitlab.example/group/sub/shop":      "group/sub/shop",
		"ssh://git@gitea.example:2222/team/shop.git": "team/shop",
		"git@bitbucket.org:team/shop.git":            "team/shop",
	} {
		if got, err := RepositoryPath(repo); err != nil || got != want {
			t.Errorf("%s: %q, %v; want %q", repo, got, err, want)
		}
	}
	for _, repo := range []string{"https://git.example/repo.git", "git@host:repo"} {
		if _, err := RepositoryPath(repo); err == nil || !strings.Contains(err.Error(), "spec.commitStatus.repository") {
			t.Errorf("%s: %v, want an error naming spec.commitStatus.repository", repo, err)
		}
	}
}
