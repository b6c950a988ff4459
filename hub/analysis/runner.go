// Package analysis measures the analysis checks of rollouts (ROLLOUT.md §7) for the hub's
// rollout controllers. It owns no decision: the planner says which checks it judges now
// (rollout.ActiveCheck), the Runner measures exactly those at their intervals from the
// providers the operator defined, and gives the planner back their judgements
// (rollout.Check.Judge) as inputs, like readiness. A verdict that changes wakes the controller
// that judges it. Nothing here writes an object: a check that fails is told by one Event per
// check and revision, through the hub's recorder.
//
//	d := rollout.Plan(in)                        // in: runner.Inputs(owner, …)
//	runner.Track(owner, d.Analysis, labels)       // measured from now on, until a pass drops it
//	bun.Status.Analysis = runner.Summary(owner)   // bounded: counts per verdict, a few names
//
// Measurements live in memory: a hub that restarts measures again, and its gates wait (a
// check not measured yet holds, R7.4). A provider is an AnalysisProvider of the bundle's
// namespace, allowed by every FleetRestriction there; a repository names one and nothing
// else, so no query goes anywhere a repository chose (R7.1).
package analysis

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/endpoint"
	"github.com/flotilla-dev/flotilla/hub/events"
	"github.com/flotilla-dev/flotilla/hub/metrics"
	"github.com/flotilla-dev/flotilla/rollout"
)

// Kind names the controller that judges an owner's checks, and so the one a changed verdict
// wakes.
type Kind string

const (
	KindRollout  Kind = "rollout"  // a Bundle's continuous rollout
	KindSequence Kind = "sequence" // a Bundle's sequence
	KindRun      Kind = "run"      // a StagedUpdateRun
)

// Owner is what judges a set of checks: a bundle's rollout or sequence (Name is the Bundle's),
// or a staged run (Name is the run's). Bundle names the bundle for the queries.
type Owner struct {
	Kind      Kind
	Namespace string
	Name      string
	Bundle    string
}

// DefaultWorkers bounds the measurements in flight, every provider together.
const DefaultWorkers = 8

// Runner measures the checks the controllers judge. The zero value is not usable: use New. A
// nil Runner judges nothing: every check stays Pending.
type Runner struct {
	client  client.Reader
	now     func() time.Time
	workers int
	// Recorder, when set, tells a check's failure: one Event on the Bundle per check and
	// revision, never one per cluster.
	Recorder *events.Recorder

	mu     sync.Mutex
	owners map[Owner]map[rollout.AnalysisKey]*entry
	// inFlight counts the measurements being taken, all and per namespace: a namespace's
	// take at most half of the workers, so one tenant's slow checks leave the others theirs.
	inFlight   int
	inFlightNS map[string]int
	notify     map[Kind]chan event.GenericEvent
	pending    map[Owner]bool
	wake       chan struct{}
	resolved   *providers
	// toldFailed are the checks whose failure was told, by owner.
	toldFailed map[Owner]map[failedCheck]bool
}

type failedCheck struct {
	check    string
	revision int64
}

// entry is one check measured on one cluster or gate.
type entry struct {
	check    rollout.Check
	clusters []string
	labels   map[string]string
	m        rollout.Measurements
	next     time.Time
	inFlight bool
	// told is the verdict the owner's controller last saw.
	told rollout.Verdict
}

// New returns a Runner that reads providers, restrictions and Secrets with c (Secrets should
// be uncached: the hub caches none). now is the clock; workers bounds measurements in flight
// (0: DefaultWorkers); addresses is the hub's allow-list of where providers may be reached
// (with the namespace's FleetRestrictions').
func New(c client.Reader, now func() time.Time, workers int, addresses endpoint.AddressList) *Runner {
	if now == nil {
		now = time.Now
	}
	if workers <= 0 {
		workers = DefaultWorkers
	}
	return &Runner{client: c, now: now, workers: workers, owners: map[Owner]map[rollout.AnalysisKey]*entry{}, notify: map[Kind]chan event.GenericEvent{},
		pending: map[Owner]bool{}, wake: make(chan struct{}, 1), resolved: newProviders(c, addresses), toldFailed: map[Owner]map[failedCheck]bool{},
		inFlightNS: map[string]int{}}
}

