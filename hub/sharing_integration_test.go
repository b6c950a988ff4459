package hub

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/e2e/gitserver"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// A git server that hangs costs the GitRepos it serves, not the hub: with six repositories of
// one tenant and three of another on a server that accepts connections and never answers (a
// self-hosted forge both use), each tenant's healthy repository on another server still picks
// up a push within its poll interval and a few seconds, on four poll workers. Each hung poll
// holds a worker for the stall timeout, not the whole fetch timeout; one server's polls hold at
// most half of the workers. The hung GitRepos say why they fail.
func TestAHungGitServerCostsOnlyItsOwnRepositories(t *testing.T) {
	const stall, poll = time.Second, 2 * time.Second
	hung := gitserver.New(t)
	hung.Commit("main", map[string]string{"app/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: hung}\n"})
	hungSrv, faulted := hung.ServeFaulty(gitserver.Fault{Hang: true, EveryRequest: true})
	healthy := gitserver.New(t)
	first := healthy.Commit("main", map[string]string{"app/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n"})
	healthySrv := healthy.ServeHTTP("", "")

	c, _ := startHub(t, Options{PollWorkers: 4, GitStallTimeout: stall, PollRecordInterval: 3600})
	ctx := context.Background()
	gitRepo := func(ns, name, url string) types.NamespacedName {
		t.Helper()
		repo := &v1alpha1.GitRepo{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: v1alpha1.GitRepoSpec{Repo: url, PollingInterval: &metav1.Duration{Duration: poll}}}
		if err := c.Create(ctx, repo); err != nil {
			t.Fatal(err)
		}
		return client.ObjectKeyFromObject(repo)
	}
	tenants := map[string]int{namespace(t, c): 6, namespace(t, c): 3}
	var healthyRepos, hungRepos []types.NamespacedName
	for ns, n := range tenants {
		for i := range n {
			hungRepos = append(hungRepos, gitRepo(ns, fmt.Sprintf("hung-%d", i), hungSrv.URL+"/repo.git"))
		}
		healthyRepos = append(healthyRepos, gitRepo(ns, "healthy", healthySrv.URL+"/repo.git"))
	}
	for _, key := range healthyRepos {
		waitFor(t, c, key, "the first commit beside the hung server", func(r *v1alpha1.GitRepo) bool { return r.Status.Commit == first })
	}
	waitUntil(t, "the hung server holding polls", func() bool { return faulted.Load() >= 4 })

	second := healthy.Commit("main", map[string]string{"app/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\n"})
	pushed := time.Now()
	for _, key := range healthyRepos {
		waitFor(t, c, key, "the push beside the hung server", func(r *v1alpha1.GitRepo) bool { return r.Status.Commit == second })
		t.Logf("%s saw the push after %s (poll interval %s, stall timeout %s, %d polls of the hung server so far)",
			key, time.Since(pushed).Round(100*time.Millisecond), poll, stall, faulted.Load())
	}
	for _, key := range hungRepos[:1] {
		waitFor(t, c, key, "the hung GitRepo says why", func(r *v1alpha1.GitRepo) bool {
			cond := sourceReady(r)
			return cond != nil && cond.Status == metav1.ConditionFalse && strings.Contains(cond.Message, "sent nothing")
		})
	}
}
