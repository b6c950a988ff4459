// Command prepare installs what the integration and end-to-end tests run on a fresh machine: the
// control-plane binaries (kube-apiserver, kube-controller-manager, kube-scheduler, etcd, kwok),
// built from source into the per-version cache, and the Debian packages the tests drive (chromium
// for the browser tests, prometheus for the analysis gates, ssh-keygen and gpg that sign commits),
// and the sops and cosign commands that encrypt the tests' SOPS files and sign their artifacts.
// The README's test command runs it first so that the first build is visible instead
// of hidden inside a silent test binary; later runs find everything in place and return at once.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"time"

	"github.com/flotilla-dev/flotilla/e2e/controlplane"
	"github.com/flotilla-dev/flotilla/e2e/reftools"
)

// debianPackages are the system programs the tests need, by the path each one installs. Only
// what is missing is installed, so a machine that already has them needs neither apt nor root.
var debianPackages = []struct{ pkg, binary string }{
	{pkg: "chromium", binary: "/usr/bin/chromium"},
	// The analysis gates are tested against a real Prometheus server.
	{pkg: "prometheus", binary: "/usr/bin/prometheus"},
	// Signed commits are made by git with the reference signers: ssh-keygen -Y sign and gpg.
	{pkg: "openssh-client", binary: "/usr/bin/ssh-keygen"},
	{pkg: "gnupg", binary: "/usr/bin/gpg"},
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	started := time.Now()
	if err := ensureDebianPackages(ctx, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "prepare:", err)
		os.Exit(1)
	}
	bins, err := controlplane.EnsureBinaries(ctx, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "prepare:", err)
		os.Exit(1)
	}
	tools, err := reftools.Ensure(ctx, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "prepare:", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "prepare: control-plane binaries, sops and cosign ready in %s (kube-apiserver at %s, sops at %s, cosign at %s)\n",
		time.Since(started).Round(time.Second), bins.APIServer, tools["sops"], tools["cosign"])
}

// ensureDebianPackages installs with apt-get the packages whose binary is missing. The package
// index is refreshed only when the first install fails, since a fresh image often has none.
func ensureDebianPackages(ctx context.Context, log io.Writer) error {
	var missing []string
	for _, p := range debianPackages {
		if _, err := os.Stat(p.binary); err != nil {
			missing = append(missing, p.pkg)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	fmt.Fprintf(log, "prepare: installing Debian packages %v\n", missing)
	install := append([]string{"apt-get", "install", "-y", "--no-install-recommends"}, missing...)
	if err := runAsRoot(ctx, log, install...); err == nil {
		return nil
	}
	if err := runAsRoot(ctx, log, "apt-get", "update"); err != nil {
		return fmt.Errorf("refreshing the package index to install %v: %w", missing, err)
	}
	if err := runAsRoot(ctx, log, install...); err != nil {
		return fmt.Errorf("installing %v (the browser tests need them): %w", missing, err)
	}
	return nil
}

// runAsRoot runs a command directly when this process is root and through sudo otherwise.
func runAsRoot(ctx context.Context, log io.Writer, args ...string) error {
	if os.Geteuid() != 0 {
		args = append([]string{"sudo", "-n"}, args...)
	}
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%v: %w", args, err)
	}
	return nil
}
