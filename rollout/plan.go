package rollout

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Plan decides one planning pass: which clusters get Revision now, which lose the workload, and
// why every other cluster waits. It is pure and deterministic: equal inputs give equal plans.
// A bundle with a Placement rolls out by §2 (RollingUpdate), every other by §1 (partitions).
func Plan(in *Input) *Decision {
	sorted := make([]*Target, len(in.Targets))
	for i := range in.Targets {
		sorted[i] = &in.Targets[i]
	}
	byName := func(a, b *Target) int { return strings.Compare(a.Cluster, b.Cluster) }
	if !slices.IsSortedFunc(sorted, byName) {
		slices.SortFunc(sorted, byName)
	}
	var d *Decision
	var parts []partition
	if in.Placement != nil {
		d = planRollingUpdate(in, sorted)
	} else {
		d, parts = planPartitions(in, sorted)
	}
	if w, ok := ineligibleWarning(sorted, in.Revision); ok {
		d.Warnings = append(d.Warnings, w)
	}
	groups, globalMax := budgetGroups(in, sorted, d, parts)
	if q := quarantined(in.Quarantine, in.Revision); q != nil {
		return planRollback(in, sorted, *q, groups, globalMax)
	}
	failure, wake := judge(in, sorted, groups, globalMax)
	switch {
	case failure != nil && failure.Action == FailureRollback:
		rb := planRollback(in, sorted, *failure, groups, globalMax)
		rb.Failure = failure
		return rb
	case failure != nil:
		d.Failure, d.Outcome = failure, OutcomeFailed
		d.Paused = failure.Message
	case d.Complete || !in.CompletedAt.IsZero():
		// A rollout that completed stays completed: a cluster NotReady later is its health,
		// which the states count, and is judged only within the health window (R5.1, R5.6).
		// Were the outcome dropped, the next pass would judge as if the rollout went on.
		d.Outcome = OutcomeCompleted
	}
	if !wake.IsZero() {
		d.RequeueAfter = requeueAt(d.RequeueAfter, in.Now, wake)
	}
	return d
}

