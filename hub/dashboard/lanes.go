package dashboard

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/model"
	"github.com/flotilla-dev/flotilla/hub/report"
	"github.com/flotilla-dev/flotilla/rollout"
)

// Chip is how one cluster of a rollout is drawn: what a person needs to know of it at a glance.
type Chip string

const (
	ChipFailed     Chip = "failed"     // the agent could not apply the revision
	ChipNotReady   Chip = "notready"   // applied, and its resources say they are not ready
	ChipOffline    Chip = "offline"    // the agent missed its heartbeat deadline (R1.11)
	ChipRolledBack Chip = "rolledback" // released an older revision by a rollback (R5.4)
	ChipPaused     Chip = "paused"     // the cluster or its deployment is paused (R1.13)
	ChipModified   Chip = "modified"   // changed outside Flotilla (drift)
	ChipReleased   Chip = "released"   // released, the agent has not applied it yet
	ChipApplied    Chip = "applied"    // applied, readiness not reported yet
	ChipPending    Chip = "pending"    // the rollout has not reached it
	ChipSkipped    Chip = "skipped"    // a person skipped it in a staged run (R3.11)
	ChipReady      Chip = "ready"
)

// attention orders chips for a person: what needs them first.
var attention = []Chip{ChipFailed, ChipNotReady, ChipOffline, ChipRolledBack, ChipPaused, ChipModified, ChipReleased, ChipApplied, ChipPending, ChipSkipped, ChipReady}

func attentionRank(c Chip) int { return slices.Index(attention, c) }

// needsAttention: chips a lane lists first, and the fleet view counts.
func needsAttention(c Chip) bool { return attentionRank(c) <= attentionRank(ChipModified) }

// clusterFacts is what the view knows of a cluster beside its deployment.
type clusterFacts struct {
	Labels  map[string]string
	Groups  []string
	Offline bool
	Paused  bool
}

// online reads a Cluster's Ready condition as the cluster-status controller writes it: an agent
// that never connected or missed its deadline is offline.
func online(cl *v1alpha1.Cluster) bool {
	c := meta.FindStatusCondition(cl.Status.Conditions, v1alpha1.ReadyCondition)
	if c == nil {
		return false
	}
	return c.Reason != v1alpha1.OfflineReason && c.Reason != v1alpha1.HeartbeatMissedReason && c.Reason != v1alpha1.AgentNotConnectedReason
}

// chipOf draws one deployment, from the state the hub computes (model.DeploymentState) and
// what the cluster and the run say.
func chipOf(state v1alpha1.ClusterState, bd *v1alpha1.BundleDeployment, facts clusterFacts, run v1alpha1.RunState) Chip {
	switch {
	case facts.Offline:
		return ChipOffline
	case bd != nil && bd.Spec.Rollback:
		return ChipRolledBack
	case run == v1alpha1.RunSkipped:
		return ChipSkipped
	case state != v1alpha1.StateReady && (facts.Paused || bd != nil && bd.Spec.Paused):
		return ChipPaused
	}
	switch state {
	case v1alpha1.StateReady:
		return ChipReady
	case v1alpha1.StateModified:
		return ChipModified
	case v1alpha1.StateErrApplied:
		return ChipFailed
	case v1alpha1.StateNotReady:
		if bd != nil {
			if c := meta.FindStatusCondition(bd.Status.Conditions, v1alpha1.ReadyCondition); c == nil || c.Status == metav1.ConditionUnknown {
				return ChipApplied
			}
		}
		return ChipNotReady
	case v1alpha1.StateWaitApplied:
		return ChipReleased
	}
	return ChipPending
}

// ClusterChip is one cluster in a lane or a table.
type ClusterChip struct {
	Name   string `json:"name"`
	Chip   Chip   `json:"chip"`
	Detail string `json:"detail,omitempty"`
	// Applied and Staged are the revisions the agent applied and the cluster should run.
	Applied int64 `json:"applied,omitempty"`
	Staged  int64 `json:"staged,omitempty"`
}

// Countdown is a moment a lane waits for: a soak's end, a timed wait, a scheduled start.
type Countdown struct {
	Label string    `json:"label"`
	Until time.Time `json:"until"`
}

// Gate is an approval gate of a staged run (R3.9) and how far it got.
type Gate struct {
	Run       string   `json:"run"`
	Stage     string   `json:"stage"`
	Group     string   `json:"group,omitempty"`
	After     bool     `json:"after,omitempty"`
	State     string   `json:"state"`
	Request   string   `json:"request,omitempty"`
	Approvals []string `json:"approvals,omitempty"`
	Quorum    int32    `json:"quorum,omitempty"`
	Rejected  string   `json:"rejected,omitempty"`
}

