package rollout

import (
	"fmt"
	"math"
	"time"
)

// §5 for continuous rollouts (§1 partitions, §2 placements): Plan judges the revision after
// each pass, and rolls a quarantined one back.

// budgetGroup is a set of targets and how many of them may be unavailable: a partition and
// its maxUnavailable (§1), or a placement's clusters and its maxUnavailable (§2).
type budgetGroup struct {
	name      string
	members   []int
	threshold int
}

// budgetGroups are the groups failures and restores are counted in, in rollout order (the
// pass's partitions, or the placement's clusters), and the global maxUnavailable over them.
func budgetGroups(in *Input, sorted []*Target, d *Decision, parts []partition) ([]budgetGroup, int) {
	if in.Placement != nil {
		all := make([]int, len(sorted))
		for i := range all {
			all[i] = i
		}
		return []budgetGroup{{name: "placement", members: all, threshold: d.MaxUnavailable}}, d.MaxUnavailable
	}
	// The pass's own partitions.
	groups := make([]budgetGroup, len(parts))
	for i, p := range parts {
		groups[i] = budgetGroup{name: "partition " + p.name, members: p.members, threshold: p.threshold}
	}
	return groups, d.MaxUnavailable
}

// judge applies R5.1–R5.3 to a continuous rollout: clusters that fail the revision (an apply
// that failed, a regression under onRegression Fail, not Ready since their release) and have
// done so for failureTimeout fail it once they are more than a partition's (or the global)
// maxUnavailable tolerates. Regressions count while the rollout goes on and within the health
// window after it completed. It returns the failure, or nil and when to look again (zero when
// no failure is pending).
func judge(in *Input, sorted []*Target, groups []budgetGroup, globalMax int) (*Failure, time.Time) {
	p := in.policy()
	if !in.CompletedAt.IsZero() && !in.Now.Before(in.CompletedAt.Add(p.window())) {
		return nil, time.Time{}
	}
	var wake time.Time
	failing := make([]bool, len(sorted))
	rule := RuleFailureBudget
	checkFailed := "" // the first Cluster check that failed a cluster, for the message
	for i, t := range sorted {
		f, since := faultOf(t.Deployment, in.Revision, t.Offline)
		at, counts := p.failedAt(f, since)
		if !counts {
			continue
		}
		// Failing clusters hold the rollout for failureTimeout before the policy applies; a
		// failed check already had its tolerance (R7.6).
		if f != faultNotReady && f != faultAnalysis {
			at = at.Add(p.timeout())
		}
		if in.Now.Before(at) {
			if wake.IsZero() || at.Before(wake) {
				wake = at
			}
			continue
		}
		failing[i] = true
		switch {
		case f == faultAnalysis:
			rule = RuleAnalysis
			if checkFailed == "" {
				checkFailed = clusterCheckFailure(t.Cluster, t.Deployment)
			}
		case f == faultRegression && rule != RuleAnalysis:
			rule = RuleRegression
		}
	}
	if f := gateFailure(in, sorted, groups); f != nil {
		return f, time.Time{}
	}
	var over []string // the groups over their budget
	var failed []string
	total := 0
	for _, g := range groups {
		n := 0
		for _, ti := range g.members {
			if failing[ti] {
				n++
			}
		}
		total += n
		if n > g.threshold {
			over = append(over, fmt.Sprintf("%s: %d failing, more than its maxUnavailable %d", g.name, n, g.threshold))
		}
	}
	if total > globalMax && len(groups) > 1 {
		over = append(over, fmt.Sprintf("%d failing, more than maxUnavailable %d", total, globalMax))
	}
	if len(over) == 0 {
		return nil, wake
	}
	for i, t := range sorted {
		if failing[i] {
			failed = append(failed, t.Cluster)
		}
	}
	action := p.action()
	what := fmt.Sprintf("revision %d failed (%s) on", in.Revision, abbreviate(over, 2))
	if checkFailed != "" {
		what = fmt.Sprintf("revision %d failed (%s; %s) on", in.Revision, abbreviate(over, 2), checkFailed)
	}
	return &Failure{Revision: in.Revision, Rule: rule, Action: action, Clusters: failed, Message: failureMessage(rule, action, what, failed), At: in.Now}, time.Time{}
}

