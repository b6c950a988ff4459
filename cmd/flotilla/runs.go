package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/operate"
)

func newApproveCommand(h *hubFlags) *cobra.Command {
	var gate operate.Gate
	var comment, reason string
	var reject bool
	cmd := &cobra.Command{
		Use:   "approve RUN --stage STAGE [--group GROUP] [--after] [--comment TEXT] | --reject --reason TEXT",
		Short: "Approve or reject a gate of a staged update run, as the user the hub's API server knows you by",
		Long: `Approve or reject a gate of a staged update run (R3.9). The record names you as the hub's
API server authenticates you, which its admission policy checks: no one can approve in another's
name. A gate with a quorum opens once that many different people approved. A rejection, with its
reason, stops the run.`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: h.completeNames(func() client.ObjectList { return &v1alpha1.StagedUpdateRunList{} }),
		RunE: func(cmd *cobra.Command, args []string) error {
			if reject == (reason == "") {
				return badInput("--reject and --reason go together")
			}
			c, ns, err := h.connect()
			if err != nil {
				return err
			}
			if reject {
				name, err := operate.Reject(cmd.Context(), c, ns, args[0], gate, reason)
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "rejected %s: the run stops\n", name)
				return err
			}
			name, already, err := operate.Approve(cmd.Context(), c, ns, args[0], gate, comment)
			if err != nil {
				return err
			}
			if already {
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "you approved %s already\n", name)
			} else {
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "approved %s\n", name)
			}
			return err
		},
	}
	cmd.Flags().StringVar(&gate.Stage, "stage", "", "stage of the gate (required)")
	cmd.Flags().StringVar(&gate.Group, "group", "", "group of the gate, for group gates")
	cmd.Flags().BoolVar(&gate.After, "after", false, "the gate after the stage (default: before)")
	cmd.Flags().StringVar(&comment, "comment", "", "why you approve")
	cmd.Flags().BoolVar(&reject, "reject", false, "reject the gate: the run stops")
	cmd.Flags().StringVar(&reason, "reason", "", "why you reject (with --reject)")
	_ = cmd.MarkFlagRequired("stage")
	return cmd
}

func newRunCommand(h *hubFlags) *cobra.Command {
	root := &cobra.Command{Use: "run", Short: "Start, stop or resume a staged update run"}
	for _, verb := range []struct {
		use   string
		state v1alpha1.RunAction
	}{{"start", v1alpha1.RunRun}, {"stop", v1alpha1.RunStop}, {"resume", v1alpha1.RunRun}} {
		cmd := &cobra.Command{
			Use:               verb.use + " RUN",
			Args:              cobra.ExactArgs(1),
			ValidArgsFunction: h.completeNames(func() client.ObjectList { return &v1alpha1.StagedUpdateRunList{} }),
			RunE: func(cmd *cobra.Command, args []string) error {
				c, ns, err := h.connect()
				if err != nil {
					return err
				}
				if err := operate.SetRunState(cmd.Context(), c, ns, args[0], verb.state); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "run %s: %s\n", args[0], verb.state)
				return nil
			},
		}
		root.AddCommand(cmd)
	}
	return root
}

func newSkipCommand(h *hubFlags) *cobra.Command {
	var skip v1alpha1.RunSkip
	cmd := &cobra.Command{
		Use:               "skip RUN --stage STAGE [--group G] [--cluster C | --gate Before|After]",
		Short:             "Skip a stage, group, cluster or gate of a staged update run",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: h.completeNames(func() client.ObjectList { return &v1alpha1.StagedUpdateRunList{} }),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := h.connect()
			if err != nil {
				return err
			}
			if err := operate.Skip(cmd.Context(), c, ns, args[0], skip); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "run %s: skipping %+v\n", args[0], skip)
			return nil
		},
	}
	cmd.Flags().StringVar(&skip.Stage, "stage", "", "stage (required)")
	cmd.Flags().StringVar(&skip.Group, "group", "", "group")
	cmd.Flags().StringVar(&skip.Cluster, "cluster", "", "cluster")
	cmd.Flags().StringVar(&skip.Gate, "gate", "", "gate: Before or After")
	_ = cmd.MarkFlagRequired("stage")
	return cmd
}

