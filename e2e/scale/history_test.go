package scale

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/e2e/gitserver"
	"github.com/flotilla-dev/flotilla/hub"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// historyCommits and historyLimit: 200 commits through one GitRepo that keeps 5 revisions.
const (
	historyCommits  = 200
	historyLimit    = 5
	historyClusters = 20
)

// BenchmarkContentHistory pushes 200 commits, each a new revision of one bundle on 20 clusters,
// through one GitRepo that keeps 5 revisions in its history, and reports the Content stored
// after 50 and after 200 commits (objects and bytes, once the collector settled): flat once the
// history is full, instead of growing with every commit.
func BenchmarkContentHistory(b *testing.B) {
	for b.Loop() {
		runHistory(b)
	}
}

func runHistory(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := benchClient(b)
	ns := benchNamespace(b, c, "history-")
	files := func(i int) map[string]string {
		return map[string]string{"app/fleet.yaml": "defaultNamespace: history\n",
			"app/cm.yaml": fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\ndata: {commit: \"%d\"}\n", i)}
	}
	up := gitserver.New(b)
	up.Commit("main", files(1))
	srv := up.ServeHTTP("", "")
	register(b, c, ns.Name, historyClusters)
	const grace, delay = 2 * time.Second, time.Second
	webhook := freeLoopbackAddr(b)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		_ = hub.Run(ctx, hub.Options{Config: fastConfig(), CacheDir: b.TempDir(), WebhookAddr: webhook, ContentGrace: grace, StatusDelay: delay})
	}()
	fleet := &fleetWatch{}
	go func() { defer wg.Done(); fleet.simulateAgents(ctx, b, c, ns.Name, historyClusters) }()
	defer removeScenario(b, c, ns.Name, historyClusters)
	defer wg.Wait()
	defer cancel()

	hook := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "hook", Namespace: ns.Name}, Data: map[string][]byte{"token": []byte(webhookSecret)}}
	if err := c.Create(ctx, hook); err != nil {
		b.Fatal(err)
	}
	limit := int32(historyLimit)
	repo := &v1alpha1.GitRepo{ObjectMeta: metav1.ObjectMeta{Name: "history", Namespace: ns.Name}, Spec: v1alpha1.GitRepoSpec{
		Repo: srv.URL + "/repo.git", PollingInterval: &metav1.Duration{Duration: time.Minute}, WebhookSecretRef: &v1alpha1.LocalObjectReference{Name: hook.Name},
		RevisionHistoryLimit: &limit, Targets: []v1alpha1.Target{{ClusterMatch: v1alpha1.ClusterMatch{ClusterSelector: &metav1.LabelSelector{}}}},
	}}
	if err := c.Create(ctx, repo); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	fleet.waitAllReady(b, historyClusters, 1, start)
	stored := map[int][2]int{}
	for i := 2; i <= historyCommits; i++ {
		announcePush(b, webhook, srv.URL+"/repo.git", up.Commit("main", files(i)))
		fleet.waitAllReady(b, historyClusters, int64(i), time.Now())
		if i == 50 || i == historyCommits {
			stored[i] = settledContent(b, c, ns.Name, grace+2*delay)
		}
	}
	b.ReportMetric(float64(stored[50][0]), "content-objects@50")
	b.ReportMetric(float64(stored[historyCommits][0]), "content-objects@200")
	b.ReportMetric(float64(stored[50][1])/1024, "content-KiB@50")
	b.ReportMetric(float64(stored[historyCommits][1])/1024, "content-KiB@200")
	b.ReportMetric(time.Since(start).Seconds()/historyCommits, "s/commit")
	if stored[historyCommits][0] > stored[50][0] {
		b.Errorf("content grew with the commits after the history was full: %d objects after 50 commits, %d after 200", stored[50][0], stored[historyCommits][0])
	}
}

// settledContent counts the namespace's Content objects and their bytes once the count has
// stayed the same for quiet: the collector has deleted what it will.
func settledContent(b *testing.B, c client.Client, ns string, quiet time.Duration) [2]int {
	last, since := -1, time.Now()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		var list v1alpha1.ContentList
		if err := c.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			b.Fatal(err)
		}
		if len(list.Items) != last {
			last, since = len(list.Items), time.Now()
			continue
		}
		if time.Since(since) >= quiet {
			bytes := 0
			for _, ct := range list.Items {
				bytes += len(ct.Data)
			}
			return [2]int{len(list.Items), bytes}
		}
	}
	b.Fatalf("the content of %s did not settle within a minute", ns)
	return [2]int{}
}
