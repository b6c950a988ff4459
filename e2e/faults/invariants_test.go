package faults

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/model"
)

// rolloutRules is what a strategy allows, as the checker holds a rollout to it: the clusters
// go through steps (partitions, stages or groups) in order.
type rolloutRules struct {
	// stepOf is each cluster's step.
	stepOf map[string]int
	// stepBudget is, per step, the most of its clusters released a revision and not ready on
	// it at once; fleetBudget the same over every step (0: no fleet-wide budget).
	stepBudget  []int
	fleetBudget int
	// gate is, per step, how many of its clusters may be not ready on a revision when a
	// cluster of a later step is released it: a partition's threshold (R1.7), none for a
	// stage (R3.8) or a sequence group (R4.3).
	gate []int
}

// rolloutCheck follows every BundleDeployment of a fleet namespace through a watch and checks
// the rules at every event. Writes are counted from generations, so an event the watch missed
// (the API server restarted under it) still counts.
type rolloutCheck struct {
	rules rolloutRules
	start time.Time

	mu   sync.Mutex
	last map[string]*v1alpha1.BundleDeployment // by cluster
	// writes counts spec writes per cluster and revision (the revision staged by the write);
	// released the releases seen, firstRelease when the first of each revision was seen.
	writes       map[string]map[int64]int64
	released     map[string]map[int64]int
	firstRelease map[int64]time.Time
	// lastRelease is when the last release was seen.
	lastRelease time.Time
	violations  []string
	timeline    []string
	events      int
}

