package main

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/flotilla-dev/flotilla/hub/operate"
	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"
)

// Every command that reads prints JSON or YAML on -o, the same document in both, and refuses
// any other format with exit code 2.
func TestReadCommandsPrintJSONAndYAML(t *testing.T) {
	dir := t.TempDir()
	clusters, fleet := writeFile(t, dir, "clusters.yaml", clustersYAML), writeFile(t, dir, "fleet.yaml", fleetYAML)
	repo := "../../bundle/testdata/helm-multicluster/repo"
	for _, c := range []struct {
		name string
		args []string
		// check reads the document.
		check func(doc any) bool
	}{
		{"version", []string{"version"}, func(doc any) bool { return doc.(map[string]any)["binary"] == "flotilla" }},
		{"render", []string{"render", repo, "--cluster-name", "prod-1", "--cluster-label", "env=prod", "--cluster-label", "region=us", "--repo-name", "shop"}, func(doc any) bool {
			for _, b := range doc.([]any) {
				if b := b.(map[string]any); b["bundle"] == "shop-apps-web" && len(b["objects"].([]any)) == 1 && b["customization"] == "prod" {
					return true
				}
			}
			return false
		}},
		{"plan", []string{"plan", "--clusters", clusters, "--fleet-yaml", fleet}, func(doc any) bool {
			return len(doc.(map[string]any)["partitions"].([]any)) > 0 && len(doc.(map[string]any)["steps"].([]any)) > 0
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			docs := map[string]any{}
			for _, format := range []string{"json", "yaml"} {
				out, err := runCLI(append(c.args, "-o", format)...)
				if err != nil {
					t.Fatalf("-o %s: %v\n%s", format, err, out)
				}
				var doc any
				if format == "json" {
					err = json.Unmarshal([]byte(out), &doc)
				} else {
					err = yaml.Unmarshal([]byte(out), &doc)
				}
				if err != nil || !c.check(doc) {
					t.Fatalf("-o %s printed %v:\n%s", format, err, out)
				}
				docs[format] = doc
			}
			j, _ := json.Marshal(docs["json"])
			y, _ := json.Marshal(docs["yaml"])
			if string(j) != string(y) {
				t.Errorf("-o json and -o yaml print different documents:\n%s\n%s", j, y)
			}
			_, err := runCLI(append(c.args, "-o", "xml")...)
			var in *operate.ErrInput
			if !errors.As(err, &in) || !strings.Contains(err.Error(), `--output "xml"`) {
				t.Errorf("-o xml: %v, want bad input", err)
			}
		})
	}
}

// The hub's connection flags are kubectl's, on every command that talks to the hub: -n, else
// the kubeconfig context's namespace, else fleet-default; --context picks the context.
func TestNamespaceFollowsKubectl(t *testing.T) {
	dir := t.TempDir()
	kubeconfig := writeFile(t, dir, "kubeconfig", `apiVersion: v1
kind: Config
clusters: [{name: hub, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: me, user: {token: x}}]
contexts:
- {name: plain, context: {cluster: hub, user: me}}
- {name: team, context: {cluster: hub, user: me, namespace: team-a}}
current-context: plain
`)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--kubeconfig", kubeconfig}, defaultNamespace},
		{[]string{"--kubeconfig", kubeconfig, "--context", "team"}, "team-a"},
		{[]string{"--kubeconfig", kubeconfig, "--context", "team", "-n", "other"}, "other"},
	} {
		root := &cobra.Command{Use: "flotilla"}
		flags := newHubFlags(root)
		if err := root.PersistentFlags().Parse(c.args); err != nil {
			t.Fatal(err)
		}
		if got, err := flags.namespace(); err != nil || got != c.want {
			t.Errorf("%v: namespace %q (%v), want %q", c.args, got, err, c.want)
		}
	}
}
