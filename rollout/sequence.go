package rollout

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// Sequence is a linear chain of cluster groups through which every revision moves, each group
// finishing and soaking it before the next may receive it (ROLLOUT.md §4). Its JSON form is the
// RolloutSequence spec's.
type Sequence struct {
	Groups    []SequenceGroup   `json:"groups"`
	Revisions []RevisionControl `json:"revisions,omitempty"`
	// FailurePolicy is how every group's soak watches its members (§5).
	FailurePolicy
	// Paused is the bundle's pause (R1.13): no cluster is released; groups in flight keep
	// their state.
	Paused bool `json:"-"`
	// Quarantine are the revisions that failed and are rolled back (R5.5): no group releases
	// them; every cluster that received one gets its last good revision back (R5.4).
	Quarantine []Failure `json:"-"`
	// Analyses are the judgements of the groups' Gate checks (§7), by "group NAME".
	Analyses Analyses `json:"-"`
}

// SequenceGroup is one link: its clusters (by selector or cluster group) and its soak time.
type SequenceGroup struct {
	Name     string `json:"name"`
	Upstream string `json:"upstream,omitempty"`
	// ClusterSelector, Selector (its string form, R3.6) or ClusterGroup selects the clusters.
	ClusterSelector *Selector `json:"clusterSelector,omitempty"`
	Selector        string    `json:"selector,omitempty"`
	ClusterGroup    string    `json:"clusterGroup,omitempty"`
	Soak            *Duration `json:"soak,omitempty"`
	// Analysis are the checks measured during the group's soak: it ends once they passed (§7).
	Analysis []Check `json:"analysis,omitempty"`
}

// RevisionControl pauses, cancels or changes the soak of one revision (R4.2, R4.10).
type RevisionControl struct {
	Index         int64          `json:"index"`
	Paused        bool           `json:"paused,omitempty"`
	Cancelled     bool           `json:"cancelled,omitempty"`
	SoakOverrides []SoakOverride `json:"soakOverrides,omitempty"`
}

// SoakOverride replaces a group's soak for one revision.
type SoakOverride struct {
	Group string   `json:"group"`
	Soak  Duration `json:"soak"`
}

// SequenceState is a group's state for one revision (R4.6).
type SequenceState string

const (
	SeqIneligible    SequenceState = "INELIGIBLE"
	SeqPending       SequenceState = "PENDING"
	SeqInProgress    SequenceState = "IN_PROGRESS"
	SeqSoaking       SequenceState = "SOAKING"
	SeqForcedSoaking SequenceState = "FORCED_SOAKING"
	SeqComplete      SequenceState = "COMPLETE"
	// SeqFailed: a member failed the revision (R5.2, R5.3); the group holds it, or the
	// revision is rolled back (onFailure).
	SeqFailed SequenceState = "FAILED"
	// SeqRolledBack: the revision was rolled back from the group's clusters (R5.4).
	SeqRolledBack SequenceState = "ROLLED_BACK"
)

// Soak limits (R4.2, R4.5).
const (
	DefaultSoak   = 7 * 24 * time.Hour
	MaxSoak       = 30 * 24 * time.Hour
	ForcedSoakAge = 30 * 24 * time.Hour
)

// SequenceStatus is every group's progress per revision; the JSON form is the RolloutSequence
// status's.
type SequenceStatus struct {
	Groups []SequenceGroupStatus `json:"groups,omitempty"`
}

// SequenceGroupStatus is one group's progress, groups in chain order.
type SequenceGroupStatus struct {
	Name      string                   `json:"name"`
	Clusters  int                      `json:"clusters,omitempty"`
	Revisions []SequenceRevisionStatus `json:"revisions,omitempty"`
}

// SequenceRevisionStatus is one group's progress on one revision.
type SequenceRevisionStatus struct {
	Index      int64         `json:"index"`
	State      SequenceState `json:"state"`
	StartedAt  time.Time     `json:"startedAt,omitzero"`
	FinishedAt time.Time     `json:"finishedAt,omitzero"`
	SoakUntil  time.Time     `json:"soakUntil,omitzero"`
	Counts     Counts        `json:"summary,omitempty"`
	Message    string        `json:"message,omitempty"`
}

