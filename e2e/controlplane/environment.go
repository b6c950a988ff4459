package controlplane

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"
)

// Options configure an Environment.
type Options struct {
	// Dir holds logs, certificates, kubeconfigs and etcd data. Default: a new temporary
	// directory, removed by Stop.
	Dir string
	// Progress receives build and start-up progress lines. Default: discarded.
	Progress io.Writer
}

// Environment is one etcd and the clusters that share it.
type Environment struct {
	dir      string
	ownDir   bool
	progress io.Writer
	bins     *Binaries
	etcd     *etcd

	mu       sync.Mutex
	clusters []*Cluster
}

// Start builds any missing binaries and starts etcd. Call Stop when done, also on failure.
func Start(ctx context.Context, opts Options) (*Environment, error) {
	env := &Environment{dir: opts.Dir, progress: opts.Progress}
	if env.progress == nil {
		env.progress = io.Discard
	}
	bins, err := EnsureBinaries(ctx, env.progress)
	if err != nil {
		return nil, err
	}
	env.bins = bins
	if env.dir == "" {
		dir, err := os.MkdirTemp("", "flotilla-controlplane-")
		if err != nil {
			return nil, fmt.Errorf("failed to create environment dir: %w", err)
		}
		env.dir, env.ownDir = dir, true
	} else if err := os.MkdirAll(env.dir, 0o755); err != nil {
		return nil, fmt.Errorf("failed to create environment dir: %w", err)
	}
	env.etcd, err = startEtcd(ctx, bins.Etcd, env.dir)
	if err != nil {
		env.removeDir()
		return nil, err
	}
	return env, nil
}

// Dir is the environment's working directory (logs, kubeconfigs).
func (e *Environment) Dir() string { return e.dir }

// Stop stops every cluster, then etcd, and removes the working directory if Start created it.
func (e *Environment) Stop() {
	e.mu.Lock()
	clusters := e.clusters
	e.clusters = nil
	e.mu.Unlock()
	if e.etcd != nil {
		_ = e.ResumeEtcd() // a test that failed while etcd was paused
	}
	var wg sync.WaitGroup
	for _, c := range clusters {
		wg.Add(1)
		go func() { defer wg.Done(); c.Stop() }()
	}
	wg.Wait()
	if e.etcd != nil {
		e.etcd.proc.stop()
	}
	e.removeDir()
}

func (e *Environment) removeDir() {
	if e.ownDir {
		_ = os.RemoveAll(e.dir)
	}
}

var clusterName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// StartCluster starts a cluster on the environment's etcd, under the prefix /<name>. A Bare
// cluster is an API server alone (a hub); a Workload cluster also runs the controller manager,
// the scheduler and kwok with simulated nodes, so workloads become ready through the real
// controllers.
func (e *Environment) StartCluster(ctx context.Context, opts ClusterOptions) (*Cluster, error) {
	if !clusterName.MatchString(opts.Name) {
		return nil, fmt.Errorf("invalid cluster name %q: use lower-case letters, digits and dashes", opts.Name)
	}
	e.mu.Lock()
	for _, c := range e.clusters {
		if c.Name == opts.Name {
			e.mu.Unlock()
			return nil, fmt.Errorf("cluster %q already exists in this environment", opts.Name)
		}
	}
	e.mu.Unlock()
	dir := filepath.Join(e.dir, opts.Name)
	c, err := startCluster(ctx, e.bins, e.etcd.url, dir, opts)
	if err != nil {
		if c != nil {
			c.Stop()
		}
		return nil, fmt.Errorf("failed to start cluster %q: %w", opts.Name, err)
	}
	e.mu.Lock()
	e.clusters = append(e.clusters, c)
	e.mu.Unlock()
	fmt.Fprintf(e.progress, "controlplane: cluster %s (%s) is up: %s\n", opts.Name, opts.Kind, c.KubeconfigPath)
	return c, nil
}

// PauseEtcd stops the environment's etcd where it stands (SIGSTOP): every request that reaches
// it waits, as with a disk or a member that stalls, until ResumeEtcd.
func (e *Environment) PauseEtcd() error {
	return syscall.Kill(e.etcd.proc.cmd.Process.Pid, syscall.SIGSTOP)
}

// ResumeEtcd lets a paused etcd go on (SIGCONT).
func (e *Environment) ResumeEtcd() error {
	return syscall.Kill(e.etcd.proc.cmd.Process.Pid, syscall.SIGCONT)
}
