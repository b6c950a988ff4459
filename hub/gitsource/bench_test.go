package gitsource

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flotilla-dev/flotilla/e2e/gitserver"
)

// cpuTime returns the CPU used by this process and by its finished children (git processes).
func cpuTime() (self, children time.Duration) {
	var s, c syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &s)
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &c)
	tv := func(t syscall.Timeval) time.Duration {
		return time.Duration(t.Sec)*time.Second + time.Duration(t.Usec)*time.Microsecond
	}
	return tv(s.Utime) + tv(s.Stime), tv(c.Utime) + tv(c.Stime)
}

// BenchmarkPoll500UnchangedRepos polls 500 repositories that did not change, through the
// worker pool, against git http-backend on loopback. One op is one round over all 500. It
// reports the wall time per poll, the CPU of this process per poll (the client, plus the test's
// HTTP server: an upper bound for the hub), the CPU of the git server processes, and the hub's
// CPU per minute at the default 15 s interval.
func BenchmarkPoll500UnchangedRepos(b *testing.B) {
	up := gitserver.New(b)
	up.Commit("main", map[string]string{"a.yaml": "a: 1\n"})
	for i := range 500 {
		if err := os.Symlink(up.Bare, filepath.Join(filepath.Dir(up.Bare), fmt.Sprintf("repo-%03d.git", i))); err != nil {
			b.Fatal(err)
		}
	}
	srv := up.ServeHTTP("", "")
	defer srv.Close()
	c := &Client{CacheDir: b.TempDir()}
	keys := make([]string, 500)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s/repo-%03d.git", srv.URL, i)
	}
	b.ResetTimer()
	self0, child0 := cpuTime()
	for b.Loop() {
		var wg sync.WaitGroup
		sem := make(chan struct{}, 8)
		for _, url := range keys {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				if _, err := c.Resolve(context.Background(), Repo{URL: url, Branch: "main"}); err != nil {
					b.Error(err)
				}
			}()
		}
		wg.Wait()
	}
	self1, child1 := cpuTime()
	polls := time.Duration(b.N * 500)
	hub, server := (self1-self0)/polls, (child1-child0)/polls
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(polls), "µs/poll")
	b.ReportMetric(float64(hub.Microseconds()), "hub-cpu-µs/poll")
	b.ReportMetric(float64(server.Microseconds()), "git-server-cpu-µs/poll")
	b.ReportMetric(hub.Seconds()*500*4, "hub-cpu-s/min@500repos")
}

// BenchmarkWebhookToCheckout measures, for each push, the time from the webhook delivery to
// the checkout of the new commit being ready, through the receiver, the poller and the client.
func BenchmarkWebhookToCheckout(b *testing.B) {
	up := gitserver.New(b)
	up.Commit("main", map[string]string{"a.yaml": "a: 0\n"})
	srv := up.ServeHTTP("", "")
	defer srv.Close()
	c := &Client{CacheDir: b.TempDir()}
	repo := Repo{URL: srv.URL + "/repo.git", Branch: "main"}
	ready := make(chan string, 1)
	p := &Poller{Sync: func(ctx context.Context, key string) error {
		ref, err := c.Resolve(ctx, repo)
		if err != nil {
			return err
		}
		if _, err := c.Checkout(ctx, repo, ref.Commit); err != nil {
			return err
		}
		select {
		case ready <- ref.Commit:
		default:
		}
		return nil
	}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go p.Run(ctx)
	p.Set("repo", Schedule{Interval: time.Hour})
	<-ready
	rc := &Receiver{Subscribers: func(string) []Subscriber { return []Subscriber{{Key: "repo", Repo: repo}} }, Notify: func(s Subscriber, _ Push) { p.Trigger(s.Key) }}
	hook := httptest.NewServer(rc)
	defer hook.Close()
	i := 0
	for b.Loop() {
		b.StopTimer()
		i++
		commit := up.Commit("main", map[string]string{"a.yaml": fmt.Sprintf("a: %d\n", i)})
		body := fmt.Sprintf(`{"ref":"refs/heads/main","repository":{"clone_url":%q}}`, repo.URL)
		b.StartTimer()
		req, _ := http.NewRequest(http.MethodPost, hook.URL, strings.NewReader(body))
		req.Header.Set("X-GitHub-Event", "push")
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusAccepted {
			b.Fatalf("webhook: %v %v", resp, err)
		}
		resp.Body.Close()
		for got := <-ready; got != commit; got = <-ready {
		}
	}
}