// SequenceCluster is a cluster as a sequence sees it.
type SequenceCluster struct {
	Name         string
	Labels       map[string]string
	Groups       []string
	Deployment   *Deployment
	Availability *Availability
	// Paused (R1.13) and Offline (R1.11) clusters are not released until they are back.
	Paused, Offline bool
	// Since is the oldest revision rendered for the cluster (0: every one). A cluster that
	// joined the targets later has no rendering of older revisions: for them it counts like a
	// cluster ahead (R4.7) and receives the first revision from Since on that its group gets.
	Since int64
}

// lacks reports whether revision r was rendered before the cluster joined.
func (c *SequenceCluster) lacks(r int64) bool { return c.Since > r }

// SequenceResult is the outcome of one StepSequence.
type SequenceResult struct {
	Status SequenceStatus
	// Release maps clusters to the revision they must be released now.
	Release map[string]int64
	// Unsequenced are targeted clusters in no group of the sequence: never released, and
	// shown like unpartitioned clusters (R1.3).
	Unsequenced []string
	// WakeAt is when to step again without an event (a soak ends, a forced soak starts, a
	// window opens); zero when only events matter.
	WakeAt time.Time
	// Failures are the revisions a group failed in this step (R5.3); those whose action is
	// Rollback are quarantined from now on: the caller records them and passes them back in
	// Sequence.Quarantine.
	Failures []Failure
	// Restore are the clusters a rollback releases their last good revision now (R5.4).
	Restore []Restore
	// Analysis are the checks the soaks judge now (§7, R7.3).
	Analysis []ActiveCheck
	// Outcome is how the newest revision's rollout ended, "" while it goes on (R5.6).
	Outcome Outcome
}

// ChainOrder validates the chain (R4.1) and returns the groups in order, first group first.
func (s *Sequence) ChainOrder() ([]int, error) {
	if len(s.Groups) == 0 {
		return nil, &FieldError{Field: "groups", Message: "at least one group is required"}
	}
	if len(s.Groups) > MaxSequenceGroups {
		return nil, &FieldError{Field: "groups", Message: fmt.Sprintf("at most %d groups, got %d", MaxSequenceGroups, len(s.Groups))}
	}
	index := map[string]int{}
	for i, g := range s.Groups {
		if g.Name == "" {
			return nil, &FieldError{Field: fmt.Sprintf("groups[%d].name", i), Message: "is required"}
		}
		if _, dup := index[g.Name]; dup {
			return nil, &FieldError{Field: fmt.Sprintf("groups[%d].name", i), Message: fmt.Sprintf("%q is used twice", g.Name)}
		}
		index[g.Name] = i
		if ways := boolRank(g.ClusterSelector != nil) + boolRank(g.Selector != "") + boolRank(g.ClusterGroup != ""); ways != 1 {
			return nil, &FieldError{Field: fmt.Sprintf("groups[%d]", i), Message: "select the clusters with exactly one of clusterSelector, selector and clusterGroup"}
		}
		if g.Selector != "" {
			if _, err := ParseSelector(g.Selector); err != nil {
				return nil, &FieldError{Field: fmt.Sprintf("groups[%d].selector", i), Message: err.Error()}
			}
		}
		if g.Soak != nil && (*g.Soak < 0 || time.Duration(*g.Soak) > MaxSoak) {
			return nil, &FieldError{Field: fmt.Sprintf("groups[%d].soak", i), Message: "must be between 0 and 30 days"}
		}
	}
	downstream := map[string]int{}
	root := -1
	for i, g := range s.Groups {
		switch {
		case g.Upstream == "":
			if root >= 0 {
				return nil, &FieldError{Field: "groups", Message: fmt.Sprintf("groups %s and %s both have no upstream: a sequence has one first group", s.Groups[root].Name, g.Name)}
			}
			root = i
		case g.Upstream == g.Name:
			return nil, &FieldError{Field: fmt.Sprintf("groups[%d].upstream", i), Message: "a group cannot be its own upstream"}
		default:
			if _, ok := index[g.Upstream]; !ok {
				return nil, &FieldError{Field: fmt.Sprintf("groups[%d].upstream", i), Message: fmt.Sprintf("no group named %q", g.Upstream)}
			}
			if prev, ok := downstream[g.Upstream]; ok {
				return nil, &FieldError{Field: fmt.Sprintf("groups[%d].upstream", i), Message: fmt.Sprintf("%s is already the upstream of %s: sequences do not branch", g.Upstream, s.Groups[prev].Name)}
			}
			downstream[g.Upstream] = i
		}
	}
	if root < 0 {
		return nil, &FieldError{Field: "groups", Message: "every group has an upstream: the chain is a cycle"}
	}
	order := []int{root}
	for next, ok := downstream[s.Groups[root].Name]; ok; next, ok = downstream[s.Groups[next].Name] {
		order = append(order, next)
	}
	if len(order) != len(s.Groups) {
		in := map[int]bool{}
		for _, i := range order {
			in[i] = true
		}
		var cut []string
		for i, g := range s.Groups {
			if !in[i] {
				cut = append(cut, g.Name)
			}
		}
		return nil, &FieldError{Field: "groups", Message: "groups form a cycle outside the chain: " + strings.Join(cut, ", ")}
	}
	for i, rc := range s.Revisions {
		for j, o := range rc.SoakOverrides {
			if _, ok := index[o.Group]; !ok {
				return nil, &FieldError{Field: fmt.Sprintf("revisions[%d].soakOverrides[%d].group", i, j), Message: fmt.Sprintf("no group named %q", o.Group)}
			}
			if o.Soak < 0 || time.Duration(o.Soak) > MaxSoak {
				return nil, &FieldError{Field: fmt.Sprintf("revisions[%d].soakOverrides[%d].soak", i, j), Message: "must be between 0 and 30 days"}
			}
		}
	}
	return order, nil
}

