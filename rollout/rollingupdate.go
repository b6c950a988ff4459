package rollout

import (
	"fmt"
	"slices"
	"time"
)

// planRollingUpdate is §2. It keeps two invariants (R2.4) while the picked set and the revision
// change:
//
//	available ≥ N − maxUnavailable     (updates and removals spend this budget)
//	carrying  ≤ N + maxSurge           (new clusters spend this one)
//
// Moves that cost nothing come first: removing or updating clusters that are unavailable anyway
// (a failed cluster never holds the budget, R2.6). Then new clusters get the workload before
// deselected ones lose it. A cluster counts as available only unavailablePeriodSeconds after its
// apply succeeded (R2.5); the decision says when that next happens (RequeueAfter).
func planRollingUpdate(in *Input, sorted []*Target) *Decision {
	rev := in.Revision
	p := in.Placement
	ru := RollingUpdate{}
	if p.RollingUpdate != nil {
		ru = *p.RollingUpdate
	}
	period := time.Duration(DefaultUnavailablePeriodSecond) * time.Second
	if ru.UnavailablePeriodSeconds != nil {
		period = time.Duration(*ru.UnavailablePeriodSeconds) * time.Second
	}
	selected, n, warnings := pick(p, sorted)
	maxUnavailable := ru.MaxUnavailable.Or(DefaultRollingMaxUnavailable).ScaleUp(n)
	maxSurge := ru.MaxSurge.Or(DefaultRollingMaxSurge).ScaleUp(n)

	plan := &Decision{N: n, MaxUnavailable: maxUnavailable, MaxSurge: maxSurge, Warnings: warnings, Clusters: make([]ClusterStatus, len(sorted))}
	carrying := make([]bool, len(sorted))
	available := make([]bool, len(sorted))
	release := make([]bool, len(sorted))
	remove := make([]bool, len(sorted))
	nAvailable, nCarrying := 0, 0
	judged := in.judgedNow() && len(ru.Analysis) > 0
	for i, t := range sorted {
		plan.Clusters[i].Name = t.Cluster
		d := t.Deployment
		if d == nil || d.Released == 0 {
			continue
		}
		carrying[i] = true
		nCarrying++
		if unavailable(t, rev) {
			continue // an ineligible cluster counts on what it still runs (R1.15)
		}
		if judged && judgedOn(d, rev) {
			// A cluster on the revision counts as available once its checks passed (R7.8).
			plan.Analysis = activate(plan.Analysis, ru.Analysis, rev, "", []string{t.Cluster})
			if analysisHolds(d, true) {
				continue
			}
		}
		if at := settledAt(d, period); at.After(in.Now) {
			plan.RequeueAfter = requeueAt(plan.RequeueAfter, in.Now, at)
			continue
		}
		available[i] = true
		nAvailable++
	}
	down := nAvailable - (n - maxUnavailable) // how many available clusters may go down
	up := n + maxSurge - nCarrying            // how many more clusters may carry the workload

	needsUpdate := func(i int) bool { return selected[i] && carrying[i] && sorted[i].Deployment.Released != rev }
	availWait := fmt.Sprintf("maxUnavailable: %d of %d clusters available, at least N−maxUnavailable = %d must stay available (R2.4)", nAvailable, n, n-maxUnavailable)
	wait := func(i int, reason string) { plan.Clusters[i].Wait = reason }
	switch {
	case in.Paused:
		for i := range sorted {
			if selected[i] && (!carrying[i] || needsUpdate(i)) {
				wait(i, "bundle is paused (R1.13)")
			}
		}
		plan.Paused = "bundle is paused (R1.13)"
	default:
		// 1. Free moves: clusters that are unavailable anyway.
		for i := range sorted {
			switch {
			case carrying[i] && !selected[i] && !available[i]:
				remove[i] = true
				up++
			case needsUpdate(i) && !available[i] && sorted[i].held() == "":
				release[i] = true
			}
		}
		// 2. New clusters, within the surge.
		for i, t := range sorted {
			if !selected[i] || carrying[i] {
				continue
			}
			switch {
			case t.held() != "":
				wait(i, t.held())
			case up <= 0:
				wait(i, fmt.Sprintf("maxSurge: %d clusters carry the workload, at most N+maxSurge = %d (R2.4)", n+maxSurge-up, n+maxSurge))
			default:
				release[i] = true
				up--
			}
		}
		// 3. Deselected available clusters, then updates, within the availability budget.
		for i := range sorted {
			if carrying[i] && !selected[i] && available[i] {
				if down > 0 {
					remove[i] = true
					down--
				} else {
					wait(i, "leaving: "+availWait)
				}
			}
		}
		for i, t := range sorted {
			if !needsUpdate(i) || release[i] {
				continue
			}
			switch {
			case t.held() != "":
				wait(i, t.held())
			case down > 0:
				release[i] = true
				down--
			default:
				wait(i, availWait)
			}
		}
	}

	complete := true
	for i, t := range sorted {
		c := &plan.Clusters[i]
		c.State = stateAfter(t, rev, release[i])
		c.Unavailable = (selected[i] || carrying[i]) && (!available[i] || release[i])
		switch {
		case release[i]:
			plan.Release = append(plan.Release, t.Cluster)
		case remove[i]:
			plan.Remove = append(plan.Remove, t.Cluster)
			c.Wait = ""
		case !selected[i] && !carrying[i]:
			c.Wait = fmt.Sprintf("not picked by placement %s", placementType(p))
		}
		if (selected[i] && (!available[i] || release[i] || t.Deployment.Released != rev)) || (carrying[i] && !selected[i]) {
			complete = false
		}
	}
	if plan.Paused == "" && !complete && len(plan.Release) == 0 && len(plan.Remove) == 0 {
		for i, c := range plan.Clusters {
			if c.Wait != "" && (selected[i] || carrying[i]) {
				plan.Paused = c.Wait
				break
			}
		}
	}
	plan.Complete = complete
	return plan
}

