package controlplane

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"time"
)

// etcd is one etcd member on loopback shared by every cluster of an Environment, each cluster
// under its own key prefix.
type etcd struct {
	proc *process
	url  string
}

func startEtcd(ctx context.Context, binary, dir string) (*etcd, error) {
	clientPort, err := freePort()
	if err != nil {
		return nil, err
	}
	peerPort, err := freePort()
	if err != nil {
		return nil, err
	}
	clientURL := fmt.Sprintf("http://127.0.0.1:%d", clientPort)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	proc, err := startProcess("etcd", dir, binary,
		"--name=flotilla",
		"--data-dir="+filepath.Join(dir, "etcd-data"),
		"--listen-client-urls="+clientURL,
		"--advertise-client-urls="+clientURL,
		"--listen-peer-urls="+peerURL,
		"--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=flotilla="+peerURL,
		// Test data is thrown away: durability buys nothing and fsync costs seconds per test.
		"--unsafe-no-fsync=true",
		"--quota-backend-bytes=8589934592",
		"--log-level=warn",
	)
	if err != nil {
		return nil, err
	}
	e := &etcd{proc: proc, url: clientURL}
	if err := proc.waitFor(ctx, 30*time.Second, "etcd health", httpOK(http.DefaultClient, clientURL+"/health")); err != nil {
		proc.stop()
		return nil, err
	}
	return e, nil
}
