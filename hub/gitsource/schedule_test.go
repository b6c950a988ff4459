package gitsource

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

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

// A schedule with polling disabled (a GitRepo's disablePolling) syncs again only when
// triggered, but still retries a failure on its back-off.
func TestScheduleWithPollingDisabled(t *testing.T) {
	s := Schedule{Interval: 15 * time.Second, Disabled: true}
	if got := s.Next(monday, 0, 0); got.Sub(monday) < 50*365*24*time.Hour {
		t.Errorf("after a sync: next in %s, want never", got.Sub(monday))
	}
	if got := s.Next(monday, 2, 0); got.Sub(monday) != 30*time.Second {
		t.Errorf("after two failures: next in %s, want the back-off's 30s", got.Sub(monday))
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
	waiters map[*fakeWaiter]bool
}

type fakeWaiter struct {
	at time.Time
	ch chan time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *fakeClock) Timer(d time.Duration) (<-chan time.Time, func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := &fakeWaiter{c.now.Add(d), make(chan time.Time, 1)}
	if c.waiters == nil {
		c.waiters = map[*fakeWaiter]bool{}
	}
	c.waiters[w] = true
	return w.ch, func() { c.mu.Lock(); defer c.mu.Unlock(); delete(c.waiters, w) }
}

// Advance moves the clock and fires the timers it reaches; it tells whether it fired any.
func (c *fakeClock) Advance(d time.Duration) (fired bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	for w := range c.waiters {
		if !w.at.After(c.now) {
			w.ch <- c.now
			delete(c.waiters, w)
			fired = true
		}
	}
	return fired
}

type syncEvent struct {
	key string
	at  time.Duration
}

// pollerHarness runs a Poller on a fakeClock in lockstep: each step acts, then waits until the
// poller has finished every sync it started and armed its timer, and compares the syncs it saw
// with those wanted. Moving the clock while a sync still runs would date its next sync from the
// moved time, so the harness never does.
type pollerHarness struct {
	t      *testing.T
	clock  *fakeClock
	poller *Poller
	events chan syncEvent
	idle   chan struct{}
}

// startPoller sets the schedules, starts the poller with workers and sync, and returns once the
// first syncs (every key, due at once) are done; want are those syncs.
func startPoller(t *testing.T, workers int, schedules map[string]Schedule, sync func(key string) error, want ...syncEvent) *pollerHarness {
	t.Helper()
	return startPollerOn(t, nil, workers, schedules, sync, want...)
}

// startPollerOn is startPoller with the keys' repositories on the hosts named.
func startPollerOn(t *testing.T, hosts map[string]string, workers int, schedules map[string]Schedule, sync func(key string) error, want ...syncEvent) *pollerHarness {
	t.Helper()
	h := &pollerHarness{t: t, clock: &fakeClock{now: monday}, events: make(chan syncEvent, 100), idle: make(chan struct{}, 1)}
	h.poller = &Poller{Clock: h.clock, Rand: func() float64 { return 0 }, Workers: workers, Host: func(key string) string { return hosts[key] },
		Sync: func(_ context.Context, key string) error {
			h.events <- syncEvent{key, h.clock.Now().Sub(monday)}
			return sync(key)
		},
		idle: func() {
			select {
			case h.idle <- struct{}{}:
			default:
			}
		}}
	for key, s := range schedules {
		h.poller.Set(key, s)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { h.poller.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	h.settled(want)
	return h
}

// advance moves the clock by d; want are the syncs that follow.
func (h *pollerHarness) advance(d time.Duration, want ...syncEvent) {
	h.t.Helper()
	if !h.clock.Advance(d) {
		// No timer fired: the poller sleeps on, and no sync can start.
		h.expect(want)
		return
	}
	h.settled(want)
}

// trigger is a webhook for key; want are the syncs that follow.
func (h *pollerHarness) trigger(key string, want ...syncEvent) {
	h.t.Helper()
	h.poller.Trigger(key)
	h.settled(want)
}

func (h *pollerHarness) settled(want []syncEvent) {
	h.t.Helper()
	select {
	case <-h.idle:
	case <-time.After(10 * time.Second):
		h.t.Fatalf("the poller did not finish its syncs; wanted %v", want)
	}
	h.expect(want)
}

// expect compares the syncs seen since the last step (all of them: a sync reports before it
// ends) with want, in key order.
func (h *pollerHarness) expect(want []syncEvent) {
	h.t.Helper()
	var got []syncEvent
	for len(h.events) > 0 {
		got = append(got, <-h.events)
	}
	sortEvents(got)
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(syncEvent{}), cmpopts.EquateEmpty()); diff != "" {
		h.t.Fatalf("syncs (-want +got):\n%s", diff)
	}
}

func TestPollerSchedulesTriggersAndBacksOff(t *testing.T) {
	every15s := Schedule{Interval: 15 * time.Second}
	h := startPoller(t, 2, map[string]Schedule{"app": every15s, "broken": every15s}, func(key string) error {
		if key == "broken" {
			return errors.New("unreachable")
		}
		return nil
	}, syncEvent{"app", 0}, syncEvent{"broken", 0})
	h.advance(10 * time.Second)
	// 15s: app on its interval, broken after 15s back-off.
	h.advance(5*time.Second, syncEvent{"app", 15 * time.Second}, syncEvent{"broken", 15 * time.Second})
	h.trigger("app", syncEvent{"app", 15 * time.Second}) // a webhook: at once, no time passes
	// 30s: app again; broken waits 30s now.
	h.advance(15*time.Second, syncEvent{"app", 30 * time.Second})
	h.advance(15*time.Second, syncEvent{"app", 45 * time.Second}, syncEvent{"broken", 45 * time.Second})
	h.poller.Remove("app")
	// 105s: broken (60s back-off); app is gone.
	h.advance(time.Minute, syncEvent{"broken", 105 * time.Second})
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
	every15s := Schedule{Interval: 15 * time.Second}
	// One worker: a crash that leaked its worker would stop every other repository.
	h := startPoller(t, 1, map[string]Schedule{"app": every15s, "crashing": every15s}, func(key string) error {
		if key == "crashing" {
			panic("a renderer bug")
		}
		return nil
	}, syncEvent{"app", 0}, syncEvent{"crashing", 0})
	// The other repository keeps its 15 s interval; the crashing one backs off 15, 30, 60 s.
	h.advance(15*time.Second, syncEvent{"app", 15 * time.Second}, syncEvent{"crashing", 15 * time.Second})
	h.advance(15*time.Second, syncEvent{"app", 30 * time.Second})
	h.advance(15*time.Second, syncEvent{"app", 45 * time.Second}, syncEvent{"crashing", 45 * time.Second})
	h.advance(15*time.Second, syncEvent{"app", 60 * time.Second})
	h.advance(45*time.Second, syncEvent{"app", 105 * time.Second}, syncEvent{"crashing", 105 * time.Second})
}

// One tenant's repositories never hold every worker: with six of its syncs hanging, another
// tenant's repository still syncs at once, on a worker its share leaves free.
func TestPollerLeavesOtherTenantsTheirShare(t *testing.T) {
	hung := []string{"greedy/repo-0", "greedy/repo-1", "greedy/repo-2", "greedy/repo-3", "greedy/repo-4", "greedy/repo-5"}
	assertShareLeftFree(t, &Poller{Workers: 4}, hung, "other/repo")
}

// assertShareLeftFree runs p with the syncs of hung hanging until the test ends, and asserts
// that they never hold more than half of p's workers and that other, set once they hold
// theirs, syncs at once.
func assertShareLeftFree(t *testing.T, p *Poller, hung []string, other string) {
	t.Helper()
	release := make(chan struct{})
	started := make(chan string, len(hung)+1)
	var mu sync.Mutex
	running, most := 0, 0
	p.Sync = func(ctx context.Context, key string) error {
		started <- key
		if !slices.Contains(hung, key) {
			return nil
		}
		mu.Lock()
		running++
		most = max(most, running)
		mu.Unlock()
		defer func() { mu.Lock(); running--; mu.Unlock() }()
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}
	for _, key := range hung {
		p.Set(key, Schedule{Interval: time.Hour})
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	defer func() { close(release); cancel(); <-done }()
	share := (p.Workers + 1) / 2
	for range share {
		<-started // the hung repositories' share
	}
	p.Set(other, Schedule{Interval: time.Hour})
	timeout := time.After(10 * time.Second)
	for {
		select {
		case key := <-started:
			if key != other {
				continue
			}
			mu.Lock()
			defer mu.Unlock()
			if most > share {
				t.Errorf("the hung repositories held %d of %d workers at once, want at most %d", most, p.Workers, share)
			}
			return
		case <-timeout:
			t.Fatalf("%s did not sync while the others hung", other)
		}
	}
}

// A repository whose server did not answer is retried as soon as the server answers another
// repository, not after its back-off, and at most once per RecoveryInterval; one that failed for
// its own reasons (a missing branch) keeps its back-off, as do repositories of other servers.
func TestPollerRetriesARepositoryOnceItsServerAnswersAgain(t *testing.T) {
	every15s := Schedule{Interval: 15 * time.Second}
	hosts := map[string]string{"a/flaky": "forge", "b/steady": "forge", "c/badref": "forge", "d/elsewhere": "other"}
	var mu sync.Mutex
	down := true
	h := startPollerOn(t, hosts, 4, map[string]Schedule{"a/flaky": every15s, "b/steady": {Interval: time.Hour}, "c/badref": every15s, "d/elsewhere": every15s}, func(key string) error {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case key == "c/badref":
			return errors.New("branch \"main\": reference not found")
		case key == "d/elsewhere":
			return MarkUnavailable(errors.New("503 from another server"))
		case down:
			return MarkUnavailable(errors.New("connection refused"))
		}
		return nil
	}, syncEvent{"a/flaky", 0}, syncEvent{"b/steady", 0}, syncEvent{"c/badref", 0}, syncEvent{"d/elsewhere", 0})
	// 15 s: the first retries, all failing again; back-off 30 s from here.
	h.advance(15*time.Second, syncEvent{"a/flaky", 15 * time.Second}, syncEvent{"c/badref", 15 * time.Second}, syncEvent{"d/elsewhere", 15 * time.Second})
	mu.Lock()
	down = false
	mu.Unlock()
	// The forge answers steady (a webhook): flaky follows at once; badref and elsewhere wait.
	h.advance(5 * time.Second)
	h.trigger("b/steady", syncEvent{"a/flaky", 20 * time.Second}, syncEvent{"b/steady", 20 * time.Second})
	// Down again for flaky alone, say: it fails; steady answering within RecoveryInterval does
	// not retry it; after it, it does.
	mu.Lock()
	down = true
	mu.Unlock()
	h.trigger("a/flaky", syncEvent{"a/flaky", 20 * time.Second})
	mu.Lock()
	down = false
	mu.Unlock()
	h.trigger("b/steady", syncEvent{"b/steady", 20 * time.Second})
	// elsewhere's server did not answer: it is asked again at its interval (15 s after its
	// last try), not after a back-off of 30 s.
	h.advance(RecoveryInterval, syncEvent{"d/elsewhere", 30 * time.Second})
	h.trigger("b/steady", syncEvent{"a/flaky", 20*time.Second + RecoveryInterval}, syncEvent{"b/steady", 20*time.Second + RecoveryInterval})
	// badref on its back-off (15 s + 30 s), elsewhere and flaky on their interval again.
	h.advance(45*time.Second-20*time.Second-RecoveryInterval, syncEvent{"a/flaky", 45 * time.Second}, syncEvent{"c/badref", 45 * time.Second}, syncEvent{"d/elsewhere", 45 * time.Second})
}

// One server's repositories never hold every worker, whichever tenants they belong to: with
// six of them hanging, each of another tenant, a repository elsewhere still syncs at once.
func TestPollerLeavesOtherServersTheirShare(t *testing.T) {
	var hung []string
	for i := range 6 {
		hung = append(hung, fmt.Sprintf("tenant-%d/hung", i))
	}
	p := &Poller{Workers: 4, Host: func(key string) string {
		if strings.HasSuffix(key, "/hung") {
			return "forge.internal"
		}
		return "github.com"
	}}
	assertShareLeftFree(t, p, hung, "other/repo")
}

// Of the repositories of a server that does not answer, one asks it again at its interval
// while the others back off; once it answers that one, the others follow at once.
func TestOneRepositoryProbesAServerThatDoesNotAnswer(t *testing.T) {
	clock := &fakeClock{now: monday}
	p := &Poller{Clock: clock, Rand: func() float64 { return 0 }}
	p.init()
	every15s := Schedule{Interval: 15 * time.Second}
	items := map[string]*pollItem{}
	for _, key := range []string{"a/one", "b/two", "c/three"} {
		items[key] = &pollItem{schedule: every15s, host: "forge", running: true}
		p.items[key] = items[key]
	}
	down := MarkUnavailable(errors.New("dial tcp: i/o timeout"))
	for round, wantProbe := range []time.Duration{15 * time.Second, 15 * time.Second, 15 * time.Second, 15 * time.Second} {
		for _, key := range []string{"a/one", "b/two", "c/three"} {
			items[key].running = true
			p.finish(items[key], down)
		}
		if got := items["a/one"].next.Sub(clock.now); got != wantProbe {
			t.Errorf("round %d: the probe (the first to fail) is due in %s, want %s", round, got, wantProbe)
		}
		for _, key := range []string{"b/two", "c/three"} {
			if backoff := every15s.Next(clock.now, items[key].failures, 0); !items[key].next.Equal(backoff) {
				t.Errorf("round %d: %s is due at %s, want its back-off's %s", round, key, items[key].next, backoff)
			}
		}
		clock.now = items["a/one"].next
	}
	if backoff := items["b/two"].next.Sub(clock.now); backoff < time.Minute {
		t.Fatalf("after four failures the others back off %s, want a minute or more", backoff)
	}
	// The server answers the probe: the others are due at once.
	items["a/one"].running = true
	p.finish(items["a/one"], nil)
	for _, key := range []string{"b/two", "c/three"} {
		if !items[key].next.Equal(clock.now) {
			t.Errorf("%s is due at %s once the server answered, want now (%s)", key, items[key].next, clock.now)
		}
	}
}
