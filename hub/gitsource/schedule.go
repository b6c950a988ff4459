package gitsource

import (
	"fmt"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/flotilla-dev/flotilla/rollout"
)

// DefaultInterval is how often a GitRepo is polled when it sets no interval or schedule.
const DefaultInterval = 15 * time.Second

// Schedule decides when a repository is synced next: every Interval (plus up to 10% jitter, so
// hundreds of repositories do not poll in step), or at the times of a cron schedule; after
// failures, with exponential back-off up to MaxBackoff.
type Schedule struct {
	Interval time.Duration
	// Cron, when set, replaces the interval: standard five-field specs or descriptors
	// (@hourly, @every 5m), evaluated in TimeZone (default UTC).
	Cron     string
	TimeZone string
	// MaxBackoff caps the wait after failures; default 5m.
	MaxBackoff time.Duration
	// Disabled stops the periodic syncs: the repository syncs when it is set or triggered, and
	// after a failure, backing off (a GitRepo's disablePolling).
	Disabled bool

	cron cron.Schedule
}

// Compile parses the cron schedule and time zone.
func (s *Schedule) Compile() error {
	if s.Cron == "" {
		return nil
	}
	spec := s.Cron
	if s.TimeZone != "" {
		if _, err := time.LoadLocation(s.TimeZone); err != nil {
			return fmt.Errorf("syncSchedule.timeZone: unknown time zone %q", s.TimeZone)
		}
		spec = "CRON_TZ=" + s.TimeZone + " " + spec
	}
	sched, err := cron.ParseStandard(spec)
	if err != nil {
		return fmt.Errorf("syncSchedule.cron: invalid schedule %q: %w", s.Cron, err)
	}
	s.cron = sched
	return nil
}

// Next is when to sync after a sync that ended at last; failures counts the consecutive failed
// syncs up to it, and rnd in [0, 1) draws the jitter.
func (s *Schedule) Next(last time.Time, failures int, rnd float64) time.Time {
	interval := s.Interval
	if interval <= 0 {
		interval = DefaultInterval
	}
	if failures > 0 {
		maxBackoff := s.MaxBackoff
		if maxBackoff <= 0 {
			maxBackoff = 5 * time.Minute
		}
		wait := interval
		for i := 1; i < failures && wait < maxBackoff; i++ {
			wait *= 2
		}
		wait = min(wait, maxBackoff)
		return last.Add(wait + time.Duration(float64(wait)*0.1*rnd))
	}
	if s.Disabled {
		return last.Add(disabledWait)
	}
	if s.cron != nil {
		return s.cron.Next(last)
	}
	return last.Add(interval + time.Duration(float64(interval)*0.1*rnd))
}

// disabledWait is "not until triggered" for a schedule that is Disabled.
const disabledWait = 100 * 365 * 24 * time.Hour

// SyncWindowKind says whether a window allows or denies releases.
type SyncWindowKind string

const (
	WindowAllow SyncWindowKind = "Allow"
	WindowDeny  SyncWindowKind = "Deny"
)

// SyncWindow allows or denies releasing new revisions while it is open.
type SyncWindow struct {
	Kind   SyncWindowKind
	Window rollout.Window

	avail rollout.Availability
}

// Compile parses the window's schedule.
func (w *SyncWindow) Compile() error {
	if w.Kind != WindowAllow && w.Kind != WindowDeny {
		return fmt.Errorf("kind %q is not Allow or Deny", w.Kind)
	}
	window := w.Window
	w.avail = rollout.Availability{Window: &window}
	if err := w.avail.Compile(); err != nil {
		return err
	}
	return nil
}

// ReleaseAllowed applies sync windows at now: an open Deny window always wins; with Allow
// windows, releases happen only inside one; without windows, always. The reason says which
// window decided and, when releases are held, when they can next happen.
func ReleaseAllowed(windows []SyncWindow, now time.Time) (bool, string) {
	hasAllow, inAllow := false, false
	for _, w := range windows {
		open := w.avail.OpenAt(now)
		switch {
		case w.Kind == WindowDeny && open:
			return false, fmt.Sprintf("deny window %q is open", w.Window.Schedule)
		case w.Kind == WindowAllow:
			hasAllow = true
			inAllow = inAllow || open
		}
	}
	if hasAllow && !inAllow {
		var next time.Time
		for _, w := range windows {
			if w.Kind != WindowAllow {
				continue
			}
			if t, ok := w.avail.NextOpening(now); ok && (next.IsZero() || t.Before(next)) {
				next = t
			}
		}
		return false, fmt.Sprintf("outside every allow window; the next opens at %s", next.UTC().Format(time.RFC3339))
	}
	return true, ""
}