func (s *Sequence) control(rev int64) RevisionControl {
	for _, rc := range s.Revisions {
		if rc.Index == rev {
			return rc
		}
	}
	return RevisionControl{Index: rev}
}

// soak is the group's soak for one revision: its override, the group's value, or 7 days.
func (s *Sequence) soak(g SequenceGroup, rev int64) time.Duration {
	for _, o := range s.control(rev).SoakOverrides {
		if o.Group == g.Name {
			return time.Duration(o.Soak)
		}
	}
	if g.Soak != nil {
		return time.Duration(*g.Soak)
	}
	return DefaultSoak
}

// StepSequence moves every revision through the chain by one decision. revisions are the
// bundle's known revision indexes; prev is the status last written. A revision that fails
// under onFailure Rollback is quarantined within the same step: its rollback starts at once.
func StepSequence(seq *Sequence, prev SequenceStatus, revisions []int64, fleet []SequenceCluster, now time.Time) (SequenceResult, error) {
	res, err := stepSequence(seq, prev, revisions, fleet, now)
	if err != nil {
		return res, err
	}
	var fresh []Failure
	for _, f := range res.Failures {
		if f.Action == FailureRollback && quarantined(seq.Quarantine, f.Revision) == nil {
			fresh = append(fresh, f)
		}
	}
	if len(fresh) == 0 {
		return res, nil
	}
	withQuarantine := *seq
	withQuarantine.Quarantine = append(slices.Clone(seq.Quarantine), fresh...)
	again, err := stepSequence(&withQuarantine, res.Status, revisions, fleet, now)
	again.Failures = res.Failures
	return again, err
}

