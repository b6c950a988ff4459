// Package events records the Kubernetes Events an operator reads later (`kubectl get events`,
// `kubectl describe`): what the hub and the agents did, and why. The hub and the agent share it.
//
// Events cost the API server writes like any other object, and a fleet's hub must not spend a
// write per cluster on them. So the Recorder
//   - writes asynchronously: a reconcile never waits for an Event, and a full queue drops the
//     Event (counted in flotilla_events_dropped_total) rather than slow the rollout;
//   - aggregates: an Event repeated on the same object (same reason and note) within
//     SeriesWindow is counted in memory and written as one series update at most every
//     FlushInterval, as the events.k8s.io API intends; told again within SameOccurrence of
//     its first telling, it is the same occurrence and not counted;
//   - rate-limits per object: an object gets Burst Events, then one every Refill, like the API
//     server's own spam filter, so no loop can flood the server.
//
// Unlike client-go's broadcaster, the aggregation key includes the note: two different things
// happening to one object within minutes ("partition canary released", then "partition rest
// released") are two Events, in order, not a series of the first.
package events

import (
	"context"
	"fmt"
	"maps"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// Limits of a Recorder; see the package doc.
const (
	QueueSize     = 1024
	SeriesWindow  = 10 * time.Minute
	FlushInterval = time.Minute
	Burst         = 25
	Refill        = 10 * time.Second
	// SameOccurrence: an Event told again this soon after its first telling is not counted.
	SameOccurrence = 10 * time.Second
)

// Sink writes Events to the API server: the hub's client (model.EventSink) or the agent's own.
// The package links no API client of its own, so that the agent stays small.
type Sink interface {
	Create(ctx context.Context, ev *eventsv1.Event) error
	// MergePatch applies a JSON merge patch to the Event ev names.
	MergePatch(ctx context.Context, ev *eventsv1.Event, patch []byte) error
}

// Object is what an Event is about: an API object of a kind the Recorder's scheme knows.
type Object interface {
	metav1.Object
	runtime.Object
}

// Recorder records Events through a Sink. The zero of *Recorder (nil) records nothing, so code
// and tests that run without one need no checks.
type Recorder struct {
	sink       Sink
	kinds      runtime.ObjectTyper
	controller string
	instance   string
	queue      chan write
	// onDrop, if set, counts an Event the queue had no room for (a metric).
	onDrop func()
	// onTold, if set, is handed each Event recorded (not its repetitions).
	onTold func(Told)
	// FlushEvery is how often repeated Events' counts are written; default FlushInterval.
	FlushEvery time.Duration
	// Clock is when an Event is told; default time.Now.
	Clock func() time.Time

	mu     sync.Mutex
	series map[seriesKey]*series
	limits map[types.UID]*rate.Limiter
}

// New returns a Recorder writing to sink as controller (the Event's reportingController, such
// as "flotilla.dev/hub"); kinds (a scheme) names the kind of each object an Event is about. It
// writes once Start runs.
func New(sink Sink, kinds runtime.ObjectTyper, controller string) *Recorder {
	host, _ := os.Hostname()
	return &Recorder{sink: sink, kinds: kinds, controller: controller, instance: truncate(controller+"-"+host, 128), Clock: time.Now, FlushEvery: FlushInterval,
		queue: make(chan write, QueueSize), series: map[seriesKey]*series{}, limits: map[types.UID]*rate.Limiter{}}
}

// OnDrop sets what is called for each Event dropped because the queue was full.
func (r *Recorder) OnDrop(f func()) { r.onDrop = f }

// Told is an Event as the Recorder recorded it, for what passes Events on (notifications).
type Told struct {
	Kind, Namespace, Name string
	// Labels are the object's, as recorded.
	Labels             map[string]string
	Type, Reason, Note string
	Time               time.Time
}

// OnTold sets what is handed each Event recorded, once per occurrence (not its repetitions
// within SeriesWindow, nor those the rate limit drops). It is called with the Recorder's lock
// held: it must not block.
func (r *Recorder) OnTold(f func(Told)) { r.onTold = f }

// Normal records an Event of type Normal about obj.
func (r *Recorder) Normal(obj Object, reason v1alpha1.EventReason, format string, args ...any) {
	r.record(obj, corev1.EventTypeNormal, reason, format, args...)
}

// Warning records an Event of type Warning about obj.
func (r *Recorder) Warning(obj Object, reason v1alpha1.EventReason, format string, args ...any) {
	r.record(obj, corev1.EventTypeWarning, reason, format, args...)
}

type seriesKey struct {
	uid         types.UID
	typ, reason string
	note        string
}

// series is an Event written once and seen again since.
type series struct {
	event   *eventsv1.Event // as last written (or being created)
	count   int32
	first   time.Time // first observed
	last    time.Time // last observed
	written int32     // the count the server has
	created bool
}

// write is an Event to create, with the series it starts.
type write struct {
	key    seriesKey
	create *eventsv1.Event
}

func (r *Recorder) record(obj Object, typ string, reason v1alpha1.EventReason, format string, args ...any) {
	if r == nil || obj == nil {
		return
	}
	note := truncate(fmt.Sprintf(format, args...), 1024)
	key := seriesKey{uid: obj.GetUID(), typ: typ, reason: string(reason), note: note}
	now := r.Clock()
	r.mu.Lock()
	defer r.mu.Unlock()
	if s := r.series[key]; s != nil && now.Sub(s.last) < SeriesWindow {
		// Told again within seconds of its first telling, it is the same occurrence seen twice
		// (a controller that acted on a cache not showing its own write yet): not counted,
		// and not worth a write.
		if now.Sub(s.first) >= SameOccurrence {
			s.count++
		}
		s.last = now
		return // counted: written by the next flush
	}
	lim := r.limits[key.uid]
	if lim == nil {
		lim = rate.NewLimiter(rate.Every(Refill), Burst)
		r.limits[key.uid] = lim
	}
	if !lim.AllowN(now, 1) {
		return
	}
	ev, err := r.event(obj, typ, reason, note, now)
	if err != nil {
		log.Log.Info("event not recorded", "reason", reason, "error", err.Error())
		return
	}
	// The log tells the same story, keyed by what it is about (gitrepo, bundle, cluster, …).
	logger := log.Log.WithName("events").WithValues(logKey(ev.Regarding.Kind), obj.GetNamespace()+"/"+obj.GetName(), "reason", reason, "note", note)
	if typ == corev1.EventTypeWarning {
		logger.Info("warning")
	} else {
		logger.V(1).Info("event")
	}
	r.series[key] = &series{event: ev, count: 1, first: now, last: now, written: 1}
	if r.onTold != nil {
		r.onTold(Told{Kind: ev.Regarding.Kind, Namespace: obj.GetNamespace(), Name: obj.GetName(), Labels: maps.Clone(obj.GetLabels()),
			Type: typ, Reason: string(reason), Note: note, Time: now})
	}
	select {
	case r.queue <- write{key: key, create: ev.DeepCopy()}:
	default:
		delete(r.series, key)
		if r.onDrop != nil {
			r.onDrop()
		}
	}
}

// event builds the events.k8s.io Event regarding obj.
func (r *Recorder) event(obj Object, typ string, reason v1alpha1.EventReason, note string, now time.Time) (*eventsv1.Event, error) {
	gvks, _, err := r.kinds.ObjectKinds(obj)
	if err != nil {
		return nil, err
	}
	gvk := gvks[0]
	ns := obj.GetNamespace()
	if ns == "" {
		ns = metav1.NamespaceDefault // where the API server keeps events of cluster-scoped objects
	}
	return &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s.%x%s", truncate(obj.GetName(), 200), now.UnixNano(), rand.String(4))},
		EventTime:  metav1.MicroTime{Time: now},
		Regarding: corev1.ObjectReference{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Namespace: obj.GetNamespace(), Name: obj.GetName(),
			UID: obj.GetUID()},
		Type: typ, Reason: string(reason), Action: reason.Action(), Note: note,
		ReportingController: r.controller, ReportingInstance: r.instance,
	}, nil
}

