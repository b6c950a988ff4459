// Package report renders the status of GitRepos for people: GitRepos → bundles → partitions →
// clusters, with each cluster's state (computed by the one state function) and the reason for
// every wait. The CLI's status command prints it; tests read it.
package report

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"golang.org/x/mod/semver"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/hub"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// Write prints GitRepos → bundles → partitions → clusters with their states, from the
// status the hub wrote and the same state function the hub uses.
func Write(ctx context.Context, out io.Writer, c client.Client, namespace, name string) error {
	if ctx == nil {
		ctx = context.Background()
	}
	var repos v1alpha1.GitRepoList
	if err := c.List(ctx, &repos, client.InNamespace(namespace)); err != nil {
		return fmt.Errorf("failed to list gitrepos: %w", err)
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	for _, repo := range repos.Items {
		if name != "" && repo.Name != name {
			continue
		}
		fmt.Fprintf(w, "GitRepo %s/%s  %s  commit %s  %s %s\n", repo.Namespace, repo.Name, repo.Spec.Repo, short(repo.Status.Commit, 12), bar(repo.Status.Summary), repo.Status.Display.ReadyClusters)
		for _, cond := range repo.Status.Conditions {
			if cond.Status != "True" && cond.Type != v1alpha1.ReadyCondition || cond.Type == v1alpha1.RolloutPausedCondition {
				fmt.Fprintf(w, "  ! %s: %s\n", cond.Type, cond.Message)
			}
		}
		var bundles v1alpha1.BundleList
		if err := c.List(ctx, &bundles, client.InNamespace(repo.Namespace), client.MatchingLabels{hub.LabelGitRepo: repo.Name}); err != nil {
			return err
		}
		for _, b := range bundles.Items {
			fmt.Fprintf(w, "  Bundle %s (%s)  revision %d  %s %s  %s\n", b.Name, b.Spec.Path, b.Status.ReleasingRevision, bar(b.Status.Summary), b.Status.Display.ReadyClusters, b.Status.Display.State)
			if cond := meta.FindStatusCondition(b.Status.Conditions, v1alpha1.RolloutPausedCondition); cond != nil {
				fmt.Fprintf(w, "    waiting: %s\n", cond.Message)
			} else if b.Status.Display.Message != "" {
				fmt.Fprintf(w, "    now: %s\n", b.Status.Display.Message)
			}
			for _, typ := range []string{v1alpha1.UnpartitionedClustersCondition, v1alpha1.UnsafeDefaultsCondition} {
				if cond := meta.FindStatusCondition(b.Status.Conditions, typ); cond != nil {
					fmt.Fprintf(w, "    warning: %s\n", cond.Message)
				}
			}
			for _, p := range b.Status.Partitions {
				state := "Ready"
				if !p.Ready {
					state = "NotReady"
				}
				fmt.Fprintf(w, "    Partition %s\t%d clusters\t%d unavailable (max %d)\t%s\n", p.Name, p.Count, p.Unavailable, p.MaxUnavailable, state)
			}
			for _, s := range b.Status.Stages {
				fmt.Fprintf(w, "    Stage %s\t%d/%d clusters done\t%s\n", s.Name, s.Completed, s.Clusters, s.State)
			}
			for _, g := range b.Status.Sequence {
				for _, r := range g.Revisions {
					if r.State != v1alpha1.SequenceIneligible || r.Index == b.Status.ReleasingRevision {
						fmt.Fprintf(w, "    Group %s\trevision %d\t%s\t%s\n", g.Name, r.Index, r.State, r.Message)
					}
				}
			}
			var bds v1alpha1.BundleDeploymentList
			if err := c.List(ctx, &bds, client.MatchingLabels{hub.LabelBundle: b.Name, hub.LabelBundleNamespace: b.Namespace}); err != nil {
				return err
			}
			sort.Slice(bds.Items, func(i, j int) bool {
				return bds.Items[i].Labels[hub.LabelCluster] < bds.Items[j].Labels[hub.LabelCluster]
			})
			_ = w.Flush() // the cluster table aligns on its own, not with the partition lines
			fmt.Fprintln(w, "    CLUSTER\tSTATE\tSTAGED\tRELEASED\tAPPLIED\tDETAIL")
			for _, bd := range bds.Items {
				released := "-"
				if bd.Spec.Released != nil {
					released = fmt.Sprint(bd.Spec.Released.Index)
				}
				fmt.Fprintf(w, "    %s\t%s\t%d\t%s\t%d\t%s\n", bd.Labels[hub.LabelCluster], hub.DeploymentState(&b, &bd), bd.Spec.Staged.Index, released, bd.Status.AppliedRevision, detail(&bd))
			}
			if n := b.Status.Summary.Pending; n > 0 {
				fmt.Fprintf(w, "    (%d more clusters Pending: the rollout has not reached them)\n", n)
			}
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return writeOldAgents(ctx, out, c, namespace)
}

// writeOldAgents lists the clusters whose agent is older than the hub (see hub.recordVersion).
func writeOldAgents(ctx context.Context, out io.Writer, c client.Client, namespace string) error {
	var recorded corev1.ConfigMapList
	if err := c.List(ctx, &recorded, client.HasLabels{hub.LabelHubVersion}); err != nil {
		return nil // a reader without access to ConfigMaps: nothing to compare with
	}
	hubVersion := ""
	for _, cm := range recorded.Items {
		if v := cm.Data["version"]; hubVersion == "" || Older(hubVersion, v) {
			hubVersion = v
		}
	}
	if hubVersion == "" {
		return nil
	}
	var clusters v1alpha1.ClusterList
	if err := c.List(ctx, &clusters, client.InNamespace(namespace)); err != nil {
		return fmt.Errorf("failed to list clusters: %w", err)
	}
	var old []string
	for _, cl := range clusters.Items {
		if Older(cl.Status.AgentVersion, hubVersion) {
			old = append(old, fmt.Sprintf("%s/%s (%s)", cl.Namespace, cl.Name, cl.Status.AgentVersion))
		}
	}
	if len(old) > 0 {
		sort.Strings(old)
		_, err := fmt.Fprintf(out, "Agents older than the hub (%s): %s\n", hubVersion, strings.Join(old, ", "))
		return err
	}
	return nil
}

// Older reports whether version a is older than b. Versions that are not semantic versions
// (dev builds, "quickstart") are never older nor newer: nothing can be said of them.
func Older(a, b string) bool {
	a, b = canonical(a), canonical(b)
	return semver.IsValid(a) && semver.IsValid(b) && semver.Compare(a, b) < 0
}

func canonical(v string) string {
	if v != "" && !strings.HasPrefix(v, "v") {
		v = "v" + v
	}
	return v
}

// detail says what is wrong with a deployment, if anything.
func detail(bd *v1alpha1.BundleDeployment) string {
	for _, t := range []string{v1alpha1.AppliedCondition, v1alpha1.ReadyCondition, v1alpha1.InSyncCondition} {
		if c := meta.FindStatusCondition(bd.Status.Conditions, t); c != nil && c.Status == "False" {
			return c.Message
		}
	}
	return ""
}

// bar is a 20-character progress bar of ready clusters.
func bar(s v1alpha1.StateCounts) string {
	if s.DesiredReady == 0 {
		return "[" + strings.Repeat(" ", 20) + "]"
	}
	done := int((s.Ready + s.Modified) * 20 / s.DesiredReady)
	return "[" + strings.Repeat("#", done) + strings.Repeat(".", 20-done) + "]"
}

func short(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
