package rollout

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"
	_ "time/tzdata" // time zones resolve the same on every machine, without reading the host's files

	"github.com/robfig/cron/v3"
)

// Window is a recurring maintenance window (R3.13): it opens at each time of a cron schedule
// (five fields or a descriptor such as @daily) in a time zone, and stays open for Duration.
type Window struct {
	Schedule string   `json:"schedule"`
	Duration Duration `json:"duration"`
	TimeZone string   `json:"timeZone,omitempty"`
}

// TimeRange is an absolute range [Start, End), such as a maintenance exclusion.
type TimeRange struct {
	Name  string    `json:"name,omitempty"`
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
}

// Availability is when work may start on a cluster: inside its window (if it has one) and
// outside every exclusion (R3.13, R4.9).
type Availability struct {
	Window     *Window     `json:"maintenanceWindow,omitempty"`
	Exclusions []TimeRange `json:"exclusions,omitempty"`

	schedule cron.Schedule
	// invalid is why the window or exclusions do not compile: no work starts then (fail
	// closed), so a typo never lifts a freeze.
	invalid error
}

// InvalidAvailability is the availability of a cluster whose window or exclusions are invalid:
// closed, for the reason err gives (it should name the object and field).
func InvalidAvailability(err error) *Availability { return &Availability{invalid: err} }

// Compile parses the window's schedule and time zone. It must be called (or Validate must
// succeed) before the availability is used.
func (a *Availability) Compile() error {
	if a == nil {
		return nil
	}
	for i, x := range a.Exclusions {
		if !x.End.After(x.Start) {
			return &FieldError{Field: fmt.Sprintf("exclusions[%d]", i), Message: "end must be after start"}
		}
	}
	w := a.Window
	if w == nil {
		return nil
	}
	if time.Duration(w.Duration) <= 0 {
		return &FieldError{Field: "maintenanceWindow.duration", Message: "must be positive"}
	}
	loc := time.UTC
	if w.TimeZone != "" {
		var err error
		if loc, err = time.LoadLocation(w.TimeZone); err != nil {
			return &FieldError{Field: "maintenanceWindow.timeZone", Message: fmt.Sprintf("unknown time zone %q", w.TimeZone)}
		}
	}
	sched, err := cron.ParseStandard(w.Schedule)
	if err != nil {
		return &FieldError{Field: "maintenanceWindow.schedule", Message: fmt.Sprintf("invalid cron schedule %q: %v", w.Schedule, err)}
	}
	if spec, ok := sched.(*cron.SpecSchedule); ok {
		spec.Location = loc
	}
	a.schedule = sched
	return nil
}

// windowOpen reports whether the window is open at t: some opening o has o ≤ t < o + duration.
// The first opening after t − duration is the only candidate.
func (a *Availability) windowOpen(t time.Time) bool {
	if a != nil && a.invalid != nil {
		return false
	}
	if a == nil || a.schedule == nil {
		return true
	}
	o := a.schedule.Next(t.Add(-time.Duration(a.Window.Duration)))
	return !o.IsZero() && !o.After(t)
}

// excludedUntil returns the end of the exclusion covering t, or the zero time.
func (a *Availability) excludedUntil(t time.Time) time.Time {
	if a == nil {
		return time.Time{}
	}
	var until time.Time
	for _, x := range a.Exclusions {
		if !t.Before(x.Start) && t.Before(x.End) && x.End.After(until) {
			until = x.End
		}
	}
	return until
}

// OpenAt reports whether work may start at t.
func (a *Availability) OpenAt(t time.Time) bool {
	return a.windowOpen(t) && a.excludedUntil(t).IsZero()
}

// NextOpening returns the first moment at or after t when work may start, and false when none
// comes within a year (a schedule that never fires, or exclusions covering it all).
func (a *Availability) NextOpening(t time.Time) (time.Time, bool) {
	if a != nil && a.invalid != nil {
		return time.Time{}, false
	}
	limit := t.AddDate(1, 0, 0)
	for i := 0; i < 10000 && !t.After(limit); i++ {
		if until := a.excludedUntil(t); !until.IsZero() {
			t = until
			continue
		}
		if a.windowOpen(t) {
			return t, true
		}
		next := a.schedule.Next(t)
		if next.IsZero() {
			return time.Time{}, false
		}
		t = next
	}
	return time.Time{}, false
}

// windowRank orders clusters within a group (R3.13): window open now (0), opening within 4
// hours (1), no window (2), closed for longer (3).
func (a *Availability) windowRank(now time.Time) int {
	if a != nil && a.invalid != nil {
		return 3
	}
	if a == nil || (a.Window == nil && len(a.Exclusions) == 0) {
		return 2
	}
	if a.OpenAt(now) {
		return 0
	}
	if next, ok := a.NextOpening(now); ok && next.Sub(now) <= 4*time.Hour {
		return 1
	}
	return 3
}

// Reason says why work cannot start on the cluster at now, or "" when it can.
func (a *Availability) Reason(now time.Time) string {
	if a.OpenAt(now) {
		return ""
	}
	return a.closedMessage(now)
}

// closedMessage says why work cannot start on the cluster now, naming the next opening.
func (a *Availability) closedMessage(now time.Time) string {
	if a.invalid != nil {
		return "no work starts while the maintenance window is invalid: " + a.invalid.Error()
	}
	what := "maintenance window closed"
	if until := a.excludedUntil(now); !until.IsZero() {
		what = "maintenance exclusion in force"
	}
	if next, ok := a.NextOpening(now); ok {
		return fmt.Sprintf("%s; next opening %s", what, next.UTC().Format(time.RFC3339))
	}
	return what + "; no opening within a year"
}

// Duration is a time.Duration written as a Go duration string ("1h30m"), as Kubernetes writes
// metav1.Duration.
type Duration time.Duration

// UnmarshalJSON reads "1h30m".
func (d *Duration) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("want a duration such as \"1h30m\", got %s", data)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("invalid duration %q", s)
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes "1h30m0s".
func (d Duration) MarshalJSON() ([]byte, error) {
	return []byte(`"` + time.Duration(d).String() + `"`), nil
}

// sortByWindow orders indexes by window rank, keeping the given order among equals.
func sortByWindow(idx []int, rank func(int) int) {
	slices.SortStableFunc(idx, func(a, b int) int { return rank(a) - rank(b) })
}
