// Command flotilla is Flotilla's command-line interface.
//
//	flotilla plan --clusters clusters.yaml --fleet-yaml fleet.yaml   preview a rollout
//	flotilla render ./repo --cluster-label env=prod                 render bundles for a cluster
//	flotilla preview --base main --clusters clusters.yaml           what a change does to the fleet
//	flotilla status [-n NS | -A] [-o json|yaml]                     where rollouts stand, and why
//
// Commands that talk to the hub take kubectl's connection flags (--kubeconfig, --context,
// -n/--namespace …) with one meaning in all of them; commands that read take -o json|yaml.
//
// Exit codes: 0 success, 1 failure, 2 bad input (a file or flag that cannot be used); preview
// exits 3 when nothing changes.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/flotilla-dev/flotilla/cmd/internal/version"
	"github.com/flotilla-dev/flotilla/hub/operate"
)

// badInput is bad input: the command exits with code 2, as for a request the hub's operations
// refuse (operate.ErrInput).
func badInput(format string, args ...any) error {
	return &operate.ErrInput{Err: fmt.Errorf(format, args...)}
}

// usage records whether a command got as far as running: an error before that is the parser's
// (an unknown command or flag, a wrong number of arguments, a required flag missing), which is
// bad input like any other.
type usage struct{ ran bool }

// classify makes an error that came before the command ran bad input.
func (u *usage) classify(err error) error {
	if err != nil && !u.ran && !errors.As(err, new(*operate.ErrInput)) {
		return &operate.ErrInput{Err: err}
	}
	return err
}

func newRootCommand() *cobra.Command {
	u := &usage{}
	return newRootCommandWith(u)
}

func newRootCommandWith(u *usage) *cobra.Command {
	root := &cobra.Command{
		Use:           "flotilla",
		Short:         "GitOps continuous delivery for fleets of Kubernetes clusters",
		Version:       version.String("flotilla"),
		SilenceUsage:  true,
		SilenceErrors: true,
		// Runs after the parser accepted the flags and arguments; the required flags and flag
		// groups, which cobra checks after it, are checked here first.
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := cmd.ValidateRequiredFlags(); err != nil {
				return &operate.ErrInput{Err: err}
			}
			if err := cmd.ValidateFlagGroups(); err != nil {
				return &operate.ErrInput{Err: err}
			}
			u.ran = true
			return nil
		},
	}
	root.SetVersionTemplate("{{.Version}}\n")
	h := newHubFlags(root)
	root.AddCommand(newPlanCommand(), newRenderCommand(), newPreviewCommand(h), newStatusCommand(h), newQuickstartCommand(), newApproveCommand(h), newRunCommand(h), newSkipCommand(h),
		newRollbackCommand(h), newRolloutCommand(h), newAgentCommand(h), newClusterCommand(h), newDashboardCommand(h), newVersionCommand(), newImageCommand(), newPushCommand(), newDevCommand(), newImportCommand())
	return root
}

func main() {
	u := &usage{}
	err := u.classify(newRootCommandWith(u).Execute())
	if err == nil {
		return
	}
	var status *exitStatus
	if errors.As(err, &status) {
		os.Exit(status.code)
	}
	fmt.Fprintln(os.Stderr, "error:", err)
	var in *operate.ErrInput
	if errors.As(err, &in) {
		os.Exit(2)
	}
	os.Exit(1)
}
