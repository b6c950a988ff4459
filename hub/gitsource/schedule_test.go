package gitsource

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/flotilla-dev/flotilla/rollout"
)

var monday = time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)

func TestScheduleInterval(t *testing.T) {
	s := Schedule{Interval: 30 * time.Second}
	if got := s.Next(monday, 0, 0); !got.Equal(monday.Add(30 * time.Second)) {
		t.Errorf("no jitter: %s", got)
	}
	if got := s.Next(monday, 0, 0.999); got.Sub(monday) > 33*time.Second || got.Sub(monday) < 32*time.Second {
		t.Errorf("jitter at most 10%%: %s", got.Sub(monday))
	}
	if got := (&Schedule{}).Next(monday, 0, 0); got.Sub(monday) != DefaultInterval {
		t.Errorf("default interval: %s", got.Sub(monday))
	}
}

func TestScheduleBackoff(t *testing.T) {
	s := Schedule{Interval: 15 * time.Second, MaxBackoff: 2 * time.Minute}
	var waits []time.Duration
	for f := 1; f <= 6; f++ {
		waits = append(waits, s.Next(monday, f, 0).Sub(monday))
	}
	want := []time.Duration{15 * time.Second, 30 * time.Second, time.Minute, 2 * time.Minute, 2 * time.Minute, 2 * time.Minute}
	if diff := cmp.Diff(want, waits); diff != "" {
		t.Errorf("back-off (-want +got):\n%s", diff)
	}
}

// TestCronScheduleOverSimulatedDays evaluates schedules with Schedule.Next across a week.
func TestCronScheduleOverSimulatedDays(t *testing.T) {
	cases := []struct {
		cron, tz string
		days     int
		want     int
		first    time.Time
	}{
		{"@hourly", "", 1, 23, monday.Add(time.Hour)},                                      // 01:00 … 23:00
		{"0 9 * * 1-5", "Europe/Paris", 7, 5, time.Date(2026, 1, 5, 8, 0, 0, 0, time.UTC)}, // 09:00 CET
		{"*/30 * * * *", "", 1, 47, monday.Add(30 * time.Minute)},
		{"@every 5m", "", 1, 287, monday.Add(5 * time.Minute)},
	}
	for _, c := range cases {
		s := Schedule{Cron: c.cron, TimeZone: c.tz}
		if err := s.Compile(); err != nil {
			t.Fatal(err)
		}
		n, at := 0, monday
		var first time.Time
		for {
			at = s.Next(at, 0, 0.5)
			if !at.Before(monday.AddDate(0, 0, c.days)) {
				break
			}
			if n == 0 {
				first = at
			}
			n++
		}
		if n != c.want || !first.Equal(c.first) {
			t.Errorf("%s %s over %d days: %d syncs, first %s; want %d, %s", c.cron, c.tz, c.days, n, first, c.want, c.first)
		}
	}
	for _, bad := range []Schedule{{Cron: "every monday"}, {Cron: "@daily", TimeZone: "Mars/Base"}} {
		if err := bad.Compile(); err == nil || !strings.HasPrefix(err.Error(), "syncSchedule.") {
			t.Errorf("%+v: %v", bad, err)
		}
	}
}

func TestSyncWindows(t *testing.T) {
	w := func(kind SyncWindowKind, sched string, d time.Duration) SyncWindow {
		sw := SyncWindow{Kind: kind, Window: rollout.Window{Schedule: sched, Duration: rollout.Duration(d)}}
		if err := sw.Compile(); err != nil {
			t.Fatal(err)
		}
		return sw
	}
	// Releases allowed 08:00–18:00 on weekdays, denied on Friday afternoons.
	windows := []SyncWindow{w(WindowAllow, "0 8 * * 1-5", 10*time.Hour), w(WindowDeny, "0 14 * * 5", 4*time.Hour)}
	allowedHours := 0
	for h := 0; h < 7*24; h++ {
		if ok, _ := ReleaseAllowed(windows, monday.Add(time.Duration(h)*time.Hour)); ok {
			allowedHours++
		}
	}
	if allowedHours != 5*10-4 {
		t.Errorf("%d allowed hours in a week, want 46", allowedHours)
	}
	ok, reason := ReleaseAllowed(windows, monday.Add(2*time.Hour))
	if ok || !strings.Contains(reason, "next opens at 2026-01-05T08:00:00Z") {
		t.Errorf("Monday 02:00: %v %q", ok, reason)
	}
	ok, reason = ReleaseAllowed(windows, monday.AddDate(0, 0, 4).Add(15*time.Hour))
	if ok || !strings.Contains(reason, `deny window "0 14 * * 5" is open`) {
		t.Errorf("Friday 15:00: %v %q", ok, reason)
	}
	if ok, _ := ReleaseAllowed(nil, monday); !ok {
		t.Errorf("no windows must allow")
	}
}

