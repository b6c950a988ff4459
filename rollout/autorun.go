package rollout

import "fmt"

// RunRef summarises an existing run of a bundle for PlanAutoRuns.
type RunRef struct {
	Name     string
	Revision int64
	// Auto: the run was created by PlanAutoRuns' decision, not by a person.
	Auto  bool
	State RunState
}

// AutoRunDecision is what R3.14 asks for.
type AutoRunDecision struct {
	// Create is the name of the run to create and start for the latest revision, or "".
	Create string
	// Supersede are automatic runs of older revisions still in flight: each must stop (clusters
	// in flight finish) and record that Create superseded it.
	Supersede []string
}

// AutoRunName is the name of the automatic run of a revision.
func AutoRunName(bundle string, revision int64) string {
	return fmt.Sprintf("%s-r%d", bundle, revision)
}

// PlanAutoRuns applies R3.14 for a bundle whose staged rollout starts runs by itself: one run
// per new revision, and a newer revision supersedes automatic runs still in flight. Runs a
// person created are never superseded: they are that person's decision.
func PlanAutoRuns(bundle string, latest int64, runs []RunRef) AutoRunDecision {
	var d AutoRunDecision
	name := AutoRunName(bundle, latest)
	exists := false
	for _, r := range runs {
		if r.Revision == latest || r.Name == name {
			exists = true
		}
	}
	if !exists {
		d.Create = name
	}
	for _, r := range runs {
		if r.Auto && r.Revision < latest && !r.State.Terminal() && r.State != RunStopped {
			d.Supersede = append(d.Supersede, r.Name)
		}
	}
	return d
}
