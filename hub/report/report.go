// Package report collects the status of GitRepos (Status: GitRepos → bundles → partitions →
// clusters, with each cluster's state from the one state function and the reason for every
// wait) and prints it for people. The CLI's status command prints it, as text, JSON or YAML;
// tests read it.
package report

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"golang.org/x/mod/semver"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/model"
)

// Status is what `flotilla status` shows, as data (its -o json and -o yaml): GitRepos →
// bundles → partitions, stages, sequence groups → clusters, from the status the hub wrote and
// the state function the hub uses.
type Status struct {
	GitRepos []GitRepo `json:"gitRepos"`
	// HelmOps are the charts deployed without git.
	HelmOps []HelmOp `json:"helmOps,omitempty"`
	// HubVersion is the hub's recorded version; OlderAgents the clusters whose agent is older.
	HubVersion  string   `json:"hubVersion,omitempty"`
	OlderAgents []string `json:"olderAgents,omitempty"`
}

// GitRepo is one GitRepo and its bundles.
type GitRepo struct {
	Namespace     string               `json:"namespace"`
	Name          string               `json:"name"`
	Repo          string               `json:"repo"`
	Commit        string               `json:"commit,omitempty"`
	State         string               `json:"state,omitempty"`
	ReadyClusters string               `json:"readyClusters,omitempty"`
	Summary       v1alpha1.StateCounts `json:"summary"`
	Problems      []string             `json:"problems,omitempty"`
	Bundles       []Bundle             `json:"bundles"`
}

// HelmOp is one HelmOp and its bundle.
type HelmOp struct {
	Namespace     string               `json:"namespace"`
	Name          string               `json:"name"`
	Chart         string               `json:"chart"`
	Version       string               `json:"version,omitempty"`
	State         string               `json:"state,omitempty"`
	ReadyClusters string               `json:"readyClusters,omitempty"`
	Summary       v1alpha1.StateCounts `json:"summary"`
	Problems      []string             `json:"problems,omitempty"`
	Bundles       []Bundle             `json:"bundles"`
}

// Bundle is one bundle's rollout.
type Bundle struct {
	Name          string                         `json:"name"`
	Path          string                         `json:"path,omitempty"`
	Revision      int64                          `json:"revision"`
	State         string                         `json:"state,omitempty"`
	ReadyClusters string                         `json:"readyClusters,omitempty"`
	Summary       v1alpha1.StateCounts           `json:"summary"`
	Waiting       string                         `json:"waiting,omitempty"`
	Now           string                         `json:"now,omitempty"`
	Warnings      []string                       `json:"warnings,omitempty"`
	Partitions    []v1alpha1.PartitionStatus     `json:"partitions,omitempty"`
	Stages        []v1alpha1.StageProgress       `json:"stages,omitempty"`
	Sequence      []v1alpha1.SequenceGroupStatus `json:"sequence,omitempty"`
	// Outcome is how the newest revision's rollout ended under its failure policy, with the
	// rule that fired (R5.6); Quarantined, the revisions nothing releases (R5.5).
	Outcome     *v1alpha1.RolloutResult    `json:"outcome,omitempty"`
	Quarantined []v1alpha1.RevisionFailure `json:"quarantined,omitempty"`
	// Analysis is what the rollout's checks say (§7).
	Analysis []v1alpha1.AnalysisStatus `json:"analysis,omitempty"`
	Clusters []Cluster                 `json:"clusters"`
}

// Cluster is the bundle's deployment on one cluster.
type Cluster struct {
	Name     string                `json:"name"`
	State    v1alpha1.ClusterState `json:"state"`
	Staged   int64                 `json:"staged"`
	Released *int64                `json:"released,omitempty"`
	Applied  int64                 `json:"applied"`
	Detail   string                `json:"detail,omitempty"`
	// NotReady are the objects the agent names as keeping the deployment from Ready.
	NotReady []v1alpha1.ResourceSummary `json:"notReady,omitempty"`
}

