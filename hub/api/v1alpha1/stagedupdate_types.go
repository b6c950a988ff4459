package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// StagedUpdateStrategySpec is an ordered list of stages (ROLLOUT.md R3.1).
// +kubebuilder:validation:XValidation:rule="!has(self.failureTimeout)",message="failureTimeout: a staged run times clusters out with clusterTimeout"
type StagedUpdateStrategySpec struct {
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=31
	// +listType=map
	// +listMapKey=name
	Stages []StageConfig `json:"stages"`
	// ClusterTimeout is how long a cluster may take to become Ready after its release before
	// it counts as a failure (R3.10). Default 10m.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('10s')",message="clusterTimeout must be at least 10s"
	ClusterTimeout *metav1.Duration `json:"clusterTimeout,omitempty"`
	// FailurePolicy is how a run answers a revision that fails (§5); failureTimeout is
	// clusterTimeout's here.
	FailurePolicy `json:",inline"`
}

// StageConfig is one stage: a label-selected set of clusters updated together.
// +kubebuilder:validation:XValidation:rule="has(self.labelSelector) != has(self.selector)",message="select the stage's clusters with exactly one of labelSelector and selector"
type StageConfig struct {
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`
	// LabelSelector selects the stage's clusters; Selector does the same in the string form of
	// kubectl's --selector, such as "env=prod,ring notin (canary),!legacy" (R3.6). Exactly one
	// is set.
	// +optional
	LabelSelector *metav1.LabelSelector `json:"labelSelector,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Selector string `json:"selector,omitempty"`
	// SortingLabelKey orders the stage's clusters by the integer value of this label (R3.2).
	// +optional
	SortingLabelKey string `json:"sortingLabelKey,omitempty"`
	// MaxConcurrency is how many clusters of the stage may update at once (R3.3, R3.5).
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=4
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 1 : self.matches('^(100|[1-9][0-9]?)%$')",message="must be an integer of at least 1 or a percentage from 1% to 100%"
	MaxConcurrency *intstr.IntOrString `json:"maxConcurrency,omitempty"`
	// MaxAllowedFailures is the stage's failure budget; a percent rounds up (R3.10). Default 0.
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=4
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 0 : self.matches('^(100|[1-9]?[0-9])%$')",message="must be a non-negative integer or a percentage from 0% to 100%"
	MaxAllowedFailures *intstr.IntOrString `json:"maxAllowedFailures,omitempty"`
	// BeforeStageTasks gate the start of the stage: at most one, Approval or ScheduledStart.
	// +optional
	// +kubebuilder:validation:MaxItems=1
	// +kubebuilder:validation:XValidation:rule="self.all(t, t.type != 'TimedWait' && t.type != 'Analysis')",message="before-stage tasks may be Approval or ScheduledStart, not TimedWait or Analysis"
	BeforeStageTasks []StageTask `json:"beforeStageTasks,omitempty"`
	// AfterStageTasks run together once the stage's clusters finished: at most one TimedWait,
	// one Approval and one Analysis.
	// +optional
	// +kubebuilder:validation:MaxItems=3
	// +kubebuilder:validation:XValidation:rule="self.all(t, t.type != 'ScheduledStart')",message="after-stage tasks may be Approval, TimedWait or Analysis, not ScheduledStart"
	// +kubebuilder:validation:XValidation:rule="self.all(t, self.exists_one(u, u.type == t.type))",message="after-stage tasks may hold at most one task of each type"
	AfterStageTasks []StageTask `json:"afterStageTasks,omitempty"`
	// Groups split the stage into label-selected groups that run in parallel (R3.5).
	// +optional
	// +kubebuilder:validation:MaxItems=50
	// +listType=map
	// +listMapKey=name
	Groups []StageGroup `json:"groups,omitempty"`
}

