package rollout

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func mustAvailability(t *testing.T, a *Availability) *Availability {
	t.Helper()
	if err := a.Compile(); err != nil {
		t.Fatal(err)
	}
	return a
}

func TestR3_13_MaintenanceWindow(t *testing.T) {
	berlin, _ := time.LoadLocation("Europe/Berlin")
	// 02:00–06:00 Berlin every day.
	a := mustAvailability(t, &Availability{Window: &Window{Schedule: "0 2 * * *", Duration: Duration(4 * time.Hour), TimeZone: "Europe/Berlin"}})
	day := func(h, m int) time.Time { return time.Date(2026, 1, 14, h, m, 0, 0, berlin) }
	cases := []struct {
		at   time.Time
		open bool
		next time.Time
	}{
		{day(1, 59), false, day(2, 0)},
		{day(2, 0), true, day(2, 0)},
		{day(5, 59), true, day(5, 59)},
		{day(6, 0), false, day(2, 0).AddDate(0, 0, 1)},
		{day(23, 0), false, day(2, 0).AddDate(0, 0, 1)},
	}
	for _, c := range cases {
		if got := a.OpenAt(c.at); got != c.open {
			t.Errorf("OpenAt(%s) = %v, want %v", c.at.Format("15:04"), got, c.open)
		}
		next, ok := a.NextOpening(c.at)
		if !ok || !next.Equal(c.next) {
			t.Errorf("NextOpening(%s) = %s, want %s", c.at.Format("15:04"), next, c.next)
		}
	}
}

func TestR3_13_Exclusions(t *testing.T) {
	start := time.Date(2026, 12, 20, 0, 0, 0, 0, time.UTC)
	end := time.Date(2027, 1, 4, 0, 0, 0, 0, time.UTC)
	a := mustAvailability(t, &Availability{Exclusions: []TimeRange{{Name: "freeze", Start: start, End: end}}})
	if a.OpenAt(start.Add(time.Hour)) || !a.OpenAt(end) || !a.OpenAt(start.Add(-time.Second)) {
		t.Errorf("exclusion [start, end) not honoured")
	}
	if next, _ := a.NextOpening(start); !next.Equal(end) {
		t.Errorf("next opening during the freeze = %s, want %s", next, end)
	}
	msg := a.closedMessage(start.Add(time.Hour))
	if !strings.Contains(msg, "exclusion") || !strings.Contains(msg, "2027-01-04T00:00:00Z") {
		t.Errorf("message = %q", msg)
	}
	// With a window: the exclusion ends mid-window (window 00:00–12:00 UTC daily).
	b := mustAvailability(t, &Availability{Window: &Window{Schedule: "@daily", Duration: Duration(12 * time.Hour)}, Exclusions: []TimeRange{{Start: start, End: end.Add(6 * time.Hour)}}})
	if next, _ := b.NextOpening(start); !next.Equal(end.Add(6 * time.Hour)) {
		t.Errorf("next opening = %s, want the end of the exclusion inside the window", next)
	}
}

func TestR3_13_WindowRank(t *testing.T) {
	now := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	w := func(hour int) *Availability {
		return mustAvailability(t, &Availability{Window: &Window{Schedule: fmt.Sprintf("0 %d * * *", hour), Duration: Duration(time.Hour)}})
	}
	cases := []struct {
		name string
		a    *Availability
		rank int
	}{
		{"open now", w(10), 0},
		{"opening within 4 hours", w(13), 1},
		{"no window", nil, 2},
		{"closed", w(20), 3},
	}
	for _, c := range cases {
		if got := c.a.windowRank(now); got != c.rank {
			t.Errorf("%s: rank %d, want %d", c.name, got, c.rank)
		}
	}
}

func TestWindowValidation(t *testing.T) {
	cases := map[string]*Availability{
		"maintenanceWindow.schedule": {Window: &Window{Schedule: "every day", Duration: Duration(time.Hour)}},
		"maintenanceWindow.timeZone": {Window: &Window{Schedule: "@daily", Duration: Duration(time.Hour), TimeZone: "Mars/Olympus"}},
		"maintenanceWindow.duration": {Window: &Window{Schedule: "@daily"}},
		"exclusions[0]":              {Exclusions: []TimeRange{{Start: time.Unix(10, 0), End: time.Unix(5, 0)}}},
	}
	for field, a := range cases {
		if err := a.Compile(); err == nil || !strings.HasPrefix(err.Error(), field) {
			t.Errorf("%s: error %v", field, err)
		}
	}
}