// Lane is one part of a rollout in the order the rollout takes them: a partition, a stage (or a
// stage's group), a sequence group.
type Lane struct {
	Kind      string         `json:"kind"`
	Name      string         `json:"name"`
	Stage     string         `json:"stage,omitempty"`
	Group     string         `json:"group,omitempty"`
	State     string         `json:"state,omitempty"`
	Reason    string         `json:"reason,omitempty"`
	Total     int            `json:"total"`
	Counts    map[Chip]int   `json:"counts"`
	Clusters  []ClusterChip  `json:"clusters"`
	More      int            `json:"more,omitempty"`
	Countdown *Countdown     `json:"countdown,omitempty"`
	Gates     []Gate         `json:"gates,omitempty"`
	Budget    *LaneBudget    `json:"budget,omitempty"`
	members   map[string]int // cluster → index in the bundle's cluster list, while building
}

// LaneBudget is a partition's unavailability budget (R1.6).
type LaneBudget struct {
	Unavailable    int32 `json:"unavailable"`
	MaxUnavailable int32 `json:"maxUnavailable"`
}

// laneChips is how many chips a lane carries: at 10,000 clusters a lane is its counts and the
// clusters that need attention, not every name (the cluster table pages through the rest).
const laneChips = 120

// fill counts a lane's chips and keeps the first laneChips in attention order.
func (l *Lane) fill(chips []ClusterChip) {
	l.Total, l.Counts = len(chips), map[Chip]int{}
	for _, c := range chips {
		l.Counts[c.Chip]++
	}
	sorted := slices.Clone(chips)
	slices.SortStableFunc(sorted, func(a, b ClusterChip) int {
		return cmp.Or(cmp.Compare(attentionRank(a.Chip), attentionRank(b.Chip)), cmp.Compare(a.Name, b.Name))
	})
	if len(sorted) > laneChips {
		l.More = len(sorted) - laneChips
		sorted = sorted[:laneChips]
	}
	l.Clusters = sorted
}

// rolloutInput is what lanes are drawn from, read from the viewer's caches.
type rolloutInput struct {
	Bundle   *v1alpha1.Bundle
	Report   report.Bundle
	Facts    map[string]clusterFacts
	Deploys  map[string]*v1alpha1.BundleDeployment
	Run      *v1alpha1.StagedUpdateRun
	Requests map[string]*v1alpha1.ApprovalRequest
	Sequence *v1alpha1.RolloutSequence
	Groups   []rollout.ClusterGroup
	Now      time.Time
}

// lanes draws the rollout of a bundle as its strategy takes it.
func lanes(in rolloutInput) ([]Lane, error) {
	b := in.Bundle
	chips := make(map[string]ClusterChip, len(in.Report.Clusters))
	for _, c := range in.Report.Clusters {
		chips[c.Name] = ClusterChip{Name: c.Name, Chip: chipOf(c.State, in.Deploys[c.Name], in.Facts[c.Name], ""), Detail: c.Detail, Applied: c.Applied, Staged: c.Staged}
	}
	switch {
	case b.Spec.StagedUpdate != nil:
		return stagedLanes(in, chips), nil
	case b.Spec.Sequence != nil:
		return sequenceLanes(in, chips), nil
	case b.Spec.Placement != nil && b.Spec.Placement.RollingUpdate != nil:
		l := Lane{Kind: "placement", Name: "rolling update", State: in.Report.State, Reason: in.Report.Waiting}
		l.fill(values(chips, in.Report.Clusters))
		return []Lane{l}, nil
	}
	return partitionLanes(in, chips)
}

func values(chips map[string]ClusterChip, order []report.Cluster) []ClusterChip {
	out := make([]ClusterChip, 0, len(order))
	for _, c := range order {
		out = append(out, chips[c.Name])
	}
	return out
}