// StageGroup is a group within a stage.
// +kubebuilder:validation:XValidation:rule="has(self.labelSelector) != has(self.selector)",message="select the group's clusters with exactly one of labelSelector and selector"
type StageGroup struct {
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`
	// LabelSelector or Selector (its string form) selects the group's clusters among the
	// stage's; exactly one is set (R3.6).
	// +optional
	LabelSelector *metav1.LabelSelector `json:"labelSelector,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Selector string `json:"selector,omitempty"`
	// MaxConcurrency is a number or percent of the group (floor, minimum 1). Default 1.
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=4
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 1 : self.matches('^(100|[1-9][0-9]?)%$')",message="must be an integer of at least 1 or a percentage from 1% to 100%"
	MaxConcurrency *intstr.IntOrString `json:"maxConcurrency,omitempty"`
	// MaxAllowedFailures is the group's failure budget; a percent rounds up. Default 0.
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=4
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 0 : self.matches('^(100|[1-9]?[0-9])%$')",message="must be a non-negative integer or a percentage from 0% to 100%"
	MaxAllowedFailures *intstr.IntOrString `json:"maxAllowedFailures,omitempty"`
	// BeforeGroupTasks gate the group: at most one, Approval or ScheduledStart.
	// +optional
	// +kubebuilder:validation:MaxItems=1
	// +kubebuilder:validation:XValidation:rule="self.all(t, t.type != 'TimedWait' && t.type != 'Analysis')",message="before-group tasks may be Approval or ScheduledStart, not TimedWait or Analysis"
	BeforeGroupTasks []StageTask `json:"beforeGroupTasks,omitempty"`
	// AfterGroupTasks run once the group's clusters finished: at most one of each type.
	// +optional
	// +kubebuilder:validation:MaxItems=3
	// +kubebuilder:validation:XValidation:rule="self.all(t, t.type != 'ScheduledStart')",message="after-group tasks may be Approval, TimedWait or Analysis, not ScheduledStart"
	// +kubebuilder:validation:XValidation:rule="self.all(t, self.exists_one(u, u.type == t.type))",message="after-group tasks may hold at most one task of each type"
	AfterGroupTasks []StageTask `json:"afterGroupTasks,omitempty"`
}

// StageTaskType names a gate.
// +kubebuilder:validation:Enum=Approval;TimedWait;ScheduledStart;Analysis
type StageTaskType string

const (
	TaskApproval       StageTaskType = "Approval"
	TaskTimedWait      StageTaskType = "TimedWait"
	TaskScheduledStart StageTaskType = "ScheduledStart"
	// TaskAnalysis opens once its checks passed (§7).
	TaskAnalysis StageTaskType = "Analysis"
)

// StageTask is a gate before or after a stage or group (R3.4, R3.12).
// +kubebuilder:validation:XValidation:rule="self.type == 'TimedWait' ? has(self.waitTime) : !has(self.waitTime)",message="waitTime is required for TimedWait and only valid there"
// +kubebuilder:validation:XValidation:rule="self.type == 'ScheduledStart' ? has(self.scheduledStart) : !has(self.scheduledStart)",message="scheduledStart is required for ScheduledStart and only valid there"
// +kubebuilder:validation:XValidation:rule="self.type == 'Approval' || !has(self.quorum)",message="quorum is only valid for Approval"
// +kubebuilder:validation:XValidation:rule="self.type == 'Approval' || !has(self.approvers)",message="approvers are only valid for Approval"
// +kubebuilder:validation:XValidation:rule="self.type == 'Analysis' ? has(self.analysis) && size(self.analysis) > 0 : (self.type == 'TimedWait' || !has(self.analysis))",message="analysis is required for an Analysis task, and valid only there and for TimedWait"
type StageTask struct {
	Type StageTaskType `json:"type"`
	// WaitTime is how long a TimedWait lasts, counted from the end of the stage's last cluster.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="waitTime must be positive"
	WaitTime *metav1.Duration `json:"waitTime,omitempty"`
	// ScheduledStart is the time a ScheduledStart gate opens by itself.
	// +optional
	ScheduledStart *ScheduledStart `json:"scheduledStart,omitempty"`
	// Quorum is how many distinct people must approve an Approval gate; default 1.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10
	Quorum int32 `json:"quorum,omitempty"`
	// Approvers are who may approve or reject an Approval gate: users by name and groups, as
	// the API server authenticates them (the admission policy flotilla-approvals-name-their-author
	// refuses anyone else's record). Empty: anyone allowed to write the gate's status. A
	// ServiceAccount or other system: identity counts only when listed by its user name.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=50
	Approvers []Approver `json:"approvers,omitempty"`
	// Analysis are an Analysis task's checks, or those a TimedWait measures while it waits;
	// the task opens once they passed (§7).
	// +optional
	// +kubebuilder:validation:MaxItems=10
	Analysis []AnalysisCheck `json:"analysis,omitempty"`
}

