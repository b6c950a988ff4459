package rollout

import (
	"encoding/json"
	"fmt"
	"time"
)

// RunAction is what a person asks of a run (R3.7).
type RunAction string

const (
	ActionInitialize RunAction = "Initialize"
	ActionRun        RunAction = "Run"
	ActionStop       RunAction = "Stop"
)

// RunState is the state of a run, stage, group, cluster or gate (R3.11).
type RunState string

const (
	RunNotStarted RunState = "NotStarted"
	RunPending    RunState = "Pending"
	RunRunning    RunState = "Running"
	RunStopping   RunState = "Stopping"
	RunStopped    RunState = "Stopped"
	RunSkipped    RunState = "Skipped"
	RunFailed     RunState = "Failed"
	RunCompleted  RunState = "Completed"
	// RunRollingBack: the run failed under onFailure Rollback and restores every cluster that
	// received its revision (R5.4); RunRolledBack once it has.
	RunRollingBack RunState = "RollingBack"
	RunRolledBack  RunState = "RolledBack"
)

// terminal reports whether nothing more happens in this state.
func (s RunState) Terminal() bool {
	return s == RunCompleted || s == RunFailed || s == RunSkipped || s == RunRolledBack
}

// Skip is what a person chose to skip (R3.11): a stage; with Group, a group; with Cluster, a
// cluster; with Gate ("Before" or "After"), that gate of the stage (or of the group).
type Skip struct {
	Stage   string `json:"stage"`
	Group   string `json:"group,omitempty"`
	Cluster string `json:"cluster,omitempty"`
	Gate    string `json:"gate,omitempty"`
}

// Run is a staged update run as the controller sees it: what was asked, and the status it
// last wrote (the state machine's memory).
type Run struct {
	Name string
	// Strategy is the strategy object's current spec; it is frozen into the status at start.
	Strategy StagedStrategy
	// Revision is the resolved revision index: the spec's, or the bundle's latest.
	Revision int64
	Action   RunAction
	Skips    []Skip
	// SupersededBy names a newer run that replaces this one (R3.14): it stops like Stop.
	SupersededBy string
	// Paused is the bundle's pause (R1.13): no cluster starts; those in flight finish.
	Paused bool
	// Current: the run's revision is the one the bundle wants now, and no newer run replaced
	// it. Only then does a cluster that joined after the run started receive the revision, once
	// its stage is done.
	Current bool
	// Quarantine are the bundle's revisions that failed and were rolled back (R5.5): a run of
	// one fails at once, releasing nothing.
	Quarantine []Failure
	// Analyses are the judgements of the Gate checks of the run's tasks (§7).
	Analyses Analyses
	Status   RunStatus
}

// RunCluster is a targeted cluster as a run sees it.
type RunCluster struct {
	Name       string
	Labels     map[string]string
	Deployment *Deployment
	// Offline: the agent missed its heartbeat deadline (R1.11); Paused: the cluster is paused
	// (R1.13). Neither starts until it is back; Offline counts against one in flight.
	Offline, Paused bool
	Availability    *Availability
	// Since is the oldest revision rendered for the cluster (0: every one): a run of an older
	// revision skips it, as it has nothing to deploy there.
	Since int64
}

// RunStatus is a run's progress. Its JSON form is the StagedUpdateRun status's.
type RunStatus struct {
	State         RunState        `json:"state,omitempty"`
	Message       string          `json:"message,omitempty"`
	RevisionIndex int64           `json:"revisionIndex,omitempty"`
	FailureCount  int             `json:"failureCount,omitempty"`
	StartedAt     MicroTime       `json:"startedAt,omitzero"`
	Strategy      *StagedStrategy `json:"strategy,omitempty"`
	Stages        []StageStatus   `json:"stages,omitempty"`
	Unstaged      []string        `json:"unstagedClusters,omitempty"`
	SupersededBy  string          `json:"supersededBy,omitempty"`
	// Failure is the run's failure over its budgets (R5.3), once it failed.
	Failure *Failure `json:"failure,omitempty"`
}

// StageStatus is one stage's progress.
type StageStatus struct {
	Name         string        `json:"name"`
	State        RunState      `json:"state"`
	Message      string        `json:"message,omitempty"`
	FailureCount int           `json:"failureCount,omitempty"`
	StartedAt    time.Time     `json:"startedAt,omitzero"`
	FinishedAt   time.Time     `json:"finishedAt,omitzero"`
	BeforeTasks  []TaskStatus  `json:"beforeTasks,omitempty"`
	AfterTasks   []TaskStatus  `json:"afterTasks,omitempty"`
	Groups       []GroupStatus `json:"groups,omitempty"`
}