func newRollbackCommand(h *hubFlags) *cobra.Command {
	var to int64
	cmd := &cobra.Command{
		Use:   "rollback BUNDLE --to-revision N",
		Short: "Deploy an older revision of a bundle again, as it was rendered then",
		Long: `Rollback deploys revision N of the bundle again under the bundle's rollout strategy: a
continuous rollout releases it partition by partition; a staged bundle gets a new run for it and
runs in flight stop. The next commit that changes the bundle ends the rollback.`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: h.completeNames(func() client.ObjectList { return &v1alpha1.BundleList{} }),
		RunE: func(cmd *cobra.Command, args []string) error {
			return h.actOnBundle(cmd, args[0], fmt.Sprintf("rolling back to revision %d", to), func(ctx context.Context, c client.Client, ns, me string) (operate.RollbackResult, error) {
				return operate.Rollback(ctx, c, ns, args[0], to, me)
			})
		},
	}
	cmd.Flags().Int64Var(&to, "to-revision", 0, "revision index to deploy (see `flotilla status` or the bundle's spec.revisions)")
	_ = cmd.MarkFlagRequired("to-revision")
	return cmd
}

// actOnBundle runs an action a person takes on a bundle's rollout (rollback, retry) as the user
// the hub's API server knows them by (recorded on the bundle), and says what it did.
func (h *hubFlags) actOnBundle(cmd *cobra.Command, bundle, what string, act func(ctx context.Context, c client.Client, ns, me string) (operate.RollbackResult, error)) error {
	c, ns, err := h.connect()
	if err != nil {
		return err
	}
	me, err := operate.Whoami(cmd.Context(), c)
	if err != nil {
		return err
	}
	res, err := act(cmd.Context(), c, ns, me)
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "bundle %s: %s\n", bundle, what)
	for _, s := range res.Superseded {
		fmt.Fprintf(out, "stopped run %s\n", s)
	}
	if res.Run != "" {
		fmt.Fprintf(out, "started run %s\n", res.Run)
	}
	return nil
}

func newRolloutCommand(h *hubFlags) *cobra.Command {
	root := &cobra.Command{Use: "rollout", Short: "Act on a bundle's rollout"}
	var revision int64
	retry := &cobra.Command{
		Use:   "retry BUNDLE --revision N",
		Short: "Roll out again a revision that failed and was rolled back",
		Long: `Retry lifts the quarantine of revision N of the bundle (ROLLOUT.md R5.5): a revision whose
failure policy rolled it back is released nowhere until a newer revision replaces it or a person
retries it. The revision then rolls out again under the bundle's strategy, watched as before: a
staged bundle gets a new run, a sequence starts it over from its first group.`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: h.completeNames(func() client.ObjectList { return &v1alpha1.BundleList{} }),
		RunE: func(cmd *cobra.Command, args []string) error {
			return h.actOnBundle(cmd, args[0], fmt.Sprintf("revision %d rolls out again", revision), func(ctx context.Context, c client.Client, ns, me string) (operate.RollbackResult, error) {
				return operate.Retry(ctx, c, ns, args[0], revision, me)
			})
		},
	}
	retry.Flags().Int64Var(&revision, "revision", 0, "the quarantined revision to roll out again (see `flotilla status`)")
	_ = retry.MarkFlagRequired("revision")
	root.AddCommand(retry, newPauseCommand(h, operate.PauseBundle, true), newPauseCommand(h, operate.PauseBundle, false))
	return root
}

