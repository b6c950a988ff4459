package hub

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/e2e/gitserver"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/events"
	"github.com/flotilla-dev/flotilla/hub/model"
)

// simClock is the hub's Clock in a test: days pass when the test says so, and from resume on
// it runs at the wall clock's pace, so that a wake-up the hub set for a moment of simulated time
// (a window opening, a scheduled start) comes by itself.
type simClock struct {
	mu      sync.Mutex
	at      time.Time
	resumed time.Time // zero while the clock stands still
}

func (c *simClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.resumed.IsZero() {
		return c.at
	}
	return c.at.Add(time.Since(c.resumed))
}

func (c *simClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at = c.at.Add(d)
}

// resume lets the clock run on from where it stands.
func (c *simClock) resume() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.resumed = time.Now()
}

// simFleet is a hub, a repository with one bundle (web, in the repository's directory web) and
// registered clusters whose agents the test plays: it reports a release applied and ready, or
// not, when the rule under test needs it. The hub is the real one; only the agents are the
// test's, so what a test asserts about releases is the hub's decision alone.
type simFleet struct {
	t      *testing.T
	c      client.Client
	ns     string
	up     *gitserver.Upstream
	bundle types.NamespacedName
	pokes  int
}

// newSimFleet serves fleetYAML and a ConfigMap as bundle web, registers clusters (name →
// labels), and points a GitRepo selecting every cluster at it.
func newSimFleet(t *testing.T, opts Options, fleetYAML string, clusters map[string]map[string]string) *simFleet {
	t.Helper()
	return newSimFleetOf(t, opts, fleetYAML, clusters, nil)
}

// newSimFleetOf is newSimFleet with the spec of some clusters (windows, exclusions) set when
// they are registered, before the hub plans anything for them.
func newSimFleetOf(t *testing.T, opts Options, fleetYAML string, clusters map[string]map[string]string, specs map[string]v1alpha1.ClusterSpec) *simFleet {
	t.Helper()
	up := gitserver.New(t)
	up.Commit("main", map[string]string{"web/fleet.yaml": fleetYAML, "web/cm.yaml": configMap("1")})
	srv := up.ServeHTTP("", "")
	if opts.StatusDelay == 0 {
		opts.StatusDelay = 200 * time.Millisecond
	}
	c, _ := startHub(t, opts)
	f := &simFleet{t: t, c: c, ns: namespace(t, c), up: up}
	f.bundle = types.NamespacedName{Namespace: f.ns, Name: "shop-web"}
	for _, name := range slices.Sorted(maps.Keys(clusters)) {
		registerClusterWith(t, c, f.ns, name, clusters[name], specs[name])
	}
	repo := &v1alpha1.GitRepo{ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: f.ns}, Spec: v1alpha1.GitRepoSpec{
		Repo: srv.URL + "/repo.git", PollingInterval: &metav1.Duration{Duration: time.Second},
		Targets: []v1alpha1.Target{{ClusterMatch: v1alpha1.ClusterMatch{ClusterSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "retired", Operator: metav1.LabelSelectorOpDoesNotExist}}}}}},
	}}
	if err := c.Create(context.Background(), repo); err != nil {
		t.Fatal(err)
	}
	return f
}

// canaryThenRest rolls out to the clusters labelled ring=canary, then, once they are all
// available, to those labelled ring=main.
const canaryThenRest = `defaultNamespace: web
rolloutStrategy:
  maxUnavailable: 0
  partitions:
  - {name: canary, clusterSelector: {matchLabels: {ring: canary}}}
  - {name: rest, clusterSelector: {matchLabels: {ring: main}}}
`

func configMap(color string) string {
	return "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {color: \"" + color + "\"}\n"
}

// commit pushes a new revision of the bundle's content (and, when set, of its fleet.yaml).
func (f *simFleet) commit(color, fleetYAML string) {
	files := map[string]string{"web/cm.yaml": configMap(color)}
	if fleetYAML != "" {
		files["web/fleet.yaml"] = fleetYAML
	}
	f.up.Commit("main", files)
}

