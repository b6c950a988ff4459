package rollout

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestR3_14_RunsStartThemselves(t *testing.T) {
	cases := []struct {
		name   string
		latest int64
		runs   []RunRef
		want   string
	}{
		{"first revision", 1, nil, "web-r1"},
		{"run exists", 1, []RunRef{{Name: "web-r1", Revision: 1, Auto: true, State: RunRunning}}, ""},
		{"a person's run of the revision counts", 2, []RunRef{{Name: "mine", Revision: 2, State: RunRunning}}, ""},
		{"newer revision", 2, []RunRef{{Name: "web-r1", Revision: 1, Auto: true, State: RunRunning}}, "web-r2"},
	}
	for _, c := range cases {
		if got := PlanAutoRuns("web", c.latest, c.runs); got != c.want {
			t.Errorf("%s: create %q, want %q", c.name, got, c.want)
		}
	}
}

// R3.14 extended to every run: one rollout per bundle, the newest intent wins.
func TestR3_14_NewestIntentSupersedesEveryOtherRun(t *testing.T) {
	now := t0.Add(time.Hour)
	running := func(name string, started time.Duration, auto bool) RunRef {
		return RunRef{Name: name, Auto: auto, Action: ActionRun, State: RunRunning, Started: t0.Add(started), Created: t0}
	}
	cases := []struct {
		name       string
		runs       []RunRef
		current    string
		superseded []string
	}{
		{"one run", []RunRef{running("a", 0, true)}, "a", nil},
		{"a newer revision's run supersedes a person's run", []RunRef{running("mine", 0, false), {Name: "web-r3", Auto: true, Action: ActionRun, Created: now}}, "web-r3", []string{"mine"}},
		{"a rollback run supersedes the automatic run", []RunRef{running("web-r3", 0, true), {Name: "rollback", Action: ActionRun, Created: now}}, "rollback", []string{"web-r3"}},
		{"a person starting an older run makes it the newest intent",
			[]RunRef{running("web-r3", time.Minute, true), {Name: "mine", Action: ActionRun, State: RunNotStarted, Created: t0.Add(-time.Hour)}}, "mine", []string{"web-r3"}},
		{"the run started last wins", []RunRef{running("a", 2*time.Minute, false), running("b", time.Minute, false)}, "a", []string{"b"}},
		{"the same start: the run created last wins", []RunRef{running("a", 0, false), {Name: "b", Action: ActionRun, State: RunRunning, Started: t0, Created: t0.Add(time.Second)}}, "b", []string{"a"}},
		{"runs not in flight take no part",
			[]RunRef{running("a", 0, false), {Name: "done", Action: ActionRun, State: RunCompleted}, {Name: "stopped", Action: ActionStop, State: RunStopped},
				{Name: "planned", Action: ActionInitialize, State: RunNotStarted, Created: now}, {Name: "old", Action: ActionRun, State: RunStopping, SupersededBy: "a"}},
			"a", nil},
	}
	for _, c := range cases {
		current, superseded := Superseding(c.runs, now)
		if current != c.current || !cmp.Equal(superseded, c.superseded) {
			t.Errorf("%s: current %q superseded %v; want %q %v", c.name, current, superseded, c.current, c.superseded)
		}
	}
}

// The run a staged bundle's status follows: the one holding the rollout, else the newest.
func TestR3_14_CurrentRun(t *testing.T) {
	now := t0.Add(time.Hour)
	done := func(name string, started time.Duration) RunRef {
		return RunRef{Name: name, Action: ActionRun, State: RunCompleted, Started: t0.Add(started), Created: t0}
	}
	if got := CurrentRun([]RunRef{done("old", 0), done("new", time.Minute)}, now); got != "new" {
		t.Errorf("no run in flight: %q, want the one started last", got)
	}
	flying := RunRef{Name: "flying", Action: ActionRun, State: RunRunning, Started: t0, Created: t0}
	if got := CurrentRun([]RunRef{done("new", time.Minute), flying}, now); got != "flying" {
		t.Errorf("a run in flight: %q, want it", got)
	}
	if got := CurrentRun(nil, now); got != "" {
		t.Errorf("no runs: %q", got)
	}
}
