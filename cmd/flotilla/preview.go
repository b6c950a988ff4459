package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/bundle"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/gitsource"
	"github.com/flotilla-dev/flotilla/hub/model"
	"github.com/flotilla-dev/flotilla/hub/preview"
	"github.com/flotilla-dev/flotilla/rollout"
)

type previewOptions struct {
	base, head   string
	clustersFile string
	fromHub      bool
	gitRepo      string
	repoName     string
	paths        []string
	kubeVersion  string
	chartHosts   []string
	readyAfter   time.Duration
	maxLength    int
	output       *outputFlag
	hub          *hubFlags
}

// exitStatus ends the command with a code other than 0, 1 and 2, after its output.
type exitStatus struct {
	code int
	why  string
}

func (e *exitStatus) Error() string { return e.why }

// errNothingChanges is preview's answer when the head deploys what the base does.
var errNothingChanges = &exitStatus{code: 3, why: "nothing changes"}

func newPreviewCommand(h *hubFlags) *cobra.Command {
	o := &previewOptions{hub: h}
	cmd := &cobra.Command{
		Use:   "preview [REPO] --base REF [--head REF] (--clusters FILE | --from-hub --gitrepo NAME)",
		Short: "Show what a change of a repository does to the fleet: objects per group of clusters, targets and the rollout plan",
		Long: `preview renders the bundles of two revisions of a git repository (a working copy or a bare
repository, default the current directory) for every cluster, as the hub would, and prints per
bundle: the objects added, changed (a diff) and removed for each group of clusters that renders
alike (one entry for 900 identical clusters), the clusters that join or leave the bundle, and how
the new revision would roll out, with its ETA.

The clusters are a clusters file (plan's format; all of them targeted, unless --gitrepo names a
GitRepo manifest whose targets and paths to use) or, with --from-hub, the hub's: the GitRepo
--gitrepo of the namespace, its Clusters, ClusterGroups and the strategies its bundles name, read
with your credentials and nothing written.

Secrets' values never appear (a changed key says only that it changed). -o markdown (the
default) fits a pull-request comment, summary first, within --max-length.

Exit codes: 0 something changes, 3 nothing changes, 1 a bundle of the head does not render,
2 bad input.`,
		Example: `  flotilla preview --base origin/main --head HEAD --clusters clusters.yaml
  flotilla preview ./fleet-repo --base main --head feature --from-hub -n fleet-default --gitrepo platform -o json
  flotilla preview --base "$BASE_SHA" --head "$HEAD_SHA" --clusters fleet/clusters.yaml --gitrepo fleet/gitrepo.yaml > comment.md`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			repo := "."
			if len(args) == 1 {
				repo = args[0]
			}
			return o.run(cmd.Context(), cmd.OutOrStdout(), repo)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.base, "base", "", "the revision the fleet runs now: a branch, tag, commit or git revision such as HEAD~1 (required)")
	f.StringVar(&o.head, "head", "HEAD", "the revision to compare with it")
	f.StringVar(&o.clustersFile, "clusters", "", "YAML file listing the clusters, as plan reads it")
	f.BoolVar(&o.fromHub, "from-hub", false, "compare for the hub's clusters, GitRepo and strategies (read-only, with your kubeconfig)")
	f.StringVar(&o.gitRepo, "gitrepo", "", "with --from-hub the GitRepo's name (required); with --clusters a GitRepo manifest whose paths, targets and name to use")
	f.StringVar(&o.repoName, "repo-name", "", "name that bundles without a fleet.yaml name derive from (default: the GitRepo's name, else the repository directory's)")
	f.StringSliceVar(&o.paths, "paths", nil, "GitRepo paths (globs) holding bundles (default: the GitRepo's, else the root)")
	f.StringVar(&o.kubeVersion, "kube-version", bundle.DefaultKubeVersion, "Kubernetes version charts see")
	f.StringSliceVar(&o.chartHosts, "allowed-chart-hosts", nil, "chart servers (host or host:port; * for any) a change's bundles may download charts from, as the hub's flag; default none: a pull request names no server the preview reaches")
	f.DurationVar(&o.readyAfter, "ready-after", 30*time.Second, "simulated time from release to Ready, for the ETA")
	f.IntVar(&o.maxLength, "max-length", preview.DefaultMarkdownLength, "longest Markdown output in bytes; what does not fit is left out whole and counted")
	o.output = addOutputFlag(cmd, "markdown")
	_ = cmd.MarkFlagRequired("base")
	cmd.MarkFlagsMutuallyExclusive("clusters", "from-hub")
	cmd.MarkFlagsOneRequired("clusters", "from-hub")
	return cmd
}

