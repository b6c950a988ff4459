package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/bundle"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/report"
	"github.com/flotilla-dev/flotilla/rollout"
)

type devOptions struct {
	clusters string
	paths    []string
	once     bool
	dir      string
	timeout  time.Duration
	interval time.Duration
}

func newDevCommand() *cobra.Command {
	o := &devOptions{}
	cmd := &cobra.Command{
		Use:   "dev PATH",
		Short: "Deploy a repository directory of your own to local clusters, and again on every change",
		Long: `dev runs what the quickstart runs (a local hub, workload clusters, agents) for a repository of
your own: the working tree at PATH is committed to a git server on loopback, a GitRepo targets
every cluster (--paths: the directories of PATH it finds bundles in, as a GitRepo's paths), and
the rollout is shown live. Every change under PATH is committed again and
rolled out. --clusters names the clusters and their labels and groups, in the format of
` + "`flotilla plan --clusters`" + ` (default: dev-1 and dev-2, labelled env=dev).
With --once it exits 0 once every bundle is Ready on every cluster it targets, and non-zero with
the reasons when rendering fails or the rollout does not complete within --timeout.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return o.run(cmd.Context(), cmd.OutOrStdout(), args[0]) },
	}
	cmd.Flags().StringVar(&o.clusters, "clusters", "", "clusters.yaml: clusters with labels and groups (as flotilla plan reads it)")
	cmd.Flags().StringSliceVar(&o.paths, "paths", nil, "the GitRepo's paths: directories (globs) of PATH to find bundles in, as a GitRepo's spec.paths (default: all of PATH)")
	cmd.Flags().BoolVar(&o.once, "once", false, "exit when every bundle is Ready on its clusters (0), or fails (non-zero)")
	cmd.Flags().StringVar(&o.dir, "dir", "", "directory for the hub kubeconfig and the clusters' data (default: a new temporary one, removed at the end)")
	cmd.Flags().DurationVar(&o.timeout, "timeout", 10*time.Minute, "with --once: how long the rollout may take")
	cmd.Flags().DurationVar(&o.interval, "interval", time.Second, "how often PATH is checked for changes")
	return cmd
}

// devGroupLabel marks a cluster's membership of a group of clusters.yaml: the ClusterGroup of
// that name selects it.
const devGroupLabel = "group.flotilla.dev/"

func (o *devOptions) run(ctx context.Context, out io.Writer, path string) error {
	root, err := filepath.Abs(path)
	if err != nil {
		return badInput("%s: %v", path, err)
	}
	if info, err := os.Stat(root); err != nil || !info.IsDir() {
		return badInput("%s: not a directory", path)
	}
	if len(o.paths) > 0 {
		// Checked before any cluster starts: a path that matches nothing is a typo.
		if _, err := bundle.Discover(root, "dev", o.paths); err != nil {
			return badInput("--paths: %v", err)
		}
	}
	clusters := []rollout.SimCluster{{Name: "dev-1", Labels: map[string]string{"env": "dev"}}, {Name: "dev-2", Labels: map[string]string{"env": "dev"}}}
	var groups []rollout.ClusterGroup
	if o.clusters != "" {
		if clusters, groups, err = loadClusters(o.clusters); err != nil {
			return err
		}
	}
	return runLocalFleet(ctx, out, "dev", o.dir, func(f *localFleet) error {
		ctx := f.ctx
		for _, g := range groups {
			cg := &v1alpha1.ClusterGroup{ObjectMeta: metav1.ObjectMeta{Name: g.Name, Namespace: f.ns, Labels: g.Labels},
				Spec: v1alpha1.ClusterGroupSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{devGroupLabel + g.Name: "true"}}}}
			if err := f.c.Create(ctx, cg); err != nil {
				return fmt.Errorf("cluster group %s: %w", g.Name, err)
			}
		}
		for _, c := range clusters {
			labels := map[string]string{}
			for k, v := range c.Labels {
				labels[k] = v
			}
			for _, g := range c.Groups {
				labels[devGroupLabel+g] = "true"
			}
			if err := f.join(ctx, "dev", c.Name, labels); err != nil {
				return err
			}
			f.say("workload cluster %s %v registered, agent running", c.Name, c.Labels)
		}
		up, url, err := f.serveGit()
		if err != nil {
			return err
		}
		tree, err := mirror(root, up.Work)
		if err != nil {
			return err
		}
		commit, err := up.Commit("main", nil)
		if err != nil {
			return err
		}
		f.say("%s committed as %.12s, served at %s", path, commit, url)
		if err := f.createRepo(ctx, "dev", url, o.paths); err != nil {
			return err
		}
		deadline := time.Now().Add(o.timeout)
		last := ""
		live := newScreen(out, f.header...)
		var settling failureSettling
		for {
			view, done, failure, err := devProgress(ctx, f.c, f.ns, commit)
			failure = settling.settled(failure, time.Now())
			if ctx.Err() != nil {
				return nil // stopped (a read cut short by the stop is no failure)
			}
			if err != nil {
				return err
			}
			if o.once {
				if line := firstLine(view); line != last {
					f.say("%s", line)
					last = line
				}
				switch {
				case failure != "":
					return fmt.Errorf("%s\n%s", failure, view)
				case done:
					_, err := io.WriteString(out, view)
					f.say("every bundle is Ready on every cluster it targets")
					return err
				case time.Now().After(deadline):
					return fmt.Errorf("the rollout did not complete within %s:\n%s", o.timeout, view)
				}
			} else {
				live.draw(view)
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(o.interval):
			}
			// A change of the working tree is a new commit, rolled out like any push.
			now, err := mirror(root, up.Work)
			if err != nil {
				return err
			}
			if now != tree {
				if commit, err = up.Commit("main", nil); err != nil {
					return err
				}
				tree = now
				deadline = time.Now().Add(o.timeout)
				f.say("%s changed: committed %.12s", path, commit)
			}
		}
	})
}

// devProgress reports the fleet's status view, whether commit is rolled out as far as it can
// be (every deployment Ready on its bundle's revision), and a failure that waiting will not
// mend: the commit renders no bundle, a bundle's rollout is stalled on its spec, or, once the
// rest is rolled out, the deployments whose apply failed and the bundles that do not render
// (each failed alone; the others deployed).
func devProgress(ctx context.Context, c client.Client, ns, commit string) (view string, done bool, failure string, err error) {
	var repo v1alpha1.GitRepo
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "dev"}, &repo); err != nil {
		return "", false, "", client.IgnoreNotFound(err)
	}
	var b strings.Builder
	if err := report.Write(ctx, &b, c, ns, "dev"); err != nil {
		return "", false, "", err
	}
	view = b.String()
	rendered := meta.FindStatusCondition(repo.Status.Conditions, v1alpha1.RenderedCondition)
	notRendered := rendered != nil && rendered.Status == metav1.ConditionFalse
	if repo.Status.Commit != commit {
		// The hub keeps the last good commit when a newer one renders no bundle, and says why.
		if notRendered {
			return view, false, "the repository does not render: " + rendered.Message, nil
		}
		return view, false, "", nil
	}
	var bundles v1alpha1.BundleList
	if err := c.List(ctx, &bundles, client.InNamespace(ns)); err != nil {
		return view, false, "", err
	}
	for _, bun := range bundles.Items {
		if stalled := meta.FindStatusCondition(bun.Status.Conditions, v1alpha1.StalledCondition); stalled != nil && stalled.Status == metav1.ConditionTrue {
			return view, false, fmt.Sprintf("bundle %s cannot roll out: %s", bun.Name, stalled.Message), nil
		}
	}
	applied, err := allApplied(ctx, c, ns)
	if err != nil {
		return view, false, "", err
	}
	if !applied {
		failed, err := failedApplies(ctx, c, ns)
		if err != nil || len(failed) == 0 {
			return view, false, "", err
		}
		return view, false, applyFailuresPrefix + strings.Join(failed, "; "), nil
	}
	if notRendered {
		return view, false, "every bundle that renders is Ready; these do not: " + rendered.Message, nil
	}
	return view, true, "", nil
}

// applyFailuresPrefix starts the failure of deployments whose apply failed: an agent retries
// them, so they count only once they stayed for applyFailureGrace (failureSettling).
const applyFailuresPrefix = "every other deployment is Ready; these failed to apply: "

const applyFailureGrace = 15 * time.Second

// failureSettling holds back a failure of applies until the same one stayed applyFailureGrace:
// an apply that fails while what it needs is still being created (a namespace, a CRD) heals at
// the agent's next try. Every other failure counts at once.
type failureSettling struct {
	failure string
	since   time.Time
}

func (s *failureSettling) settled(failure string, now time.Time) string {
	if !strings.HasPrefix(failure, applyFailuresPrefix) {
		s.failure = ""
		return failure
	}
	if failure != s.failure {
		s.failure, s.since = failure, now
	}
	if now.Sub(s.since) < applyFailureGrace {
		return ""
	}
	return failure
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// mirror makes dst's tree (all but .git) a copy of src's (all but .git) and returns a hash of
// it: the paths, modes and contents. Symbolic links are copied as links, so the hub confines
// them as it does any repository's.
func mirror(src, dst string) (string, error) {
	h := sha256.New()
	wanted := map[string]bool{}
	var names []string
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() && d.Name() == ".git" {
			return filepath.SkipDir
		}
		if rel != "." {
			names = append(names, rel)
			wanted[rel] = true
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("failed to read %s: %w", src, err)
	}
	sort.Strings(names)
	// What left src goes from dst, deepest first.
	var stale []string
	_ = filepath.WalkDir(dst, func(p string, d fs.DirEntry, err error) error {
		rel, _ := filepath.Rel(dst, p)
		if err != nil || rel == "." {
			return err
		}
		if d.IsDir() && d.Name() == ".git" && filepath.Dir(rel) == "." {
			return filepath.SkipDir
		}
		if !wanted[rel] {
			stale = append(stale, p)
		}
		return nil
	})
	for i := len(stale) - 1; i >= 0; i-- {
		if err := os.RemoveAll(stale[i]); err != nil {
			return "", err
		}
	}
	for _, rel := range names {
		from, to := filepath.Join(src, rel), filepath.Join(dst, rel)
		info, err := os.Lstat(from)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s\x00%o\x00", filepath.ToSlash(rel), info.Mode())
		switch {
		case info.IsDir():
			if err := os.MkdirAll(to, 0o755); err != nil {
				return "", err
			}
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(from)
			if err != nil {
				return "", err
			}
			h.Write([]byte(target))
			_ = os.Remove(to)
			if err := os.Symlink(target, to); err != nil {
				return "", err
			}
		case info.Mode().IsRegular():
			data, err := os.ReadFile(from)
			if err != nil {
				return "", err
			}
			h.Write(data)
			if old, err := os.ReadFile(to); err != nil || string(old) != string(data) {
				if err := os.WriteFile(to, data, 0o644); err != nil {
					return "", err
				}
			}
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