// Collect reads the Status of a namespace's GitRepos ("": every namespace), or of one
// GitRepo.
func Collect(ctx context.Context, c client.Reader, namespace, name string) (*Status, error) {
	var repos v1alpha1.GitRepoList
	if err := c.List(ctx, &repos, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("failed to list gitrepos: %w", err)
	}
	st := &Status{GitRepos: []GitRepo{}}
	for _, repo := range repos.Items {
		if name != "" && repo.Name != name {
			continue
		}
		g := GitRepo{Namespace: repo.Namespace, Name: repo.Name, Repo: repo.Spec.Repo, Commit: repo.Status.Commit, State: repo.Status.Display.State,
			ReadyClusters: repo.Status.Display.ReadyClusters, Summary: repo.Status.Summary, Bundles: []Bundle{}}
		g.Problems = problems(repo.Status.Conditions)
		var err error
		if g.Bundles, err = collectBundles(ctx, c, repo.Namespace, model.LabelGitRepo, repo.Name); err != nil {
			return nil, err
		}
		st.GitRepos = append(st.GitRepos, g)
	}
	var ops v1alpha1.HelmOpList
	if err := c.List(ctx, &ops, client.InNamespace(namespace)); err != nil && !meta.IsNoMatchError(err) {
		return nil, fmt.Errorf("failed to list helmops: %w", err)
	}
	for _, op := range ops.Items {
		if name != "" && op.Name != name {
			continue
		}
		h := HelmOp{Namespace: op.Namespace, Name: op.Name, Chart: op.Spec.Helm.Repo, Version: op.Status.Version, State: op.Status.Display.State,
			ReadyClusters: op.Status.Display.ReadyClusters, Summary: op.Status.Summary, Problems: problems(op.Status.Conditions)}
		if op.Spec.Helm.Chart != "" {
			h.Chart += " " + op.Spec.Helm.Chart
		}
		var err error
		if h.Bundles, err = collectBundles(ctx, c, op.Namespace, model.LabelHelmOp, op.Name); err != nil {
			return nil, err
		}
		st.HelmOps = append(st.HelmOps, h)
	}
	if name != "" && len(st.GitRepos) == 0 && len(st.HelmOps) == 0 {
		// As kubectl get says it: a name that names nothing is an error, not an empty report.
		return nil, fmt.Errorf("namespace %s: %w", namespace, apierrors.NewNotFound(v1alpha1.GroupVersion.WithResource("gitrepos").GroupResource(), name))
	}
	var err error
	st.HubVersion, st.OlderAgents, err = olderAgents(ctx, c, namespace)
	return st, err
}

