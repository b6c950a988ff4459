package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/spf13/cobra"

	"github.com/flotilla-dev/flotilla/hub/gitsource"
)

type pushArtifactOptions struct {
	source, revision string
	username         string
	passwordStdin    bool
}

func newPushCommand() *cobra.Command {
	root := &cobra.Command{Use: "push", Short: "Push a fleet repository to a registry"}
	o := &pushArtifactOptions{}
	artifact := &cobra.Command{
		Use:   "artifact DIR oci://REGISTRY/PATH:TAG",
		Short: "Push a directory as an OCI artifact that a GitRepo of repo oci://… deploys",
		Long: `artifact packs DIR (its files and symbolic links, .git left out, reproducibly: the same
directory is the same digest) into one gzipped tar layer and pushes it. A GitRepo whose repo is
oci://REGISTRY/PATH follows it by tag, semver range or digest, as it follows a git repository.
Credentials: --username with the password on standard input (--password-stdin), else the docker
configuration's (~/.docker/config.json).`,
		Example: `  flotilla push artifact ./fleet oci://registry.example/platform/fleet:1.4.0 --source https://github.com/team/fleet --revision "$(git rev-parse HEAD)"
  echo "$TOKEN" | flotilla push artifact ./fleet oci://ghcr.io/team/fleet:1.4.0 --username team --password-stdin`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.InOrStdin(), cmd.OutOrStdout(), args[0], args[1])
		},
	}
	f := artifact.Flags()
	f.StringVar(&o.source, "source", "", "the repository the content comes from (annotation org.opencontainers.image.source)")
	f.StringVar(&o.revision, "revision", "", "the revision it comes from (annotation org.opencontainers.image.revision)")
	f.StringVar(&o.username, "username", "", "registry user; the password is read from standard input (--password-stdin)")
	f.BoolVar(&o.passwordStdin, "password-stdin", false, "read the registry password from standard input")
	root.AddCommand(artifact)
	return root
}

func (o *pushArtifactOptions) run(in io.Reader, out io.Writer, dir, target string) error {
	if !gitsource.IsOCI(target) {
		return badInput("%s: give oci://REGISTRY/PATH:TAG", target)
	}
	ref, err := name.NewTag(strings.TrimPrefix(target, gitsource.OCIScheme), name.StrictValidation)
	if err != nil {
		return badInput("%s: %v", target, err)
	}
	if info, err := os.Stat(dir); err != nil || !info.IsDir() {
		return badInput("%s: not a directory", dir)
	}
	annotations := map[string]string{}
	for k, v := range map[string]string{"org.opencontainers.image.source": o.source, "org.opencontainers.image.revision": o.revision} {
		if v != "" {
			annotations[k] = v
		}
	}
	img, err := gitsource.BuildArtifact(dir, annotations)
	if err != nil {
		return badInput("%s: %v", dir, err)
	}
	auth := remote.WithAuthFromKeychain(authn.DefaultKeychain)
	if o.username != "" || o.passwordStdin {
		if o.username == "" || !o.passwordStdin {
			return badInput("--username and --password-stdin go together")
		}
		password, err := io.ReadAll(io.LimitReader(in, 64<<10))
		if err != nil {
			return err
		}
		auth = remote.WithAuth(authn.FromConfig(authn.AuthConfig{Username: o.username, Password: strings.TrimRight(string(password), "\r\n")}))
	}
	if err := remote.Write(ref, img, auth); err != nil {
		return fmt.Errorf("failed to push %s: %w", target, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "pushed %s@%s\n", target, digest)
	return nil
}