// Changed is the channel on which the runner tells a controller that a verdict of one of its
// owners changed: a Bundle (rollout, sequence) or a StagedUpdateRun with only its name set,
// for source.Channel. Call it before the runner starts.
func (r *Runner) Changed(k Kind) <-chan event.GenericEvent {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.notify[k] == nil {
		r.notify[k] = make(chan event.GenericEvent, 256)
	}
	return r.notify[k]
}

// Track makes active the owner's checks measured from now on: a new one is measured at once,
// one no longer listed is dropped with its measurements. labels gives a cluster's labels for
// a Cluster check's query.
func (r *Runner) Track(o Owner, active []rollout.ActiveCheck, labels func(cluster string) map[string]string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	entries := r.owners[o]
	if entries == nil {
		if len(active) == 0 {
			return
		}
		entries = map[rollout.AnalysisKey]*entry{}
		r.owners[o] = entries
	}
	keep := make(map[rollout.AnalysisKey]bool, len(active))
	added := false
	for _, a := range active {
		keep[a.Key] = true
		e := entries[a.Key]
		if e == nil || !sameCheck(&e.check, a.Check) {
			// A check whose spec changed starts over: its measurements judged another query.
			e = &entry{check: *a.Check, next: now, m: rollout.Measurements{Since: now}}
			entries[a.Key] = e
			added = true
		}
		e.clusters = a.Clusters
		if a.Key.Cluster != "" && labels != nil {
			e.labels = labels(a.Key.Cluster)
		}
	}
	for k := range entries {
		if !keep[k] {
			delete(entries, k)
		}
	}
	if len(entries) == 0 {
		delete(r.owners, o)
		delete(r.toldFailed, o)
	}
	r.countJudged()
	if added {
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
}

func sameCheck(a, b *rollout.Check) bool {
	return a.Name == b.Name && a.Provider == b.Provider && a.Query == b.Query && a.Condition == b.Condition && a.FailureLimit == b.FailureLimit &&
		a.EffectiveScope() == b.EffectiveScope() && a.EffectiveInterval() == b.EffectiveInterval() && durationOf(a.InconclusiveLimit) == durationOf(b.InconclusiveLimit)
}

func durationOf(d *rollout.Duration) time.Duration {
	if d == nil {
		return -1
	}
	return time.Duration(*d)
}

// countJudged updates the gauge of checks judged. Called with r.mu held.
func (r *Runner) countJudged() {
	n := 0
	for _, entries := range r.owners {
		n += len(entries)
	}
	metrics.AnalysisJudged.Set(float64(n))
}

// Inputs gives a pass of the owner what its checks say now: each deployment that a Cluster
// check judges gets the worst of their judgements on the revision it applied
// (rollout.Deployment.Analysis); the Gate checks' judgements are returned.
func (r *Runner) Inputs(o Owner, deployment func(cluster string) *rollout.Deployment) rollout.Analyses {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	gates := rollout.Analyses{}
	perCluster := map[string][]rollout.Judgement{}
	for k, e := range r.owners[o] {
		j := e.check.Judge(e.m, now)
		if k.Cluster == "" {
			gates[k] = j
			continue
		}
		if d := deployment(k.Cluster); d != nil && d.Applied == k.Revision {
			perCluster[k.Cluster] = append(perCluster[k.Cluster], j)
		}
	}
	for cluster, js := range perCluster {
		w := rollout.Worst(js)
		deployment(cluster).Analysis = &w
	}
	return gates
}

// maxNamed is how many clusters or gates a check's status names.
const maxNamed = 10

// Summary is what each of the owner's checks says now, for the Bundle's status: per check and
// revision, how many clusters or gates have each verdict, the worst, and up to ten that hold or
// failed. Sorted by check and revision; bounded whatever the fleet's size.
func (r *Runner) Summary(o Owner) []v1alpha1.AnalysisStatus {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	type key struct {
		check    string
		revision int64
	}
	type named struct {
		name string
		j    rollout.Judgement
	}
	byCheck := map[key]*v1alpha1.AnalysisStatus{}
	worst := map[key]rollout.Judgement{}
	held := map[key][]named{}
	for k, e := range r.owners[o] {
		j := e.check.Judge(e.m, now)
		ck := key{k.Check, k.Revision}
		st := byCheck[ck]
		if st == nil {
			st = &v1alpha1.AnalysisStatus{Check: k.Check, Scope: string(e.check.EffectiveScope()), Revision: k.Revision, Counts: map[string]int32{}}
			byCheck[ck] = st
			worst[ck] = j
		}
		st.Counts[string(j.Verdict)]++
		if w := rollout.Worst([]rollout.Judgement{worst[ck], j}); w != worst[ck] {
			worst[ck] = j
		}
		if j.Verdict != rollout.VerdictPassed {
			target := k.Cluster
			if target == "" {
				target = k.Gate
			}
			held[ck] = append(held[ck], named{target, j})
		}
	}
	if len(byCheck) == 0 {
		return nil
	}
	out := make([]v1alpha1.AnalysisStatus, 0, len(byCheck))
	for ck, st := range byCheck {
		w := worst[ck]
		st.Verdict, st.Message = string(w.Verdict), truncate(w.Message, 512)
		if w.Verdict != rollout.VerdictPassed && !w.Since.IsZero() {
			st.Since = &metav1.Time{Time: w.Since.Truncate(time.Second)}
		}
		hs := held[ck]
		sort.Slice(hs, func(i, j int) bool {
			if a, b := rankOf(hs[i].j.Verdict), rankOf(hs[j].j.Verdict); a != b {
				return a > b
			}
			return hs[i].name < hs[j].name
		})
		for _, h := range hs[:min(len(hs), maxNamed)] {
			st.Targets = append(st.Targets, h.name)
		}
		out = append(out, *st)
	}
	slices.SortFunc(out, func(a, b v1alpha1.AnalysisStatus) int {
		if a.Check != b.Check {
			if a.Check < b.Check {
				return -1
			}
			return 1
		}
		return int(a.Revision - b.Revision)
	})
	return out
}

// rankOf orders verdicts worst last, as rollout.Worst does.
func rankOf(v rollout.Verdict) int {
	return slices.Index([]rollout.Verdict{rollout.VerdictPassed, rollout.VerdictPending, rollout.VerdictFailing, rollout.VerdictInconclusive, rollout.VerdictFailed}, v)
}

// NeedLeaderElection: only the leader's controllers judge, so only it measures.
func (r *Runner) NeedLeaderElection() bool { return true }

// Start measures what is due, every second, when a new check is tracked or a measurement
// ends, until ctx ends.
func (r *Runner) Start(ctx context.Context) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	go r.sendChanges(ctx)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case <-r.wake:
		}
		for _, d := range r.due() {
			wg.Go(func() { r.measure(ctx, d) })
		}
	}
}

