package rollout

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// RunRef summarises an existing run of a bundle for PlanAutoRuns and Superseding.
type RunRef struct {
	Name     string
	Revision int64
	// Auto: the run was created by PlanAutoRuns' decision, not by a person.
	Auto   bool
	State  RunState
	Action RunAction
	// Started is when the run was last set running; zero while it has not started yet.
	Started time.Time
	// Created is when the run was created; it orders runs started in the same instant.
	Created time.Time
	// SupersededBy names the run that replaced it already, if any.
	SupersededBy string
}

// AutoRunName is the name of the automatic run of a revision.
func AutoRunName(bundle string, revision int64) string {
	return fmt.Sprintf("%s-r%d", bundle, revision)
}

// PlanAutoRuns applies R3.14 for a bundle whose staged rollout starts runs by itself: it returns
// the name of the run to create and start for the latest revision, or "" when that revision has
// a run already. Superseding then stops whatever that run replaces.
func PlanAutoRuns(bundle string, latest int64, runs []RunRef) string {
	name := AutoRunName(bundle, latest)
	for _, r := range runs {
		if r.Revision == latest || r.Name == name {
			return ""
		}
	}
	return name
}

// inFlight: the run is set running, is not finished, stopped or replaced: it may release.
func (r *RunRef) inFlight() bool {
	return r.Action == ActionRun && !r.State.Terminal() && r.State != RunStopped && r.SupersededBy == ""
}

// Superseding keeps one rollout per bundle (R3.14, for every run): of the runs in flight, the
// newest intent wins: the one set running last, a run about to start (not started yet) counting
// as set running now, ties going to the one created last. It returns that run and the others in
// flight, which must stop (clusters in flight finish) and say by what. Runs a person created,
// rollback runs and automatic runs are alike: the newest decision is the one that holds.
func Superseding(runs []RunRef, now time.Time) (current string, superseded []string) {
	var flying []*RunRef
	for i := range runs {
		if runs[i].inFlight() {
			flying = append(flying, &runs[i])
		}
	}
	if len(flying) == 0 {
		return "", nil
	}
	newest := slices.MaxFunc(flying, func(a, b *RunRef) int { return compareIntent(a, b, now) })
	for _, r := range flying {
		if r != newest {
			superseded = append(superseded, r.Name)
		}
	}
	slices.Sort(superseded)
	return newest.Name, superseded
}

// CurrentRun is the run a staged bundle's status follows: the one in flight that holds the
// rollout, else the newest intent among all runs (a finished one, usually).
func CurrentRun(runs []RunRef, now time.Time) string {
	if current, _ := Superseding(runs, now); current != "" || len(runs) == 0 {
		return current
	}
	refs := make([]*RunRef, len(runs))
	for i := range runs {
		refs[i] = &runs[i]
	}
	return slices.MaxFunc(refs, func(a, b *RunRef) int { return compareIntent(a, b, now) }).Name
}

// compareIntent orders runs by when they were set running (a run not started yet counts as
// now), then by creation, then by name.
func compareIntent(a, b *RunRef, now time.Time) int {
	intent := func(r *RunRef) time.Time {
		if r.Started.IsZero() || r.State == RunNotStarted || r.State == "" {
			return now
		}
		return r.Started
	}
	if c := intent(a).Compare(intent(b)); c != 0 {
		return c
	}
	if c := a.Created.Compare(b.Created); c != 0 {
		return c
	}
	return strings.Compare(a.Name, b.Name)
}