func stepSequence(seq *Sequence, prev SequenceStatus, revisions []int64, fleet []SequenceCluster, now time.Time) (SequenceResult, error) {
	order, err := seq.ChainOrder()
	if err != nil {
		return SequenceResult{Status: prev}, err
	}
	revs := append([]int64(nil), revisions...)
	sort.Slice(revs, func(i, j int) bool { return revs[i] < revs[j] })
	res := SequenceResult{Release: map[string]int64{}, Unsequenced: unsequenced(seq, fleet)}
	wake := func(t time.Time) {
		if t.After(now) && (res.WakeAt.IsZero() || t.Before(res.WakeAt)) {
			res.WakeAt = t
		}
	}
	old := map[string]map[int64]SequenceRevisionStatus{}
	for _, g := range prev.Groups {
		old[g.Name] = map[int64]SequenceRevisionStatus{}
		for _, r := range g.Revisions {
			old[g.Name][r.Index] = r
		}
	}
	var upstream map[int64]SequenceRevisionStatus // the previous group's statuses this step
	for k, gi := range order {
		g := seq.Groups[gi]
		members := groupClusters(g, fleet)
		gs := SequenceGroupStatus{Name: g.Name, Clusters: len(members)}
		cur := map[int64]SequenceRevisionStatus{}
		// The group's target: the newest revision it may receive (R4.3, R4.4).
		var target int64
		for _, r := range revs {
			if eligible(k, upstream, r, seq) {
				target = r
			}
		}
		for _, r := range revs {
			rs, seen := old[g.Name][r]
			if !seen {
				rs = SequenceRevisionStatus{Index: r, State: SeqIneligible}
			}
			rs.Message = ""
			ctl := seq.control(r)
			var failure *Failure
			switch q := quarantined(seq.Quarantine, r); {
			case q != nil:
				rs = rolledBack(rs, q, seen)
			case rs.State == SeqComplete && seq.regressedWithinWindow(rs, members, now, wake) != nil:
				// A regression within the health window after the soak: the group fails
				// the revision after all, and its downstream stops receiving it (R5.1).
				rs, failure = seq.judge(g, rs, members, now, wake)
			case rs.State == SeqComplete:
				// Final: a completed revision stays qualified. A cluster that joined the group
				// since gets it, when it is what the group runs now.
				if r == target {
					rs.Message = catchUp(seq, members, r, seq.control(r), now, res.Release, wake)
				}
			case !eligible(k, upstream, r, seq):
				rs.State = SeqIneligible
				switch {
				case ctl.Cancelled:
					rs.Message = "revision cancelled"
				case k == 0:
				default:
					rs.Message = fmt.Sprintf("waiting for group %s to complete it", seq.Groups[order[k-1]].Name)
				}
			case r != target:
				rs.State, rs.Message = SeqIneligible, fmt.Sprintf("superseded by revision %d", target)
			case len(members) == 0 && k == 0:
				rs.State, rs.Message = SeqPending, "the first group has no clusters: nothing qualifies (R4.8)"
			case len(members) == 0:
				rs.State, rs.Message, rs.FinishedAt = SeqComplete, "empty group: passed through (R4.8)", now
			default:
				rs, failure = progressRevision(seq, g, rs, members, ctl, now, res.Release, wake, &res.Analysis)
			}
			if failure != nil {
				res.Failures = append(res.Failures, *failure)
			}
			cur[r] = rs
			gs.Revisions = append(gs.Revisions, rs)
		}
		res.Status.Groups = append(res.Status.Groups, gs)
		upstream = cur
	}
	rollingBack := map[int64]bool{}
	for _, q := range seq.Quarantine {
		if q.Action == FailureRollback {
			restores, left := seq.restore(q, fleet, now, wake)
			res.Restore = append(res.Restore, restores...)
			rollingBack[q.Revision] = left > 0
		}
	}
	if len(revs) > 0 {
		res.Outcome = sequenceOutcome(res.Status, revs[len(revs)-1], rollingBack)
	}
	return res, nil
}

// rolledBack is a group's state for a quarantined revision: the group whose member failed
// keeps FAILED and its message; every other group that had the revision shows it rolled back.
func rolledBack(rs SequenceRevisionStatus, q *Failure, seen bool) SequenceRevisionStatus {
	switch {
	case rs.State == SeqFailed:
		rs.Message = q.Message
	case !seen || rs.State == SeqIneligible:
		rs.State, rs.Message = SeqIneligible, "revision quarantined: it failed and was rolled back (R5.5)"
	default:
		rs.State, rs.Message = SeqRolledBack, fmt.Sprintf("rolled back: revision %d failed (%s) (R5.4)", q.Revision, q.Rule)
	}
	rs.SoakUntil = time.Time{}
	return rs
}

