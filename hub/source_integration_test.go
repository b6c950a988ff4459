package hub

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/e2e/controlplane"
	"github.com/flotilla-dev/flotilla/e2e/gitserver"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/gitsource"
	"github.com/flotilla-dev/flotilla/hub/sources"
)

var hubCluster *controlplane.Cluster

func TestMain(m *testing.M) {
	// Everything the hubs log is kept for the attack tests, which assert their targets never
	// reach a log line.
	ctrl.SetLogger(funcr.New(func(prefix, args string) { hubLogs.write(prefix + " " + args) }, funcr.Options{Verbosity: 2}))
	os.Exit(controlplane.RunTests(m, func(ctx context.Context, env *controlplane.Environment) (err error) {
		if hubCluster, err = env.StartCluster(ctx, controlplane.ClusterOptions{Name: "hub", Kind: controlplane.Bare}); err != nil {
			return err
		}
		return controlplane.InstallFlotillaAPI(ctx, hubCluster.Config())
	}))
}

// startHub runs hub.Run until the test ends and returns a client and the webhook URL.
func startHub(t *testing.T, opts Options) (client.Client, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	if opts.Config == nil {
		opts.Config = hubCluster.Config()
	}
	opts.CacheDir, opts.WebhookAddr = t.TempDir(), addr
	if opts.AllowedProviderAddresses == nil {
		// The tests' providers (hooks, forges, Prometheus) are served on loopback: listed, as
		// an operator lists where theirs are.
		opts.AllowedProviderAddresses = []string{"127.0.0.1"}
	}
	if opts.AllowedChartHosts == nil {
		// And so are their chart servers and registries.
		opts.AllowedChartHosts = []string{"127.0.0.1"}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := Run(ctx, opts); err != nil {
			t.Errorf("hub.Run: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
	scheme, _ := Scheme()
	c, err := client.New(hubCluster.Config(), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c, "http://" + addr
}

// apiClient is a client of the test API server with the hub's scheme, for tests that drive
// reconcilers by hand or write objects directly.
func apiClient(t *testing.T) client.Client {
	t.Helper()
	scheme, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(hubCluster.Config(), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func namespace(t *testing.T, c client.Client) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "gitrepo-"}}
	if err := c.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// waitFor polls the GitRepo until cond holds (the test reads the API server; the hub itself
// watches).
func waitFor(t *testing.T, c client.Client, key types.NamespacedName, what string, cond func(*v1alpha1.GitRepo) bool) *v1alpha1.GitRepo {
	t.Helper()
	return waitForObject(t, c, key, "gitrepo: "+what, cond)
}

func sourceReady(r *v1alpha1.GitRepo) *metav1.Condition {
	return meta.FindStatusCondition(r.Status.Conditions, v1alpha1.SourceReadyCondition)
}

func TestGitRepoSourceStatus(t *testing.T) {
	up := gitserver.New(t)
	first := up.Commit("main", map[string]string{"app/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n"})
	srv := up.ServeHTTP("fleet", "t0ken")
	c, webhook := startHub(t, Options{PollRecordInterval: 3600})
	ns := namespace(t, c)
	ctx := context.Background()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "git-auth", Namespace: ns}, Data: map[string][]byte{"username": []byte("fleet"), "password": []byte("t0ken")}}
	hook := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "git-hook", Namespace: ns}, Data: map[string][]byte{"token": []byte("hook-secret")}}
	for _, s := range []*corev1.Secret{secret, hook} {
		if err := c.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	repo := &v1alpha1.GitRepo{ObjectMeta: metav1.ObjectMeta{Name: "apps", Namespace: ns}, Spec: v1alpha1.GitRepoSpec{
		Repo: srv.URL + "/repo.git", Branch: "main", SecretRef: &v1alpha1.LocalObjectReference{Name: "git-auth"},
		WebhookSecretRef: &v1alpha1.LocalObjectReference{Name: "git-hook"}, PollingInterval: &metav1.Duration{Duration: time.Hour},
	}}
	if err := c.Create(ctx, repo); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(repo)
	got := waitFor(t, c, key, "first commit", func(r *v1alpha1.GitRepo) bool { return r.Status.Commit == first })
	if cond := sourceReady(got); cond == nil || cond.Status != metav1.ConditionTrue || got.Status.LastPollTime == nil {
		t.Fatalf("status after first poll: %+v", got.Status)
	}

	// A push, announced by a signed GitHub webhook, is picked up without waiting for the hour.
	second := up.Commit("main", map[string]string{"app/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\n"})
	body := fmt.Sprintf(`{"ref":"refs/heads/main","after":"0000000000000000000000000000000000000000","repository":{"clone_url":%q}}`, srv.URL+"/repo.git")
	if code, _ := deliverPush(t, webhook, body, "a guess"); code != http.StatusUnauthorized {
		t.Errorf("wrongly signed webhook: %d, want 401", code)
	}
	if code, _ := deliverPush(t, webhook, body, "hook-secret"); code != http.StatusAccepted {
		t.Fatalf("signed webhook: %d", code)
	}
	got = waitFor(t, c, key, "second commit after the webhook", func(r *v1alpha1.GitRepo) bool { return r.Status.Commit == second })
	if got.Status.LastWebhookTime == nil {
		t.Errorf("lastWebhookTime not recorded")
	}

	// Nothing changes: polls do not write (lastPollTime is recorded at most hourly here).
	if err := c.Patch(ctx, got, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"pollingInterval":"1s"}}`))); err != nil {
		t.Fatal(err)
	}
	got = waitFor(t, c, key, "the new generation observed", func(r *v1alpha1.GitRepo) bool { return r.Status.ObservedGeneration == r.Generation })
	rv := got.ResourceVersion
	polled := up.RefReads()
	waitUntil(t, "three polls of the unchanged repository", func() bool { return up.RefReads() >= polled+3 })
	var after v1alpha1.GitRepo
	if err := c.Get(ctx, key, &after); err != nil {
		t.Fatal(err)
	}
	if after.ResourceVersion != rv {
		t.Errorf("unchanged polls wrote the GitRepo: resourceVersion %s → %s, status %+v", rv, after.ResourceVersion, after.Status)
	}

	// Wrong credentials: the condition says so, the last good commit stays.
	secret.Data["password"] = []byte("revoked")
	if err := c.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	got = waitFor(t, c, key, "authentication failure", func(r *v1alpha1.GitRepo) bool {
		cond := sourceReady(r)
		return cond != nil && cond.Status == metav1.ConditionFalse
	})
	cond := sourceReady(got)
	if cond.Reason != "AuthenticationFailed" || got.Status.Commit != second || strings.Contains(cond.Message, "revoked") {
		t.Errorf("after revoking: reason %s, commit %s, message %q", cond.Reason, got.Status.Commit, cond.Message)
	}
	if ready := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ReadyCondition); ready == nil || ready.Status != metav1.ConditionFalse {
		t.Errorf("Ready must follow SourceReady: %+v", ready)
	}
}

// A missing branch is reported; a sync schedule of the right shape that still does not parse
// (hour 25: the API server checks the shape only) stalls the GitRepo, naming the field.
func TestGitRepoMissingBranchAndBadSchedule(t *testing.T) {
	up := gitserver.New(t)
	up.Commit("main", map[string]string{"a.yaml": "a: 1\n"})
	srv := up.ServeHTTP("", "")
	c, _ := startHub(t, Options{})
	ns := namespace(t, c)
	ctx := context.Background()
	gone := &v1alpha1.GitRepo{ObjectMeta: metav1.ObjectMeta{Name: "gone", Namespace: ns}, Spec: v1alpha1.GitRepoSpec{Repo: srv.URL + "/repo.git", Branch: "release"}}
	cron := &v1alpha1.GitRepo{ObjectMeta: metav1.ObjectMeta{Name: "cron", Namespace: ns}, Spec: v1alpha1.GitRepoSpec{Repo: srv.URL + "/repo.git", SyncSchedule: &v1alpha1.SyncSchedule{Cron: "0 25 * * *"}}}
	for _, r := range []*v1alpha1.GitRepo{gone, cron} {
		if err := c.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	got := waitFor(t, c, client.ObjectKeyFromObject(gone), "RefNotFound", func(r *v1alpha1.GitRepo) bool {
		cond := sourceReady(r)
		return cond != nil && cond.Reason == "RefNotFound"
	})
	if !strings.Contains(sourceReady(got).Message, `branch "release"`) || got.Status.Commit != "" {
		t.Errorf("missing branch: %+v", got.Status)
	}
	got = waitFor(t, c, client.ObjectKeyFromObject(cron), "Stalled", func(r *v1alpha1.GitRepo) bool {
		return meta.IsStatusConditionTrue(r.Status.Conditions, v1alpha1.StalledCondition)
	})
	if cond := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.StalledCondition); !strings.Contains(cond.Message, "syncSchedule.cron") {
		t.Errorf("stalled message %q", cond.Message)
	}
}

func TestSyncWindowHoldsNewCommits(t *testing.T) {
	up := gitserver.New(t)
	first := up.Commit("main", map[string]string{"a.yaml": "a: 1\n"})
	srv := up.ServeHTTP("", "")
	c, _ := startHub(t, Options{})
	ns := namespace(t, c)
	ctx := context.Background()
	repo := &v1alpha1.GitRepo{ObjectMeta: metav1.ObjectMeta{Name: "windowed", Namespace: ns}, Spec: v1alpha1.GitRepoSpec{
		Repo: srv.URL + "/repo.git", PollingInterval: &metav1.Duration{Duration: time.Second}}}
	if err := c.Create(ctx, repo); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(repo)
	got := waitFor(t, c, key, "first commit", func(r *v1alpha1.GitRepo) bool { return r.Status.Commit == first })
	// A deny window open right now (it opens every minute and lasts an hour).
	base := got.DeepCopy()
	got.Spec.SyncWindows = []v1alpha1.SyncWindow{{Kind: v1alpha1.SyncWindowDeny, CronWindow: v1alpha1.CronWindow{Schedule: "* * * * *", Duration: metav1.Duration{Duration: time.Hour}}}}
	if err := c.Patch(ctx, got, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	second := up.Commit("main", map[string]string{"a.yaml": "a: 2\n"})
	got = waitFor(t, c, key, "held by the window", func(r *v1alpha1.GitRepo) bool {
		cond := meta.FindStatusCondition(r.Status.Conditions, v1alpha1.RolloutPausedCondition)
		return cond != nil && strings.Contains(cond.Message, second[:12])
	})
	if cond := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.RolloutPausedCondition); got.Status.Commit != first || !strings.Contains(cond.Message, "commit "+second[:12]+" waits: deny window") {
		t.Fatalf("commit %s, condition %+v", got.Status.Commit, cond)
	}
	if err := c.Patch(ctx, got, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"syncWindows":null}}`))); err != nil {
		t.Fatal(err)
	}
	got = waitFor(t, c, key, "released after the window", func(r *v1alpha1.GitRepo) bool { return r.Status.Commit == second })
	if meta.FindStatusCondition(got.Status.Conditions, v1alpha1.RolloutPausedCondition) != nil {
		t.Errorf("RolloutPaused still present: %+v", got.Status.Conditions)
	}
}

