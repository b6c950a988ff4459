package controlplane

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"time"
)

// Versions of the control-plane components. Changing one rebuilds only that component: each is
// cached under its own versioned folder.
const (
	KubernetesVersion = "v1.37.2"
	// StagingVersion is the version of the k8s.io/<staging> modules that KubernetesVersion needs.
	StagingVersion = "v0.37.2"
	EtcdVersion    = "v3.6.16"
	KwokVersion    = "v0.8.0"
)

// Binaries are the paths of the built control-plane programs.
type Binaries struct {
	APIServer         string
	ControllerManager string
	Scheduler         string
	Etcd              string
	Kwok              string
}

// component is one throwaway Go module that builds some programs.
type component struct {
	name    string // folder name, with version
	require string // "module version"
	// replaces derives the replace lines from the required module; may be nil.
	replaces func(ctx context.Context) ([]string, error)
	pkgs     []string // main packages
	programs []string // the program built from each of pkgs, in the same order
}

func components() []component {
	return []component{
		{
			name:     "etcd-" + EtcdVersion,
			require:  "go.etcd.io/etcd/server/v3 " + EtcdVersion,
			pkgs:     []string{"go.etcd.io/etcd/server/v3"},
			programs: []string{"etcd"},
		},
		{
			name:     "kwok-" + KwokVersion,
			require:  "sigs.k8s.io/kwok " + KwokVersion,
			pkgs:     []string{"sigs.k8s.io/kwok/cmd/kwok"},
			programs: []string{"kwok"},
		},
		{
			name:     "kubernetes-" + KubernetesVersion,
			require:  "k8s.io/kubernetes " + KubernetesVersion,
			replaces: stagingReplaces,
			pkgs: []string{
				"k8s.io/kubernetes/cmd/kube-apiserver",
				"k8s.io/kubernetes/cmd/kube-controller-manager",
				"k8s.io/kubernetes/cmd/kube-scheduler",
			},
			programs: []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"},
		},
	}
}

// CacheDir is where built binaries live: $FLOTILLA_CACHE_DIR, or flotilla/ in the user's cache
// directory (~/.cache/flotilla). It is outside the repository and shared by every checkout.
func CacheDir() (string, error) {
	if dir := os.Getenv("FLOTILLA_CACHE_DIR"); dir != "" {
		return dir, nil
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("failed to find the user cache directory (set FLOTILLA_CACHE_DIR): %w", err)
	}
	return filepath.Join(base, "flotilla"), nil
}

// EnsureBinaries returns the control-plane programs, building those that are missing. The first
// build takes about 20 minutes on two cores; progress goes to progress. Several processes may
// call it at once: they take turns on a file lock and the later ones find the binaries built.
func EnsureBinaries(ctx context.Context, progress io.Writer) (*Binaries, error) {
	cache, err := CacheDir()
	if err != nil {
		return nil, err
	}
	if progress == nil {
		progress = io.Discard
	}
	bins := &Binaries{
		Etcd:              filepath.Join(cache, "bin", "etcd-"+EtcdVersion, "etcd"),
		Kwok:              filepath.Join(cache, "bin", "kwok-"+KwokVersion, "kwok"),
		APIServer:         filepath.Join(cache, "bin", "kubernetes-"+KubernetesVersion, "kube-apiserver"),
		ControllerManager: filepath.Join(cache, "bin", "kubernetes-"+KubernetesVersion, "kube-controller-manager"),
		Scheduler:         filepath.Join(cache, "bin", "kubernetes-"+KubernetesVersion, "kube-scheduler"),
	}
	if allExist(bins) {
		return bins, nil
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return nil, fmt.Errorf("failed to create cache dir: %w", err)
	}
	unlock, err := lockFile(ctx, filepath.Join(cache, "build.lock"), progress)
	if err != nil {
		return nil, err
	}
	defer unlock()
	for _, c := range components() {
		if err := c.ensure(ctx, cache, progress); err != nil {
			return nil, err
		}
	}
	return bins, nil
}

// Program is a Go main package built into the cache by EnsureProgram.
type Program struct {
	// Name is the program's file name.
	Name string
	// Module and Version name the module that holds Package.
	Module, Version string
	// Package is the main package's import path.
	Package string
}

// EnsureProgram builds a Go program into the per-version cache once (a throwaway module, like
// the control-plane binaries) and returns its path. Benchmarks use it for reference tools such
// as the helm CLI.
func EnsureProgram(ctx context.Context, progress io.Writer, p Program) (string, error) {
	cache, err := CacheDir()
	if err != nil {
		return "", err
	}
	if progress == nil {
		progress = io.Discard
	}
	c := component{name: p.Name + "-" + p.Version, require: p.Module + " " + p.Version, pkgs: []string{p.Package}, programs: []string{p.Name}}
	path := filepath.Join(cache, "bin", c.name, p.Name)
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", fmt.Errorf("failed to create cache dir: %w", err)
	}
	unlock, err := lockFile(ctx, filepath.Join(cache, "build.lock"), progress)
	if err != nil {
		return "", err
	}
	defer unlock()
	return path, c.ensure(ctx, cache, progress)
}

func allExist(b *Binaries) bool {
	for _, p := range []string{b.APIServer, b.ControllerManager, b.Scheduler, b.Etcd, b.Kwok} {
		if _, err := os.Stat(p); err != nil {
			return false
		}
	}
	return true
}

