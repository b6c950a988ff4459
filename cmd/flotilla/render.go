package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/flotilla-dev/flotilla/bundle"
)

type renderOptions struct {
	clusterName   string
	clusterLabels []string
	clusterGroups []string
	repoName      string
	paths         []string
	kubeVersion   string
	output        *outputFlag
}

// renderedBundle is one bundle as render's -o json and -o yaml print it.
type renderedBundle struct {
	Bundle        string                   `json:"bundle"`
	Dir           string                   `json:"dir"`
	Customization string                   `json:"customization,omitempty"`
	DoNotDeploy   bool                     `json:"doNotDeploy,omitempty"`
	ContentID     string                   `json:"contentID,omitempty"`
	DeploymentID  string                   `json:"deploymentID,omitempty"`
	Options       bundle.DeploymentOptions `json:"options"`
	Objects       []bundle.Object          `json:"objects"`
}

func newRenderCommand() *cobra.Command {
	o := &renderOptions{}
	cmd := &cobra.Command{
		Use:   "render PATH",
		Short: "Render the bundles of a repository checkout for one cluster, as the hub would",
		Long: `render finds the bundles under PATH (directories with a fleet.yaml, and plain manifest
directories), renders each with Helm, Kustomize or as plain YAML for the cluster described by the
flags, and prints the result as YAML. Nothing is contacted except Helm repositories the bundles
name. Run it before pushing.`,
		Example: `  flotilla render ./fleet-repo --cluster-name prod-eu-1 --cluster-label env=prod --cluster-label region=eu
  flotilla render ./fleet-repo/apps/web --cluster-group staging`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return o.run(cmd.Context(), cmd.OutOrStdout(), args[0]) },
	}
	f := cmd.Flags()
	f.StringVar(&o.clusterName, "cluster-name", "local", "name of the target cluster")
	f.StringArrayVar(&o.clusterLabels, "cluster-label", nil, "label of the target cluster, key=value (repeatable)")
	f.StringArrayVar(&o.clusterGroups, "cluster-group", nil, "cluster group the target belongs to (repeatable)")
	f.StringVar(&o.repoName, "repo-name", "", "GitRepo name used to derive bundle names (default: the directory name)")
	f.StringSliceVar(&o.paths, "paths", nil, "GitRepo paths (globs) to look for bundles in (default: PATH itself)")
	f.StringVar(&o.kubeVersion, "kube-version", bundle.DefaultKubeVersion, "Kubernetes version charts see")
	o.output = addOutputFlag(cmd, "manifests")
	return cmd
}

func (o *renderOptions) run(ctx context.Context, out io.Writer, root string) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if o.output == nil {
		o.output = &outputFlag{format: "manifests", text: "manifests"}
	}
	structured, err := o.output.structured()
	if err != nil {
		return err
	}
	labels := map[string]string{}
	for _, kv := range o.clusterLabels {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return badInput("--cluster-label %q: want key=value", kv)
		}
		labels[k] = v
	}
	groups := map[string]map[string]string{}
	for _, g := range o.clusterGroups {
		groups[g] = map[string]string{}
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return badInput("%s: %v", root, err)
	}
	repoName := o.repoName
	if repoName == "" {
		repoName = filepath.Base(abs)
	}
	sources, err := bundle.Discover(abs, repoName, o.paths)
	if err != nil {
		return badInput("%v", err)
	}
	if len(sources) == 0 {
		return badInput("%s: no bundles found", root)
	}
	r, err := bundle.NewRenderer(abs, bundle.RendererOptions{KubeVersion: o.kubeVersion})
	if err != nil {
		return badInput("%v", err)
	}
	defer r.Close()
	target := bundle.Target{ClusterName: o.clusterName, Labels: labels, Groups: groups}
	all := []renderedBundle{}
	for i := range sources {
		src := &sources[i]
		res, err := r.Render(ctx, src, target)
		if err != nil {
			return badInput("bundle %s: %v", src.Name, err)
		}
		if structured {
			rb := renderedBundle{Bundle: src.Name, Dir: src.Dir, Customization: res.Customization, DoNotDeploy: res.DoNotDeploy, ContentID: res.ContentID,
				DeploymentID: res.DeploymentID, Options: res.Options, Objects: res.Objects}
			if rb.Objects == nil {
				rb.Objects = []bundle.Object{}
			}
			all = append(all, rb)
			continue
		}
		fmt.Fprintf(out, "# Bundle %s (%s)", src.Name, src.Dir)
		if res.Customization != "" {
			fmt.Fprintf(out, ", target customization %s", res.Customization)
		}
		if res.DoNotDeploy {
			fmt.Fprintf(out, ": not deployed to %s (doNotDeploy)\n", o.clusterName)
			continue
		}
		fmt.Fprintf(out, ", %d objects, content %s\n", len(res.Objects), res.ContentID)
		if _, err := out.Write(res.Manifest); err != nil {
			return err
		}
	}
	if structured {
		return o.output.print(out, all)
	}
	return nil
}