// restore releases their last good revision to the clusters that received the quarantined
// revision q: at once, with no budget (a sequence has none), waiting only for the maintenance
// window of a cluster that did not fail. It returns the restores and how many clusters are
// still to restore or being restored.
func (seq *Sequence) restore(q Failure, fleet []SequenceCluster, now time.Time, wake func(time.Time)) ([]Restore, int) {
	cands := make([]restoreCandidate, 0, len(fleet))
	for i := range fleet {
		c := &fleet[i]
		failed := slices.Contains(q.Clusters, c.Name)
		held := !failed && (c.Paused || seq.Paused || !c.Availability.OpenAt(now))
		if held && !c.Paused && !seq.Paused {
			if next, ok := c.Availability.NextOpening(now); ok {
				wake(next)
			}
		}
		cands = append(cands, restoreCandidate{name: c.Name, d: c.Deployment, failed: failed, held: held})
	}
	return planRestores(q.Revision, seq.Quarantine, cands, noLimit)
}

// sequenceOutcome is how the newest revision's rollout ended: Completed once the last group
// completed it, Failed while a group holds it failed, RolledBack once its rollback is done.
func sequenceOutcome(st SequenceStatus, newest int64, rollingBack map[int64]bool) Outcome {
	if busy, ok := rollingBack[newest]; ok {
		if busy {
			return ""
		}
		return OutcomeRolledBack
	}
	if len(st.Groups) == 0 {
		return ""
	}
	outcome := OutcomeCompleted
	for _, g := range st.Groups {
		for _, r := range g.Revisions {
			switch {
			case r.Index != newest:
			case r.State == SeqFailed:
				return OutcomeFailed
			case r.State != SeqComplete:
				outcome = ""
			}
		}
	}
	return outcome
}

// eligible reports whether group k may receive revision r: the first group any revision that
// is neither cancelled nor quarantined, later groups what their upstream completed (R4.3,
// R4.10, R5.5).
func eligible(k int, upstream map[int64]SequenceRevisionStatus, r int64, seq *Sequence) bool {
	if seq.control(r).Cancelled || quarantined(seq.Quarantine, r) != nil {
		return false
	}
	return k == 0 || upstream[r].State == SeqComplete
}

