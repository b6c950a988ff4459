package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/hub"
)

// defaultNamespace is the namespace commands work in when neither -n nor the kubeconfig
// context names one: Fleet's default workspace.
const defaultNamespace = "fleet-default"

// hubFlags are kubectl's connection flags (--kubeconfig, --context, -n/--namespace, --server,
// --user, …), on every command that talks to the hub and with one meaning in all of them.
type hubFlags struct {
	config *genericclioptions.ConfigFlags
}

func newHubFlags(root *cobra.Command) *hubFlags {
	h := &hubFlags{config: genericclioptions.NewConfigFlags(true)}
	h.config.AddFlags(root.PersistentFlags())
	return h
}

// connect returns a client of the hub and the namespace to work in: -n, else the kubeconfig
// context's, else defaultNamespace.
func (h *hubFlags) connect() (client.Client, string, error) {
	cfg, err := h.config.ToRESTConfig()
	if err != nil {
		return nil, "", badInput("kubeconfig: %v", err)
	}
	ns, err := h.namespace()
	if err != nil {
		return nil, "", err
	}
	scheme, err := hub.Scheme()
	if err != nil {
		return nil, "", err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	return c, ns, err
}

func (h *hubFlags) namespace() (string, error) {
	if h.config.Namespace != nil && *h.config.Namespace != "" {
		return *h.config.Namespace, nil
	}
	raw, err := h.config.ToRawKubeConfigLoader().RawConfig()
	if err != nil {
		return "", badInput("kubeconfig: %v", err)
	}
	current := raw.CurrentContext
	if h.config.Context != nil && *h.config.Context != "" {
		current = *h.config.Context
	}
	if ctx := raw.Contexts[current]; ctx != nil && ctx.Namespace != "" {
		return ctx.Namespace, nil
	}
	return defaultNamespace, nil
}

// outputFlag is -o/--output on every command that reads: its own text, json or yaml.
type outputFlag struct {
	format, text string
}

func addOutputFlag(cmd *cobra.Command, text string) *outputFlag {
	o := &outputFlag{text: text}
	cmd.Flags().StringVarP(&o.format, "output", "o", text, fmt.Sprintf("output format: %s, json or yaml", text))
	return o
}

// structured reports whether the output is JSON or YAML rather than the command's text, and
// refuses any other format.
func (o *outputFlag) structured() (bool, error) {
	switch o.format {
	case o.text:
		return false, nil
	case "json", "yaml":
		return true, nil
	}
	return false, badInput("--output %q: use %s, json or yaml", o.format, o.text)
}

// print writes v as JSON or YAML.
func (o *outputFlag) print(out io.Writer, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if o.format == "yaml" {
		if data, err = yaml.JSONToYAML(data); err != nil {
			return err
		}
	} else {
		data = append(data, '\n')
	}
	_, err = out.Write(data)
	return err
}

// completeNames completes a command's one argument with the names of a kind's objects in the
// namespace the connection flags select, read with the user's own credentials (shell
// completion: `source <(flotilla completion bash)`).
func (h *hubFlags) completeNames(list func() client.ObjectList) func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		c, ns, err := h.connect()
		if err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		objs := list()
		if err := c.List(cmd.Context(), objs, client.InNamespace(ns)); err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		items, err := meta.ExtractList(objs)
		if err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		var names []string
		for _, o := range items {
			if obj, ok := o.(client.Object); ok && strings.HasPrefix(obj.GetName(), toComplete) {
				names = append(names, obj.GetName())
			}
		}
		return names, cobra.ShellCompDirectiveNoFileComp
	}
}