// collectBundles reads the bundles of a source: those of namespace labelled label=name.
func collectBundles(ctx context.Context, c client.Reader, namespace, label, name string) ([]Bundle, error) {
	var bundles v1alpha1.BundleList
	if err := c.List(ctx, &bundles, client.InNamespace(namespace), client.MatchingLabels{label: name}); err != nil {
		return nil, err
	}
	out := []Bundle{}
	for i := range bundles.Items {
		b, err := CollectBundle(ctx, c, &bundles.Items[i])
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

// Problems are the conditions of a GitRepo a person should see: each one not True (but Ready,
// which the state shows) and a paused rollout, as "Type: message".
func Problems(repo *v1alpha1.GitRepo) []string { return problems(repo.Status.Conditions) }

func problems(conds []metav1.Condition) []string {
	var out []string
	for _, cond := range conds {
		if cond.Status != "True" && cond.Type != v1alpha1.ReadyCondition || cond.Type == v1alpha1.RolloutPausedCondition {
			out = append(out, cond.Type+": "+cond.Message)
		}
	}
	return out
}

// CollectBundle reads one bundle's rollout: why it waits, its outcome, and every deployment's
// state, from the same state function the hub uses.
func CollectBundle(ctx context.Context, c client.Reader, b *v1alpha1.Bundle) (Bundle, error) {
	out := Bundle{Name: b.Name, Path: b.Spec.Path, Revision: b.Status.ReleasingRevision, State: b.Status.Display.State, ReadyClusters: b.Status.Display.ReadyClusters,
		Summary: b.Status.Summary, Partitions: b.Status.Partitions, Stages: b.Status.Stages, Outcome: b.Status.Outcome, Quarantined: b.Status.Quarantined, Analysis: b.Status.Analysis, Clusters: []Cluster{}}
	if cond := meta.FindStatusCondition(b.Status.Conditions, v1alpha1.RolloutPausedCondition); cond != nil {
		out.Waiting = cond.Message
	} else {
		out.Now = b.Status.Display.Message
	}
	for _, typ := range []string{v1alpha1.UnpartitionedClustersCondition, v1alpha1.UnsafeDefaultsCondition} {
		if cond := meta.FindStatusCondition(b.Status.Conditions, typ); cond != nil {
			out.Warnings = append(out.Warnings, cond.Message)
		}
	}
	for _, g := range b.Status.Sequence {
		shown := g
		shown.Revisions = nil
		for _, r := range g.Revisions {
			if r.State != v1alpha1.SequenceIneligible || r.Index == b.Status.ReleasingRevision {
				shown.Revisions = append(shown.Revisions, r)
			}
		}
		out.Sequence = append(out.Sequence, shown)
	}
	var bds v1alpha1.BundleDeploymentList
	if err := c.List(ctx, &bds, client.MatchingLabels{model.LabelBundle: b.Name, model.LabelBundleNamespace: b.Namespace}); err != nil {
		return out, err
	}
	sort.Slice(bds.Items, func(i, j int) bool {
		return bds.Items[i].Labels[model.LabelCluster] < bds.Items[j].Labels[model.LabelCluster]
	})
	for i := range bds.Items {
		bd := &bds.Items[i]
		cl := Cluster{Name: bd.Labels[model.LabelCluster], State: model.DeploymentState(b, bd), Staged: bd.Spec.Staged.Index, Applied: bd.Status.AppliedRevision, Detail: detail(bd),
			NotReady: bd.Status.NonReadyResources}
		if bd.Spec.Released != nil {
			cl.Released = &bd.Spec.Released.Index
		}
		out.Clusters = append(out.Clusters, cl)
	}
	return out, nil
}

// Write prints the Status of a namespace's GitRepos ("": every namespace), or of one GitRepo.
func Write(ctx context.Context, out io.Writer, c client.Reader, namespace, name string) error {
	if ctx == nil {
		ctx = context.Background()
	}
	st, err := Collect(ctx, c, namespace, name)
	if err != nil {
		return err
	}
	return st.WriteText(out)
}

// WriteText prints the Status for people: a progress bar per GitRepo and bundle, why each
// waits, and a table of clusters per bundle.
func (st *Status) WriteText(out io.Writer) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	for _, repo := range st.GitRepos {
		fmt.Fprintf(w, "GitRepo %s/%s  %s  commit %s  %s %s\n", repo.Namespace, repo.Name, repo.Repo, short(repo.Commit, 12), bar(repo.Summary), repo.ReadyClusters)
		for _, p := range repo.Problems {
			fmt.Fprintf(w, "  ! %s\n", p)
		}
		writeBundles(w, repo.Bundles)
	}
	for _, op := range st.HelmOps {
		fmt.Fprintf(w, "HelmOp %s/%s  %s  version %s  %s %s\n", op.Namespace, op.Name, op.Chart, op.Version, bar(op.Summary), op.ReadyClusters)
		for _, p := range op.Problems {
			fmt.Fprintf(w, "  ! %s\n", p)
		}
		writeBundles(w, op.Bundles)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if len(st.OlderAgents) > 0 {
		_, err := fmt.Fprintf(out, "Agents older than the hub (%s): %s\n", st.HubVersion, strings.Join(st.OlderAgents, ", "))
		return err
	}
	return nil
}

// writeBundles prints each bundle of a source: why it waits, its partitions, stages or groups,
// and a table of its clusters.
func writeBundles(w *tabwriter.Writer, bundles []Bundle) {
	for _, b := range bundles {
		fmt.Fprintf(w, "  Bundle %s (%s)  revision %d  %s %s  %s\n", b.Name, b.Path, b.Revision, bar(b.Summary), b.ReadyClusters, b.State)
		switch {
		case b.Waiting != "":
			fmt.Fprintf(w, "    waiting: %s\n", b.Waiting)
		case b.Now != "":
			fmt.Fprintf(w, "    now: %s\n", b.Now)
		}
		for _, warning := range b.Warnings {
			fmt.Fprintf(w, "    warning: %s\n", warning)
		}
		writeOutcome(w, b)
		for _, a := range b.Analysis {
			fmt.Fprintf(w, "    analysis %s\trevision %d\t%s\t%s\t%s\n", a.Check, a.Revision, a.Verdict, verdictCounts(a), analysisDetail(a))
		}
		for _, p := range b.Partitions {
			state := "Ready"
			if !p.Ready {
				state = "NotReady"
			}
			fmt.Fprintf(w, "    Partition %s\t%d clusters\t%d unavailable (max %d)\t%s\n", p.Name, p.Count, p.Unavailable, p.MaxUnavailable, state)
		}
		for _, s := range b.Stages {
			fmt.Fprintf(w, "    Stage %s\t%d/%d clusters done\t%s\n", s.Name, s.Completed, s.Clusters, s.State)
		}
		for _, g := range b.Sequence {
			for _, r := range g.Revisions {
				fmt.Fprintf(w, "    Group %s\trevision %d\t%s\t%s\n", g.Name, r.Index, r.State, r.Message)
			}
		}
		_ = w.Flush() // the cluster table aligns on its own, not with the partition lines
		fmt.Fprintln(w, "    CLUSTER\tSTATE\tSTAGED\tRELEASED\tAPPLIED\tDETAIL")
		for _, cl := range b.Clusters {
			released := "-"
			if cl.Released != nil {
				released = fmt.Sprint(*cl.Released)
			}
			fmt.Fprintf(w, "    %s\t%s\t%d\t%s\t%d\t%s\n", cl.Name, cl.State, cl.Staged, released, cl.Applied, cl.Detail)
			// The detail names the first object not ready; the next few follow it.
			for i, r := range cl.NotReady[min(1, len(cl.NotReady)):min(maxNotReadyShown, len(cl.NotReady))] {
				fmt.Fprintf(w, "    \t\t\t\t\t%s\n", r)
				if i == maxNotReadyShown-2 && len(cl.NotReady) > maxNotReadyShown {
					fmt.Fprintf(w, "    \t\t\t\t\t(and %d more objects not ready)\n", len(cl.NotReady)-maxNotReadyShown)
				}
			}
		}
		if n := b.Summary.Pending; n > 0 {
			fmt.Fprintf(w, "    (%d more clusters Pending: the rollout has not reached them)\n", n)
		}
	}
}

// olderAgents returns the hub's recorded version (model.HubVersionConfigMap) and the clusters
// whose agent is older.
func olderAgents(ctx context.Context, c client.Reader, namespace string) (string, []string, error) {
	hubVersion := HubVersion(ctx, c)
	if hubVersion == "" {
		return "", nil, nil
	}
	var clusters v1alpha1.ClusterList
	if err := c.List(ctx, &clusters, client.InNamespace(namespace)); err != nil {
		return "", nil, fmt.Errorf("failed to list clusters: %w", err)
	}
	var old []string
	for _, cl := range clusters.Items {
		if Older(cl.Status.AgentVersion, hubVersion) {
			old = append(old, fmt.Sprintf("%s/%s (%s)", cl.Namespace, cl.Name, cl.Status.AgentVersion))
		}
	}
	sort.Strings(old)
	return hubVersion, old, nil
}

// HubVersion is the newest version the hub's replicas recorded (model.HubVersionConfigMap), or
// "" where the reader may not read it.
func HubVersion(ctx context.Context, c client.Reader) string {
	var recorded corev1.ConfigMapList
	if err := c.List(ctx, &recorded, client.HasLabels{model.LabelHubVersion}); err != nil {
		return "" // a reader without access to ConfigMaps: nothing to compare with
	}
	hubVersion := ""
	for _, cm := range recorded.Items {
		if v := cm.Data["version"]; hubVersion == "" || Older(hubVersion, v) {
			hubVersion = v
		}
	}
	return hubVersion
}

// Older reports whether version a is older than b. Versions that are not semantic versions
// (dev builds, "quickstart") are never older nor newer: nothing can be said of them.
func Older(a, b string) bool {
	a, b = canonical(a), canonical(b)
	return semver.IsValid(a) && semver.IsValid(b) && semver.Compare(a, b) < 0
}

func canonical(v string) string {
	if v != "" && !strings.HasPrefix(v, "v") {
		v = "v" + v
	}
	return v
}

// verdictCounts is "2 Passed, 1 Failing", worst last, as the planner ranks them.
func verdictCounts(a v1alpha1.AnalysisStatus) string {
	var parts []string
	for _, v := range []string{"Passed", "Pending", "Failing", "Inconclusive", "Failed"} {
		if n := a.Counts[v]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, v))
		}
	}
	return strings.Join(parts, ", ")
}