// progressRevision releases the group's target revision where windows allow, and moves its
// state through IN_PROGRESS, SOAKING (or FORCED_SOAKING) and COMPLETE.
func progressRevision(seq *Sequence, g SequenceGroup, rs SequenceRevisionStatus, members []*SequenceCluster, ctl RevisionControl, now time.Time, release map[string]int64, wake func(time.Time), analysis *[]ActiveCheck) (SequenceRevisionStatus, *Failure) {
	r := rs.Index
	if rs.State == SeqFailed {
		// Judged again below: under Pause a group whose members recovered goes on, and its
		// soak starts over.
		rs.State = SeqInProgress
	}
	rs.Counts = Counts{}
	needing, done, waiting := 0, 0, 0
	var invalid []string // clusters held by a window that does not compile
	var held []string    // clusters paused or offline
	var ineligible []string
	for _, c := range members {
		d := c.Deployment
		if d != nil && d.Released > r || c.lacks(r) {
			continue // R4.7: already ahead, or only newer revisions are rendered for it
		}
		if d.ineligibleFor(r) {
			// R1.15: left behind like a cluster ahead; it runs r once it serves r's APIs.
			ineligible = append(ineligible, c.Name+" "+d.IneligibleReason())
			rs.Counts.add(ClusterState(d, r))
			continue
		}
		needing++
		state := ClusterState(d, r)
		rs.Counts.add(state)
		switch {
		case state.Available():
			done++
		case d != nil && d.Released == r:
			// In flight. The step that released it may not have been recorded yet (a status
			// read back before the write): the group started no later than now.
			if rs.StartedAt.IsZero() {
				rs.StartedAt = now
			}
		case ctl.Paused || seq.Paused:
			waiting++
		case c.Paused || c.Offline:
			held = append(held, c.Name)
		case !c.Availability.OpenAt(now):
			waiting++
			if c.Availability.invalid != nil {
				invalid = append(invalid, c.Availability.invalid.Error())
			}
			if next, ok := c.Availability.NextOpening(now); ok {
				wake(next)
			}
		default:
			release[c.Name] = r
			if rs.StartedAt.IsZero() {
				rs.StartedAt = now
			}
		}
	}
	// R1.15: a group qualifies a revision only if one of its clusters ran it.
	noneCan := needing == 0 && len(ineligible) > 0
	ahead := needing == 0 && !noneCan
	if ahead {
		// Clusters ahead are ignored only while some cluster needs the revision (R4.7); when
		// every one is ahead, the group has finished it and soaks it like any other, so that a
		// revision never qualifies downstream without its soak.
		needing, done = len(members), len(members)
	}
	soak := seq.soak(g, r)
	var failure *Failure
	if rs, failure = seq.judge(g, rs, members, now, wake); failure != nil {
		return rs, failure
	}
	switch rs.State {
	case SeqSoaking:
		if !rs.FinishedAt.IsZero() {
			rs.SoakUntil = rs.FinishedAt.Add(soak) // a soak override set mid-soak counts (R4.2)
		}
	case SeqForcedSoaking:
		rs.SoakUntil = rs.StartedAt.Add(ForcedSoakAge).Add(soak)
	default:
		switch {
		case done == needing && !noneCan:
			rs.State, rs.FinishedAt, rs.SoakUntil = SeqSoaking, now, now.Add(soak)
		case rs.StartedAt.IsZero():
			rs.State = SeqPending
		case !now.Before(rs.StartedAt.Add(ForcedSoakAge)):
			rs.State, rs.SoakUntil = SeqForcedSoaking, rs.StartedAt.Add(ForcedSoakAge).Add(soak)
		default:
			rs.State = SeqInProgress
			wake(rs.StartedAt.Add(ForcedSoakAge))
		}
	}
	checksPassed := true
	if rs.State == SeqSoaking || rs.State == SeqForcedSoaking {
		var failure *Failure
		if checksPassed, failure = seq.judgeSoak(g, &rs, members, now, analysis); failure != nil {
			return rs, failure
		}
		if !now.Before(rs.SoakUntil) && checksPassed {
			rs.State = SeqComplete
		} else if now.Before(rs.SoakUntil) {
			wake(rs.SoakUntil)
		}
	}
	hold := "" // why clusters of the group wait
	if rs.State != SeqComplete {
		switch {
		case noneCan:
			hold = fmt.Sprintf("no cluster of the group can run revision %d, so the group does not qualify it (R1.15): %s", r, strings.Join(ineligible, "; "))
		case seq.Paused:
			hold = "bundle paused: nothing new starts (R1.13)"
		case ctl.Paused:
			hold = "revision paused: nothing new starts (R4.10)"
		case len(held) > 0:
			hold = fmt.Sprintf("%d clusters paused or offline wait until they are back (R1.13, R1.11): %s", len(held), strings.Join(held, ", "))
		case len(invalid) > 0:
			hold = fmt.Sprintf("%d clusters wait, no work starts while a maintenance window is invalid: %s", waiting, strings.Join(invalid, "; "))
		case waiting > 0:
			hold = fmt.Sprintf("%d clusters wait for their maintenance window or an exclusion to end", waiting)
		}
	}
	switch {
	case rs.State == SeqForcedSoaking:
		// Forced, and what still holds the clusters left: both are what a person acts on.
		rs.Message = fmt.Sprintf("not finished 30 days after it started: soaking anyway; %d of %d clusters done (R4.5)", done, needing)
		if hold != "" {
			rs.Message += "; " + hold
		}
	case hold != "":
		rs.Message = hold
	case ahead:
		rs.Message = "every cluster already runs a newer revision (R4.7)"
	case !checksPassed:
		// judgeSoak said what the checks wait for.
	}
	if len(ineligible) > 0 && !noneCan {
		left := fmt.Sprintf("%d clusters left behind, ineligible (R1.15): %s", len(ineligible), strings.Join(ineligible, "; "))
		if rs.Message == "" {
			rs.Message = left
		} else if !strings.Contains(rs.Message, left) {
			rs.Message += "; " + left
		}
	}
	return rs, nil
}

