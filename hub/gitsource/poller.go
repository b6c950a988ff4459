package gitsource

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// Clock is the poller's time source; tests pass a simulated one.
type Clock interface {
	Now() time.Time
	// Timer returns a channel that receives once d has passed, and a stop that releases it
	// when the poller no longer waits for it.
	Timer(d time.Duration) (<-chan time.Time, func())
}

// RealClock is the wall clock.
type RealClock struct{}

func (RealClock) Now() time.Time { return time.Now() }

func (RealClock) Timer(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTimer(d)
	return t.C, func() { t.Stop() }
}

// Poller syncs many repositories on their schedules with a bounded number of workers. A
// webhook's Trigger runs a sync as soon as a worker is free; a trigger during a sync runs it
// again right after, so no push is missed.
type Poller struct {
	// Sync does one sync; an error counts as a failure for back-off.
	Sync func(ctx context.Context, key string) error
	// Workers bounds concurrent syncs; default DefaultPollWorkers.
	Workers int
	// Tenant names the tenant a key belongs to; default the part of the key before its first
	// "/" (a GitRepo's namespace). A tenant's syncs hold at most half of the workers (rounded
	// up), so one tenant's slow repositories leave the others workers to sync on.
	Tenant func(key string) string
	// Host names the server a key's repository is fetched from (HostOf its URL); default none.
	// One host's syncs hold at most half of the workers too, so a server that hangs for every
	// tenant (a self-hosted forge, a proxy) leaves the other servers' repositories workers; and
	// a sync of a host that succeeds makes its repositories that failed because the server did
	// not answer (ServerUnavailable) due at once, each at most once per RecoveryInterval, rather
	// than waiting out their back-off.
	Host func(key string) string
	// Clock defaults to the wall clock; Rand (in [0,1)) draws jitter.
	Clock Clock
	Rand  func() float64
	// Log records syncs that panicked (with their stack); default discards.
	Log logr.Logger

	mu    sync.Mutex
	items map[string]*pollItem
	// unavailable counts, per host, the items whose last sync found the server unavailable:
	// a success looks for items to recover only where there are some.
	unavailable map[string]int
	// probes holds, per server that did not answer, when one of its repositories asks it
	// again (scheduleProbe).
	probes map[string]time.Time
	wake   chan struct{}
	// idle, when set (tests), is called each time the loop waits with no sync running and its
	// timer armed: from then on, nothing happens until the clock moves or a key is set or
	// triggered.
	idle func()
}

type pollItem struct {
	schedule  Schedule
	next      time.Time
	failures  int
	running   bool
	triggered bool
	removed   bool
	// host is the item's server as of its last dispatch; unavailable, the host that did not
	// answer its last sync, if that is why it failed; recovered, when it was last made due
	// because the server answered another repository.
	host        string
	unavailable string
	recovered   time.Time
}

// DefaultPollWorkers is how many syncs run at once unless the hub is told otherwise
// (--poll-workers): most of a sync is waiting for a git server.
const DefaultPollWorkers = 8

// RecoveryInterval: a repository made due because its server answered another one is retried
// so at most this often, so that a repository whose own path fails (a 503 for it alone) does not
// sync at every success of its neighbours.
const RecoveryInterval = 10 * time.Second

func (p *Poller) init() {
	if p.items == nil {
		p.items = map[string]*pollItem{}
		p.unavailable = map[string]int{}
		p.probes = map[string]time.Time{}
		p.wake = make(chan struct{}, 1)
	}
	if p.Clock == nil {
		p.Clock = RealClock{}
	}
	if p.Rand == nil {
		p.Rand = rand.Float64
	}
}

func (p *Poller) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Set adds a repository or changes its schedule; either way it syncs at once.
func (p *Poller) Set(key string, s Schedule) {
	p.mu.Lock()
	p.init()
	if it, ok := p.items[key]; ok {
		// A new schedule takes effect now: sync at once, then follow it.
		it.schedule = s
		if !it.running {
			it.next = p.Clock.Now()
		}
	} else {
		p.items[key] = &pollItem{schedule: s, next: p.Clock.Now()}
	}
	p.mu.Unlock()
	p.signal()
}

// Remove stops syncing a repository.
func (p *Poller) Remove(key string) {
	p.mu.Lock()
	p.init()
	if it, ok := p.items[key]; ok {
		it.removed = true
		p.markUnavailable(it, false)
		delete(p.items, key)
	}
	p.mu.Unlock()
}

// Trigger syncs a repository as soon as possible (a webhook arrived).
func (p *Poller) Trigger(key string) {
	p.mu.Lock()
	p.init()
	if it, ok := p.items[key]; ok {
		if it.running {
			it.triggered = true
		} else {
			it.next = p.Clock.Now()
		}
	}
	p.mu.Unlock()
	p.signal()
}

