// Command flotilla is Flotilla's command-line interface.
//
//	flotilla plan --clusters clusters.yaml --fleet-yaml fleet.yaml   preview a rollout
//	flotilla render ./repo --cluster-label env=prod                 render bundles for a cluster
//	flotilla status [-n NS | -A] [-o json|yaml]                     where rollouts stand, and why
//
// Commands that talk to the hub take kubectl's connection flags (--kubeconfig, --context,
// -n/--namespace …) with one meaning in all of them; commands that read take -o json|yaml.
//
// Exit codes: 0 success, 1 failure, 2 bad input (a file or flag that cannot be used).
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/flotilla-dev/flotilla/hub/operate"
	"github.com/spf13/cobra"
)

// badInput is bad input: the command exits with code 2, as for a request the hub's operations
// refuse (operate.ErrInput).
func badInput(format string, args ...any) error {
	return &operate.ErrInput{Err: fmt.Errorf(format, args...)}
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "flotilla",
		Short:         "GitOps continuous delivery for fleets of Kubernetes clusters",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	h := newHubFlags(root)
	root.AddCommand(newPlanCommand(), newRenderCommand(), newStatusCommand(h), newQuickstartCommand(), newApproveCommand(h), newRunCommand(h), newSkipCommand(h),
		newRollbackCommand(h), newRolloutCommand(h), newAgentCommand(h), newClusterCommand(h), newVersionCommand(), newImageCommand(), newDevCommand())
	return root
}

func main() {
	err := newRootCommand().Execute()
	if err == nil {
		return
	}
	fmt.Fprintln(os.Stderr, "error:", err)
	var in *operate.ErrInput
	if errors.As(err, &in) {
		os.Exit(2)
	}
	os.Exit(1)
}