// planPartitions is §1. Partitions are visited in order; a partition with clusters still to
// release is entered only if the gates allow (R1.7, R1.6, R1.9), then gets one batch of at most
// maxNew releases (R1.8). The pass stops at the first partition that is not fully released:
// the rollout "moves on" only from a fully released partition.
//
//	partition:   [ p1: released, Ready ] → [ p2: batch ≤ maxNew ] ┆ p3 … wait
//	gates:        NotReady(p1..pk-1) ≤ maxUnavailablePartitions
//	              unavailable(pk) ≤ its maxUnavailable
//	              unavailable(all) ≤ global maxUnavailable
func planPartitions(in *Input, sorted []*Target) (*Decision, []partition) {
	s := &in.Strategy
	rev := in.Revision
	n := len(sorted)
	parts, unpartitioned := partitionTargets(sorted, s, in.Groups)
	globalMax := s.MaxUnavailable.Or(DefaultMaxUnavailable).ScaleDown(n)
	maxParts := s.MaxUnavailablePartitions.Or(DefaultMaxUnavailablePartitions).ScaleDown(len(parts))
	maxNew := DefaultMaxNew
	if s.MaxNew != nil {
		maxNew = *s.MaxNew
	}

	plan := &Decision{N: n, MaxUnavailable: globalMax, MaxUnavailablePartitions: maxParts, Clusters: make([]ClusterStatus, n)}
	unavail := make([]bool, n)
	release := make([]bool, n)
	globalUnavailable := 0
	judged := in.judgedNow()
	checked := judged && len(clusterChecks(s.Analysis)) > 0
	heldBy := "" // the first cluster that only its checks hold, and why (R7.8)
	for i, t := range sorted {
		plan.Clusters[i].Name = t.Cluster
		switch {
		case unavailable(t, rev):
		case checked && judgedOn(t.Deployment, rev) && analysisHolds(t.Deployment, true):
			if heldBy == "" {
				heldBy = analysisWait(t.Cluster, t.Deployment)
			}
		default:
			continue
		}
		unavail[i] = true
		globalUnavailable++
	}

	gateWaits := map[string]string{} // the partitions whose Gate checks hold them, and why
	stop := ""                       // why partitions from here on wait; set once
	var notReady []string            // names of NotReady partitions visited so far
	allImmediatelyReady := true      // R1.14: every threshold equals its partition's size
	for _, p := range parts {
		pu := 0
		var pending []int
		replaced := 0 // unavailable on an older revision, and about to be released this one
		for _, ti := range p.members {
			plan.Clusters[ti].Partition = p.name
			if unavail[ti] {
				pu++
			}
			if d := sorted[ti].Deployment; d == nil || d.Released != rev {
				pending = append(pending, ti)
				if unavail[ti] && !sorted[ti].Offline {
					replaced++
				}
			}
		}
		if p.threshold < len(p.members) {
			allImmediatelyReady = false
		}
		if len(pending) > 0 && stop == "" {
			// A cluster broken on an older revision counts against the budgets (R1.6's
			// decision), but not against entering its own partition: the new revision may be
			// its fix, and holding it back for its own state would hold it forever.
			stop = gateReason(in.Paused, notReady, maxParts, p, pu-replaced, globalUnavailable-replaced, globalMax, s)
			if stop != "" && !in.Paused {
				if old := unavailableOnOlder(sorted, rev, p.members, release); len(old) > 0 {
					stop += "; unavailable on an older revision: " + abbreviate(old, 3)
				}
			}
			if stop != "" && !in.Paused {
				// Say what holds when it is the checks: the counts alone do not.
				if why := analysisHold(notReady, gateWaits); why != "" && len(notReady) > maxParts {
					stop += "; " + why
				} else if heldBy != "" {
					stop += "; " + heldBy
				}
			}
			if stop == "" {
				batch := 0
				var over string
				for _, ti := range pending {
					switch {
					case sorted[ti].held() != "":
						plan.Clusters[ti].Wait = sorted[ti].held()
					case batch == maxNew:
						if over == "" {
							over = fmt.Sprintf("maxNew: %d clusters of partition %s released in this pass; the rest follow once it is within maxUnavailable %d", maxNew, p.name, p.threshold)
						}
						plan.Clusters[ti].Wait = over
					default:
						release[ti] = true
						batch++
						if !unavail[ti] {
							unavail[ti] = true
							pu++
							globalUnavailable++
						}
					}
				}
				if over != "" {
					stop = "waiting for partition " + p.name + " to be fully released"
					plan.More = true
				}
			} else {
				plan.Paused = stop
			}
		}
		for _, ti := range pending {
			if !release[ti] && plan.Clusters[ti].Wait == "" {
				plan.Clusters[ti].Wait = stop
			}
		}
		ready := pu <= p.threshold
		ps := p.status(sorted, rev, release, pu, ready)
		if judged {
			// A partition is Ready once its Gate checks passed too; they are judged from when
			// every cluster of it was released the revision and became Ready (R7.3, R7.8).
			gate := "partition " + p.name
			plan.Analysis = activate(plan.Analysis, clusterOnly(s.Analysis), rev, gate, judgedMembers(sorted, p.members, rev))
			if j, ok := gateJudgement(s.Analysis, in.Analyses, rev, gate); ok {
				if judging := judgedMembers(sorted, p.members, rev); len(pending) == 0 && len(judging) == len(p.members) {
					plan.Analysis = activate(plan.Analysis, gateOnly(s.Analysis), rev, gate, judging)
				} else {
					j = Judgement{Check: j.Check, Verdict: VerdictPending, Message: "judged once every cluster of the partition runs the revision Ready"}
				}
				ps.Analysis = &j
				if j.Verdict != VerdictPassed {
					ps.Ready, ready = false, false
					gateWaits[p.name] = analysisHolding(gate, j)
				}
			}
		}
		if !ready {
			notReady = append(notReady, p.name)
		}
		plan.Partitions = append(plan.Partitions, ps)
	}
	for _, ti := range unpartitioned {
		plan.Unpartitioned = append(plan.Unpartitioned, sorted[ti].Cluster)
		plan.Clusters[ti].Wait = "matches no partition: not rolled out (R1.3)"
	}
	if len(unpartitioned) > 0 {
		plan.Warnings = append(plan.Warnings, Warning{WarnUnpartitioned, fmt.Sprintf("%d targeted clusters match no partition and will not be rolled out: %s", len(unpartitioned), abbreviate(plan.Unpartitioned, 5))})
	}
	if allImmediatelyReady && len(parts) > 0 {
		plan.Warnings = append(plan.Warnings, Warning{WarnUnsafeDefaults, "maxUnavailable is 100%: every partition counts as Ready at once and the rollout passes through all of them without waiting (R1.14)"})
	}
	plan.finish(sorted, rev, release, unavail, parts)
	if plan.Complete && judged {
		// Checks that still wait keep the rollout from completing (R7.8).
		for _, ps := range plan.Partitions {
			if !ps.Ready {
				plan.Complete = false
			}
		}
		for i := range sorted {
			if checked && unavail[i] {
				plan.Complete = false
			}
		}
	}
	return plan, parts
}

// analysisHold is why the first of the partitions its Gate checks hold waits, "" for none.
func analysisHold(partitions []string, waits map[string]string) string {
	for _, p := range partitions {
		if w := waits[p]; w != "" {
			return w
		}
	}
	return ""
}

// judgedNow reports whether the revision's checks are judged in this pass: while it rolls out,
// and within the health window after it completed (R7.3).
func (in *Input) judgedNow() bool {
	return in.CompletedAt.IsZero() || in.Now.Before(in.CompletedAt.Add(in.policy().window()))
}