// lockFile takes an exclusive flock, telling the user when it has to wait for another builder.
func lockFile(ctx context.Context, path string, progress io.Writer) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("failed to open build lock: %w", err)
	}
	told := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); _ = f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			_ = f.Close()
			return nil, fmt.Errorf("failed to lock %s: %w", path, err)
		}
		if !told {
			fmt.Fprintf(progress, "controlplane: another process is building the binaries; waiting for %s\n", path)
			told = true
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

func (c component) ensure(ctx context.Context, cache string, progress io.Writer) error {
	binDir := filepath.Join(cache, "bin", c.name)
	missing := false
	for _, p := range c.programs {
		if _, err := os.Stat(filepath.Join(binDir, p)); err != nil {
			missing = true
		}
	}
	if !missing {
		return nil
	}
	started := time.Now()
	fmt.Fprintf(progress, "controlplane: building %s (%s) into %s; the first build takes minutes\n", c.name, strings.Join(c.programs, ", "), binDir)
	src := filepath.Join(cache, "src", c.name)
	if err := os.MkdirAll(src, 0o755); err != nil {
		return fmt.Errorf("failed to create %s: %w", src, err)
	}
	var gomod strings.Builder
	fmt.Fprintf(&gomod, "module flotilla.local/build/%s\n\ngo 1.26.0\n\nrequire %s\n", strings.ReplaceAll(c.name, ".", "-"), c.require)
	if c.replaces != nil {
		lines, err := c.replaces(ctx)
		if err != nil {
			return err
		}
		gomod.WriteString("\n" + strings.Join(lines, "\n") + "\n")
	}
	var tools strings.Builder
	tools.WriteString("//go:build tools\n\n// Package tools pins the programs this throwaway module builds.\npackage tools\n\nimport (\n")
	for _, p := range c.pkgs {
		fmt.Fprintf(&tools, "\t_ %q\n", p)
	}
	tools.WriteString(")\n")
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte(gomod.String()), 0o644); err != nil {
		return fmt.Errorf("failed to write go.mod: %w", err)
	}
	if err := os.WriteFile(filepath.Join(src, "tools.go"), []byte(tools.String()), 0o644); err != nil {
		return fmt.Errorf("failed to write tools.go: %w", err)
	}
	if err := goCmd(ctx, src, progress, c.name, "mod", "tidy"); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Join(cache, "src"), "out-")
	if err != nil {
		return fmt.Errorf("failed to create build output dir: %w", err)
	}
	defer os.RemoveAll(tmp)
	for i, pkg := range c.pkgs {
		// One build per program: -o names the file, whatever the package path ends in (etcd's
		// main package is .../server/v3).
		if err := goCmd(ctx, src, progress, c.programs[i], "build", "-v", "-trimpath", "-ldflags=-s", "-o", filepath.Join(tmp, c.programs[i]), pkg); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return fmt.Errorf("failed to create %s: %w", binDir, err)
	}
	for _, p := range c.programs {
		// A rename within one file system is atomic: a reader sees the whole binary or none.
		if err := os.Rename(filepath.Join(tmp, p), filepath.Join(binDir, p)); err != nil {
			return fmt.Errorf("failed to install %s: %w", p, err)
		}
	}
	fmt.Fprintf(progress, "controlplane: built %s in %s\n", c.name, time.Since(started).Round(time.Second))
	return nil
}

// goCmd runs the go command in dir. With -v, go build names each package it compiles; those
// lines become a running count so a long build shows it is alive without flooding the log.
func goCmd(ctx context.Context, dir string, progress io.Writer, label string, args ...string) error {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := cmd.StderrPipe()
	if err != nil {
		return fmt.Errorf("failed to run go %s: %w", args[0], err)
	}
	cmd.Stdout = cmd.Stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("failed to start go %s: %w", args[0], err)
	}
	var tail []string
	compiled := 0
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		if args[0] == "build" && !strings.Contains(line, " ") && !strings.HasPrefix(line, "#") {
			compiled++
			if compiled%250 == 0 {
				fmt.Fprintf(progress, "controlplane: %s: %d packages compiled\n", label, compiled)
			}
			continue
		}
		tail = append(tail, line)
		if len(tail) > 40 {
			tail = tail[1:]
		}
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("failed to run go %s for %s: %w\n%s", strings.Join(args, " "), label, err, strings.Join(tail, "\n"))
	}
	return nil
}

var stagingReplace = regexp.MustCompile(`(?m)^\s*(?:replace\s+)?(k8s\.io/[a-z0-9-]+)\s+=>\s+\./staging/`)

// stagingReplaces reads k8s.io/kubernetes's go.mod: each module it replaces with its own
// staging folder is, outside that repository, the published k8s.io/<name> at StagingVersion.
func stagingReplaces(ctx context.Context) ([]string, error) {
	out, err := exec.CommandContext(ctx, "go", "mod", "download", "-json", "k8s.io/kubernetes@"+KubernetesVersion).Output()
	if err != nil {
		return nil, fmt.Errorf("failed to download k8s.io/kubernetes@%s: %w", KubernetesVersion, err)
	}
	var info struct{ GoMod string }
	if err := json.Unmarshal(out, &info); err != nil {
		return nil, fmt.Errorf("failed to read go mod download output: %w", err)
	}
	gomod, err := os.ReadFile(info.GoMod)
	if err != nil {
		return nil, fmt.Errorf("failed to read k8s.io/kubernetes go.mod: %w", err)
	}
	var lines []string
	for _, m := range stagingReplace.FindAllStringSubmatch(string(gomod), -1) {
		lines = append(lines, fmt.Sprintf("replace %s => %s %s", m[1], m[1], StagingVersion))
	}
	if len(lines) == 0 {
		return nil, fmt.Errorf("found no staging modules in k8s.io/kubernetes@%s go.mod", KubernetesVersion)
	}
	sort.Strings(lines)
	return lines, nil
}
