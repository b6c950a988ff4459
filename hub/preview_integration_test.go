package hub

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/e2e/controlplane"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/preview"
)

// A preview against the hub reads the GitRepo, its namespace's Clusters, ClusterGroups and the
// strategy its bundle names with the rights of a person who may only get and list them, and
// plans the staged bundle with the hub's strategy. Nothing of another namespace is read, even
// where the person could.
func TestPreviewFromTheHubReadsWithAViewersRights(t *testing.T) {
	ctx := context.Background()
	c := apiClient(t)
	ns, other := namespace(t, c), namespace(t, c)
	for _, cl := range []struct {
		ns, name, env string
	}{{ns, "dev-1", "dev"}, {ns, "prod-1", "prod"}, {ns, "prod-2", "prod"}, {other, "intruder", "prod"}} {
		obj := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: cl.name, Namespace: cl.ns, Labels: map[string]string{"env": cl.env}}}
		if err := c.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	viewerRules := []rbacv1.PolicyRule{{APIGroups: []string{v1alpha1.GroupVersion.Group},
		Resources: []string{"gitrepos", "clusters", "clustergroups", "stagedupdatestrategies", "rolloutsequences"}, Verbs: []string{"get", "list"}}}
	objs := []client.Object{
		&v1alpha1.ClusterGroup{ObjectMeta: metav1.ObjectMeta{Name: "production", Namespace: ns, Labels: map[string]string{"tier": "1"}},
			Spec: v1alpha1.ClusterGroupSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}}},
		&v1alpha1.StagedUpdateStrategy{ObjectMeta: metav1.ObjectMeta{Name: "envs", Namespace: ns}, Spec: v1alpha1.StagedUpdateStrategySpec{Stages: []v1alpha1.StageConfig{
			{Name: "dev", LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "dev"}}, MaxConcurrency: ptrTo(intstr.FromInt32(1))},
			{Name: "prod", LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}},
				BeforeStageTasks: []v1alpha1.StageTask{{Type: v1alpha1.TaskApproval}}},
		}}},
		&v1alpha1.GitRepo{ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: ns}, Spec: v1alpha1.GitRepoSpec{Repo: "https://git.example/shop", Paths: []string{"apps/*"},
			Targets: []v1alpha1.Target{{Name: "all", ClusterMatch: v1alpha1.ClusterMatch{ClusterSelector: &metav1.LabelSelector{}}}}}},
		&v1alpha1.GitRepo{ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: other}, Spec: v1alpha1.GitRepoSpec{Repo: "https://git.example/shop",
			Targets: []v1alpha1.Target{{Name: "all", ClusterMatch: v1alpha1.ClusterMatch{ClusterSelector: &metav1.LabelSelector{}}}}}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "viewer", Namespace: ns}, Rules: viewerRules},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "viewer", Namespace: ns}, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "viewer"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "previewer"}}},
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	cfg := rest.CopyConfig(hubCluster.Config())
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "previewer"}
	// The authorizer learns of the viewer's Role from its own watch: a refusal below must be the
	// namespace's, not the moment's.
	held, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := controlplane.WaitRulesHeld(held, cfg, ns, viewerRules); err != nil {
		t.Fatal(err)
	}
	scheme, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	viewer, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}

	fleet, err := preview.FleetOf(ctx, viewer, ns, "shop")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, cl := range fleet.Clusters {
		names = append(names, cl.ClusterName)
		if _, grouped := cl.Groups["production"]; grouped != strings.HasPrefix(cl.ClusterName, "prod-") {
			t.Errorf("%s's groups: %v", cl.ClusterName, cl.Groups)
		}
	}
	if !slices.Equal(names, []string{"dev-1", "prod-1", "prod-2"}) || fleet.RepoName != "shop" || !slices.Equal(fleet.Paths, []string{"apps/*"}) {
		t.Fatalf("the hub's fleet: clusters %v, repo %q, paths %v; want the three of %s only", names, fleet.RepoName, fleet.Paths, ns)
	}
	if _, err := preview.FleetOf(ctx, viewer, other, "shop"); !apierrors.IsForbidden(err) {
		t.Errorf("a namespace the person may not read: %v, want forbidden", err)
	}

	write := func(image string) string {
		dir := t.TempDir()
		files := map[string]string{
			"apps/web/fleet.yaml": "defaultNamespace: web\nstagedUpdate: {strategy: envs}\n",
			"apps/web/deploy.yaml": "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n" +
				"    spec: {containers: [{name: web, image: " + image + "}]}\n",
		}
		for name, content := range files {
			if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	r, err := preview.Compare(ctx, preview.Revision{Ref: "main", Dir: write("web:1")}, preview.Revision{Ref: "pr", Dir: write("web:2")}, fleet, preview.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Bundles) != 1 || r.Bundles[0].Name != "shop-apps-web" || r.Summary.ClustersAffected != 3 {
		t.Fatalf("report %+v", r)
	}
	p := r.Bundles[0].Plan
	if p == nil || p.Strategy != "stagedUpdate envs" || p.NotSimulated != "" || len(p.Steps) == 0 || !slices.Equal(p.Steps[0].Started, []string{"dev-1"}) ||
		!strings.Contains(p.Stuck, "approval") {
		t.Errorf("the plan with the hub's StagedUpdateStrategy: %+v; want dev-1 started, then the approval of stage prod", p)
	}
}