// Approver is a person allowed to decide a gate, by user name, or the people of a group.
// +kubebuilder:validation:XValidation:rule="has(self.user) != has(self.group)",message="set either user or group"
type Approver struct {
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	User string `json:"user,omitempty"`
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Group string `json:"group,omitempty"`
}

// ScheduledStart is an absolute time, or a weekday and time of day at a UTC offset (the next
// such moment after the gate is reached).
// +kubebuilder:validation:XValidation:rule="has(self.at) != has(self.timeOfDay)",message="set either at, or timeOfDay (with an optional weekday)"
// +kubebuilder:validation:XValidation:rule="!has(self.weekday) || has(self.timeOfDay)",message="weekday needs timeOfDay"
type ScheduledStart struct {
	// +optional
	At *metav1.Time `json:"at,omitempty"`
	// +optional
	// +kubebuilder:validation:Enum=Monday;Tuesday;Wednesday;Thursday;Friday;Saturday;Sunday
	Weekday string `json:"weekday,omitempty"`
	// TimeOfDay is "HH:MM".
	// +optional
	// +kubebuilder:validation:Pattern=`^([01][0-9]|2[0-3]):[0-5][0-9]$`
	TimeOfDay string `json:"timeOfDay,omitempty"`
	// UTCOffset is "+HH:MM" or "-HH:MM"; default +00:00.
	// +optional
	// +kubebuilder:validation:Pattern=`^[+-]([01][0-9]|2[0-3]):[0-5][0-9]$`
	UTCOffset string `json:"utcOffset,omitempty"`
}

// StagedUpdateStrategy is a reusable staged rollout plan.
// +kubebuilder:object:root=true
// +kubebuilder:resource:categories=flotilla
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type StagedUpdateStrategy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec StagedUpdateStrategySpec `json:"spec"`
}

// StagedUpdateStrategyList is a list of StagedUpdateStrategies.
// +kubebuilder:object:root=true
type StagedUpdateStrategyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []StagedUpdateStrategy `json:"items"`
}

// RunAction is what a person asks of a run (R3.7).
// +kubebuilder:validation:Enum=Initialize;Run;Stop
type RunAction string

const (
	RunInitialize RunAction = "Initialize"
	RunRun        RunAction = "Run"
	RunStop       RunAction = "Stop"
)

// RunState is the state of a run, stage, group or cluster (R3.11).
// +kubebuilder:validation:Enum=NotStarted;Pending;Running;Stopping;Stopped;Skipped;Failed;Completed;RollingBack;RolledBack
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
	// RunRollingBack and RunRolledBack: the run failed under onFailure Rollback (R5.4).
	RunRollingBack RunState = "RollingBack"
	RunRolledBack  RunState = "RolledBack"
)

// StagedUpdateRunSpec names what to roll out and how (R3.7).
type StagedUpdateRunSpec struct {
	// Bundle is the bundle to roll out.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="bundle is immutable"
	Bundle string `json:"bundle"`
	// Strategy is the StagedUpdateStrategy to follow; it is frozen into the run when it starts.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="strategy is immutable"
	Strategy string `json:"strategy"`
	// RevisionIndex is the revision to roll out; omitted means the latest, an older index is a
	// rollback.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="revisionIndex is immutable"
	RevisionIndex *int64 `json:"revisionIndex,omitempty"`
	// State: Initialize (plan only), Run, Stop. Allowed changes: Initialize→Run, Run→Stop, Stop→Run.
	// +kubebuilder:default=Initialize
	// +kubebuilder:validation:XValidation:rule="self == oldSelf || (oldSelf == 'Initialize' && self == 'Run') || (oldSelf == 'Run' && self == 'Stop') || (oldSelf == 'Stop' && self == 'Run')",message="state may only change Initialize→Run, Run→Stop or Stop→Run"
	State RunAction `json:"state"`
	// Skips are what a person chose to skip: a stage, a group, a cluster or a gate.
	// +optional
	// +kubebuilder:validation:MaxItems=500
	Skips []RunSkip `json:"skips,omitempty"`
}

