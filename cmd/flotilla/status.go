package main

import (
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/report"
)

func newStatusCommand(h *hubFlags) *cobra.Command {
	var allNamespaces, watch bool
	var interval time.Duration
	var output *outputFlag
	cmd := &cobra.Command{
		Use:               "status [GITREPO]",
		Short:             "Show GitRepos, their bundles, partitions and clusters, and why anything waits",
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: h.completeNames(func() client.ObjectList { return &v1alpha1.GitRepoList{} }),
		RunE: func(cmd *cobra.Command, args []string) error {
			structured, err := output.structured()
			if err != nil {
				return err
			}
			if structured && watch {
				return badInput("--watch shows the text view only")
			}
			name := ""
			if len(args) == 1 {
				name = args[0]
			}
			c, ns, err := h.connect()
			if err != nil {
				return err
			}
			if allNamespaces {
				ns = ""
			}
			live := newScreen(cmd.OutOrStdout())
			for {
				st, err := report.Collect(cmd.Context(), c, ns, name)
				if err != nil {
					return err
				}
				if structured {
					return output.print(cmd.OutOrStdout(), st)
				}
				var buf strings.Builder
				if err := st.WriteText(&buf); err != nil {
					return err
				}
				if !watch {
					_, err := io.WriteString(cmd.OutOrStdout(), buf.String())
					return err
				}
				live.draw(buf.String())
				select {
				case <-cmd.Context().Done():
					return nil
				case <-time.After(interval):
				}
			}
		},
	}
	cmd.Flags().BoolVarP(&allNamespaces, "all-namespaces", "A", false, "the GitRepos of every namespace")
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "refresh continuously, with progress bars")
	cmd.Flags().DurationVar(&interval, "interval", 2*time.Second, "refresh interval with --watch")
	output = addOutputFlag(cmd, "text")
	return cmd
}
