package main

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/e2e/wait"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/report"
)

// copyTree copies a directory of the repository's test data into dst.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// `flotilla dev --once` deploys a repository of one's own that mixes a Helm chart, a Kustomize
// overlay and plain YAML (the renderer's test repositories, side by side) to the clusters a
// clusters.yaml describes, and exits 0 once every bundle is Ready on every cluster it targets;
// a repository that does not render makes it exit with the file and field at fault.
func TestDevOnceDeploysARepositoryOfOnesOwn(t *testing.T) {
	repo := t.TempDir()
	copyTree(t, "../../bundle/testdata/helm-multicluster/repo", repo)
	copyTree(t, "../../bundle/testdata/kustomize/repo", filepath.Join(repo, "kustomized"))
	copyTree(t, "../../bundle/testdata/manifests/repo", filepath.Join(repo, "plain"))
	clusters := filepath.Join(t.TempDir(), "clusters.yaml")
	if err := os.WriteFile(clusters, []byte("clusters:\n- {name: dev-1, labels: {env: dev, region: eu}, groups: [europe]}\n- {name: prod-1, labels: {env: prod, region: us}}\nclusterGroups:\n- {name: europe}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	devOnce := func() (string, error) {
		return runCLI("dev", repo, "--clusters", clusters, "--once", "--timeout", "5m")
	}
	text, err := devOnce()
	if err != nil {
		t.Fatalf("dev --once: %v\n%s", err, text)
	}
	for _, want := range []string{"every bundle is Ready on every cluster it targets", "Bundle dev-apps-web", "Bundle dev-kustomized", "Bundle dev (.)", "dev-1", "prod-1",
		"dashboard: http://127.0.0.1:"} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}

	if err := os.WriteFile(filepath.Join(repo, "kustomized", "fleet.yaml"), []byte("kustomize: {dir: overlays/missing}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The bundle that does not render fails alone: the others are deployed, and --once exits
	// non-zero naming the file and field at fault.
	if out, err := devOnce(); err == nil || !strings.Contains(err.Error(), "every bundle that renders is Ready") || !strings.Contains(err.Error(), "kustomized/fleet.yaml: kustomize.dir") {
		t.Errorf("dev --once on a repository with a bundle that does not render: %v\n%s", err, out)
	}
	// --paths, as a GitRepo's paths: only the bundles found there are deployed; one that
	// matches nothing is refused before any cluster starts.
	text, err = runCLI("dev", repo, "--clusters", clusters, "--once", "--timeout", "5m", "--paths", "apps/*,plain")
	if err != nil || !strings.Contains(text, "Bundle dev-apps-web") || !strings.Contains(text, "Bundle dev-plain") || strings.Contains(text, "kustomized") {
		t.Errorf("dev --once --paths apps/*,plain beside a bundle that does not render: %v\n%s", err, text)
	}
	if _, err := runCLI("dev", repo, "--once", "--paths", "nowhere"); err == nil || !strings.Contains(err.Error(), `--paths: paths: "nowhere" matches nothing`) {
		t.Errorf("dev --paths nowhere: %v", err)
	}
	// A repository of which nothing renders fails as soon as the hub says so.
	for _, f := range []string{"fleet.yaml", "apps/web/fleet.yaml"} {
		if err := os.WriteFile(filepath.Join(repo, f), []byte("helm: {chart: ../../../../etc}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := devOnce(); err == nil || !strings.Contains(err.Error(), "the repository does not render") {
		t.Errorf("dev --once on a repository of which nothing renders: %v\n%s", err, out)
	}
}

// Without --once, `flotilla dev` keeps following the directory: a change under it is committed
// and rolled out, and the new object appears on the clusters.
func TestDevRollsOutChanges(t *testing.T) {
	repo := t.TempDir()
	copyTree(t, "../../bundle/testdata/manifests/repo", repo)
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var out bytes.Buffer
	go func() {
		cmd := newRootCommand()
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs([]string{"dev", repo, "--dir", dir, "--interval", "200ms"})
		done <- cmd.ExecuteContext(ctx)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("dev: %v", err)
		}
	}()
	var c client.Client
	eventuallyDev(t, "the hub is up", func() bool {
		var err error
		h := newHubFlags(&cobra.Command{})
		*h.config.KubeConfig = filepath.Join(dir, "hub.kubeconfig")
		c, _, err = h.connect()
		return err == nil
	})
	var first string
	eventuallyDev(t, "the first commit is rolled out", func() bool {
		var repo v1alpha1.GitRepo
		if c.Get(ctx, client.ObjectKey{Namespace: localFleetNamespace, Name: "dev"}, &repo) != nil || repo.Status.Commit == "" {
			return false
		}
		first = repo.Status.Commit
		ok, _ := allApplied(ctx, c, localFleetNamespace)
		return ok
	})
	// status reads the same hub through kubectl's flags, as text, JSON or YAML, in one
	// namespace or all.
	kubeconfig := filepath.Join(dir, "hub.kubeconfig")
	for _, args := range [][]string{{"-n", localFleetNamespace, "-o", "json"}, {"-A", "-o", "yaml"}} {
		out, err := runCLI(append([]string{"status", "--kubeconfig", kubeconfig}, args...)...)
		var st report.Status
		if err == nil {
			err = yaml.Unmarshal([]byte(out), &st)
		}
		if err != nil || !slices.ContainsFunc(st.GitRepos, func(g report.GitRepo) bool {
			return g.Name == "dev" && len(g.Bundles) > 0 && len(g.Bundles[0].Clusters) > 0
		}) {
			t.Errorf("status %v: %v\n%s", args, err, out)
		}
	}
	if out, err := runCLI("status", "--kubeconfig", kubeconfig, "-n", localFleetNamespace); err != nil || !strings.Contains(out, "GitRepo "+localFleetNamespace+"/dev") {
		t.Errorf("status as text: %v\n%s", err, out)
	}
	// A GitRepo that does not exist is an error, as kubectl says it; names complete from the hub.
	if out, err := runCLI("status", "nosuch", "--kubeconfig", kubeconfig, "-n", localFleetNamespace); err == nil || !strings.Contains(err.Error(), `"nosuch" not found`) {
		t.Errorf("status nosuch: %v\n%s", err, out)
	}
	if out, err := runCLI("__complete", "status", "--kubeconfig", kubeconfig, "-n", localFleetNamespace, "d"); err != nil || !strings.HasPrefix(out, "dev\n") {
		t.Errorf("completing a GitRepo's name: %v\n%s", err, out)
	}
	if out, err := runCLI("__complete", "rollback", "--kubeconfig", kubeconfig, "-n", localFleetNamespace, ""); err != nil || !strings.Contains(out, "dev\n") {
		t.Errorf("completing a bundle's name: %v\n%s", err, out)
	}
	extra := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: added-while-running}\ndata: {a: b}\n"
	if err := os.WriteFile(filepath.Join(repo, "extra.yaml"), []byte(extra), 0o644); err != nil {
		t.Fatal(err)
	}
	local := kubernetes.NewForConfigOrDie(clusterConfig(t, filepath.Join(dir, "clusters", "dev-1", "kubeconfig")))
	eventuallyDev(t, "the change reaches dev-1", func() bool {
		_, err := local.CoreV1().ConfigMaps("default").Get(ctx, "added-while-running", metav1.GetOptions{})
		return err == nil
	})
	// The GitRepo records the commit once its render is written, which may be after the agent
	// applied it.
	eventuallyDev(t, "the GitRepo records the new commit", func() bool {
		var repoNow v1alpha1.GitRepo
		return c.Get(ctx, client.ObjectKey{Namespace: localFleetNamespace, Name: "dev"}, &repoNow) == nil && repoNow.Status.Commit != first && repoNow.Status.Commit != ""
	})
}

func clusterConfig(t *testing.T, kubeconfig string) *rest.Config {
	t.Helper()
	var cfg *rest.Config
	eventuallyDev(t, "kubeconfig "+kubeconfig, func() bool {
		var err error
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
		return err == nil
	})
	return cfg
}

func eventuallyDev(t *testing.T, what string, cond func() bool) {
	t.Helper()
	wait.Until(t, what, 3*time.Minute, cond)
}
