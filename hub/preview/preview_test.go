package preview

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/flotilla-dev/flotilla/bundle"
	"github.com/flotilla-dev/flotilla/rollout"
)

// fleetRepo is a repository of the three kinds of bundle: a Helm chart, a Kustomize base with
// an overlay per environment, plain YAML; each customizes dev, staging and prod.
var fleetRepo = map[string]string{
	"helm/fleet.yaml": `
defaultNamespace: helm-web
helm:
  chart: ./chart
  values: {image: "web:1", replicas: 1}
rolloutStrategy:
  maxUnavailable: 10%
  autoPartitionSize: 25%
targetCustomizations:
- name: prod
  clusterSelector: {matchLabels: {env: prod}}
  helm: {values: {replicas: 3}}
- name: staging
  clusterSelector: {matchLabels: {env: staging}}
  helm: {values: {replicas: 2}}
`,
	"helm/chart/Chart.yaml": "apiVersion: v2\nname: web\nversion: 0.1.0\n",
	"helm/chart/templates/deployment.yaml": `apiVersion: apps/v1
kind: Deployment
metadata: {name: helm-web}
spec:
  replicas: {{ .Values.replicas }}
  selector: {matchLabels: {app: helm-web}}
  template:
    metadata: {labels: {app: helm-web}}
    spec:
      containers:
      - {name: web, image: {{ .Values.image | quote }}}
`,
	"helm/chart/templates/extra.yaml": `{{- if .Values.extra }}
apiVersion: v1
kind: ConfigMap
metadata: {name: helm-extra}
data: {mode: {{ .Values.extra | quote }}}
{{- end }}
`,
	"kustomize/fleet.yaml": `
defaultNamespace: kz
targetCustomizations:
- name: dev
  clusterSelector: {matchLabels: {env: dev}}
  kustomize: {dir: overlays/dev}
- name: staging
  clusterSelector: {matchLabels: {env: staging}}
  kustomize: {dir: overlays/staging}
- name: prod
  clusterSelector: {matchLabels: {env: prod}}
  kustomize: {dir: overlays/prod}
`,
	"kustomize/base/kustomization.yaml": "resources: [deployment.yaml]\n",
	"kustomize/base/deployment.yaml": `apiVersion: apps/v1
kind: Deployment
metadata: {name: kz-web}
spec:
  selector: {matchLabels: {app: kz-web}}
  template:
    metadata: {labels: {app: kz-web}}
    spec:
      containers:
      - {name: web, image: "kz:1"}
`,
	"kustomize/overlays/dev/kustomization.yaml":     "resources: [../../base]\nnamePrefix: dev-\n",
	"kustomize/overlays/staging/kustomization.yaml": "resources: [../../base]\nnamePrefix: staging-\n",
	"kustomize/overlays/prod/kustomization.yaml":    "resources: [../../base]\nnamePrefix: prod-\n",
	"plain/fleet.yaml":                              "defaultNamespace: plain\n",
	"plain/configmap.yaml":                          "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {color: blue}\n",
	"plain/secret.yaml":                             "apiVersion: v1\nkind: Secret\nmetadata: {name: db}\nstringData: {password: base-hunter2-secret, user: app}\n",
}

