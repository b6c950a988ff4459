package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/spf13/cobra"

	"github.com/flotilla-dev/flotilla/cmd/internal/image"
	"github.com/flotilla-dev/flotilla/cmd/internal/version"
)

func newVersionCommand() *cobra.Command {
	var output *outputFlag
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version and commit of this CLI",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			structured, err := output.structured()
			switch {
			case err != nil:
				return err
			case structured:
				return output.print(cmd.OutOrStdout(), map[string]string{"binary": "flotilla", "version": version.Version(), "commit": version.Commit()})
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), version.String("flotilla"))
			return err
		},
	}
	output = addOutputFlag(cmd, "text")
	return cmd
}

type imageBuildOptions struct {
	output, push, versionOverride string
	platforms                     []string
	only                          []string
	insecure                      bool
}

func newImageCommand() *cobra.Command {
	root := &cobra.Command{Use: "image", Short: "Build Flotilla's container images"}
	o := &imageBuildOptions{}
	build := &cobra.Command{
		Use:   "build (--output DIR | --push REGISTRY/PATH)",
		Short: "Build the hub and agent images from this checkout, without a container daemon",
		Long: `Build compiles flotilla-hub and flotilla-agent as static binaries for each platform and
assembles one multi-platform OCI image index per binary: no shell, user 65532, CA certificates,
OCI labels with the source, revision and version. The same commit builds the same digests.
Run it in a checkout; the version is the v* tag at HEAD, or a pseudo-version of the commit.

  flotilla image build --output dist/images                 # OCI layouts dist/images/flotilla-{hub,agent}
  flotilla image build --push ghcr.io/example/flotilla      # ghcr.io/example/flotilla/flotilla-hub:<version>`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.output == "" && o.push == "" {
				return badInput("give --output DIR, --push REGISTRY/PATH or both")
			}
			platforms, err := parsePlatforms(o.platforms)
			if err != nil {
				return err
			}
			dir, err := os.Getwd()
			if err != nil {
				return err
			}
			stamp, err := image.FromGit(cmd.Context(), dir)
			if err != nil {
				return badInput("run it in a git checkout of Flotilla: %v", err)
			}
			if o.versionOverride != "" {
				stamp.Version = o.versionOverride
			}
			logf := func(format string, args ...any) { fmt.Fprintf(cmd.ErrOrStderr(), "image: "+format+"\n", args...) }
			for _, bin := range image.Binaries {
				if len(o.only) > 0 && !slices.Contains(o.only, bin.Name) {
					continue
				}
				idx, err := image.Build(cmd.Context(), image.Options{ModuleDir: dir, Platforms: platforms, Stamp: stamp, Log: logf}, bin)
				if err != nil {
					return err
				}
				digest, err := idx.Digest()
				if err != nil {
					return err
				}
				if o.output != "" {
					path := filepath.Join(o.output, bin.Name)
					if err := os.RemoveAll(path); err != nil {
						return err
					}
					if _, err := layout.Write(path, idx); err != nil {
						return fmt.Errorf("failed to write %s: %w", path, err)
					}
					fmt.Fprintf(cmd.OutOrStdout(), "%s %s@%s (OCI layout %s)\n", bin.Name, stamp.Version, digest, path)
				}
				if o.push != "" {
					var opts []name.Option
					if o.insecure {
						opts = append(opts, name.Insecure)
					}
					ref, err := name.ParseReference(strings.TrimSuffix(o.push, "/")+"/"+bin.Name+":"+tagFor(stamp.Version), opts...)
					if err != nil {
						return badInput("--push: %v", err)
					}
					if err := remote.WriteIndex(ref, idx, remote.WithContext(cmd.Context()), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
						return fmt.Errorf("failed to push %s: %w", ref, err)
					}
					fmt.Fprintf(cmd.OutOrStdout(), "%s pushed %s@%s\n", bin.Name, ref, digest)
				}
			}
			return nil
		},
	}
	build.Flags().StringVar(&o.output, "output", "", "directory for the OCI image layouts (one per image)")
	build.Flags().StringVar(&o.push, "push", "", "registry and path to push to, e.g. ghcr.io/example/flotilla")
	build.Flags().BoolVar(&o.insecure, "insecure", false, "push over plain HTTP (a local registry)")
	build.Flags().StringSliceVar(&o.platforms, "platform", []string{"linux/amd64", "linux/arm64"}, "platforms, os/arch[/variant]")
	build.Flags().StringSliceVar(&o.only, "image", nil, "build only these images (flotilla-hub, flotilla-agent)")
	build.Flags().StringVar(&o.versionOverride, "version", "", "version to stamp (default: from git)")
	root.AddCommand(build)
	return root
}

func parsePlatforms(specs []string) ([]v1.Platform, error) {
	var out []v1.Platform
	for _, s := range specs {
		p, err := v1.ParsePlatform(s)
		if err != nil || p.OS == "" || p.Architecture == "" {
			return nil, badInput("--platform %q: want os/arch[/variant]", s)
		}
		out = append(out, *p)
	}
	return out, nil
}

// tagFor turns a version into an image tag (tags allow no "+").
func tagFor(v string) string { return strings.ReplaceAll(v, "+", "_") }