// Start writes queued Events and flushes series until ctx ends (a manager.Runnable).
func (r *Recorder) Start(ctx context.Context) error {
	flush := time.NewTicker(r.FlushEvery)
	defer flush.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case w := <-r.queue:
			r.write(ctx, w)
		case <-flush.C:
			r.flush(ctx)
		}
	}
}

// NeedLeaderElection is false: a replica writes the Events its own controllers recorded, and
// only the leader's controllers record any.
func (r *Recorder) NeedLeaderElection() bool { return false }

func (r *Recorder) write(ctx context.Context, w write) {
	err := r.sink.Create(ctx, w.create)
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.series[w.key]
	if err != nil {
		// Said at the default level: a hub whose Events never appear (RBAC, quota) says why.
		log.FromContext(ctx).Info("event not written", "reason", w.create.Reason, "error", err.Error())
		delete(r.series, w.key) // the next occurrence tries again
		return
	}
	if s != nil {
		s.created = true
	}
}

// flush writes the counts of series seen again since their last write, and forgets series and
// limits that have been quiet for SeriesWindow.
func (r *Recorder) flush(ctx context.Context) {
	now := r.Clock()
	var due []*eventsv1.Event
	r.mu.Lock()
	for k, s := range r.series {
		switch {
		case s.created && s.count > s.written:
			ev := s.event.DeepCopy()
			ev.Series = &eventsv1.EventSeries{Count: s.count, LastObservedTime: metav1.MicroTime{Time: s.last}}
			s.written = s.count
			due = append(due, ev)
		case now.Sub(s.last) >= SeriesWindow:
			delete(r.series, k)
		}
	}
	for uid, lim := range r.limits {
		if lim.TokensAt(now) >= Burst {
			delete(r.limits, uid)
		}
	}
	r.mu.Unlock()
	for _, ev := range due {
		patch := fmt.Appendf(nil, `{"series":{"count":%d,"lastObservedTime":%q}}`,
			ev.Series.Count, ev.Series.LastObservedTime.UTC().Format(metav1.RFC3339Micro))
		if err := r.sink.MergePatch(ctx, ev, patch); err != nil {
			log.FromContext(ctx).Info("event series not written", "reason", ev.Reason, "error", err.Error())
		}
	}
}

// logKey is the log key of an object of kind: the keys every Flotilla log line uses.
func logKey(kind string) string {
	switch kind {
	case "StagedUpdateRun":
		return "run"
	case "BundleDeployment":
		return "deployment"
	case "RolloutSequence":
		return "sequence"
	}
	return strings.ToLower(kind)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
