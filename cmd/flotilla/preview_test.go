package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/flotilla-dev/flotilla/e2e/gitserver"
	"github.com/flotilla-dev/flotilla/hub/operate"
	"github.com/flotilla-dev/flotilla/hub/preview"
)

const previewClusters = `
clusters:
- {name: dev-1, labels: {env: dev}}
- {name: eu-1, labels: {env: prod, region: eu}}
- {name: eu-2, labels: {env: prod, region: eu}}
- {name: us-1, labels: {env: prod, region: us}}
`

// A pull request's two commits, in a repository served nowhere: preview reads the repository
// itself, its working copy or its bare form, and exits 0 when something changes, 3 when
// nothing does and 2 for a revision it does not hold.
func TestPreviewOfTwoCommits(t *testing.T) {
	up := gitserver.New(t)
	base := up.Commit("main", map[string]string{
		"web/fleet.yaml":                "defaultNamespace: web\ntargetCustomizations:\n- name: us\n  clusterSelector: {matchLabels: {region: us}}\n  yaml: {overlays: [us]}\n",
		"web/cm.yaml":                   "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web}\ndata: {replicas: \"2\"}\n",
		"web/overlays/us/cm_patch.yaml": "data: {replicas: \"5\"}\n",
	})
	head := up.Commit("main", map[string]string{"web/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web}\ndata: {replicas: \"3\"}\n"})
	clusters := writeFile(t, t.TempDir(), "clusters.yaml", previewClusters)

	out, err := runCLI("preview", up.Work, "--base", base, "--head", head, "--clusters", clusters, "-o", "json")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var r preview.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(r.Bundles) != 1 || r.Head.Commit != head || r.Base.Commit != base {
		t.Fatalf("report %+v", r)
	}
	b := r.Bundles[0]
	// The us cluster's overlay keeps its replicas: only the three others change.
	if b.Name != "work-web" || b.Status != preview.StatusChanged || len(b.Groups) != 1 || b.Unchanged != 1 ||
		!slices.Equal(b.Groups[0].Clusters, []string{"dev-1", "eu-1", "eu-2"}) {
		t.Errorf("bundle %+v", b)
	}

	// The bare repository, by revision expressions, as Markdown.
	md, err := runCLI("preview", up.Bare, "--base", "main~1", "--head", "main", "--clusters", clusters)
	if err != nil {
		t.Fatalf("%v\n%s", err, md)
	}
	if !strings.Contains(md, "**3 clusters**: dev-1, eu-1, eu-2") || !strings.Contains(md, `-  replicas: "2"`) || !strings.Contains(md, `+  replicas: "3"`) {
		t.Errorf("markdown:\n%s", md)
	}

	_, err = runCLI("preview", up.Work, "--base", head, "--head", head, "--clusters", clusters)
	var status *exitStatus
	if !errors.As(err, &status) || status.code != 3 {
		t.Errorf("the same commit twice: %v, want exit code 3", err)
	}
	for _, bad := range [][]string{
		{"--base", "no-such-branch", "--clusters", clusters},
		{"--base", base, "--head", "0123456789012345678901234567890123456789", "--clusters", clusters},
		{"--base", base},
		{"--base", base, "--clusters", clusters, "--from-hub"},
		{"--base", base, "--clusters", clusters, "-o", "html"},
	} {
		out, err := runCLI(append([]string{"preview", up.Work}, bad...)...)
		if !errors.As(err, new(*operate.ErrInput)) {
			t.Errorf("preview %v: %v (%s), want bad input", bad, err, out)
		}
	}
	if _, err := runCLI("preview", t.TempDir(), "--base", "main", "--clusters", clusters); !errors.As(err, new(*operate.ErrInput)) || !strings.Contains(err.Error(), "not a git repository") {
		t.Errorf("a directory that is no repository: %v", err)
	}
}