// Run dispatches due syncs until ctx ends, then waits for running syncs.
func (p *Poller) Run(ctx context.Context) {
	p.mu.Lock()
	p.init()
	p.mu.Unlock()
	workers := p.Workers
	if workers <= 0 {
		workers = DefaultPollWorkers
	}
	slots := make(chan struct{}, workers)
	share := (workers + 1) / 2
	running := map[string]int{}     // syncs running per tenant, under p.mu
	runningHost := map[string]int{} // and per host
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		p.mu.Lock()
		now := p.Clock.Now()
		var wait time.Duration = -1
		busy := false
		var due []string
		for key, it := range p.items {
			if it.running {
				busy = true
				continue
			}
			if d := it.next.Sub(now); d > 0 {
				if wait < 0 || d < wait {
					wait = d
				}
				continue
			}
			due = append(due, key)
		}
		// The longest due first; a tenant or a host at its share waits for one of its own to
		// finish (which wakes the loop), whatever workers are free.
		slices.SortFunc(due, func(a, b string) int { return p.items[a].next.Compare(p.items[b].next) })
		for _, key := range due {
			it, tenant := p.items[key], p.tenant(key)
			if p.Host != nil {
				it.host = p.Host(key)
			}
			if running[tenant] >= share || (it.host != "" && runningHost[it.host] >= share) {
				continue
			}
			select {
			case slots <- struct{}{}:
			default:
				continue // all workers busy: a finishing one wakes the loop
			}
			it.running, busy = true, true
			running[tenant]++
			runningHost[it.host]++
			wg.Add(1)
			go func(key, tenant string, it *pollItem) {
				defer wg.Done()
				err := p.sync(ctx, key)
				<-slots
				p.mu.Lock()
				running[tenant]--
				runningHost[it.host]--
				p.mu.Unlock()
				p.finish(it, err)
			}(key, tenant, it)
		}
		p.mu.Unlock()
		var timer <-chan time.Time
		stop := func() {}
		if wait >= 0 {
			timer, stop = p.Clock.Timer(wait)
		}
		if !busy && p.idle != nil {
			select {
			case <-p.wake: // a finish or a Set came meanwhile: look again before going idle
				stop()
				continue
			default:
				p.idle()
			}
		}
		select {
		case <-ctx.Done():
		case <-p.wake:
		case <-timer:
		}
		stop()
		if ctx.Err() != nil {
			return
		}
	}
}

func (p *Poller) tenant(key string) string {
	if p.Tenant != nil {
		return p.Tenant(key)
	}
	tenant, _, _ := strings.Cut(key, "/")
	return tenant
}

// sync runs one sync, turning a panic into its error: one repository that crashes its sync must
// not take the hub, or the other repositories' polls, with it.
func (p *Poller) sync(ctx context.Context, key string) (err error) {
	defer func() {
		if r := recover(); r != nil {
			perr := &PanicError{Value: r, Stack: debug.Stack()}
			p.Log.Error(perr, "sync panicked", "gitrepo", key, "stack", string(perr.Stack))
			err = perr
		}
	}()
	return p.Sync(ctx, key)
}

// recoverHost makes the repositories of host that failed because it did not answer due now: it
// answered another. Under p.mu.
func (p *Poller) recoverHost(host string, now time.Time) {
	if host == "" || p.unavailable[host] == 0 {
		return
	}
	recovered := 0
	for _, it := range p.items {
		if it.unavailable == host && !it.running && it.next.After(now) && now.Sub(it.recovered) >= RecoveryInterval {
			it.next, it.recovered = now, now
			recovered++
		}
	}
	if recovered > 0 {
		p.Log.Info("a git server answers again: its repositories that failed for it sync now, not after their back-off", "host", host, "repositories", recovered)
		p.signal()
	}
}

// markUnavailable records whether the item's server was unavailable at its last sync, keeping
// the count per host. Under p.mu.
func (p *Poller) markUnavailable(it *pollItem, unavailable bool) {
	if it.unavailable != "" {
		if p.unavailable[it.unavailable]--; p.unavailable[it.unavailable] <= 0 {
			delete(p.unavailable, it.unavailable)
			delete(p.probes, it.unavailable)
		}
		it.unavailable = ""
	}
	if unavailable && it.host != "" {
		it.unavailable = it.host
		p.unavailable[it.host]++
	}
}

// scheduleProbe makes it, which failed because its server did not answer, the server's probe
// when no other repository of the server is due to ask it sooner: it is asked again after the
// repository's interval (at least RecoveryInterval), not after a back-off grown through the
// outage. Once the server answers the probe, the others, backing off, follow (recoverHost): a
// server's repositories sync within that interval of its answering again, and a server that
// hangs costs one sync per interval, not one per repository.
func (p *Poller) scheduleProbe(it *pollItem, now time.Time) {
	if due, probing := p.probes[it.unavailable]; probing && due.After(now) {
		return
	}
	if probe := now.Add(max(it.schedule.Interval, RecoveryInterval)); probe.Before(it.next) {
		it.next = probe
	}
	p.probes[it.unavailable] = it.next
}

// PanicError is a sync that panicked.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("the sync failed unexpectedly: %v", e.Value) }

func (p *Poller) finish(it *pollItem, err error) {
	p.mu.Lock()
	now := p.Clock.Now()
	it.running = false
	p.markUnavailable(it, err != nil && ServerUnavailable(err))
	if err != nil {
		it.failures++
	} else {
		it.failures = 0
		p.recoverHost(it.host, now)
	}
	switch {
	case it.triggered:
		it.triggered, it.next = false, now
	default:
		it.next = it.schedule.Next(now, it.failures, p.Rand())
		if it.unavailable != "" {
			p.scheduleProbe(it, now)
		}
	}
	// Signalled before unlocking: the loop that sees this sync no longer running also sees
	// its wake-up.
	p.signal()
	p.mu.Unlock()
}
