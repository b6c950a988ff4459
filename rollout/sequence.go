package rollout

import (
	"fmt"
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
	// Paused is the bundle's pause (R1.13): no cluster is released; groups in flight keep
	// their state.
	Paused bool `json:"-"`
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
}

// ChainOrder validates the chain (R4.1) and returns the groups in order, first group first.
func (s *Sequence) ChainOrder() ([]int, error) {
	if len(s.Groups) == 0 {
		return nil, &FieldError{Field: "groups", Message: "at least one group is required"}
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
// bundle's known revision indexes; prev is the status last written.
func StepSequence(seq *Sequence, prev SequenceStatus, revisions []int64, fleet []SequenceCluster, now time.Time) (SequenceResult, error) {
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
			switch {
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
				rs = progressRevision(seq, g, rs, members, ctl, now, res.Release, wake)
			}
			cur[r] = rs
			gs.Revisions = append(gs.Revisions, rs)
		}
		res.Status.Groups = append(res.Status.Groups, gs)
		upstream = cur
	}
	return res, nil
}

// eligible reports whether group k may receive revision r: the first group any revision that
// is not cancelled, later groups what their upstream completed (R4.3, R4.10).
func eligible(k int, upstream map[int64]SequenceRevisionStatus, r int64, seq *Sequence) bool {
	if seq.control(r).Cancelled {
		return false
	}
	return k == 0 || upstream[r].State == SeqComplete
}

// progressRevision releases the group's target revision where windows allow, and moves its
// state through IN_PROGRESS, SOAKING (or FORCED_SOAKING) and COMPLETE.
func progressRevision(seq *Sequence, g SequenceGroup, rs SequenceRevisionStatus, members []*SequenceCluster, ctl RevisionControl, now time.Time, release map[string]int64, wake func(time.Time)) SequenceRevisionStatus {
	r := rs.Index
	rs.Counts = Counts{}
	needing, done, waiting := 0, 0, 0
	var invalid []string // clusters held by a window that does not compile
	var held []string    // clusters paused or offline
	for _, c := range members {
		d := c.Deployment
		if d != nil && d.Released > r || c.lacks(r) {
			continue // R4.7: already ahead, or only newer revisions are rendered for it
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
	ahead := needing == 0
	if ahead {
		// Clusters ahead are ignored only while some cluster needs the revision (R4.7); when
		// every one is ahead, the group has finished it and soaks it like any other, so that a
		// revision never qualifies downstream without its soak.
		needing, done = len(members), len(members)
	}
	soak := seq.soak(g, r)
	switch rs.State {
	case SeqSoaking:
		if !rs.FinishedAt.IsZero() {
			rs.SoakUntil = rs.FinishedAt.Add(soak) // a soak override set mid-soak counts (R4.2)
		}
	case SeqForcedSoaking:
		rs.SoakUntil = rs.StartedAt.Add(ForcedSoakAge).Add(soak)
	default:
		switch {
		case done == needing:
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
	if rs.State == SeqSoaking || rs.State == SeqForcedSoaking {
		if !now.Before(rs.SoakUntil) {
			rs.State = SeqComplete
		} else {
			wake(rs.SoakUntil)
		}
	}
	switch {
	case seq.Paused && rs.State != SeqComplete:
		rs.Message = "bundle paused: nothing new starts (R1.13)"
	case ctl.Paused && rs.State != SeqComplete:
		rs.Message = "revision paused: nothing new starts (R4.10)"
	case len(held) > 0 && rs.State != SeqComplete:
		rs.Message = fmt.Sprintf("%d clusters paused or offline wait until they are back (R1.13, R1.11): %s", len(held), strings.Join(held, ", "))
	case len(invalid) > 0 && rs.State != SeqComplete:
		rs.Message = fmt.Sprintf("%d clusters wait, no work starts while a maintenance window is invalid: %s", waiting, strings.Join(invalid, "; "))
	case waiting > 0 && rs.State != SeqComplete:
		rs.Message = fmt.Sprintf("%d clusters wait for their maintenance window or an exclusion to end", waiting)
	case rs.State == SeqForcedSoaking:
		rs.Message = fmt.Sprintf("not finished 30 days after it started: soaking anyway; %d of %d clusters done (R4.5)", done, needing)
	case ahead:
		rs.Message = "every cluster already runs a newer revision (R4.7)"
	}
	return rs
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