// deployments are the bundle's BundleDeployments by cluster.
func (f *simFleet) deployments() map[string]v1alpha1.BundleDeployment {
	return deploymentsOf(f.t, f.c, f.ns, f.bundle.Name)
}

// released lists, sorted, the clusters whose deployment releases revision rev.
func (f *simFleet) released(rev int64) []string {
	var out []string
	for name, bd := range f.deployments() {
		if bd.Spec.Released != nil && bd.Spec.Released.Index == rev {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// report writes what the cluster's agent writes once it applied the release: Ready, or
// applied and not ready.
func (f *simFleet) report(ready bool, clusters ...string) {
	f.t.Helper()
	f.reportApplied(ready, time.Now(), clusters...)
}

// reportApplied is report for an apply at the given time.
func (f *simFleet) reportApplied(ready bool, at time.Time, clusters ...string) {
	f.t.Helper()
	bds := f.deployments()
	for _, name := range clusters {
		bd, ok := bds[name]
		if !ok || bd.Spec.Released == nil {
			f.t.Fatalf("cluster %s has no release to report", name)
		}
		reportApplied(f.t, f.c, bd, ready, at)
	}
}

// ready reports the clusters Ready on their release.
func (f *simFleet) ready(clusters ...string) { f.t.Helper(); f.report(true, clusters...) }

// poke touches the Bundle's metadata, which wakes the controllers that judge it: a test that
// moved the simulated clock past a moment the hub waits for in real time (a settling period, a
// failure timeout) uses it instead of waiting for that moment.
func (f *simFleet) poke() {
	f.t.Helper()
	f.touch(&v1alpha1.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: f.bundle.Name}})
}

// pokeRun is poke for a staged run.
func (f *simFleet) pokeRun(name string) {
	f.t.Helper()
	f.touch(&v1alpha1.StagedUpdateRun{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name}})
}

func (f *simFleet) touch(obj client.Object) {
	f.t.Helper()
	f.pokes++
	patch := fmt.Sprintf(`{"metadata":{"annotations":{"test.flotilla.dev/poke":"%d"}}}`, f.pokes)
	if err := f.c.Patch(context.Background(), obj, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		f.t.Fatal(err)
	}
}

// editCluster changes a registered cluster.
func (f *simFleet) editCluster(name string, change func(*v1alpha1.Cluster)) {
	f.t.Helper()
	var cl v1alpha1.Cluster
	if err := f.c.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: name}, &cl); err != nil {
		f.t.Fatal(err)
	}
	orig := cl.DeepCopy()
	change(&cl)
	if err := f.c.Patch(context.Background(), &cl, client.MergeFrom(orig)); err != nil {
		f.t.Fatal(err)
	}
}

// story is what the hub's Events tell of the fleet's namespace.
func (f *simFleet) story() events.Story {
	f.t.Helper()
	story, err := model.ReadStory(context.Background(), f.c, f.ns, EventsController)
	if err != nil {
		f.t.Fatal(err)
	}
	return story
}

// getBundle reads the bundle; a zero Bundle while it does not exist.
func (f *simFleet) getBundle() *v1alpha1.Bundle {
	var b v1alpha1.Bundle
	if err := f.c.Get(context.Background(), f.bundle, &b); err != nil {
		return &v1alpha1.Bundle{}
	}
	return &b
}

// pausedFor is the message of the Bundle's RolloutPaused condition, "" when it is absent.
func (f *simFleet) pausedFor() string {
	if c := meta.FindStatusCondition(f.getBundle().Status.Conditions, v1alpha1.RolloutPausedCondition); c != nil && c.Status == metav1.ConditionTrue {
		return c.Message
	}
	return ""
}