// With a GitRepo manifest, its targets and paths apply: a change outside them is no change.
func TestPreviewWithAGitRepoManifest(t *testing.T) {
	up := gitserver.New(t)
	base := up.Commit("main", map[string]string{
		"apps/web/cm.yaml":    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web}\ndata: {v: \"1\"}\n",
		"other/db/cm.yaml":    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: db}\ndata: {v: \"1\"}\n",
		"apps/web/fleet.yaml": "defaultNamespace: web\n",
	})
	head := up.Commit("main", map[string]string{"other/db/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: db}\ndata: {v: \"2\"}\n"})
	dir := t.TempDir()
	clusters := writeFile(t, dir, "clusters.yaml", previewClusters)
	gitrepo := writeFile(t, dir, "gitrepo.yaml", `apiVersion: flotilla.dev/v1alpha1
kind: GitRepo
metadata: {name: shop}
spec:
  repo: https://git.example/shop
  paths: [apps/*]
  targets:
  - clusterSelector: {matchLabels: {env: prod}}
`)
	_, err := runCLI("preview", up.Work, "--base", base, "--head", head, "--clusters", clusters, "--gitrepo", gitrepo)
	if status := (*exitStatus)(nil); !errors.As(err, &status) || status.code != 3 {
		t.Errorf("a change outside the GitRepo's paths: %v, want exit code 3", err)
	}
	head = up.Commit("main", map[string]string{"apps/web/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web}\ndata: {v: \"2\"}\n"})
	out, err := runCLI("preview", up.Work, "--base", base, "--head", head, "--clusters", clusters, "--gitrepo", gitrepo, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var r preview.Report
	_ = json.Unmarshal([]byte(out), &r)
	if len(r.Bundles) != 1 || r.Bundles[0].Name != "shop-apps-web" || r.Bundles[0].Targeted != 3 || slices.Contains(r.Bundles[0].Groups[0].Clusters, "dev-1") {
		t.Errorf("the GitRepo's name, paths and targets are not applied: %s", out)
	}
	if err := os.WriteFile(gitrepo, []byte("kind: GitRepo\nspec: {repo: x, target: []}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := runCLI("preview", up.Work, "--base", base, "--clusters", clusters, "--gitrepo", gitrepo); !errors.As(err, new(*operate.ErrInput)) || !strings.Contains(err.Error(), "gitrepo.yaml") {
		t.Errorf("a GitRepo manifest with an unknown field: %v", err)
	}
}

// Rancher's fleet-examples, between two of its commits (the Redis image switch): the three
// multi-cluster bundles that render here each change their two Redis Deployments for dev, test
// and prod, and the bundles whose chart is on the internet, which this machine cannot reach,
// are reported as not rendering, naming the chart. Opt in with FLOTILLA_FLEET_EXAMPLES, a
// clone of rancher/fleet-examples: it is not part of this repository.
func TestPreviewOfFleetExamples(t *testing.T) {
	root := os.Getenv("FLOTILLA_FLEET_EXAMPLES")
	if root == "" {
		t.Skip("FLOTILLA_FLEET_EXAMPLES is not set: point it at a clone of rancher/fleet-examples to preview two of its commits")
	}
	clusters := writeFile(t, t.TempDir(), "clusters.yaml", `
clusters:
- {name: dev-1, labels: {env: dev}}
- {name: test-1, labels: {env: test}}
- {name: prod-1, labels: {env: prod}}
- {name: prod-2, labels: {env: prod}}
`)
	out, err := runCLI("preview", root, "--base", "2ada7cca7388", "--head", "0cf04e62bef7", "--clusters", clusters, "--repo-name", "fleet-examples",
		"--paths", "multi-cluster/helm,multi-cluster/kustomize,multi-cluster/manifests,multi-cluster/helm-external", "-o", "json")
	var r preview.Report
	if jerr := json.Unmarshal([]byte(out), &r); jerr != nil {
		t.Fatalf("%v: %v\n%s", err, jerr, out)
	}
	if err == nil || !strings.Contains(err.Error(), "fleet-examples-multi-cluster-helm-external") {
		t.Errorf("the bundle whose chart is on the internet: %v", err)
	}
	for _, b := range r.Bundles {
		if b.Name == "fleet-examples-multi-cluster-helm-external" {
			if b.Status != preview.StatusBroken || !strings.Contains(b.HeadFailure.Message, "helm.chart") {
				t.Errorf("%s: %+v", b.Name, b)
			}
			continue
		}
		if b.Status != preview.StatusChanged {
			t.Errorf("%s: %s", b.Name, b.Status)
			continue
		}
		changing := 0
		for _, g := range b.Groups {
			changing += g.Count
			for _, o := range g.Objects {
				if o.Kind != "Deployment" || !strings.HasPrefix(o.Name, "redis-") || !strings.Contains(o.Diff, "+      - image: redis\n") {
					t.Errorf("%s: %s %s %s:\n%s", b.Name, o.Change, o.Kind, o.Name, o.Diff)
				}
			}
		}
		if changing != 4 || b.Plan == nil || !b.Plan.Completed {
			t.Errorf("%s: %d clusters changing, plan %+v", b.Name, changing, b.Plan)
		}
	}
	if len(r.Bundles) != 4 {
		t.Errorf("%d bundles, want 4", len(r.Bundles))
	}
}

// A pull request whose head links a file of the bundle to one of the machine running the
// preview (a CI runner's secrets) or into another directory of the runner: the bundle does not
// render, the report names the link, and nothing of the target is in it.
func TestPreviewOfAHeadThatLinksOutOfTheRepository(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "runner-token")
	if err := os.WriteFile(secret, []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: stolen}\ndata: {token: ghp-runner-secret-value}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	up := gitserver.New(t)
	base := up.Commit("main", map[string]string{
		"web/fleet.yaml": "defaultNamespace: web\n",
		"web/cm.yaml":    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web}\n",
	})
	up.Link("web/leak.yaml", secret)
	up.Link("web/rel.yaml", "../../../../../../../../.."+secret)
	head := up.Commit("main", map[string]string{"web/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web}\ndata: {v: \"2\"}\n"})
	clusters := writeFile(t, t.TempDir(), "clusters.yaml", previewClusters)
	for _, format := range []string{"json", "markdown"} {
		out, err := runCLI("preview", up.Work, "--base", base, "--head", head, "--clusters", clusters, "-o", format)
		if err == nil || !strings.Contains(err.Error(), "does not render bundle work-web") {
			t.Errorf("-o %s: %v", format, err)
		}
		if strings.Contains(out, "ghp-runner-secret-value") || strings.Contains(out, "stolen") {
			t.Errorf("-o %s: the report holds the file a link points to:\n%s", format, out)
		}
		if !strings.Contains(out, "leak.yaml") && !strings.Contains(out, "rel.yaml") {
			t.Errorf("-o %s: the report does not name the link:\n%s", format, out)
		}
	}
}