// RunSkip skips part of a run. Stage alone skips the stage; with Group, the group; with Cluster,
// the cluster; with Gate, that gate (a wait, an approval or a scheduled start).
// +kubebuilder:validation:XValidation:rule="!(has(self.cluster) && has(self.gate))",message="skip either a cluster or a gate, not both"
type RunSkip struct {
	// +kubebuilder:validation:MinLength=1
	Stage string `json:"stage"`
	// +optional
	Group string `json:"group,omitempty"`
	// +optional
	Cluster string `json:"cluster,omitempty"`
	// +optional
	// +kubebuilder:validation:Enum=Before;After
	Gate string `json:"gate,omitempty"`
}

// StagedUpdateRunStatus is the progress of a run.
type StagedUpdateRunStatus struct {
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// +optional
	State RunState `json:"state,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
	// RevisionIndex is the resolved revision being rolled out.
	// +optional
	RevisionIndex int64 `json:"revisionIndex,omitempty"`
	// FailureCount is the number of clusters that failed in this run.
	// +optional
	FailureCount int32 `json:"failureCount,omitempty"`
	// StartedAt is when the run was last set running: of a bundle's runs, the one started last
	// releases and the others stop (one rollout per bundle).
	// +optional
	StartedAt *metav1.MicroTime `json:"startedAt,omitempty"`
	// Strategy is the strategy as frozen when the run started.
	// +optional
	Strategy *StagedUpdateStrategySpec `json:"strategy,omitempty"`
	// Stages are the stages' progress, in order.
	// +optional
	// +kubebuilder:validation:MaxItems=31
	Stages []StageRunStatus `json:"stages,omitempty"`
	// UnstagedClusters are targeted clusters that joined after the run started (R3.7).
	// +optional
	UnstagedClusters []string `json:"unstagedClusters,omitempty"`
	// SupersededBy names the run that replaced this one: a newer run of the same bundle, started
	// by a person, by a rollback or by a new revision (R3.14).
	// +optional
	SupersededBy string `json:"supersededBy,omitempty"`
	// Failure is what failed the run over its budgets and what its policy did (R5.3, R5.6).
	// +optional
	Failure *RevisionFailure `json:"failure,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// StageRunStatus is one stage's progress.
type StageRunStatus struct {
	Name  string   `json:"name"`
	State RunState `json:"state"`
	// +optional
	Message string `json:"message,omitempty"`
	// +optional
	FailureCount int32 `json:"failureCount,omitempty"`
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
	// +optional
	BeforeTasks []TaskStatus `json:"beforeTasks,omitempty"`
	// +optional
	AfterTasks []TaskStatus `json:"afterTasks,omitempty"`
	// +optional
	Groups []GroupRunStatus `json:"groups,omitempty"`
}

// GroupRunStatus is one group's progress; a stage without groups has one implicit group.
type GroupRunStatus struct {
	Name  string   `json:"name"`
	State RunState `json:"state"`
	// +optional
	Message string `json:"message,omitempty"`
	// +optional
	FailureCount int32 `json:"failureCount,omitempty"`
	// +optional
	BeforeTasks []TaskStatus `json:"beforeTasks,omitempty"`
	// +optional
	AfterTasks []TaskStatus `json:"afterTasks,omitempty"`
	// Clusters in update order.
	// +optional
	Clusters []ClusterRunStatus `json:"clusters,omitempty"`
}

// ClusterRunStatus is one cluster's progress within a run.
type ClusterRunStatus struct {
	Name  string   `json:"name"`
	State RunState `json:"state"`
	// +optional
	Message string `json:"message,omitempty"`
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
}

// TaskStatus is one gate's progress.
type TaskStatus struct {
	Type  StageTaskType `json:"type"`
	State RunState      `json:"state"`
	// ApprovalRequest is the name of the request an Approval task created.
	// +optional
	ApprovalRequest string `json:"approvalRequest,omitempty"`
	// WaitUntil is when a TimedWait or ScheduledStart opens.
	// +optional
	WaitUntil *metav1.Time `json:"waitUntil,omitempty"`
	// Message says what the task's checks wait for, or why they failed it.
	// +optional
	Message string `json:"message,omitempty"`
}

// StagedUpdateRun is one execution of a staged strategy for one revision of a bundle.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=flotilla,shortName=run
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.status) || !has(oldSelf.status.state) || !(oldSelf.status.state in ['Completed', 'Failed']) || self.spec.state == oldSelf.spec.state",message="a finished run cannot be restarted; create a new run"
// +kubebuilder:printcolumn:name="Bundle",type=string,JSONPath=`.spec.bundle`
// +kubebuilder:printcolumn:name="Strategy",type=string,JSONPath=`.spec.strategy`
// +kubebuilder:printcolumn:name="Revision",type=integer,JSONPath=`.status.revisionIndex`
// +kubebuilder:printcolumn:name="Requested",type=string,JSONPath=`.spec.state`
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Failures",type=integer,JSONPath=`.status.failureCount`
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.message`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type StagedUpdateRun struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   StagedUpdateRunSpec   `json:"spec"`
	Status StagedUpdateRunStatus `json:"status,omitempty"`
}

// StagedUpdateRunList is a list of StagedUpdateRuns.
// +kubebuilder:object:root=true
type StagedUpdateRunList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []StagedUpdateRun `json:"items"`
}

// ApprovalRequestSpec names the gate. Its name is <run>-before-<stage> or <run>-after-<stage>,
// with -<group> for group gates, and a hash of the four that keeps names apart (R3.9).
type ApprovalRequestSpec struct {
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="run is immutable"
	Run string `json:"run"`
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="stage is immutable"
	Stage string `json:"stage"`
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="group is immutable"
	Group string `json:"group,omitempty"`
	// +kubebuilder:validation:Enum=Before;After
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="gate is immutable"
	Gate string `json:"gate"`
	// Quorum is how many distinct people must approve the gate.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="quorum is immutable"
	Quorum int32 `json:"quorum,omitempty"`
	// Approvers are who may decide the gate (the task's approvers); empty: anyone allowed to
	// write its status.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=50
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="approvers are immutable"
	Approvers []Approver `json:"approvers,omitempty"`
}

// ApprovalRequestStatus records who approved or rejected the gate. Each person adds their own
// record, named as the API server knows them: the admission policy
// flotilla-approvals-name-their-author refuses a record that names anyone else, so a name
// cannot be typed in. Records are never changed or withdrawn.
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.approval) || (has(self.approval) && self.approval == oldSelf.approval)",message="an approval cannot be changed or withdrawn"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.approvals) || (has(self.approvals) && oldSelf.approvals.all(a, a in self.approvals))",message="approvals cannot be changed or withdrawn"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.rejection) || (has(self.rejection) && self.rejection == oldSelf.rejection)",message="a rejection cannot be changed or withdrawn"
type ApprovalRequestStatus struct {
	// Approval is an approval recorded before approvals were lists; it counts as one of them.
	// +optional
	Approval *ApprovalRecord `json:"approval,omitempty"`
	// Approvals are the people who approved, one record each; the gate opens once the quorum
	// of distinct people approved.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=20
	Approvals []ApprovalRecord `json:"approvals,omitempty"`
	// Rejection, once set, closes the gate for good: the run stops, with who rejected it and
	// why (its comment).
	// +optional
	Rejection *ApprovalRecord `json:"rejection,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ApprovalRecord says who approved, when and why.
type ApprovalRecord struct {
	// +kubebuilder:validation:MinLength=1
	By string      `json:"by"`
	At metav1.Time `json:"at"`
	// +optional
	Comment string `json:"comment,omitempty"`
}

// ApprovalRequest is a gate of a staged run that waits for a person.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=flotilla,shortName=approval
// +kubebuilder:printcolumn:name="Run",type=string,JSONPath=`.spec.run`
// +kubebuilder:printcolumn:name="Stage",type=string,JSONPath=`.spec.stage`
// +kubebuilder:printcolumn:name="Gate",type=string,JSONPath=`.spec.gate`
// +kubebuilder:printcolumn:name="Approved-By",type=string,JSONPath=`.status.approvals[0].by`
// +kubebuilder:printcolumn:name="Rejected-By",type=string,JSONPath=`.status.rejection.by`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ApprovalRequest struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ApprovalRequestSpec   `json:"spec"`
	Status ApprovalRequestStatus `json:"status,omitempty"`
}

// ApprovalRequestList is a list of ApprovalRequests.
// +kubebuilder:object:root=true
type ApprovalRequestList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ApprovalRequest `json:"items"`
}
