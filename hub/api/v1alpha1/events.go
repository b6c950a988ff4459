package v1alpha1

// EventReason is the reason of a Kubernetes Event the hub or an agent records: each names one
// thing an operator reads later (`kubectl get events`), in the order it happened.
type EventReason string

// The Events of a rollout's story. Warnings are said where they are recorded.
const (
	// On GitRepos. RevisionStaged names every bundle a commit gave a new revision.
	EventCommitPickedUp    EventReason = "CommitPickedUp"
	EventRevisionStaged    EventReason = "RevisionStaged"
	EventRenderFailed      EventReason = "RenderFailed"
	EventSourceUnavailable EventReason = "SourceUnavailable"
	// On HelmOps (besides RevisionStaged, RenderFailed and SourceUnavailable).
	EventVersionPickedUp EventReason = "VersionPickedUp"
	// On Bundles.
	EventPartitionReleased EventReason = "PartitionReleased"
	EventRolloutPaused     EventReason = "RolloutPaused"
	EventRolloutCompleted  EventReason = "RolloutCompleted"
	EventRollbackStarted   EventReason = "RollbackStarted"
	// A revision that failed under its rollout's policy (R5.3): held (RolloutFailed), or rolled
	// back (RollbackStarted, then RolledBack).
	EventRolloutFailed EventReason = "RolloutFailed"
	// AnalysisFailed: a check's verdict became Failed on a cluster or gate (§7), once per
	// check and revision.
	EventAnalysisFailed EventReason = "AnalysisFailed"
	EventRolledBack     EventReason = "RolledBack"
	// On StagedUpdateRuns and ApprovalRequests.
	EventStageStarted EventReason = "StageStarted"
	// ApprovalRequested: a gate waits for people; the message says how to approve it.
	EventApprovalRequested EventReason = "ApprovalRequested"
	EventStageCompleted    EventReason = "StageCompleted"
	EventApprovalRecorded  EventReason = "ApprovalRecorded"
	EventApprovalRejected  EventReason = "ApprovalRejected"
	EventRunSuperseded     EventReason = "RunSuperseded"
	// On RolloutSequences.
	EventGroupReleased  EventReason = "GroupReleased"
	EventGroupCompleted EventReason = "GroupCompleted"
	EventGroupFailed    EventReason = "GroupFailed"
	// On Clusters.
	EventClusterOffline EventReason = "ClusterOffline"
	EventClusterOnline  EventReason = "ClusterOnline"
	// On BundleDeployments, by the cluster's agent: `kubectl get events -n <cluster namespace>`
	// tells what went wrong or was undone on the cluster (and RolledBack when a rollback
	// removed the bundle from it); RevisionApplied and RevisionReady only with the agent's
	// --events=all.
	EventRevisionApplied EventReason = "RevisionApplied"
	EventApplyFailed     EventReason = "ApplyFailed"
	EventRevisionReady   EventReason = "RevisionReady"
	// RevisionNotReady: applied, and not Ready within the agent's --not-ready-warning.
	EventRevisionNotReady EventReason = "RevisionNotReady"
	EventReadinessLost    EventReason = "ReadinessLost"
	EventDriftCorrected   EventReason = "DriftCorrected"
)

// Action is what was done, for the Event's action field (events.k8s.io/v1 requires one).
func (r EventReason) Action() string {
	switch r {
	case EventCommitPickedUp, EventVersionPickedUp, EventSourceUnavailable:
		return "Sync"
	case EventRenderFailed, EventRevisionStaged:
		return "Render"
	case EventPartitionReleased, EventStageStarted, EventGroupReleased, EventRollbackStarted:
		return "Release"
	case EventRolloutPaused, EventRolloutFailed, EventGroupFailed, EventAnalysisFailed:
		return "Pause"
	case EventRolledBack:
		return "Complete"
	case EventApprovalRecorded, EventApprovalRejected, EventApprovalRequested:
		return "Approve"
	case EventRunSuperseded:
		return "Supersede"
	case EventRolloutCompleted, EventStageCompleted, EventGroupCompleted:
		return "Complete"
	case EventClusterOffline, EventClusterOnline:
		return "Heartbeat"
	case EventRevisionApplied, EventApplyFailed, EventDriftCorrected:
		return "Apply"
	case EventRevisionReady, EventRevisionNotReady, EventReadinessLost:
		return "Observe"
	}
	return "Report"
}