// appliedOn reports whether the deployment runs revision r: released and applied.
func appliedOn(d *Deployment, r int64) bool {
	return d != nil && d.Released == r && d.Applied == r
}

// judgedOn reports whether a cluster's checks judge revision r on it: from when the revision
// first became Ready there, for as long as it runs it (R7.3). Before that there is no
// workload to measure.
func judgedOn(d *Deployment, r int64) bool {
	return appliedOn(d, r) && (d.Ready || d.WasReady)
}

// judgedMembers are the names of the members whose checks judge revision r, in order.
func judgedMembers(sorted []*Target, members []int, r int64) []string {
	var out []string
	for _, ti := range members {
		if judgedOn(sorted[ti].Deployment, r) {
			out = append(out, sorted[ti].Cluster)
		}
	}
	return out
}

// gateReason returns why partition p may not be entered now, or "".
func gateReason(paused bool, notReady []string, maxParts int, p partition, pu, globalUnavailable, globalMax int, s *Strategy) string {
	switch {
	case paused:
		return "bundle is paused (R1.13)"
	case len(notReady) > maxParts:
		return fmt.Sprintf("%d partitions NotReady (%s), more than maxUnavailablePartitions %d (R1.7)", len(notReady), abbreviate(notReady, 3), maxParts)
	case pu > p.threshold:
		return fmt.Sprintf("partition %s: %d clusters unavailable, more than its maxUnavailable %d (%s) (R1.6)", p.name, pu, p.threshold, p.spec)
	case globalUnavailable > globalMax:
		return fmt.Sprintf("%d clusters unavailable, more than maxUnavailable %d (%s) (R1.9)", globalUnavailable, globalMax, s.MaxUnavailable.Or(DefaultMaxUnavailable))
	}
	return ""
}

// unavailableOnOlder names the clusters, outside the given partition members and not released
// rev in this pass, that count as unavailable for their state on an older revision (R1.6's
// decision): what a person looks at when the budget holds a rollout that has not reached them.
func unavailableOnOlder(sorted []*Target, rev int64, members []int, released []bool) []string {
	var out []string
	for i, t := range sorted {
		if d := t.Deployment; !t.Offline && d != nil && d.Released != 0 && d.Released != rev && !released[i] && unavailable(t, rev) && !slices.Contains(members, i) {
			out = append(out, t.Cluster)
		}
	}
	return out
}

// status reports a partition after this pass's releases.
func (p partition) status(sorted []*Target, rev int64, release []bool, unavailableCount int, ready bool) PartitionStatus {
	st := PartitionStatus{Name: p.name, Clusters: make([]string, len(p.members)), MaxUnavailable: p.threshold, Unavailable: unavailableCount, Ready: ready, Counts: Counts{}}
	for i, ti := range p.members {
		st.Clusters[i] = sorted[ti].Cluster
		st.Counts.add(stateAfter(sorted[ti], rev, release[ti]))
	}
	return st
}

// stateAfter is the cluster's state once this pass's release (if any) is written.
func stateAfter(t *Target, rev int64, released bool) State {
	if !released {
		return ClusterState(t.Deployment, rev)
	}
	d := Deployment{Released: rev}
	if t.Deployment != nil {
		d = *t.Deployment
		d.Released = rev
		d.ApplyFailed = false
	}
	return ClusterState(&d, rev)
}

// finish fills the release list, per-cluster states and completion.
func (plan *Decision) finish(sorted []*Target, rev int64, release, unavail []bool, parts []partition) {
	complete := true
	for i, t := range sorted {
		c := &plan.Clusters[i]
		c.State = stateAfter(t, rev, release[i])
		c.Unavailable = unavail[i]
		if release[i] {
			plan.Release = append(plan.Release, t.Cluster)
		}
	}
	for _, p := range parts {
		for _, ti := range p.members {
			if release[ti] || !finished(sorted[ti], rev) {
				complete = false
			}
		}
	}
	plan.Complete = complete
}

// ineligibleWarning names the clusters that cannot run revision r, if any (R1.15).
func ineligibleWarning(sorted []*Target, r int64) (Warning, bool) {
	var names []string
	for _, t := range sorted {
		if t.Deployment.ineligibleFor(r) {
			names = append(names, t.Cluster+" "+t.Deployment.IneligibleReason())
		}
	}
	if len(names) == 0 {
		return Warning{}, false
	}
	return Warning{WarnIneligible, fmt.Sprintf("%d clusters cannot run revision %d and run what they ran before: %s", len(names), r, abbreviate(names, 3))}, true
}

// abbreviate lists up to n names, then "and K more".
func abbreviate(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:n], ", ") + fmt.Sprintf(" and %d more", len(names)-n)
}

// requeueAt keeps the earliest future time.
func requeueAt(cur time.Duration, now, at time.Time) time.Duration {
	d := at.Sub(now)
	if d <= 0 {
		return cur
	}
	if cur == 0 || d < cur {
		return d
	}
	return cur
}
