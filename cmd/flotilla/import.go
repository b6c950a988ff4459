package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/hub/fleetimport"
)

type importOptions struct {
	files []string
	// fromKubeconfig and fromContext reach a Fleet hub to read its objects from (read only).
	fromKubeconfig, fromContext string
	output                      string
	reportFile                  string
	reportFormat                string
}

// errDropped is import's answer when the report lists a field it could not carry over.
var errDropped = &exitStatus{code: 3, why: "some of Fleet's fields were not carried over: see the report"}

func newImportCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "import", Short: "Bring another tool's objects over to Flotilla"}
	cmd.AddCommand(newImportFleetCommand())
	return cmd
}

func newImportFleetCommand() *cobra.Command {
	o := &importOptions{}
	cmd := &cobra.Command{
		Use:   "fleet (-f FILE|DIR | --from-kubeconfig FILE | --from-context NAME)",
		Short: "Convert a Rancher Fleet installation's objects into Flotilla's",
		Long: `import fleet reads Fleet's objects (fleet.cattle.io/v1alpha1) as kubectl get -o yaml or -o json
writes them, lists included, from files or directories (their .yaml, .yml and .json files), or
from a Fleet hub (--from-kubeconfig, --from-context: listed in every namespace, read only), and
writes Flotilla's objects on standard output, ready for kubectl apply: GitRepos and HelmOps
(every field of Fleet's mapped or reported), ClusterGroups, and GitRepoRestrictions as
FleetRestrictions.
The report says, object by object, every field that was renamed, changed or could not be
carried over, with why and what to use instead, and which Secrets the objects name (bring them
over yourself: their values are not read). It goes to standard error, or to --report.
The exit code is 0 when everything was carried over, 3 when the report lists a field that was
not, and 2 for input that does not read.`,
		Example: `  kubectl get gitrepos,clustergroups,gitreporestrictions,bundlenamespacemappings -A -o yaml > fleet.yaml
  flotilla import fleet -f fleet.yaml > flotilla.yaml
  flotilla import fleet -f ./fleet-objects/ -o json --report report.json --report-format json
  flotilla import fleet --from-context fleet-hub > flotilla.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringArrayVarP(&o.files, "filename", "f", nil, "a file of Fleet's objects, or a directory of them (repeatable)")
	f.StringVar(&o.fromKubeconfig, "from-kubeconfig", "", "read Fleet's objects from the Fleet hub this kubeconfig reaches (read only)")
	f.StringVar(&o.fromContext, "from-context", "", "the kubeconfig context of the Fleet hub to read from (default: the kubeconfig's current one)")
	f.StringVarP(&o.output, "output", "o", "yaml", "format of the objects written: yaml (documents) or json (a List)")
	f.StringVar(&o.reportFile, "report", "", "write the report to this file instead of standard error")
	f.StringVar(&o.reportFormat, "report-format", "text", "format of the report: text or json")
	cmd.MarkFlagsOneRequired("filename", "from-kubeconfig", "from-context")
	return cmd
}

func (o *importOptions) run(ctx context.Context, out, errOut io.Writer) error {
	if o.output != "yaml" && o.output != "json" {
		return badInput("--output %q: use yaml or json", o.output)
	}
	if o.reportFormat != "text" && o.reportFormat != "json" {
		return badInput("--report-format %q: use text or json", o.reportFormat)
	}
	var objs []*unstructured.Unstructured
	for _, name := range o.files {
		files, err := filesOf(name)
		if err != nil {
			return badInput("%s: %v", name, err)
		}
		for _, file := range files {
			data, err := os.ReadFile(file)
			if err != nil {
				return badInput("%s: %v", file, err)
			}
			read, err := fleetimport.Decode(file, data)
			if err != nil {
				return badInput("%v", err)
			}
			objs = append(objs, read...)
		}
	}
	if o.fromKubeconfig != "" || o.fromContext != "" {
		read, err := o.readFleetHub(ctx)
		if err != nil {
			return err
		}
		objs = append(objs, read...)
	}
	res := fleetimport.Convert(objs)
	if err := writeObjects(out, o.output, res); err != nil {
		return err
	}
	if err := o.writeReport(errOut, res); err != nil {
		return err
	}
	if res.Report.Dropped() {
		return errDropped
	}
	return nil
}

// fleetResources are the kinds a Fleet hub holds that a person writes: read from every namespace.
var fleetResources = []string{"gitrepos", "helmops", "clustergroups", "gitreporestrictions", "bundlenamespacemappings"}

// readFleetHub lists Fleet's objects on the hub --from-kubeconfig and --from-context reach, with
// the credentials of that kubeconfig, reading only. A kind the hub does not serve (an older Fleet)
// has nothing to import.
func (o *importOptions) readFleetHub(ctx context.Context) ([]*unstructured.Unstructured, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if o.fromKubeconfig != "" {
		rules.ExplicitPath = o.fromKubeconfig
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: o.fromContext}).ClientConfig()
	if err != nil {
		return nil, badInput("the Fleet hub's kubeconfig: %v", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	var objs []*unstructured.Unstructured
	for _, resource := range fleetResources {
		list, err := dyn.Resource(schema.GroupVersionResource{Group: fleetimport.FleetGroup, Version: "v1alpha1", Resource: resource}).List(ctx, metav1.ListOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s.%s from the Fleet hub %s: %w", resource, fleetimport.FleetGroup, cfg.Host, err)
		}
		for i := range list.Items {
			objs = append(objs, &list.Items[i])
		}
	}
	return objs, nil
}

// filesOf is name, or the files of objects in the directory name.
func filesOf(name string) ([]string, error) {
	info, err := os.Stat(name)
	if err != nil {
		return nil, err
	}
	if !info.IsDir() {
		return []string{name}, nil
	}
	entries, err := os.ReadDir(name)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range entries {
		if ext := filepath.Ext(e.Name()); !e.IsDir() && slices.Contains([]string{".yaml", ".yml", ".json"}, ext) {
			files = append(files, filepath.Join(name, e.Name()))
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no .yaml, .yml or .json files in the directory")
	}
	return files, nil
}

// writeObjects writes the imported objects as a person would write them (no status, no
// timestamps): YAML documents, or a JSON List.
func writeObjects(out io.Writer, format string, res fleetimport.Result) error {
	var objs []map[string]any
	for _, obj := range res.Objects {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			return err
		}
		delete(m, "status")
		unstructured.RemoveNestedField(m, "metadata", "creationTimestamp")
		objs = append(objs, m)
	}
	if format == "json" {
		list := map[string]any{"apiVersion": "v1", "kind": "List", "items": objs}
		data, err := json.MarshalIndent(list, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(out, "%s\n", data)
		return err
	}
	for i, obj := range objs {
		data, err := yaml.Marshal(obj)
		if err != nil {
			return err
		}
		if i > 0 {
			fmt.Fprintln(out, "---")
		}
		if _, err := out.Write(data); err != nil {
			return err
		}
	}
	return nil
}

func (o *importOptions) writeReport(errOut io.Writer, res fleetimport.Result) error {
	w := errOut
	if o.reportFile != "" {
		f, err := os.Create(o.reportFile)
		if err != nil {
			return badInput("--report: %v", err)
		}
		defer f.Close()
		w = f
	}
	if o.reportFormat == "json" {
		data, err := json.MarshalIndent(map[string]any{"imported": res.Report.Imported, "findings": res.Report.Findings, "secrets": res.Secrets}, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", data)
		return err
	}
	text := res.Report.Text()
	if len(res.Secrets) > 0 {
		text += "Secrets the imported objects name (bring them over, with their values): " + strings.Join(res.Secrets, ", ") + "\n"
	}
	_, err := io.WriteString(w, text)
	return err
}