// writeRepo writes files (over a copy of base, "" deleting one) into a new checkout.
func writeRepo(t testing.TB, base map[string]string, change map[string]string) string {
	t.Helper()
	files := maps.Clone(base)
	for k, v := range change {
		if v == "" {
			delete(files, k)
			continue
		}
		files[k] = v
	}
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// threeGroups is a fleet of 5 dev, 4 staging and 300 prod clusters, each environment a
// cluster group.
func threeGroups() Fleet {
	f := Fleet{RepoName: "shop", Targets: []bundle.TargetMatch{{ClusterSelector: &rollout.Selector{}}}}
	for _, env := range []struct {
		name string
		n    int
	}{{"dev", 5}, {"staging", 4}, {"prod", 300}} {
		f.ClusterGroups = append(f.ClusterGroups, rollout.ClusterGroup{Name: env.name})
		for i := 1; i <= env.n; i++ {
			f.Clusters = append(f.Clusters, bundle.Target{ClusterName: fmt.Sprintf("%s-%03d", env.name, i),
				Labels: map[string]string{"env": env.name, "zone": fmt.Sprintf("z%d", i%3)}, Groups: map[string]map[string]string{env.name: nil}})
		}
	}
	return f
}

func compare(t *testing.T, base, head string, fleet Fleet) *Report {
	t.Helper()
	r, err := Compare(context.Background(), Revision{Ref: "main", Dir: base}, Revision{Ref: "change", Dir: head}, fleet, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func bundleOf(t *testing.T, r *Report, name string) BundleChange {
	t.Helper()
	for _, b := range r.Bundles {
		if b.Name == name {
			return b
		}
	}
	t.Fatalf("no bundle %s in %+v", name, r.Bundles)
	return BundleChange{}
}

// objects lists a group's object changes as "change Kind name".
func objects(g GroupChange) []string {
	var out []string
	for _, o := range g.Objects {
		out = append(out, fmt.Sprintf("%s %s %s", o.Change, o.Kind, o.Name))
	}
	return out
}

// A change that touches the staging overlay of the Kustomize bundle and the prod values of the
// Helm chart names exactly those two groups and their objects: one entry for 300 prod
// clusters, nothing for dev, nothing for the plain bundle.
func TestPreviewNamesExactlyTheGroupsAndObjectsAChangeTouches(t *testing.T) {
	base := writeRepo(t, fleetRepo, nil)
	head := writeRepo(t, fleetRepo, map[string]string{
		"kustomize/overlays/staging/kustomization.yaml": "resources: [../../base]\nnamePrefix: staging-\nimages:\n- {name: \"kz:1\", newName: kz, newTag: \"2\"}\n",
		"helm/fleet.yaml": strings.Replace(fleetRepo["helm/fleet.yaml"], "helm: {values: {replicas: 3}}", `helm: {values: {replicas: 3, image: "web:2", extra: canary}}`, 1),
	})
	r := compare(t, base, head, threeGroups())
	if !r.Changed() || r.Broken() {
		t.Fatalf("changed %v, broken %v", r.Changed(), r.Broken())
	}
	if s := r.Summary; s.Bundles != 3 || s.Changed != 2 || s.Unchanged != 1 || s.ClustersAffected != 304 {
		t.Errorf("summary %+v, want 3 bundles, 2 changed, 1 unchanged, 304 clusters affected", s)
	}

	helm := bundleOf(t, r, "shop-helm")
	if helm.Status != StatusChanged || len(helm.Groups) != 1 || helm.Unchanged != 9 || helm.Targeted != 309 {
		t.Fatalf("helm: %s, %d groups, %d unchanged, %d targeted; want changed, 1 group, 9, 309", helm.Status, len(helm.Groups), helm.Unchanged, helm.Targeted)
	}
	g := helm.Groups[0]
	if g.Count != 300 || len(g.Clusters) != 300 || g.CommonLabels["env"] != "prod" || !slices.Equal(g.ClusterGroups, []string{"prod"}) || g.HeadCustomization != "prod" {
		t.Errorf("helm's group: %d clusters, labels %v, groups %v, customization %q; want the 300 prod clusters", g.Count, g.CommonLabels, g.ClusterGroups, g.HeadCustomization)
	}
	if got, want := objects(g), []string{"added ConfigMap helm-extra", "changed Deployment helm-web"}; !slices.Equal(got, want) {
		t.Errorf("helm's objects %v, want %v", got, want)
	}
	if d := g.Objects[1].Diff; !strings.Contains(d, `-      - image: web:1`) || !strings.Contains(d, `+      - image: web:2`) {
		t.Errorf("the Deployment's diff does not show the image change:\n%s", d)
	}
	if p := helm.Plan; p == nil || p.Strategy != "rolloutStrategy" || !p.Completed || p.Clusters != 309 || len(p.Steps) < 2 {
		t.Errorf("helm's plan: %+v; want the rolloutStrategy's partitions over 309 clusters, completed", p)
	}

	kz := bundleOf(t, r, "shop-kustomize")
	if kz.Status != StatusChanged || len(kz.Groups) != 1 || kz.Unchanged != 305 {
		t.Fatalf("kustomize: %s, %d groups, %d unchanged", kz.Status, len(kz.Groups), kz.Unchanged)
	}
	g = kz.Groups[0]
	if g.Count != 4 || g.CommonLabels["env"] != "staging" || !slices.Equal(g.ClusterGroups, []string{"staging"}) {
		t.Errorf("kustomize's group: %v, labels %v; want the 4 staging clusters", g.Clusters, g.CommonLabels)
	}
	if got, want := objects(g), []string{"changed Deployment staging-kz-web"}; !slices.Equal(got, want) {
		t.Errorf("kustomize's objects %v, want %v", got, want)
	}
	if p := kz.Plan; p == nil || p.Strategy != "default rolloutStrategy" || !p.Completed || p.ETA == "" {
		t.Errorf("kustomize's plan: %+v", p)
	}

	if plain := bundleOf(t, r, "shop-plain"); plain.Status != StatusUnchanged || len(plain.Groups) != 0 || plain.Plan != nil {
		t.Errorf("plain: %+v; want unchanged", plain)
	}
	var md bytes.Buffer
	if err := r.WriteMarkdown(&md, 0); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"**2 of 3 bundles change** on 304 of 309 clusters", "**300 clusters** (labels env=prod; cluster groups prod; customization prod)",
		"**4 clusters** (labels env=staging; cluster groups staging; customization staging)", "added v1 ConfigMap helm-web/helm-extra", "changed apps/v1 Deployment kz/staging-kz-web"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("the Markdown lacks %q:\n%s", want, md.String())
		}
	}
	for _, line := range strings.Split(md.String(), "\n") {
		if strings.HasPrefix(line, "- **") && strings.Contains(line, "dev-0") || strings.Contains(line, "shop-plain") {
			t.Errorf("the Markdown has a group of dev clusters or the unchanged bundle: %s", line)
		}
	}
}

// Clusters whose targets change are named; a Secret's values never reach the report, whether
// they change or not, in JSON or Markdown: a changed key says only that it changed.
func TestPreviewNamesClustersLeavingAndRedactsSecrets(t *testing.T) {
	base := writeRepo(t, fleetRepo, nil)
	head := writeRepo(t, fleetRepo, map[string]string{
		"plain/fleet.yaml":  "defaultNamespace: plain\noverrideTargets:\n- clusterSelector: {matchLabels: {env: dev}}\n- clusterName: staging-001\n",
		"plain/secret.yaml": "apiVersion: v1\nkind: Secret\nmetadata: {name: db}\nstringData: {password: head-correct-horse-secret, user: app}\ndata: {token: aGVhZC10b2tlbi1zZWNyZXQ=}\n",
	})
	r := compare(t, base, head, threeGroups())
	plain := bundleOf(t, r, "shop-plain")
	if plain.Status != StatusChanged || len(plain.Leaving) != 303 || len(plain.Joining) != 0 || plain.Targeted != 6 {
		t.Fatalf("plain: %s, %d leaving, %d joining, %d targeted; want 303 leaving (3 staging, 300 prod), 6 targeted", plain.Status, len(plain.Leaving), len(plain.Joining), plain.Targeted)
	}
	if slices.Contains(plain.Leaving, "staging-001") || !slices.Contains(plain.Leaving, "staging-002") {
		t.Errorf("leaving: %v", plain.Leaving[:5])
	}
	var leaving, changed *GroupChange
	for i := range plain.Groups {
		switch g := &plain.Groups[i]; {
		case slices.Contains(g.Clusters, "prod-001"):
			leaving = g
		case slices.Contains(g.Clusters, "dev-001"):
			changed = g
		}
	}
	// The clusters leaving render alike (prod and staging: no customization), so they are one.
	if leaving == nil || changed == nil || len(plain.Groups) != 2 || leaving.Count != 303 {
		t.Fatalf("groups %+v", plain.Groups)
	}
	if got, want := objects(*leaving), []string{"removed ConfigMap settings", "removed Secret db"}; !slices.Equal(got, want) {
		t.Errorf("prod's objects %v, want %v", got, want)
	}
	if got, want := objects(*changed), []string{"changed Secret db"}; !slices.Equal(got, want) || changed.Count != 6 {
		t.Errorf("dev's and staging-001's objects %v (%d clusters), want %v for 6", got, changed.Count, want)
	}
	diff := changed.Objects[0].Diff
	for _, want := range []string{"+  password: " + redactedChanged, "+  token: " + redacted, "   user: " + redacted} {
		if !strings.Contains(diff, want) {
			t.Errorf("the Secret's diff lacks %q:\n%s", want, diff)
		}
	}
	js, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var md bytes.Buffer
	if err := r.WriteMarkdown(&md, 0); err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{string(js), md.String()} {
		for _, secret := range []string{"hunter2", "correct-horse", "aGVhZC10b2tlbi1zZWNyZXQ", "head-token", "app\n", "user: app"} {
			if strings.Contains(out, secret) {
				t.Errorf("the report holds a Secret's value (%q)", secret)
			}
		}
	}
}

// Nothing to deploy: the same tree twice, or a change outside every bundle.
func TestPreviewOfNoChangeIsNothing(t *testing.T) {
	base := writeRepo(t, fleetRepo, nil)
	head := writeRepo(t, fleetRepo, map[string]string{"README.md": "docs only\n", "kustomize/base/notes.txt": "not a resource\n"})
	r := compare(t, base, head, threeGroups())
	if r.Changed() || r.Summary.Unchanged != 3 {
		t.Fatalf("a change outside the bundles' resources: %+v", r.Summary)
	}
	var md bytes.Buffer
	_ = r.WriteMarkdown(&md, 0)
	if !strings.Contains(md.String(), "Nothing changes on the 309 clusters compared") {
		t.Errorf("markdown: %s", md.String())
	}
}

// A head that breaks a bundle is reported with the file and field, for the clusters it breaks,
// and the other bundles are still compared.
func TestPreviewReportsABundleTheHeadBreaks(t *testing.T) {
	base := writeRepo(t, fleetRepo, nil)
	head := writeRepo(t, fleetRepo, map[string]string{
		"helm/fleet.yaml":   strings.Replace(fleetRepo["helm/fleet.yaml"], "defaultNamespace: helm-web", "defaultNamespace: helm-web\nhelm_typo: 1", 1),
		"plain/secret.yaml": "",
	})
	r := compare(t, base, head, threeGroups())
	helm := bundleOf(t, r, "shop-helm")
	if !r.Broken() || helm.Status != StatusBroken || helm.HeadFailure == nil || helm.HeadFailure.Count != 309 || len(helm.HeadFailure.Clusters) != maxFailureClusters {
		t.Fatalf("helm: %+v", helm)
	}
	if msg := helm.HeadFailure.Message; !strings.Contains(msg, "helm/fleet.yaml") || !strings.Contains(msg, "helm_typo") {
		t.Errorf("the failure does not name the file and field: %s", msg)
	}
	if plain := bundleOf(t, r, "shop-plain"); plain.Status != StatusChanged || len(plain.Groups) != 1 || objects(plain.Groups[0])[0] != "removed Secret db" {
		t.Errorf("plain, compared beside the broken bundle: %+v", plain)
	}
}

// A staged bundle is planned with the strategy the fleet holds; without one, the plan says why.
func TestPreviewPlansAStagedBundleWithTheFleetsStrategy(t *testing.T) {
	staged := map[string]string{"kustomize/fleet.yaml": fleetRepo["kustomize/fleet.yaml"] + "stagedUpdate: {strategy: envs}\n"}
	base := writeRepo(t, fleetRepo, staged)
	staged["kustomize/base/deployment.yaml"] = strings.Replace(fleetRepo["kustomize/base/deployment.yaml"], "kz:1", "kz:2", 1)
	head := writeRepo(t, fleetRepo, staged)

	r := compare(t, base, head, threeGroups())
	if p := bundleOf(t, r, "shop-kustomize").Plan; p == nil || p.NotSimulated == "" || !strings.Contains(p.NotSimulated, "StagedUpdateStrategy envs") {
		t.Errorf("without the fleet's strategies: %+v", p)
	}
	fleet := threeGroups()
	fleet.Strategies = strategies{staged: map[string]rollout.StagedStrategy{"envs": {Stages: []rollout.Stage{
		{Name: "dev", LabelSelector: &rollout.Selector{MatchLabels: map[string]string{"env": "dev"}}},
		{Name: "rest", LabelSelector: &rollout.Selector{MatchExpressions: []rollout.Requirement{{Key: "env", Operator: rollout.OpIn, Values: []string{"staging", "prod"}}}},
			BeforeStageTasks: []rollout.Task{{Type: rollout.TaskApproval}}},
	}}}}
	r = compare(t, base, head, fleet)
	p := bundleOf(t, r, "shop-kustomize").Plan
	if p == nil || p.NotSimulated != "" || p.Completed || !strings.Contains(p.Stuck, "approval") || len(p.Steps) == 0 {
		t.Fatalf("the staged plan: %+v; want the dev clusters started, then a wait for approval", p)
	}
	var started []string
	for _, st := range p.Steps {
		started = append(started, st.Started...)
	}
	if last := p.Steps[len(p.Steps)-1]; !slices.Equal(started, []string{"dev-001", "dev-002", "dev-003", "dev-004", "dev-005"}) || !strings.HasPrefix(last.Waiting, "approval ") {
		t.Errorf("the staged plan starts %v and ends waiting %q; want the 5 dev clusters, then the approval of stage rest", started, last.Waiting)
	}
}

type strategies struct {
	staged map[string]rollout.StagedStrategy
}

func (s strategies) Staged(_ context.Context, name string) (*rollout.StagedStrategy, error) {
	st, ok := s.staged[name]
	if !ok {
		return nil, fmt.Errorf("not found")
	}
	return &st, nil
}

func (s strategies) Sequence(context.Context, string) (*rollout.Sequence, error) {
	return nil, fmt.Errorf("not found")
}

// BenchmarkCompare previews the three-kind repository's change for fleets of growing size:
// each distinct render is made once, the rest is matching and hashing per cluster.
func BenchmarkCompare(b *testing.B) {
	for _, size := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("%dclusters", size), func(b *testing.B) {
			base := writeRepo(b, fleetRepo, nil)
			head := writeRepo(b, fleetRepo, map[string]string{
				"helm/fleet.yaml": strings.Replace(fleetRepo["helm/fleet.yaml"], "helm: {values: {replicas: 3}}", `helm: {values: {replicas: 3, image: "web:2"}}`, 1),
			})
			fleet := Fleet{RepoName: "shop", Targets: []bundle.TargetMatch{{ClusterSelector: &rollout.Selector{}}}}
			for i := range size {
				env := []string{"dev", "staging", "prod", "prod"}[i%4]
				fleet.Clusters = append(fleet.Clusters, bundle.Target{ClusterName: fmt.Sprintf("c%05d", i), Labels: map[string]string{"env": env}})
			}
			b.ResetTimer()
			for range b.N {
				r, err := Compare(context.Background(), Revision{Dir: base}, Revision{Dir: head}, fleet, Options{})
				if err != nil || r.Summary.ClustersAffected != size/2 {
					b.Fatalf("%v, %+v", err, r.Summary)
				}
			}
		})
	}
}

// A head that fixes a bundle the base could not render is a change: every object is new to
// the clusters, and nobody "joins".
func TestPreviewOfAHeadThatFixesABundle(t *testing.T) {
	broken := map[string]string{"helm/fleet.yaml": strings.Replace(fleetRepo["helm/fleet.yaml"], "defaultNamespace: helm-web", "defaultNamespace: helm-web\nhelm_typo: 1", 1)}
	r := compare(t, writeRepo(t, fleetRepo, broken), writeRepo(t, fleetRepo, nil), threeGroups())
	helm := bundleOf(t, r, "shop-helm")
	if helm.Status != StatusChanged || helm.BaseFailure == nil || len(helm.Joining) != 0 || len(helm.Groups) != 3 {
		t.Fatalf("helm: %s, base failure %v, %d joining, %d groups", helm.Status, helm.BaseFailure, len(helm.Joining), len(helm.Groups))
	}
	if got := objects(helm.Groups[0]); len(got) != 1 || got[0] != "added Deployment helm-web" {
		t.Errorf("the prod group's objects: %v", got)
	}
}
