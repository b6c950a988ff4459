package gitsource

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/flotilla-dev/flotilla/e2e/gitserver"
)

// A git server that stops answering is given up on after the stall timeout, whether it hangs
// before its first byte, mid-pack or never accepts the connection's data, with an error that says
// so; one that is slow but keeps sending finishes, however long the whole transfer takes beyond
// the stall timeout. The whole timeout is far beyond the test's: a stall not caught would hang it.
func TestAStalledGitServerIsGivenUpOnAndASlowOneFinishes(t *testing.T) {
	const stall = 400 * time.Millisecond
	up := gitserver.New(t)
	files := map[string]string{"app/fleet.yaml": "defaultNamespace: a\n"}
	for i := range 40 {
		files[filepath.Join("app", "cm-"+string(rune('a'+i%26))+string(rune('a'+i/26))+".yaml")] = "kind: ConfigMap\ndata: {n: \"" + string(rune('0'+i%10)) + "\"}\n"
	}
	commit := up.Commit("main", files)
	newClient := func() *Client { return &Client{CacheDir: t.TempDir(), StallTimeout: stall, Timeout: time.Hour} }

	// A listener that accepts connections and never reads or writes them.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { silent.Close() })
	go func() {
		for {
			conn, err := silent.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { conn.Close() })
		}
	}()
	if _, err := newClient().Resolve(context.Background(), Repo{URL: "http://" + silent.Addr().String() + "/repo.git"}); !errors.Is(err, ErrStalled) {
		t.Errorf("a server that accepts and says nothing: %v, want ErrStalled", err)
	}

	for _, tc := range []struct {
		name  string
		fault gitserver.Fault
	}{
		{"hangs before its first byte", gitserver.Fault{Hang: true, EveryRequest: true}},
		{"hangs mid-pack", gitserver.Fault{Hang: true, After: 300}},
	} {
		srv, faulted := up.ServeFaulty(tc.fault)
		c := newClient()
		repo := Repo{URL: srv.URL + "/repo.git", Branch: "main"}
		ref, err := c.Resolve(context.Background(), repo)
		if err == nil {
			_, err = c.Checkout(context.Background(), repo, ref.Commit)
		}
		if !errors.Is(err, ErrStalled) || faulted.Load() == 0 {
			t.Errorf("a server that %s: %v (faulted %d requests), want ErrStalled", tc.name, err, faulted.Load())
		}
	}

	// Slow: 64 bytes every 100 ms, a quarter of the stall timeout; the pack takes seconds.
	srv, faulted := up.ServeFaulty(gitserver.Fault{Pause: 100 * time.Millisecond, Chunk: 64})
	c := newClient()
	repo := Repo{URL: srv.URL + "/repo.git", Branch: "main"}
	start := time.Now()
	dir, err := c.Checkout(context.Background(), repo, commit)
	if err != nil || faulted.Load() == 0 {
		t.Fatalf("a slow server that keeps sending: %v (faulted %d requests)", err, faulted.Load())
	}
	if _, err := os.Stat(filepath.Join(dir, "app", "fleet.yaml")); err != nil {
		t.Errorf("the slow fetch's checkout: %v", err)
	}
	t.Logf("the slow fetch took %s with a stall timeout of %s", time.Since(start).Round(time.Millisecond), stall)
}

// A commit whose fetch was cut short by the hub stopping (killed for its memory, say) twice is
// not fetched a third time: it is refused, naming why, without a request to the server; once the
// branch moves, the new commit is fetched. A fetch cut short once is tried again.
func TestACommitThatKilledTheHubTwiceIsNotFetchedAgain(t *testing.T) {
	up := gitserver.New(t)
	first := up.Commit("main", map[string]string{"app/cm.yaml": "kind: ConfigMap\n"})
	srv, fetches := up.ServeFaulty(gitserver.Fault{}) // counts the pack transfers, alters nothing
	c := &Client{CacheDir: t.TempDir()}
	repo := Repo{URL: srv.URL + "/repo.git", Branch: "main"}
	journal := filepath.Join(c.repoDir(repo), "fetching-"+first)
	if err := os.MkdirAll(filepath.Dir(journal), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(journal, []byte(".."), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Checkout(context.Background(), repo, first); !errors.Is(err, ErrFetchInterrupted) || fetches.Load() != 0 {
		t.Fatalf("a commit whose fetch was cut short twice: %v after %d pack transfers, want ErrFetchInterrupted and none", err, fetches.Load())
	}
	second := up.Commit("main", map[string]string{"app/cm.yaml": "kind: ConfigMap\ndata: {}\n"})
	if _, err := c.Checkout(context.Background(), repo, second); err != nil || fetches.Load() != 1 {
		t.Fatalf("the branch moved on: %v after %d pack transfers, want the new commit fetched", err, fetches.Load())
	}
	if _, err := os.Stat(filepath.Join(c.repoDir(repo), "fetching-"+second)); !os.IsNotExist(err) {
		t.Errorf("a finished fetch left its journal: %v", err)
	}
	// Cut short once: fetched again.
	third := up.Commit("main", map[string]string{"app/cm.yaml": "kind: ConfigMap\ndata: {a: b}\n"})
	if err := os.WriteFile(filepath.Join(c.repoDir(repo), "fetching-"+third), []byte("."), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Checkout(context.Background(), repo, third); err != nil {
		t.Errorf("a commit whose fetch was cut short once: %v, want it fetched", err)
	}
}

// A failure is the server's (retried once it answers again) when it could not be reached,
// stalled or answered 5xx; a missing repository, refused credentials or a missing branch are
// the repository's. Classified from what the client really returns.
func TestServerUnavailableTellsTheServersFailuresFromTheRepositorys(t *testing.T) {
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusedAddr := closed.Addr().String()
	closed.Close()
	status := func(code int) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "status", code) }))
		t.Cleanup(srv.Close)
		return srv.URL + "/repo.git"
	}
	up := gitserver.New(t)
	up.Commit("main", map[string]string{"a.yaml": "a: 1\n"})
	healthy := up.ServeHTTP("", "")
	for _, tc := range []struct {
		name string
		repo Repo
		want bool
	}{
		{"connection refused", Repo{URL: "http://" + refusedAddr + "/repo.git"}, true},
		{"500", Repo{URL: status(http.StatusInternalServerError)}, true},
		{"503", Repo{URL: status(http.StatusServiceUnavailable)}, true},
		{"404", Repo{URL: status(http.StatusNotFound)}, false},
		{"401", Repo{URL: status(http.StatusUnauthorized)}, false},
		{"a missing branch", Repo{URL: healthy.URL + "/repo.git", Branch: "gone"}, false},
	} {
		_, err := (&Client{CacheDir: t.TempDir()}).Resolve(context.Background(), tc.repo)
		if err == nil || ServerUnavailable(err) != tc.want || ServerUnavailable(MarkUnavailable(errors.New(err.Error()))) != true {
			t.Errorf("%s: %v: unavailable %v, want %v", tc.name, err, ServerUnavailable(err), tc.want)
		}
	}
}