func (o *previewOptions) run(ctx context.Context, out io.Writer, repo string) error {
	if ctx == nil {
		ctx = context.Background()
	}
	structured, err := o.output.structured()
	if err != nil {
		return err
	}
	if o.maxLength < 1000 {
		return badInput("--max-length %d: give at least 1000 bytes", o.maxLength)
	}
	fleet, err := o.fleet(ctx)
	if err != nil {
		return err
	}
	if o.repoName != "" {
		fleet.RepoName = o.repoName
	}
	if fleet.RepoName == "" {
		abs, err := filepath.Abs(repo)
		if err != nil {
			return badInput("%s: %v", repo, err)
		}
		fleet.RepoName = strings.TrimSuffix(filepath.Base(abs), ".git")
	}
	if len(o.paths) > 0 {
		fleet.Paths = o.paths
	}
	tmp, err := os.MkdirTemp("", "flotilla-preview-")
	if err != nil {
		return err
	}
	defer gitsource.RemoveCheckout(tmp)
	base, err := checkoutRevision(repo, o.base, "--base", filepath.Join(tmp, "base"))
	if err != nil {
		return err
	}
	head, err := checkoutRevision(repo, o.head, "--head", filepath.Join(tmp, "head"))
	if err != nil {
		return err
	}
	report, err := preview.Compare(ctx, base, head, fleet, preview.Options{ReadyAfter: o.readyAfter,
		Renderer: bundle.RendererOptions{KubeVersion: o.kubeVersion, Sandbox: &bundle.Sandbox{}, Charts: &bundle.ChartFetcher{AllowedHosts: o.chartHosts, Closed: true}}})
	if err != nil {
		return badInput("%v", err)
	}
	if structured {
		err = o.output.print(out, report)
	} else {
		err = report.WriteMarkdown(out, o.maxLength)
	}
	switch {
	case err != nil:
		return err
	case report.Broken():
		var names []string
		for _, b := range report.Bundles {
			if b.Status == preview.StatusBroken {
				names = append(names, b.Name)
			}
		}
		return fmt.Errorf("the head does not render bundle %s (the report says why)", strings.Join(names, ", "))
	case !report.Changed():
		return errNothingChanges
	}
	return nil
}

// checkoutRevision writes a revision's tree under dir.
func checkoutRevision(repo, rev, flag, dir string) (preview.Revision, error) {
	co, commit, err := gitsource.CheckoutLocal(repo, rev, dir, 0)
	if err != nil {
		// A revision the repository does not hold, or a tree no checkout may have: the input.
		return preview.Revision{}, badInput("%s %s: %v", flag, rev, err)
	}
	return preview.Revision{Ref: rev, Commit: commit, Dir: co}, nil
}

// fleet is where the bundles go: the clusters file (with a GitRepo manifest, or every cluster
// targeted), or the hub's GitRepo, clusters and strategies.
func (o *previewOptions) fleet(ctx context.Context) (preview.Fleet, error) {
	if o.fromHub {
		return o.hubFleet(ctx)
	}
	clusters, groups, err := loadClusters(o.clustersFile)
	if err != nil {
		return preview.Fleet{}, err
	}
	fleet := preview.Fleet{ClusterGroups: groups}
	groupLabels := map[string]map[string]string{}
	for _, g := range groups {
		groupLabels[g.Name] = g.Labels
	}
	for _, c := range clusters {
		t := bundle.Target{ClusterName: c.Name, Labels: c.Labels, Groups: map[string]map[string]string{}}
		for _, g := range c.Groups {
			t.Groups[g] = groupLabels[g]
		}
		fleet.Clusters = append(fleet.Clusters, t)
	}
	if o.gitRepo == "" {
		fleet.Targets = []bundle.TargetMatch{{ClusterSelector: &rollout.Selector{}}} // every cluster
		return fleet, nil
	}
	var spec v1alpha1.GitRepoSpec
	if err := loadSpec(o.gitRepo, "GitRepo", &spec); err != nil {
		return preview.Fleet{}, err
	}
	var meta struct {
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
	}
	data, _ := os.ReadFile(o.gitRepo)
	_ = yaml.Unmarshal(data, &meta)
	fleet.RepoName, fleet.Paths, fleet.Defaults, fleet.Targets = meta.Metadata.Name, spec.Paths, spec.BundleDefaults, model.TargetMatches(spec.Targets)
	if len(spec.Targets) == 0 {
		return preview.Fleet{}, badInput("%s: spec.targets: no targets: the GitRepo deploys to no cluster", o.gitRepo)
	}
	return fleet, nil
}

func (o *previewOptions) hubFleet(ctx context.Context) (preview.Fleet, error) {
	if o.gitRepo == "" {
		return preview.Fleet{}, badInput("--from-hub: --gitrepo: name the GitRepo whose targets to compare for")
	}
	c, ns, err := o.hub.connect()
	if err != nil {
		return preview.Fleet{}, err
	}
	return preview.FleetOf(ctx, c, ns, o.gitRepo)
}
