package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/hub"
	"github.com/flotilla-dev/flotilla/hub/report"
)

type statusOptions struct {
	kubeconfig string
	namespace  string
	watch      bool
	interval   time.Duration
}

func newStatusCommand() *cobra.Command {
	o := &statusOptions{}
	cmd := &cobra.Command{
		Use:   "status [GITREPO]",
		Short: "Show GitRepos, their bundles, partitions and clusters, and why anything waits",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := ""
			if len(args) == 1 {
				name = args[0]
			}
			c, err := hubClient(o.kubeconfig)
			if err != nil {
				return err
			}
			for {
				var buf strings.Builder
				if err := report.Write(cmd.Context(), &buf, c, o.namespace, name); err != nil {
					return err
				}
				if !o.watch {
					_, err := io.WriteString(cmd.OutOrStdout(), buf.String())
					return err
				}
				fmt.Fprint(cmd.OutOrStdout(), "\033[H\033[2J"+buf.String())
				select {
				case <-cmd.Context().Done():
					return nil
				case <-time.After(o.interval):
				}
			}
		},
	}
	cmd.Flags().StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the hub (default: $KUBECONFIG or ~/.kube/config)")
	cmd.Flags().StringVarP(&o.namespace, "namespace", "n", "", "namespace of the GitRepos (default: all)")
	cmd.Flags().BoolVarP(&o.watch, "watch", "w", false, "refresh continuously, with progress bars")
	cmd.Flags().DurationVar(&o.interval, "interval", 2*time.Second, "refresh interval with --watch")
	return cmd
}

func hubClient(kubeconfig string) (client.Client, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return nil, badInput("kubeconfig: %v", err)
	}
	scheme, err := hub.Scheme()
	if err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{Scheme: scheme})
}
