package controlplane

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestStopLeavesNothingRunning starts a separate environment and checks that Stop closes every
// port it opened and removes its working directory.
func TestStopLeavesNothingRunning(t *testing.T) {
	env, err := Start(t.Context(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := env.StartCluster(t.Context(), ClusterOptions{Name: "short-lived", Kind: Bare})
	if err != nil {
		env.Stop()
		t.Fatal(err)
	}
	addrs := []string{strings.TrimPrefix(c.Host, "https://"), strings.TrimPrefix(env.etcd.url, "http://")}
	dir := env.Dir()
	env.Stop()
	for _, addr := range addrs {
		if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			conn.Close()
			t.Errorf("%s still accepts connections after Stop", addr)
		}
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("working directory %s still exists: %v", dir, err)
	}
}

// TestBuildLockIsExclusive: a second builder waits while the first holds the lock, then gets it.
func TestBuildLockIsExclusive(t *testing.T) {
	path := filepath.Join(t.TempDir(), "build.lock")
	unlock, err := lockFile(t.Context(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	var progress strings.Builder
	if _, err := lockFile(ctx, path, &progress); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second lock while the first is held: %v, want to wait until the deadline", err)
	}
	if !strings.Contains(progress.String(), "another process is building") {
		t.Errorf("waiting builder did not say why: %q", progress.String())
	}
	unlock()
	unlock2, err := lockFile(t.Context(), path, nil)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	unlock2()
}