// gateFailure is R7.7 for partitions: a partition whose Gate check failed fails the revision
// at once, with the partition's clusters that received it.
func gateFailure(in *Input, sorted []*Target, groups []budgetGroup) *Failure {
	if in.Placement != nil {
		return nil
	}
	for _, g := range groups {
		j, ok := gateJudgement(in.Strategy.Analysis, in.Analyses, in.Revision, g.name)
		if !ok || j.Verdict != VerdictFailed {
			continue
		}
		var clusters []string
		for _, ti := range g.members {
			if d := sorted[ti].Deployment; d != nil && d.Released == in.Revision {
				clusters = append(clusters, sorted[ti].Cluster)
			}
		}
		action := in.policy().action()
		what := gateFailed(fmt.Sprintf("revision %d failed in %s", in.Revision, g.name), j)
		return &Failure{Revision: in.Revision, Rule: RuleGateAnalysis, Action: action, Clusters: clusters, Message: failureMessage(RuleGateAnalysis, action, what, clusters), At: in.Now}
	}
	return nil
}

// planRollback is R5.4 for a continuous rollout: every cluster still on the quarantined
// revision gets its last good one back, the failed clusters at once, the others group by
// group in rollout order, each group under its maxUnavailable (a batch of at most maxNew may
// overshoot it, as in R1.8) and all under the global one.
func planRollback(in *Input, sorted []*Target, q Failure, groups []budgetGroup, globalMax int) *Decision {
	d := &Decision{N: len(sorted), MaxUnavailable: globalMax, Clusters: make([]ClusterStatus, len(sorted))}
	maxNew := DefaultMaxNew
	if in.Strategy.MaxNew != nil {
		maxNew = *in.Strategy.MaxNew
	}
	failed := map[string]bool{}
	for _, c := range q.Clusters {
		failed[c] = true
	}
	cand := func(ti int) restoreCandidate {
		t := sorted[ti]
		return restoreCandidate{name: t.Cluster, d: t.Deployment, failed: failed[t.Cluster], held: in.Paused || t.held() != ""}
	}
	globalBusy := 0
	for ti := range sorted {
		if c := cand(ti); !c.failed && c.restoring(q.Revision) {
			globalBusy++
		}
	}
	left, stop := 0, ""
	for _, g := range groups {
		cands := make([]restoreCandidate, len(g.members))
		for i, ti := range g.members {
			cands[i] = cand(ti)
		}
		limit := func(busy int) int {
			if stop != "" || busy > g.threshold || globalBusy > globalMax {
				return 0
			}
			return maxNew
		}
		restores, groupLeft := planRestores(q.Revision, in.Quarantine, cands, limit)
		d.Restore = append(d.Restore, restores...)
		left += groupLeft
		for _, r := range restores {
			if failed[r.Cluster] {
				groupLeft-- // a failed cluster holds no group back (R5.4)
			} else {
				globalBusy++
			}
		}
		if groupLeft > 0 && stop == "" {
			stop = fmt.Sprintf("rolling back revision %d: %s restores its clusters first", q.Revision, g.name)
		}
	}
	for i, t := range sorted {
		d.Clusters[i] = ClusterStatus{Name: t.Cluster, State: ClusterState(t.Deployment, q.Revision), Unavailable: unavailable(t, q.Revision)}
	}
	d.Paused = fmt.Sprintf("revision %d is quarantined (R5.5): %s", q.Revision, q.Message)
	if left == 0 {
		d.Outcome = OutcomeRolledBack
	} else if stop != "" {
		d.Paused = stop + "; " + d.Paused
	}
	return d
}

// policy is the failure policy of the rollout: its placement's rolling update's (§2), or its
// strategy's (§1).
func (in *Input) policy() FailurePolicy {
	if in.Placement != nil && in.Placement.RollingUpdate != nil {
		return in.Placement.RollingUpdate.FailurePolicy
	}
	return in.Strategy.FailurePolicy
}

// noLimit lets every healthy restore start at once.
func noLimit(int) int { return math.MaxInt }
