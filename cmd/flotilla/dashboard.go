package main

import (
	"flag"

	"github.com/spf13/cobra"

	"github.com/flotilla-dev/flotilla/cmd/internal/dashboardcmd"
)

func newDashboardCommand(h *hubFlags) *cobra.Command {
	o := &dashboardcmd.Options{}
	cmd := &cobra.Command{
		Use:   "dashboard [--address 127.0.0.1:8585]",
		Short: "Serve the web dashboard on loopback, acting as you (your kubeconfig)",
		Long: `Dashboard serves the web dashboard: the fleet, every bundle's rollout lane by lane and live,
the outcome of a revision, each cluster, what a revision changes, and the actions you take on a
rollout (approve or reject a gate, pause and resume, skip, roll back, retry, start or stop a run).
Every read and every action is yours, with your kubeconfig: what your RBAC forbids, the page does
not show or refuses with the API server's reason. It prints a link holding a login token; only
that link opens the page.

With --proxy-client-ca it runs as the hub chart runs it in the cluster: behind an authenticating
proxy that presents a client certificate signed by that CA and asserts the user in X-Remote-User
and the groups in X-Remote-Group; the dashboard impersonates them, and answers a request without
the proxy's certificate with 401.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := h.config.ToRESTConfig()
			if err != nil {
				return badInput("kubeconfig: %v", err)
			}
			ns, err := h.namespace()
			if err != nil {
				return err
			}
			return o.Run(cmd.Context(), cmd.OutOrStdout(), cfg, ns)
		},
	}
	flags := flag.NewFlagSet("dashboard", flag.ContinueOnError)
	o.Bind(flags, "127.0.0.1:8585")
	cmd.Flags().AddGoFlagSet(flags)
	return cmd
}