// partitionLanes are a continuous rollout's partitions (§1), formed as the planner forms them.
// The first partition not yet fully released is the one the bundle's wait is about; those after
// it wait for it.
func partitionLanes(in rolloutInput, chips map[string]ClusterChip) ([]Lane, error) {
	strategy, err := model.RolloutStrategy(in.Bundle.Spec.RolloutStrategy)
	if err != nil {
		return nil, fmt.Errorf("bundle %s: %w", in.Bundle.Name, err)
	}
	targets := make([]rollout.Target, 0, len(in.Report.Clusters))
	for _, c := range in.Report.Clusters {
		f := in.Facts[c.Name]
		targets = append(targets, rollout.Target{Cluster: c.Name, Labels: f.Labels, Groups: f.Groups})
	}
	parts, none := rollout.AssignPartitions(targets, &strategy, in.Groups)
	status := map[string]v1alpha1.PartitionStatus{}
	for _, p := range in.Bundle.Status.Partitions {
		status[p.Name] = p
	}
	var out []Lane
	current := ""
	for _, p := range parts {
		l := Lane{Kind: "partition", Name: p.Name}
		var cs []ClusterChip
		reached := true
		for _, name := range p.Clusters {
			c := chips[name]
			cs = append(cs, c)
			reached = reached && c.Chip != ChipPending && c.Chip != ChipPaused
		}
		l.fill(cs)
		if st, ok := status[p.Name]; ok {
			l.Budget = &LaneBudget{Unavailable: st.Unavailable, MaxUnavailable: st.MaxUnavailable}
			l.State = map[bool]string{true: "Ready", false: "NotReady"}[st.Ready]
		}
		switch {
		case reached && l.Counts[ChipReady]+l.Counts[ChipModified] == l.Total:
			l.State = "Done"
		case current == "":
			current = p.Name
			l.Reason = in.Report.Waiting
			if l.Reason == "" {
				l.Reason = in.Report.Now
			}
		case !reached:
			l.State, l.Reason = "Waiting", "after partition "+current
		}
		out = append(out, l)
	}
	if len(none) > 0 {
		l := Lane{Kind: "unpartitioned", Name: "in no partition", State: "Never released", Reason: "these clusters match no partition of fleet.yaml (R1.3)"}
		var cs []ClusterChip
		for _, name := range none {
			cs = append(cs, chips[name])
		}
		l.fill(cs)
		out = append(out, l)
	}
	return out, nil
}

// stagedLanes are the stages of the bundle's current run (§3), one lane per group of a stage
// with groups, each with its gates and timed waits.
func stagedLanes(in rolloutInput, chips map[string]ClusterChip) []Lane {
	run := in.Run
	if run == nil {
		l := Lane{Kind: "stage", Name: "no run", State: "NotStarted", Reason: "no StagedUpdateRun rolls this bundle out yet: start one"}
		l.fill(values(chips, in.Report.Clusters))
		return []Lane{l}
	}
	var out []Lane
	for _, st := range run.Status.Stages {
		stageGates := func(tasks []v1alpha1.TaskStatus, group string, after bool) ([]Gate, *Countdown) {
			var gates []Gate
			var cd *Countdown
			for _, t := range tasks {
				switch t.Type {
				case v1alpha1.TaskApproval:
					gates = append(gates, in.gate(run, st.Name, group, after, t))
				case v1alpha1.TaskTimedWait, v1alpha1.TaskScheduledStart:
					if t.WaitUntil != nil && t.State != v1alpha1.RunCompleted && t.State != v1alpha1.RunSkipped {
						label := "timed wait ends"
						if t.Type == v1alpha1.TaskScheduledStart {
							label = "scheduled start"
						}
						cd = &Countdown{Label: label, Until: t.WaitUntil.Time}
					}
				}
			}
			return gates, cd
		}
		for _, g := range st.Groups {
			name := st.Name
			if len(st.Groups) > 1 || g.Name != "" && g.Name != st.Name {
				name = st.Name + " / " + g.Name
			}
			l := Lane{Kind: "stage", Name: name, Stage: st.Name, State: string(g.State), Reason: cmp.Or(g.Message, st.Message)}
			if len(st.Groups) > 1 {
				l.Group = g.Name
			}
			var cs []ClusterChip
			for _, c := range g.Clusters {
				chip := chips[c.Name]
				if chip.Name == "" {
					chip = ClusterChip{Name: c.Name, Chip: ChipPending}
				}
				if c.State == v1alpha1.RunSkipped {
					chip.Chip = ChipSkipped
				}
				if chip.Detail == "" {
					chip.Detail = c.Message
				}
				cs = append(cs, chip)
			}
			l.fill(cs)
			bg, bcd := stageGates(append(slices.Clone(st.BeforeTasks), g.BeforeTasks...), l.Group, false)
			ag, acd := stageGates(append(slices.Clone(g.AfterTasks), st.AfterTasks...), l.Group, true)
			l.Gates = append(bg, ag...)
			l.Countdown = cmp.Or(bcd, acd)
			out = append(out, l)
		}
	}
	if len(run.Status.UnstagedClusters) > 0 {
		l := Lane{Kind: "unstaged", Name: "joined after the run started", State: "NotStarted", Reason: "a new run takes them (R3.7)"}
		var cs []ClusterChip
		for _, name := range run.Status.UnstagedClusters {
			cs = append(cs, cmp.Or(chips[name], ClusterChip{Name: name, Chip: ChipPending}))
		}
		l.fill(cs)
		out = append(out, l)
	}
	return out
}