// fakeClock is a simulated clock: time moves only by Advance.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []fakeWaiter
}

type fakeWaiter struct {
	at time.Time
	ch chan time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	c.waiters = append(c.waiters, fakeWaiter{c.now.Add(d), ch})
	return ch
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if !w.at.After(c.now) {
			w.ch <- c.now
		} else {
			kept = append(kept, w)
		}
	}
	c.waiters = kept
}

type syncEvent struct {
	key string
	at  time.Duration
}

func TestPollerSchedulesTriggersAndBacksOff(t *testing.T) {
	clock := &fakeClock{now: monday}
	events := make(chan syncEvent, 100)
	p := &Poller{Clock: clock, Rand: func() float64 { return 0 }, Workers: 2,
		Sync: func(_ context.Context, key string) error {
			events <- syncEvent{key, clock.Now().Sub(monday)}
			if key == "broken" {
				return errors.New("unreachable")
			}
			return nil
		}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	expect := func(want ...syncEvent) {
		t.Helper()
		var got []syncEvent
		for range want {
			select {
			case e := <-events:
				got = append(got, e)
			case <-time.After(5 * time.Second):
				t.Fatalf("waited for %v, got %v", want, got)
			}
		}
		sortEvents(got)
		if diff := cmp.Diff(want, got, cmp.AllowUnexported(syncEvent{})); diff != "" {
			t.Fatalf("syncs (-want +got):\n%s", diff)
		}
	}
	none := func() {
		t.Helper()
		select {
		case e := <-events:
			t.Fatalf("unexpected sync %v", e)
		case <-time.After(50 * time.Millisecond):
		}
	}
	p.Set("app", Schedule{Interval: 15 * time.Second})
	p.Set("broken", Schedule{Interval: 15 * time.Second})
	expect(syncEvent{"app", 0}, syncEvent{"broken", 0})
	clock.Advance(10 * time.Second)
	none()
	clock.Advance(5 * time.Second) // 15s: app on its interval, broken after 15s back-off
	expect(syncEvent{"app", 15 * time.Second}, syncEvent{"broken", 15 * time.Second})
	p.Trigger("app") // a webhook: at once, no time passes
	expect(syncEvent{"app", 15 * time.Second})
	clock.Advance(15 * time.Second) // 30s: app again; broken waits 30s now
	expect(syncEvent{"app", 30 * time.Second})
	clock.Advance(15 * time.Second) // 45s
	expect(syncEvent{"app", 45 * time.Second}, syncEvent{"broken", 45 * time.Second})
	p.Remove("app")
	clock.Advance(time.Minute) // 105s: broken (60s back-off); app is gone
	expect(syncEvent{"broken", 105 * time.Second})
}

func sortEvents(es []syncEvent) {
	for i := range es {
		for j := i + 1; j < len(es); j++ {
			if es[j].key < es[i].key {
				es[i], es[j] = es[j], es[i]
			}
		}
	}
}

// A sync that panics counts as a failure of its own repository: the poller recovers, retries
// the repository after its back-off, and keeps syncing the others on their schedule.
func TestPollerRecoversFromAPanickingSync(t *testing.T) {
	clock := &fakeClock{now: monday}
	events := make(chan syncEvent, 100)
	p := &Poller{Clock: clock, Rand: func() float64 { return 0 }, Workers: 1,
		Sync: func(_ context.Context, key string) error {
			events <- syncEvent{key, clock.Now().Sub(monday)}
			if key == "crashing" {
				panic("a renderer bug")
			}
			return nil
		}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	p.Set("crashing", Schedule{Interval: 15 * time.Second})
	p.Set("app", Schedule{Interval: 15 * time.Second})
	crashes := 0
	next := func(want syncEvent) {
		t.Helper()
		for {
			select {
			case e := <-events:
				if e.key == "crashing" {
					crashes++
					continue
				}
				if e != want {
					t.Fatalf("sync %v, want %v", e, want)
				}
				return
			case <-time.After(5 * time.Second):
				t.Fatalf("waited for %v; the crashing repository synced %d times", want, crashes)
			}
		}
	}
	// The other repository keeps its 15 s interval through the crashes.
	next(syncEvent{"app", 0})
	for at := 15 * time.Second; at <= 60*time.Second; at += 15 * time.Second {
		clock.Advance(15 * time.Second)
		next(syncEvent{"app", at})
	}
	// The crashing one was retried after its back-off (15 s from when its crash was handled,
	// at the latest 15 s in): at least once in the minute.
	deadline := time.After(5 * time.Second)
	for crashes < 2 {
		select {
		case e := <-events:
			if e.key == "crashing" {
				crashes++
			}
		case <-deadline:
			t.Fatalf("the crashing repository synced %d times in a minute, want at least 2", crashes)
		}
	}
}
