package hub

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/e2e/forgeserver"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// Commit statuses through the real hub, to a loopback server implementing each forge's status
// endpoint: a good rollout is pending, then success, on its commit; a revision that fails on
// the canary and is rolled back is pending, then failure with the reason, on its own commit.
// The token comes from a Secret of the GitRepo's namespace.
func TestCommitStatusesFollowEachCommitsRolloutOnEveryForge(t *testing.T) {
	for _, forgeType := range []v1alpha1.NotificationProviderType{v1alpha1.ProviderGitHub, v1alpha1.ProviderGitLab, v1alpha1.ProviderGitea, v1alpha1.ProviderBitbucket} {
		t.Run(string(forgeType), func(t *testing.T) {
			forge := forgeserver.New(t, "forge-token")
			f := newSimFleet(t, Options{}, canaryRollback, map[string]map[string]string{"c1": {"ring": "canary"}, "m1": {"ring": "main"}})
			ctx := context.Background()
			for _, o := range []client.Object{
				&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "forge"}, Data: map[string][]byte{"token": []byte("forge-token")}},
				&v1alpha1.NotificationProvider{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "forge"},
					Spec: v1alpha1.NotificationProviderSpec{Type: forgeType, Address: forge.URL, SecretRef: &v1alpha1.LocalSecretReference{Name: "forge"}}},
			} {
				if err := f.c.Create(ctx, o); err != nil {
					t.Fatal(err)
				}
			}
			var repo v1alpha1.GitRepo
			if err := f.c.Get(ctx, types.NamespacedName{Namespace: f.ns, Name: "shop"}, &repo); err != nil {
				t.Fatal(err)
			}
			orig := repo.DeepCopy()
			repo.Spec.CommitStatus = &v1alpha1.CommitStatusSpec{ProviderRef: v1alpha1.LocalSecretReference{Name: "forge"}, Repository: "team/shop"}
			if err := f.c.Patch(ctx, &repo, client.MergeFrom(orig)); err != nil {
				t.Fatal(err)
			}
			states := func(sha string) []string {
				var out []string
				for _, s := range forge.Statuses(string(forgeType)) {
					if s.SHA == sha && s.Context == "flotilla/shop-web" && s.Repo == "team/shop" {
						if len(out) == 0 || out[len(out)-1] != s.State {
							out = append(out, s.State)
						}
					}
				}
				return out
			}
			// Each forge's words for pending, success and failure.
			words := map[v1alpha1.NotificationProviderType][3]string{
				v1alpha1.ProviderGitHub: {"pending", "success", "failure"}, v1alpha1.ProviderGitea: {"pending", "success", "failure"},
				v1alpha1.ProviderGitLab: {"pending", "success", "failed"}, v1alpha1.ProviderBitbucket: {"INPROGRESS", "SUCCESSFUL", "FAILED"},
			}[forgeType]
			pending, success, failure := words[0], words[1], words[2]
			show := func() string {
				return fmt.Sprintf("%+v (refused %d)\n%s", forge.Statuses(string(forgeType)), forge.Refused(), f.dump())
			}

			f.releasedExactly(1, "partitions NotReady (canary)", "c1")
			f.until("the bundle names the commit it rolls out", func() bool { return f.getBundle().Status.Commit != "" })
			first := f.getBundle().Status.Commit
			waitUntil(t, "the first commit is pending", func() bool { return strings.Join(states(first), ",") == pending }, show)
			f.ready("c1")
			f.until("revision 1 reaches m1", func() bool { return f.onRevision(1, "m1") })
			f.ready("m1")
			waitUntil(t, "the first commit turns success", func() bool { return strings.Join(states(first), ",") == pending+","+success }, show)

			f.commit("2", "")
			f.until("revision 2 reaches the canary, its commit named", func() bool {
				return f.onRevision(2, "c1") && f.getBundle().Status.ReleasingRevision == 2 && f.getBundle().Status.Commit != first
			})
			second := f.getBundle().Status.Commit
			waitUntil(t, "the second commit is pending", func() bool { return strings.Join(states(second), ",") == pending }, show)
			f.failApply("c1")
			f.until("revision 2 is rolled back", func() bool {
				o := f.getBundle().Status.Outcome
				return o != nil && o.Revision == 2 && o.Outcome == v1alpha1.OutcomeRolledBack
			})
			waitUntil(t, "the second commit turns failure", func() bool { return strings.Join(states(second), ",") == pending+","+failure }, show)
			last := forge.Statuses(string(forgeType))
			if d := last[len(last)-1].Description; !strings.HasPrefix(d, "revision 2 RolledBack (R5.3) on c1: ") {
				t.Errorf("the failure says %q, want the rollback and the cluster that failed", d)
			}
			if got := states(first); strings.Join(got, ",") != pending+","+success || forge.Refused() != 0 {
				t.Errorf("the first commit's statuses %v (refused %d): a later commit must not change them", got, forge.Refused())
			}
		})
	}
}