// watchRollout starts checking the deployments of fleet namespace ns against rules until the
// test ends.
func watchRollout(t *testing.T, c client.WithWatch, ns string, rules rolloutRules) *rolloutCheck {
	r := &rolloutCheck{rules: rules, start: time.Now(), last: map[string]*v1alpha1.BundleDeployment{},
		writes: map[string]map[int64]int64{}, released: map[string]map[int64]int{}, firstRelease: map[int64]time.Time{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		selector := client.MatchingLabels{model.LabelBundleNamespace: ns}
		for ctx.Err() == nil {
			var list v1alpha1.BundleDeploymentList
			if err := c.List(ctx, &list, selector); err != nil {
				pause(ctx, 200*time.Millisecond)
				continue
			}
			for i := range list.Items {
				r.observe(watch.Modified, &list.Items[i])
			}
			w, err := c.Watch(ctx, &v1alpha1.BundleDeploymentList{}, selector, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
			if err != nil {
				pause(ctx, 200*time.Millisecond)
				continue
			}
			for ev := range w.ResultChan() {
				if bd, ok := ev.Object.(*v1alpha1.BundleDeployment); ok {
					r.observe(ev.Type, bd)
				}
			}
			w.Stop()
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		if t.Failed() {
			r.mu.Lock()
			t.Logf("the deployments' timeline (last 150 events of %d):\n%s", r.events, strings.Join(r.timeline[max(0, len(r.timeline)-150):], "\n"))
			r.mu.Unlock()
		}
	})
	return r
}

// readyOn says whether bd runs revision rev, ready.
func readyOn(bd *v1alpha1.BundleDeployment, rev int64) bool {
	rel := bd.Spec.Released
	return rel != nil && rel.Index == rev && bd.Status.AppliedDeploymentID == rel.DeploymentID && bd.Status.Ready
}

func (r *rolloutCheck) observe(typ watch.EventType, bd *v1alpha1.BundleDeployment) {
	cluster := bd.Labels[model.LabelCluster]
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events++
	prev := r.last[cluster]
	if typ == watch.Deleted {
		r.violate("%s: its deployment was deleted during the rollout", cluster)
		delete(r.last, cluster)
		return
	}
	var prevGen int64
	if prev != nil {
		prevGen = prev.Generation
	}
	if bd.Generation > prevGen {
		rev := bd.Spec.Staged.Index
		if r.writes[cluster] == nil {
			r.writes[cluster] = map[int64]int64{}
		}
		r.writes[cluster][rev] += bd.Generation - prevGen
	}
	rel := bd.Spec.Released
	newRelease := rel != nil && (prev == nil || prev.Spec.Released == nil || prev.Spec.Released.DeploymentID != rel.DeploymentID)
	if newRelease {
		if r.released[cluster] == nil {
			r.released[cluster] = map[int64]int{}
		}
		if r.released[cluster][rel.Index]++; r.released[cluster][rel.Index] > 1 {
			r.violate("%s: released revision %d a second time", cluster, rel.Index)
		}
		r.lastRelease = time.Now()
		if _, seen := r.firstRelease[rel.Index]; !seen {
			r.firstRelease[rel.Index] = r.lastRelease
		}
		r.checkGate(cluster, rel.Index)
	}
	r.last[cluster] = bd
	r.timeline = append(r.timeline, fmt.Sprintf("%7.2fs %s: generation %d staged %d released %v applied %d ready %v",
		time.Since(r.start).Seconds(), cluster, bd.Generation, bd.Spec.Staged.Index, releasedIndex(bd), bd.Status.AppliedRevision, bd.Status.Ready))
	if rel != nil {
		r.checkBudgets(rel.Index)
	}
}

func releasedIndex(bd *v1alpha1.BundleDeployment) int64 {
	if bd.Spec.Released == nil {
		return 0
	}
	return bd.Spec.Released.Index
}

func (r *rolloutCheck) violate(format string, args ...any) {
	msg := fmt.Sprintf("%.2fs: ", time.Since(r.start).Seconds()) + fmt.Sprintf(format, args...)
	r.violations = append(r.violations, msg)
	r.timeline = append(r.timeline, "VIOLATION "+msg)
}

// checkGate: cluster, of step p, was just released rev; every step before p must allow it.
func (r *rolloutCheck) checkGate(cluster string, rev int64) {
	p, ok := r.rules.stepOf[cluster]
	if !ok {
		r.violate("%s: released revision %d, but no step of the strategy holds it", cluster, rev)
		return
	}
	for q := range p {
		var unready []string
		for name, step := range r.rules.stepOf {
			if bd := r.last[name]; step == q && (bd == nil || !readyOn(bd, rev)) {
				unready = append(unready, name)
			}
		}
		if len(unready) > r.rules.gate[q] {
			slices.Sort(unready)
			r.violate("%s (step %d) released revision %d while step %d had %d clusters not ready on it (%v), more than its %d", cluster, p, rev, q, len(unready), unready, r.rules.gate[q])
		}
	}
}

// checkBudgets counts the clusters released rev and not ready on it, per step and in all.
func (r *rolloutCheck) checkBudgets(rev int64) {
	perStep := make([]int, len(r.rules.stepBudget))
	total := 0
	for name, bd := range r.last {
		if rel := bd.Spec.Released; rel != nil && rel.Index == rev && !readyOn(bd, rev) {
			perStep[r.rules.stepOf[name]]++
			total++
		}
	}
	for step, n := range perStep {
		if n > r.rules.stepBudget[step] {
			r.violate("step %d: %d clusters released revision %d and not ready, beyond its budget of %d", step, n, rev, r.rules.stepBudget[step])
		}
	}
	if b := r.rules.fleetBudget; b > 0 && total > b {
		r.violate("%d clusters released revision %d and not ready, beyond the fleet's budget of %d", total, rev, b)
	}
}

// allReady says whether every cluster of the rules runs rev, ready.
func (r *rolloutCheck) allReady(rev int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for name := range r.rules.stepOf {
		if bd := r.last[name]; bd == nil || !readyOn(bd, rev) {
			return false
		}
	}
	return true
}

// describe counts the clusters by where they stand on rev, for a failure's message.
func (r *rolloutCheck) describe(rev int64) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	counts := map[string]int{}
	for name := range r.rules.stepOf {
		bd := r.last[name]
		switch {
		case bd == nil:
			counts["no deployment"]++
		case readyOn(bd, rev):
			counts["ready"]++
		case releasedIndex(bd) == rev:
			counts["released, not ready"]++
		default:
			counts[fmt.Sprintf("staged %d released %d", bd.Spec.Staged.Index, releasedIndex(bd))]++
		}
	}
	return fmt.Sprintf("revision %d: %v; %d events", rev, counts, r.events)
}

// verify fails the test with every violation seen, and checks what a finished rollout of
// revs leaves: each cluster released each once and written once for it, and no deployment
// beyond the strategy's clusters.
func (r *rolloutCheck) verify(t *testing.T, revs []int64) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, v := range r.violations {
		t.Error(v)
	}
	for name := range r.last {
		if _, ok := r.rules.stepOf[name]; !ok {
			t.Errorf("%s: a deployment for a cluster the rollout does not target", name)
		}
	}
	for name := range r.rules.stepOf {
		for _, rev := range revs {
			if n := r.released[name][rev]; n != 1 {
				t.Errorf("%s: released revision %d %d times, want once", name, rev, n)
			}
			if n := r.writes[name][rev]; n != 1 {
				t.Errorf("%s: its deployment was written %d times for revision %d, want once", name, n, rev)
			}
		}
	}
}

// firstReleaseOf is when the first release of rev was seen.
func (r *rolloutCheck) firstReleaseOf(rev int64) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.firstRelease[rev]
}

// releasedSince says whether a release was seen after t, and when the last was.
func (r *rolloutCheck) releasedSince(t time.Time) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastRelease, r.lastRelease.After(t)
}