// until waits for cond; when it times out it fails the test with the objects it waited on:
// the bundle's status and every deployment's release and report.
func (f *simFleet) until(what string, cond func() bool) {
	f.t.Helper()
	waitUntil(f.t, what, cond, f.dump)
}

// releasedExactly waits until revision rev is released to exactly the clusters named, and the
// hub has said why the others wait (its RolloutPaused condition contains waiting): the pass
// that released them has ended, so no further release of that pass can come after the check.
func (f *simFleet) releasedExactly(rev int64, waiting string, clusters ...string) {
	f.t.Helper()
	slices.Sort(clusters)
	f.until(fmt.Sprintf("revision %d is released to %v and the rollout waits for %q", rev, clusters, waiting), func() bool {
		return slices.Equal(f.released(rev), clusters) && strings.Contains(f.pausedFor(), waiting)
	})
}

func (f *simFleet) dump() string {
	var b strings.Builder
	bun := f.getBundle()
	fmt.Fprintf(&b, "bundle %s: latest revision %d, summary %+v\n", f.bundle, bun.Spec.LatestRevision, bun.Status.Summary)
	for _, c := range bun.Status.Conditions {
		fmt.Fprintf(&b, "  condition %s=%s %s: %s\n", c.Type, c.Status, c.Reason, c.Message)
	}
	if o := bun.Status.Outcome; o != nil {
		fmt.Fprintf(&b, "  outcome of revision %d: %q, failure %+v, restored %d\n", o.Revision, o.Outcome, o.Failure, o.RestoredRevision)
	}
	for _, q := range bun.Status.Quarantined {
		fmt.Fprintf(&b, "  quarantined: revision %d (%s, %s) on %v\n", q.Revision, q.Rule, q.Action, q.Clusters)
	}
	for _, g := range bun.Status.Sequence {
		for _, r := range g.Revisions {
			fmt.Fprintf(&b, "  group %s revision %d: %s %q started %v soak until %v\n", g.Name, r.Index, r.State, r.Message, r.StartedAt, r.SoakUntil)
		}
	}
	for _, p := range bun.Status.Partitions {
		fmt.Fprintf(&b, "  partition %s: %d clusters, maxUnavailable %d, unavailable %d, ready %t\n", p.Name, p.Count, p.MaxUnavailable, p.Unavailable, p.Ready)
	}
	var runs v1alpha1.StagedUpdateRunList
	if err := f.c.List(context.Background(), &runs, client.InNamespace(f.ns)); err == nil {
		for _, run := range runs.Items {
			fmt.Fprintf(&b, "  run %s: revision %d %s: %s\n", run.Name, run.Status.RevisionIndex, run.Status.State, run.Status.Message)
			for _, st := range run.Status.Stages {
				fmt.Fprintf(&b, "    stage %s tasks before %+v after %+v\n", st.Name, st.BeforeTasks, st.AfterTasks)
				for _, g := range st.Groups {
					fmt.Fprintf(&b, "    group %s %s %q tasks before %+v after %+v\n", g.Name, g.State, g.Message, g.BeforeTasks, g.AfterTasks)
					for _, c := range g.Clusters {
						fmt.Fprintf(&b, "    stage %s %s, group %s %s, cluster %s %s %s (started %v)\n", st.Name, st.State, g.Name, g.State, c.Name, c.State, c.Message, c.StartedAt)
					}
				}
			}
		}
	}
	bds := f.deployments()
	for _, name := range slices.Sorted(maps.Keys(bds)) {
		bd := bds[name]
		released := int64(0)
		if bd.Spec.Released != nil {
			released = bd.Spec.Released.Index
		}
		fmt.Fprintf(&b, "  deployment on %s: staged %d released %d applied %d ready %t deleting %t\n", name, bd.Spec.Staged.Index, released, bd.Status.AppliedRevision, bd.Status.Ready, !bd.DeletionTimestamp.IsZero())
	}
	return b.String()
}