// newPauseCommand is `rollout pause|resume BUNDLE` and `cluster pause|resume CLUSTER` (R1.13).
func newPauseCommand(h *hubFlags, what operate.Pausable, pause bool) *cobra.Command {
	verb, short := "resume", "Release new revisions again"
	if pause {
		verb, short = "pause", "Keep staging new revisions but release none"
	}
	list := func() client.ObjectList { return &v1alpha1.BundleList{} }
	if what == operate.PauseCluster {
		list = func() client.ObjectList { return &v1alpha1.ClusterList{} }
	}
	arg := strings.ToUpper(string(what))
	return &cobra.Command{
		Use:               verb + " " + arg,
		Short:             short + " (" + string(what) + ", R1.13)",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: h.completeNames(list),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := h.connect()
			if err != nil {
				return err
			}
			changed, err := operate.SetPaused(cmd.Context(), c, what, ns, args[0], pause)
			if err != nil {
				return err
			}
			state := verb + "d"
			if !changed {
				state = "already " + map[bool]string{true: "paused", false: "not paused"}[pause]
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s %s: %s\n", what, args[0], state)
			return err
		},
	}
}

func newAgentCommand(h *hubFlags) *cobra.Command {
	root := &cobra.Command{Use: "agent", Short: "Install the agent of a downstream cluster"}
	in := operate.AgentInstall{}
	var caFile string
	install := &cobra.Command{
		Use:   "install --token NAME --cluster-name NAME [--label k=v]...",
		Short: "Print the agent manifest of one cluster, to apply there with kubectl apply -f -",
		Long: `Install prints the agent's Namespace, RBAC and Deployment with a bootstrap Secret holding the
registration token's values and the cluster's name; --label sets labels on the Cluster on the
hub now (an agent brings none of its own). On first start the agent registers with the hub,
which creates or claims the Cluster, its namespace and credentials that reach only that
cluster's BundleDeployments; the agent keeps them in the Secret flotilla-agent-hub and renews
them itself. A registration for a Cluster that has an agent already waits for
` + "`flotilla cluster approve`" + `.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, ns, err := h.connect()
			if err != nil {
				return err
			}
			in.Namespace = ns
			if caFile != "" {
				if in.CA, err = os.ReadFile(caFile); err != nil {
					return badInput("--api-server-ca: %v", err)
				}
			}
			out, err := operate.AgentManifest(cmd.Context(), c, in)
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(out)
			return err
		},
	}
	install.Flags().StringVar(&in.Token, "token", "", "ClusterRegistrationToken on the hub (required)")
	install.Flags().StringVar(&in.ClusterName, "cluster-name", "", "name of the Cluster to register (required)")
	install.Flags().StringToStringVar(&in.ClusterLabels, "label", nil, "label set on the Cluster on the hub, key=value (repeatable)")
	install.Flags().StringVar(&in.Image, "image", "", "agent image (default: the one manifests/agent names)")
	install.Flags().StringVar(&in.Server, "api-server-url", "", "the hub's API server URL as this cluster reaches it (default: the one the token gives)")
	install.Flags().StringVar(&caFile, "api-server-ca", "", "PEM file of the CA this cluster's agent trusts for the hub (default: the one the token gives)")
	_ = install.MarkFlagRequired("token")
	_ = install.MarkFlagRequired("cluster-name")
	root.AddCommand(install)
	return root
}

func newClusterCommand(h *hubFlags) *cobra.Command {
	root := &cobra.Command{Use: "cluster", Short: "Manage registered clusters"}
	approve := &cobra.Command{
		Use:   "approve REGISTRATION",
		Short: "Let a held ClusterRegistration take over the Cluster it claims",
		Long: `Approve lets a ClusterRegistration that waits for approval (its Ready condition says
AwaitingApproval) take over the Cluster it claims: the hub revokes the credentials of the
Cluster's current agent and grants the new one. Approve only a registration you expect, such as
a cluster rebuilt from scratch: anyone holding a registration token can ask.`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: h.completeNames(func() client.ObjectList { return &v1alpha1.ClusterRegistrationList{} }),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := h.connect()
			if err != nil {
				return err
			}
			cluster, err := operate.ApproveRegistration(cmd.Context(), c, ns, args[0])
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "registration %s approved: it takes over cluster %s\n", args[0], cluster)
			return err
		},
	}
	root.AddCommand(approve, newPauseCommand(h, operate.PauseCluster, true), newPauseCommand(h, operate.PauseCluster, false))
	return root
}