// pick applies the placement (R2.1) and returns the picked targets and N (R2.2).
//
// The affinity's required terms admit clusters for PickAll and PickN. PickN prefers clusters
// that already carry the workload, so a stable fleet does not move, then the clusters its
// preferred terms weigh the most, then takes the others in name order. N is numberOfClusters (PickN) or the number of names
// (PickFixed) even when fewer clusters can be picked: the budgets of R2.4 are the ones the
// bundle asked for. With a shortfall, N − maxUnavailable may be out of reach and hold updates
// until enough clusters match; the warning says so, and unavailable clusters are still updated
// (they cost no budget, R2.6).
func pick(p *Placement, sorted []*Target) (selected []bool, n int, warnings []Warning) {
	selected = make([]bool, len(sorted))
	switch placementType(p) {
	case PickAll:
		for i, t := range sorted {
			if !t.Excluded && p.Affinity.required(t.Labels) {
				selected[i] = true
				n++
			}
		}
	case PickN:
		n = *p.NumberOfClusters
		order := make([]int, 0, len(sorted))
		for i, t := range sorted {
			if !t.Excluded && p.Affinity.required(t.Labels) {
				order = append(order, i)
			}
		}
		carries := func(i int) bool { return sorted[i].Deployment != nil && sorted[i].Deployment.Released != 0 }
		slices.SortStableFunc(order, func(a, b int) int {
			if c := boolRank(carries(b)) - boolRank(carries(a)); c != 0 {
				return c
			}
			return p.Affinity.score(sorted[b].Labels) - p.Affinity.score(sorted[a].Labels)
		})
		for _, i := range order[:min(n, len(order))] {
			selected[i] = true
		}
		if len(order) < n {
			warnings = append(warnings, Warning{WarnPlacementShort, fmt.Sprintf("placement PickN wants %d clusters but only %d match; N stays %d (R2.2)", n, len(order), n)})
		}
	case PickFixed:
		n = len(p.ClusterNames)
		index := make(map[string]int, len(sorted))
		for i, t := range sorted {
			if !t.Excluded {
				index[t.Cluster] = i
			}
		}
		var missing []string
		for _, name := range p.ClusterNames {
			if i, ok := index[name]; ok {
				selected[i] = true
			} else {
				missing = append(missing, name)
			}
		}
		if len(missing) > 0 {
			warnings = append(warnings, Warning{WarnPlacementShort, fmt.Sprintf("placement PickFixed names clusters that are not targeted: %s; N stays %d (R2.2)", abbreviate(missing, 5), n)})
		}
	}
	return selected, n, warnings
}

func placementType(p *Placement) PlacementType {
	if p.Type == "" {
		return PickAll
	}
	return p.Type
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}

func firstWait(clusters []ClusterStatus) string {
	for _, c := range clusters {
		if c.Wait != "" {
			return c.Wait
		}
	}
	return ""
}