// judgeSoak judges a soaking group's checks (R7.3): its Cluster checks on the members that
// run the revision, its Gate checks once for the group. It reports whether they all passed
// (the soak ends only then, R7.8), or the group's failure when a Gate check failed (R7.7); a
// Cluster check that failed a member fails the group through judge (R7.6).
func (seq *Sequence) judgeSoak(g SequenceGroup, rs *SequenceRevisionStatus, members []*SequenceCluster, now time.Time, analysis *[]ActiveCheck) (bool, *Failure) {
	if len(g.Analysis) == 0 {
		return true, nil
	}
	r := rs.Index
	gate := "group " + g.Name
	var clusters []string
	var js []Judgement
	cluster := len(clusterOnly(g.Analysis)) > 0
	for _, c := range members {
		if !judgedOn(c.Deployment, r) {
			continue
		}
		clusters = append(clusters, c.Name)
		if cluster && analysisHolds(c.Deployment, true) {
			j := Judgement{Check: clusterOnly(g.Analysis)[0].Name, Verdict: VerdictPending, Message: "not measured yet"}
			if c.Deployment.Analysis != nil {
				j = *c.Deployment.Analysis
			}
			j.Check = j.Check + " on " + c.Name // for the message: which cluster holds
			js = append(js, j)
		}
	}
	*analysis = activate(*analysis, g.Analysis, r, gate, clusters)
	if j, ok := gateJudgement(g.Analysis, seq.Analyses, r, gate); ok {
		if j.Verdict == VerdictFailed {
			action := seq.action()
			what := gateFailed(fmt.Sprintf("group %s failed revision %d", g.Name, r), j)
			msg := failureMessage(RuleGateAnalysis, action, what, clusters)
			rs.State, rs.Message, rs.FinishedAt, rs.SoakUntil = SeqFailed, msg, time.Time{}, time.Time{}
			return false, &Failure{Revision: r, Rule: RuleGateAnalysis, Action: action, Clusters: clusters, Message: msg, At: now}
		}
		js = append(js, j)
	}
	w := Worst(js)
	if len(js) == 0 || w.Verdict == VerdictPassed {
		return true, nil
	}
	rs.Message = analysisHolding("soak", w)
	if !now.Before(rs.SoakUntil) {
		rs.Message = "soak time over; " + rs.Message
	}
	return false, nil
}

// judge applies §5 to a group's revision in flight or soaking: a member that failed it (its
// apply failed, it regressed under onRegression Fail, or, when the sequence sets a
// failureTimeout, it is not Ready that long after its release) fails the group (FAILED); under
// Restart, a regressed member sends a soaking group back to IN_PROGRESS, its soak starting over
// once every member is Ready again. Without a failureTimeout a member that is slow to become
// Ready is progressing, and R4.5's forced soak bounds the wait, as before §5.
func (seq *Sequence) judge(g SequenceGroup, rs SequenceRevisionStatus, members []*SequenceCluster, now time.Time, wake func(time.Time)) (SequenceRevisionStatus, *Failure) {
	r := rs.Index
	var failed, regressed []string
	var checkFailed string // the first Cluster check that failed a member, for the message
	rule := RuleFailureBudget
	for _, c := range members {
		f, since := faultOf(c.Deployment, r, c.Offline)
		if f == faultRegression {
			regressed = append(regressed, c.Name)
		}
		if f == faultAnalysis {
			failed = append(failed, c.Name)
			rule = RuleAnalysis // counts at once, whatever onRegression says (R7.6)
			if checkFailed == "" {
				checkFailed = clusterCheckFailure(c.Name, c.Deployment)
			}
			continue
		}
		if f == faultNotReady && seq.FailureTimeout == nil {
			continue
		}
		at, counts := seq.failedAt(f, since)
		switch {
		case !counts:
		case now.Before(at):
			wake(at)
		default:
			failed = append(failed, c.Name)
			if f == faultRegression && rule != RuleAnalysis {
				rule = RuleRegression
			}
		}
	}
	if len(failed) > 0 {
		action := seq.action()
		what := fmt.Sprintf("group %s failed revision %d", g.Name, r)
		if checkFailed != "" {
			what += " (" + checkFailed + ")"
		}
		msg := failureMessage(rule, action, what, failed)
		rs.State, rs.Message, rs.FinishedAt, rs.SoakUntil = SeqFailed, msg, time.Time{}, time.Time{}
		return rs, &Failure{Revision: r, Rule: rule, Action: action, Clusters: failed, Message: msg, At: now}
	}
	if len(regressed) > 0 && seq.regression() == RegressionRestart && (rs.State == SeqSoaking || rs.State == SeqForcedSoaking || rs.State == SeqComplete) {
		rs.State, rs.FinishedAt, rs.SoakUntil = SeqInProgress, time.Time{}, time.Time{}
		rs.Message = fmt.Sprintf("soak starts over once %s are Ready again (onRegression: Restart, R5.2)", abbreviate(regressed, 5))
	}
	return rs, nil
}