// GroupStatus is one group's progress; a stage without groups has one implicit group named
// after the stage.
type GroupStatus struct {
	Name         string             `json:"name"`
	State        RunState           `json:"state"`
	Message      string             `json:"message,omitempty"`
	FailureCount int                `json:"failureCount,omitempty"`
	BeforeTasks  []TaskStatus       `json:"beforeTasks,omitempty"`
	AfterTasks   []TaskStatus       `json:"afterTasks,omitempty"`
	Clusters     []ClusterRunStatus `json:"clusters,omitempty"`
}

// ClusterRunStatus is one cluster's progress, in update order.
type ClusterRunStatus struct {
	Name       string    `json:"name"`
	State      RunState  `json:"state"`
	Message    string    `json:"message,omitempty"`
	StartedAt  time.Time `json:"startedAt,omitzero"`
	FinishedAt time.Time `json:"finishedAt,omitzero"`
}

// TaskStatus is one gate's progress.
type TaskStatus struct {
	Type  TaskType `json:"type"`
	State RunState `json:"state"`
	// Message says what the task's checks say while it waits on them, or why it failed.
	Message         string    `json:"message,omitempty"`
	ApprovalRequest string    `json:"approvalRequest,omitempty"`
	WaitUntil       time.Time `json:"waitUntil,omitzero"`
}

// ApprovalGate is an ApprovalRequest the controller must make sure exists (R3.9).
type ApprovalGate struct {
	Name  string
	Stage string
	Group string
	Gate  string // Before or After
	// Quorum is how many distinct people must approve.
	Quorum int
	// Approvers are who may decide the gate; empty: anyone who may write its status.
	Approvers []Approver
}

// Approval is what people said on an approval gate's request (R3.9): who approved it and, when
// someone rejected it, who and why. The caller vouches for the names (the API server checks
// that each record names the user who wrote it).
type Approval struct {
	Approvers          []string
	RejectedBy, Reason string
}

// approvedBy reports whether at least quorum distinct people approved.
func (a Approval) approvedBy(quorum int) bool {
	seen := map[string]bool{}
	for _, by := range a.Approvers {
		seen[by] = true
	}
	return len(seen) >= max(quorum, 1)
}

// StepResult is the outcome of one Step.
type StepResult struct {
	Status RunStatus
	// Release are clusters that must have the run's revision released now (idempotent: every
	// running cluster not yet released is listed again).
	Release []string
	// Approvals are the gates currently waiting for a person.
	Approvals []ApprovalGate
	// WakeAt is when to step again without an event (a timed wait, a scheduled start, a
	// window opening, a cluster timeout); zero when only events matter.
	WakeAt time.Time
	// Failure is set in the step in which the run failed (R5.3); with Action Rollback the
	// caller records it as a quarantine of the revision (R5.5).
	Failure *Failure
	// Restore are the clusters a rollback releases their last good revision now (R5.4).
	Restore []Restore
	// Analysis are the checks the run's gates judge now (§7, R7.3).
	Analysis []ActiveCheck
}

// ValidateTransition applies R3.7 to a change of a run's requested state: Initialize→Run,
// Run→Stop and Stop→Run are allowed, and a finished run (Completed or Failed) cannot change.
// The CRD enforces the same rules at the API server; this is the planner's own check.
func ValidateTransition(from, to RunAction, state RunState) error {
	if from == to {
		return nil
	}
	if state.Terminal() {
		return fmt.Errorf("the run is %s: a finished run cannot be restarted; create a new run", state)
	}
	switch {
	case from == ActionInitialize && to == ActionRun, from == ActionRun && to == ActionStop, from == ActionStop && to == ActionRun:
		return nil
	}
	return fmt.Errorf("state may only change Initialize→Run, Run→Stop or Stop→Run, not %s→%s", from, to)
}

// MicroTime is a time whose JSON form keeps microseconds, as the API's MicroTime does: runs set
// running within the same second still order by when that happened (R3.14).
type MicroTime struct{ time.Time }

const microLayout = "2006-01-02T15:04:05.000000Z07:00"

// MarshalJSON writes the time with six fractional digits; the zero time is null.
func (t MicroTime) MarshalJSON() ([]byte, error) {
	if t.IsZero() {
		return []byte("null"), nil
	}
	return json.Marshal(t.UTC().Format(microLayout))
}

// UnmarshalJSON reads an RFC 3339 time with any number of fractional digits, or null.
func (t *MicroTime) UnmarshalJSON(data []byte) error {
	if string(data) == "null" {
		*t = MicroTime{}
		return nil
	}
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return err
	}
	parsed, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return err
	}
	t.Time = parsed
	return nil
}

// Outcome is how a run ended (R5.6): RolledBack, Failed (held by its policy, or stopped
// after a rejection), Completed; "" while it goes on.
func (st RunStatus) Outcome() Outcome {
	switch st.State {
	case RunRolledBack:
		return OutcomeRolledBack
	case RunCompleted, RunSkipped:
		return OutcomeCompleted
	case RunFailed:
		return OutcomeFailed
	}
	return ""
}
