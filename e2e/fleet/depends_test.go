package fleet

import (
	"strings"
	"testing"
	"time"

	"github.com/flotilla-dev/flotilla/e2e/controlplane"
	"github.com/flotilla-dev/flotilla/e2e/gitserver"
)

// dependsOn: a bundle is released to a cluster only once the bundles it depends on are ready
// there. The database never becomes ready on the canary, so the web bundle waits there (and
// says why) while it goes out everywhere else; fixing the database releases it.
func TestDependsOnHoldsAClusterUntilTheDependencyIsReadyThere(t *testing.T) {
	db := func(image string, neverReadyOnCanary bool) string {
		m := strings.Replace(webManifest(image), "name: web}", "name: db}", 1)
		m = strings.ReplaceAll(m, "app: web", "app: db")
		if neverReadyOnCanary {
			m = strings.Replace(m, "labels: {app: db}}", "labels: {app: db, "+controlplane.NeverReadyLabel+": \"true\"}}", 1)
		}
		return m
	}
	up := gitserver.New(t)
	up.Commit("main", map[string]string{
		"db/fleet.yaml": `defaultNamespace: deps
targetCustomizations:
- name: canary
  clusterSelector: {matchLabels: {index: "0"}}
  kustomize: {dir: canary}
`,
		"db/kustomization.yaml":        "resources: [deployment.yaml]\n",
		"db/deployment.yaml":           db("example.invalid/db:1", false),
		"db/canary/kustomization.yaml": "resources: [deployment.yaml]\n",
		"db/canary/deployment.yaml":    db("example.invalid/db:1", true),
		"web/fleet.yaml":               "defaultNamespace: deps\ndependsOn: [{name: shop-db}]\n",
		"web/deployment.yaml":          webManifest("example.invalid/web:1"),
	})
	srv := up.ServeHTTP("", "")
	f := startFleet(t)
	createRepo(t, f, srv.URL+"/repo.git", map[string]string{"env": "prod"})

	eventually(t, "web runs where the database is ready", 90*time.Second, func() bool {
		return availableEverywhere(t, "deps", "web", "example.invalid/web:1", workloads[1:]...)
	})
	eventually(t, "the web bundle says what it waits for", 30*time.Second, func() bool {
		msg := bundleOf(t, f, "shop-web").Status.Display.Message
		return strings.Contains(msg, workloads[0].Name+": depends on shop-db: not ready on this cluster yet")
	})
	if r := released(deploymentOf(t, f, workloads[0].Name, "shop-web")); r != 0 {
		t.Fatalf("web was released to the canary (revision %d) while its database is not ready", r)
	}
	up.Commit("main", map[string]string{"db/canary/deployment.yaml": db("example.invalid/db:2", false)})
	eventually(t, "web reaches the canary once its database is ready", 90*time.Second, func() bool {
		return deploymentAvailable(t, workloads[0], "deps", "db", "example.invalid/db:2") && deploymentAvailable(t, workloads[0], "deps", "web", "example.invalid/web:1")
	})
}