// A cluster change that arrives while the GitRepo's commit renders asks for one more render:
// the sync that was under way clears only the requests it rendered for, so the next one renders
// again (before, the request was lost until the next commit, and a joining cluster waited).
func TestRerenderRequestedDuringARenderIsNotLost(t *testing.T) {
	up := gitserver.New(t)
	up.Commit("main", map[string]string{"web/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n"})
	srv := up.ServeHTTP("", "")
	c := apiClient(t)
	ns := namespace(t, c)
	ctx := context.Background()
	repo := &v1alpha1.GitRepo{ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: ns}, Spec: v1alpha1.GitRepoSpec{Repo: srv.URL + "/repo.git"}}
	if err := c.Create(ctx, repo); err != nil {
		t.Fatal(err)
	}
	key := ns + "/shop"
	renders := 0
	var r *sources.SourceReconciler
	r = &sources.SourceReconciler{Client: c, Uncached: c, Git: &gitsource.Client{CacheDir: t.TempDir()}, Now: time.Now, RecordEvery: time.Minute,
		Schedules: map[string]gitsource.Schedule{}, Webhooks: map[string]time.Time{}, Rerender: map[string]int{}, Forwarded: map[string]string{},
		OnCommit: func(context.Context, *v1alpha1.GitRepo, string, string) error {
			renders++
			if renders == 1 {
				r.Mu.Lock()
				r.Rerender[key]++ // a cluster joins while the first render runs
				r.Mu.Unlock()
			}
			return nil
		}}
	r.Rerender[key] = 1 // the GitRepo's targets changed: its commit is rendered again
	if err := r.Sync(ctx, key); err != nil {
		t.Fatal(err)
	}
	if err := r.Sync(ctx, key); err != nil {
		t.Fatal(err)
	}
	if renders != 2 {
		t.Errorf("%d renders: the request that came during the first render was lost", renders)
	}
	if err := r.Sync(ctx, key); err != nil {
		t.Fatal(err)
	}
	if renders > 2 {
		t.Errorf("%d renders: a request once rendered is rendered again", renders)
	}
}
