package hub

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/events"
	"github.com/flotilla-dev/flotilla/hub/model"
)

// An operator reads a partitioned rollout from the Events of its namespace, in order: the
// commit, the revision, each partition released, the pause at a partition that is not ready
// (with its reason), the rollout completing.
func TestR1_2_R1_6_EventsTellAPartitionedRolloutInOrder(t *testing.T) {
	fleet := canaryThenRest
	clusters := clustersNamed(map[string]string{"ring": "main"}, "m1", "m2")
	clusters["c1"] = map[string]string{"ring": "canary"}
	f := newSimFleet(t, Options{}, fleet, clusters)
	f.releasedExactly(1, "partitions NotReady (canary)", "c1")
	f.ready("c1")
	f.until("the rest partition is released", func() bool { return len(f.released(1)) == 3 })
	f.ready("m1", "m2")
	want := []string{
		"GitRepo/shop CommitPickedUp: commit ",
		": shop-web revision 1 staged for 3 clusters",
		"Bundle/shop-web PartitionReleased: revision 1 released to partition canary (1 clusters",
		"Bundle/shop-web RolloutPaused: revision 1: 1 partitions NotReady (canary)",
		"Bundle/shop-web PartitionReleased: revision 1 released to partition rest (2 clusters",
		"Bundle/shop-web RolloutCompleted: revision 1 ready on 3 clusters",
	}
	var story events.Story
	defer func() {
		if t.Failed() {
			t.Logf("the Events:\n%s", story)
		}
	}()
	f.until("the Events tell the rollout in order", func() bool {
		story = readStory(t, f.c, f.ns, EventsController)
		return story.Tells(want...)
	})
	// Each thing is told once: passes that found nothing new recorded nothing.
	for _, w := range want {
		if n := story.Count(w); n != 1 {
			t.Errorf("%d Events %q, want 1:\n%s", n, w, story)
		}
	}
	// A healthy rollout, waits for its canary included, is told in Normal Events only: alerts
	// on Warnings do not fire on it.
	var list corev1.EventList
	if err := f.c.List(context.Background(), &list, client.InNamespace(f.ns)); err != nil {
		t.Fatal(err)
	}
	for _, e := range list.Items {
		if e.Type != corev1.EventTypeNormal {
			t.Errorf("%s Event %s on %s: %s", e.Type, e.Reason, e.InvolvedObject.Name, e.Message)
		}
	}
}

// The recorder aggregates an Event repeated on one object into one Event with a count, keeps
// different Events of one object apart and in order, and limits how many one object gets.
func TestEventsAreAggregatedOrderedAndRateLimited(t *testing.T) {
	c := apiClient(t)
	ns := namespace(t, c)
	ctx, cancel := context.WithCancel(context.Background())
	rec := events.New(model.EventSink(c), c.Scheme(), "flotilla.dev/test")
	rec.FlushEvery = 100 * time.Millisecond
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = rec.Start(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	object := func(name string) *corev1.ConfigMap {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
		if err := c.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
		return cm
	}
	repeated, chatty, marker := object("repeated"), object("chatty"), object("marker")
	// Told again within seconds it is the same occurrence; later, it is counted.
	var mu sync.Mutex
	var ahead time.Duration // how far the recorder's clock is ahead of the wall clock
	rec.Clock = func() time.Time { mu.Lock(); defer mu.Unlock(); return time.Now().Add(ahead) }
	tell := func(after time.Duration) {
		mu.Lock()
		ahead += after
		mu.Unlock()
		rec.Normal(repeated, v1alpha1.EventDriftCorrected, "the same thing again")
	}
	tell(0)
	tell(time.Second) // the same occurrence: not counted
	for range 29 {
		tell(events.SameOccurrence)
	}
	for i := range 2 * events.Burst {
		rec.Warning(chatty, v1alpha1.EventRolloutPaused, "thing %02d", i)
	}
	rec.Normal(marker, v1alpha1.EventRolloutCompleted, "written after everything before it")
	var story events.Story
	waitUntil(t, "the repeated Event is one with its count, and the marker is written", func() bool {
		story = readStory(t, c, ns, "flotilla.dev/test")
		return slices.Contains(story, "ConfigMap/repeated DriftCorrected: the same thing again (×30)") &&
			slices.Contains(story, "ConfigMap/marker RolloutCompleted: written after everything before it")
	})
	var chattyLines, things []string
	for _, l := range story {
		if strings.HasPrefix(l, "ConfigMap/chatty ") {
			chattyLines = append(chattyLines, l)
			things = append(things, strings.TrimPrefix(l, "ConfigMap/chatty RolloutPaused: "))
		}
		if strings.HasPrefix(l, "ConfigMap/repeated ") && !strings.HasSuffix(l, "(×30)") {
			t.Errorf("the repeated Event was written apart: %s", l)
		}
	}
	if len(chattyLines) != events.Burst {
		t.Errorf("an object got %d Events, want the burst of %d:\n%s", len(chattyLines), events.Burst, strings.Join(chattyLines, "\n"))
	}
	if !slices.IsSorted(things) || len(things) > 0 && things[0] != "thing 00" {
		t.Errorf("an object's Events are not its first ones in order:\n%s", strings.Join(things, "\n"))
	}
}

func readStory(t *testing.T, c client.Client, ns, controller string) events.Story {
	t.Helper()
	story, err := model.ReadStory(context.Background(), c, ns, controller)
	if err != nil {
		t.Fatal(err)
	}
	return story
}