// gate reads an approval task with its request: who approved, the quorum, a rejection.
func (in rolloutInput) gate(run *v1alpha1.StagedUpdateRun, stage, group string, after bool, t v1alpha1.TaskStatus) Gate {
	g := Gate{Run: run.Name, Stage: stage, Group: group, After: after, State: string(t.State), Request: t.ApprovalRequest, Quorum: 1}
	ar := in.Requests[t.ApprovalRequest]
	if ar == nil {
		return g
	}
	if ar.Spec.Quorum > 0 {
		g.Quorum = ar.Spec.Quorum
	}
	if a := ar.Status.Approval; a != nil {
		g.Approvals = append(g.Approvals, a.By)
	}
	for _, a := range ar.Status.Approvals {
		if !slices.Contains(g.Approvals, a.By) {
			g.Approvals = append(g.Approvals, a.By)
		}
	}
	if r := ar.Status.Rejection; r != nil {
		g.Rejected = r.By + ": " + r.Comment
	}
	return g
}

// sequenceLanes are the groups of the bundle's RolloutSequence in chain order (§4), each with
// its progress on the revision being rolled out and the end of its soak.
func sequenceLanes(in rolloutInput, chips map[string]ClusterChip) []Lane {
	if in.Sequence == nil {
		l := Lane{Kind: "sequence", Name: "sequence " + in.Bundle.Spec.Sequence.Name, State: "Unknown", Reason: "the RolloutSequence cannot be read"}
		l.fill(values(chips, in.Report.Clusters))
		return []Lane{l}
	}
	seq := model.Sequence(&in.Sequence.Spec)
	fleet := make([]rollout.SequenceCluster, 0, len(in.Report.Clusters))
	for _, c := range in.Report.Clusters {
		f := in.Facts[c.Name]
		fleet = append(fleet, rollout.SequenceCluster{Name: c.Name, Labels: f.Labels, Groups: f.Groups})
	}
	progress := map[string]v1alpha1.SequenceRevisionStatus{}
	for _, g := range in.Report.Sequence {
		for _, r := range g.Revisions {
			if r.Index == in.Bundle.Status.ReleasingRevision || progress[g.Name].Index < r.Index {
				progress[g.Name] = r
			}
		}
	}
	var out []Lane
	grouped := map[string]bool{}
	for _, g := range chainOrder(seq.Groups) {
		l := Lane{Kind: "sequence", Name: g.Name}
		if p, ok := progress[g.Name]; ok {
			l.State, l.Reason = fmt.Sprintf("%s (revision %d)", p.State, p.Index), p.Message
			if p.SoakUntil != nil && (p.State == v1alpha1.SequenceSoaking || p.State == v1alpha1.SequenceForcedSoaking) {
				l.Countdown = &Countdown{Label: "soak ends", Until: p.SoakUntil.Time}
			}
		}
		var cs []ClusterChip
		for _, name := range rollout.GroupMembers(g, fleet) {
			grouped[name] = true
			cs = append(cs, chips[name])
		}
		l.fill(cs)
		out = append(out, l)
	}
	var rest []ClusterChip
	for _, c := range in.Report.Clusters {
		if !grouped[c.Name] {
			rest = append(rest, chips[c.Name])
		}
	}
	if len(rest) > 0 {
		l := Lane{Kind: "unsequenced", Name: "in no group", Reason: "catch-up: they get the revision the last group qualified"}
		l.fill(rest)
		out = append(out, l)
	}
	return out
}

// chainOrder lists a sequence's groups from the first (no upstream) downstream.
func chainOrder(groups []rollout.SequenceGroup) []rollout.SequenceGroup {
	next := map[string]rollout.SequenceGroup{}
	var out []rollout.SequenceGroup
	for _, g := range groups {
		next[g.Upstream] = g
	}
	for up := ""; ; {
		g, ok := next[up]
		if !ok || len(out) == len(groups) {
			return out
		}
		out = append(out, g)
		up = g.Name
	}
}