// analysisDetail names what holds or failed, and what the worst measurement found.
func analysisDetail(a v1alpha1.AnalysisStatus) string {
	if len(a.Targets) == 0 {
		return a.Message
	}
	return strings.Join(a.Targets, ", ") + ": " + a.Message
}

// maxNotReadyShown is how many of a cluster's objects not ready the text view names.
const maxNotReadyShown = 4

// detail says what is wrong with a deployment, if anything.
func detail(bd *v1alpha1.BundleDeployment) string {
	for _, t := range []string{v1alpha1.AppliedCondition, v1alpha1.ReadyCondition, v1alpha1.InSyncCondition} {
		if c := meta.FindStatusCondition(bd.Status.Conditions, t); c != nil && c.Status == "False" {
			return c.Message
		}
	}
	return ""
}

// bar is a 20-character progress bar of ready clusters.
func bar(s v1alpha1.StateCounts) string {
	if s.DesiredReady == 0 {
		return "[" + strings.Repeat(" ", 20) + "]"
	}
	done := int((s.Ready + s.Modified) * 20 / s.DesiredReady)
	return "[" + strings.Repeat("#", done) + strings.Repeat(".", 20-done) + "]"
}

func short(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// writeOutcome says how a bundle's failure policy answered its newest revision (R5.6): the
// failing clusters and the rule that fired, and the revisions it quarantined.
func writeOutcome(w io.Writer, b Bundle) {
	if o := b.Outcome; o != nil && o.Failure != nil {
		what := "failed"
		switch {
		case o.Outcome == v1alpha1.OutcomeRolledBack:
			what = "rolled back, removed"
			if o.RestoredRevision != 0 {
				what = fmt.Sprintf("rolled back to revision %d", o.RestoredRevision)
			}
		case o.Failure.Action == v1alpha1.FailureActionRollback:
			what = "rolling back"
		}
		fmt.Fprintf(w, "    outcome: revision %d %s (%s, failing: %s): %s\n", o.Revision, what, o.Failure.Rule, strings.Join(o.Failure.Clusters, ", "), o.Failure.Message)
	}
	for _, q := range b.Quarantined {
		fmt.Fprintf(w, "    quarantined: revision %d since %s (flotilla rollout retry %s --revision %d)\n", q.Revision, q.At.UTC().Format(time.RFC3339), b.Name, q.Revision)
	}
}