// dueEntry is a measurement to take.
type dueEntry struct {
	owner Owner
	key   rollout.AnalysisKey
	e     *entry
	// what the query sees, copied under the lock.
	check    rollout.Check
	clusters []string
	labels   map[string]string
}

// due marks the entries whose measurement is due and may start as in flight and returns them,
// longest due first, within the workers and a namespace's share of them (half, rounded up);
// it also tells the owners whose verdict changed by the clock alone (an inconclusive run at
// its limit, a check pending past its).
func (r *Runner) due() []dueEntry {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	var ready []dueEntry
	for o, entries := range r.owners {
		for k, e := range entries {
			r.tellIfChanged(o, e, now)
			if e.inFlight || now.Before(e.next) {
				continue
			}
			ready = append(ready, dueEntry{owner: o, key: k, e: e})
		}
	}
	slices.SortFunc(ready, func(a, b dueEntry) int { return a.e.next.Compare(b.e.next) })
	share := (r.workers + 1) / 2
	var out []dueEntry
	for _, d := range ready {
		if r.inFlight >= r.workers {
			break
		}
		if r.inFlightNS[d.owner.Namespace] >= share {
			continue
		}
		r.inFlight++
		r.inFlightNS[d.owner.Namespace]++
		d.e.inFlight = true
		d.check, d.clusters, d.labels = d.e.check, slices.Clone(d.e.clusters), maps.Clone(d.e.labels)
		out = append(out, d)
	}
	return out
}

