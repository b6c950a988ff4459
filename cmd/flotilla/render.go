package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path"
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
	// decryptionKeys are files of SOPS private keys; showDecrypted prints what they decrypt.
	decryptionKeys []string
	showDecrypted  bool
	output         *outputFlag
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
	// Hidden says why Objects are only named: they hold values decrypted with SOPS.
	Hidden string `json:"hidden,omitempty"`
	// Error is why the bundle did not render; the others are rendered all the same.
	Error string `json:"error,omitempty"`
}

func newRenderCommand() *cobra.Command {
	o := &renderOptions{}
	cmd := &cobra.Command{
		Use:   "render PATH",
		Short: "Render the bundles of a repository checkout for one cluster, as the hub would",
		Long: `render finds the bundles under PATH (directories with a fleet.yaml, and plain manifest
directories), renders each with Helm, Kustomize or as plain YAML for the cluster described by the
flags, and prints the result as YAML. A bundle that does not render is named where it would
have been printed and the others are rendered all the same; the exit code is then 2 and the
error lists every bundle that failed. Nothing is contacted except Helm repositories the bundles
name. Run it before pushing. Files encrypted with SOPS are decrypted with --decryption-key;
objects that then hold a decrypted value are only named unless --show-decrypted is given.`,
		Example: `  flotilla render ./fleet-repo --cluster-name prod-eu-1 --cluster-label env=prod --cluster-label region=eu
  flotilla render ./fleet-repo/apps/web --cluster-group staging
  flotilla render ./fleet-repo --decryption-key ~/.config/sops/age/keys.txt [--show-decrypted]`,
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
	f.StringArrayVar(&o.decryptionKeys, "decryption-key", nil, "file of age identities or an armored OpenPGP private key that decrypts the repository's SOPS files (repeatable)")
	f.BoolVar(&o.showDecrypted, "show-decrypted", false, "print the objects that hold decrypted values; without it they are only named")
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
	decryptor, err := o.decryptor()
	if err != nil {
		return err
	}
	r, err := bundle.NewRenderer(abs, bundle.RendererOptions{KubeVersion: o.kubeVersion, Decryption: decryptor})
	if err != nil {
		return badInput("%v", err)
	}
	defer r.Close()
	target := bundle.Target{ClusterName: o.clusterName, Labels: labels, Groups: groups}
	all := []renderedBundle{}
	// A bundle that does not render fails alone, as on the hub: the others are printed, and
	// the error names each that failed.
	var failed []string
	for i := range sources {
		src := &sources[i]
		res, err := r.Render(ctx, src, target)
		if err != nil {
			failed = append(failed, fmt.Sprintf("bundle %s (%s): %v", src.Name, src.Dir, err))
			if structured {
				all = append(all, renderedBundle{Bundle: src.Name, Dir: src.Dir, Objects: []bundle.Object{}, Error: err.Error()})
			} else {
				fmt.Fprintf(out, "# Bundle %s (%s): not rendered: %v\n", src.Name, src.Dir, err)
			}
			continue
		}
		hidden := ""
		if decryptor != nil && !o.showDecrypted && decryptor.Reveals(res.Manifest) {
			hidden = fmt.Sprintf("%d objects hold values decrypted with SOPS: only named (--show-decrypted prints them)", len(res.Objects))
		}
		if structured {
			rb := renderedBundle{Bundle: src.Name, Dir: src.Dir, Customization: res.Customization, DoNotDeploy: res.DoNotDeploy, ContentID: res.ContentID,
				DeploymentID: res.DeploymentID, Options: res.Options, Objects: res.Objects, Hidden: hidden}
			if hidden != "" {
				rb.Objects = namesOnly(res.Objects)
			}
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
		if hidden != "" {
			fmt.Fprintf(out, "# %s:\n", hidden)
			for _, obj := range res.Objects {
				fmt.Fprintf(out, "#   %s %s %s\n", obj.APIVersion(), obj.Kind(), path.Join(obj.Namespace(), obj.Name()))
			}
			continue
		}
		if _, err := out.Write(res.Manifest); err != nil {
			return err
		}
	}
	if structured {
		if err := o.output.print(out, all); err != nil {
			return err
		}
	}
	if len(failed) > 0 {
		return badInput("%d of %d bundles did not render:\n%s", len(failed), len(sources), strings.Join(failed, "\n"))
	}
	return nil
}

// decryptor reads --decryption-key files: age identities or an armored OpenPGP private key,
// told apart by what they hold.
func (o *renderOptions) decryptor() (*bundle.Decryptor, error) {
	if len(o.decryptionKeys) == 0 {
		return nil, nil
	}
	data := map[string][]byte{}
	for i, file := range o.decryptionKeys {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, badInput("--decryption-key %s: %v", file, err)
		}
		name := fmt.Sprintf("%d-%s", i, filepath.Base(file))
		switch {
		case bytes.Contains(b, []byte("AGE-SECRET-KEY-1")):
			data[name+bundle.AgeKeySuffix] = b
		case bytes.Contains(b, []byte("-----BEGIN PGP PRIVATE KEY BLOCK-----")):
			data[name+bundle.PGPKeySuffix] = b
		default:
			return nil, badInput("--decryption-key %s: holds neither age identities (AGE-SECRET-KEY-1…) nor an armored OpenPGP private key", file)
		}
	}
	d, err := bundle.NewDecryptor("--decryption-key", data)
	if err != nil {
		return nil, badInput("%v", err)
	}
	return d, nil
}

// namesOnly keeps of each object what names it.
func namesOnly(objs []bundle.Object) []bundle.Object {
	out := make([]bundle.Object, 0, len(objs))
	for _, obj := range objs {
		meta := map[string]any{"name": obj.Name()}
		if ns := obj.Namespace(); ns != "" {
			meta["namespace"] = ns
		}
		out = append(out, bundle.Object{"apiVersion": obj.APIVersion(), "kind": obj.Kind(), "metadata": meta})
	}
	return out
}