// regressedWithinWindow returns a member that regressed on a completed revision within the
// health window after its soak (R5.1), nil when none did or the window is closed.
func (seq *Sequence) regressedWithinWindow(rs SequenceRevisionStatus, members []*SequenceCluster, now time.Time, wake func(time.Time)) *SequenceCluster {
	end := rs.SoakUntil.Add(seq.window())
	if seq.window() == 0 || rs.SoakUntil.IsZero() || !now.Before(end) || seq.regression() == RegressionIgnore {
		return nil
	}
	wake(end)
	for _, c := range members {
		if f, _ := faultOf(c.Deployment, rs.Index, c.Offline); f == faultRegression {
			return c
		}
	}
	return nil
}

// catchUp releases revision r, which the group has completed, to its members that do not run it
// or a newer one (clusters that joined the group after it finished r), unless the sequence, the
// revision or the cluster is paused, the cluster is offline or its maintenance window is closed.
// It returns a message when it released some.
func catchUp(seq *Sequence, members []*SequenceCluster, r int64, ctl RevisionControl, now time.Time, release map[string]int64, wake func(time.Time)) string {
	if seq.Paused || ctl.Paused {
		return ""
	}
	// Only revisions from a cluster's Since on are rendered for it; one that joined later waits
	// for the group's next revision.
	n, later := 0, 0
	for _, c := range members {
		if c.lacks(r) {
			later++
			continue
		}
		if d := c.Deployment; d != nil && d.Released >= r || c.Paused || c.Offline {
			continue
		}
		if !c.Availability.OpenAt(now) {
			if next, ok := c.Availability.NextOpening(now); ok {
				wake(next)
			}
			continue
		}
		release[c.Name] = r
		n++
	}
	switch {
	case n > 0:
		return fmt.Sprintf("%d clusters that joined the group receive the revision it completed", n)
	case later > 0:
		return fmt.Sprintf("%d clusters joined after revision %d was rendered: they receive the group's next revision", later, r)
	}
	return ""
}

// unsequenced lists the clusters of fleet in no group of seq, sorted.
func unsequenced(seq *Sequence, fleet []SequenceCluster) []string {
	grouped := map[string]bool{}
	for _, g := range seq.Groups {
		for _, c := range groupClusters(g, fleet) {
			grouped[c.Name] = true
		}
	}
	var out []string
	for _, c := range fleet {
		if !grouped[c.Name] {
			out = append(out, c.Name)
		}
	}
	sort.Strings(out)
	return out
}

// GroupMembers names a group's clusters, by name, as StepSequence selects them.
func GroupMembers(g SequenceGroup, fleet []SequenceCluster) []string {
	members := groupClusters(g, fleet)
	out := make([]string, len(members))
	for i, c := range members {
		out[i] = c.Name
	}
	return out
}

func CountGroupClusters(g SequenceGroup, fleet []SequenceCluster) int {
	return len(groupClusters(g, fleet))
}

// groupClusters lists the group's clusters, by name.
func groupClusters(g SequenceGroup, fleet []SequenceCluster) []*SequenceCluster {
	matcher := selectorOf(g.ClusterSelector, g.Selector).compile()
	var out []*SequenceCluster
	for i := range fleet {
		c := &fleet[i]
		if (g.ClusterGroup != "" && contains(c.Groups, g.ClusterGroup)) || (matcher != nil && matcher.matches(c.Labels)) {
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