// measure takes one measurement and records it, if the entry is still tracked.
func (r *Runner) measure(ctx context.Context, d dueEntry) {
	started := r.now()
	outcome, message, providerType := r.take(ctx, d)
	metrics.AnalysisMeasurements.WithLabelValues(providerType, string(outcome)).Inc()
	metrics.AnalysisDuration.WithLabelValues(providerType).Observe(time.Since(started).Seconds())
	r.mu.Lock()
	defer r.mu.Unlock()
	d.e.inFlight = false
	r.inFlight--
	if r.inFlightNS[d.owner.Namespace]--; r.inFlightNS[d.owner.Namespace] <= 0 {
		delete(r.inFlightNS, d.owner.Namespace)
	}
	select {
	case r.wake <- struct{}{}: // a worker is free: what waited for it may start
	default:
	}
	if r.owners[d.owner][d.key] != d.e {
		return // dropped, or replaced by a changed check, while it was measured
	}
	now := r.now()
	m := &d.e.m
	switch outcome {
	case rollout.MeasuredInconclusive:
		if m.Last != rollout.MeasuredInconclusive {
			m.InconclusiveSince = now
		}
	case rollout.MeasuredFail:
		m.Failures++
		if m.Failures > d.e.check.FailureLimit && m.FailedAt.IsZero() {
			m.FailedAt = now
			metrics.AnalysisFailed.WithLabelValues(string(d.e.check.EffectiveScope())).Inc()
		}
	case rollout.MeasuredPass:
		m.Passes++
	}
	m.Last, m.LastAt, m.Message = outcome, now, message
	d.e.next = started.Add(d.e.check.EffectiveInterval())
	if outcome != rollout.MeasuredPass {
		log.FromContext(ctx).V(1).Info("analysis measurement", "namespace", d.owner.Namespace, "bundle", d.owner.Bundle, "check", d.key.Check,
			"cluster", d.key.Cluster, "gate", d.key.Gate, "outcome", outcome, "message", message)
	}
	r.tellIfChanged(d.owner, d.e, now)
	if j := d.e.check.Judge(d.e.m, now); j.Verdict == rollout.VerdictFailed {
		r.tellFailed(ctx, d.owner, d.key, j)
	}
}

// tellFailed records the first failure of a check on a revision as an Event on the bundle.
// Called with r.mu held; the recorder queues, it does not block.
func (r *Runner) tellFailed(ctx context.Context, o Owner, k rollout.AnalysisKey, j rollout.Judgement) {
	fc := failedCheck{k.Check, k.Revision}
	if r.toldFailed[o] == nil {
		r.toldFailed[o] = map[failedCheck]bool{}
	}
	if r.Recorder == nil || r.toldFailed[o][fc] {
		return
	}
	r.toldFailed[o][fc] = true
	var bun v1alpha1.Bundle
	if err := r.client.Get(ctx, client.ObjectKey{Namespace: o.Namespace, Name: o.Bundle}, &bun); err != nil {
		return
	}
	on := k.Cluster
	if on == "" {
		on = k.Gate
	}
	r.Recorder.Warning(&bun, v1alpha1.EventAnalysisFailed, "revision %d: analysis %s failed on %s: %s", k.Revision, k.Check, on, j.Message)
}

// tellIfChanged queues a wake-up of the owner's controller when the entry's verdict is not the
// one it last saw. Called with r.mu held.
func (r *Runner) tellIfChanged(o Owner, e *entry, now time.Time) {
	v := e.check.Judge(e.m, now).Verdict
	if v == e.told {
		return
	}
	e.told = v
	if !r.pending[o] {
		r.pending[o] = true
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
}

// sendChanges delivers the queued wake-ups to the controllers, each owner once per batch.
func (r *Runner) sendChanges(ctx context.Context) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		r.mu.Lock()
		owners := slices.Collect(maps.Keys(r.pending))
		clear(r.pending)
		r.mu.Unlock()
		for _, o := range owners {
			ch := r.channel(o.Kind)
			if ch == nil {
				continue
			}
			select {
			case ch <- event.GenericEvent{Object: o.object()}:
			case <-ctx.Done():
				return
			}
		}
	}
}

func (r *Runner) channel(k Kind) chan event.GenericEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.notify[k]
}

// object is the owner as its controller's queue takes it.
func (o Owner) object() client.Object {
	meta := metav1.ObjectMeta{Namespace: o.Namespace, Name: o.Name}
	if o.Kind == KindRun {
		return &v1alpha1.StagedUpdateRun{ObjectMeta: meta}
	}
	return &v1alpha1.Bundle{ObjectMeta: meta}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "…"
}

// String names the owner in messages.
func (o Owner) String() string { return fmt.Sprintf("%s %s/%s", o.Kind, o.Namespace, o.Name) }
