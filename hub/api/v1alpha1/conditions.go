package v1alpha1

// Condition types. Ready, Reconciling and Stalled follow the kstatus convention: Ready is always
// present; Reconciling and Stalled are present only while they are True and are removed otherwise.
const (
	// ReadyCondition says whether the object has reached its desired state.
	ReadyCondition = "Ready"
	// ReconcilingCondition is True while the controller is working towards the desired state.
	ReconcilingCondition = "Reconciling"
	// StalledCondition is True when progress is impossible without a change of input (bad
	// fleet.yaml, unknown strategy, invalid selector); the controller does not retry on its own.
	StalledCondition = "Stalled"

	// SourceReadyCondition (GitRepo) says whether the last poll, webhook or scheduled sync resolved
	// and fetched the wanted commit. While False, the last good commit stays deployed.
	SourceReadyCondition = "SourceReady"
	// RenderedCondition (GitRepo, Bundle) says whether the current commit rendered; on False the
	// message names the file and field at fault and the last good revision stays deployed.
	RenderedCondition = "Rendered"
	// RolloutPausedCondition (Bundle, GitRepo) is True while the rollout waits; the message says
	// on what: a threshold, a partition, a gate, a window, a paused bundle or cluster.
	RolloutPausedCondition = "RolloutPaused"
	// UnpartitionedClustersCondition (Bundle) is a warning: targeted clusters match no manual
	// partition and will not be rolled out (ROLLOUT.md R1.3). The message lists them.
	UnpartitionedClustersCondition = "UnpartitionedClusters"
	// UnsafeDefaultsCondition (Bundle) is a warning that the rollout uses maxUnavailable 100%,
	// so every partition counts as Ready at once (ROLLOUT.md R1.14).
	UnsafeDefaultsCondition = "UnsafeDefaults"
	// IneligibleClustersCondition (Bundle) is a warning: clusters do not serve an API of the
	// revision and run what they ran before (ROLLOUT.md R1.15); the message names them.
	IneligibleClustersCondition = "IneligibleClusters"
	// AgentConnectedCondition (Cluster) is False when the agent missed its heartbeat deadline;
	// the cluster then counts as unavailable (ROLLOUT.md R1.11).
	AgentConnectedCondition = "AgentConnected"
	// AppliedCondition (BundleDeployment) says whether the agent applied the released revision.
	AppliedCondition = "Applied"
	// InSyncCondition (BundleDeployment) is False when live objects drifted from the revision.
	InSyncCondition = "InSync"
	// ApprovedCondition (ApprovalRequest) is True once a person approved the gate. Setting it is
	// one way to approve (R3.9); the hub then records the approval in status.approval too.
	ApprovedCondition = "Approved"
	// SupersededCondition (StagedUpdateRun) is True when a newer revision replaced this run (R3.14).
	SupersededCondition = "Superseded"
	// UninstalledCondition (BundleDeployment) is True once the agent removed a deleted
	// deployment's workloads (or kept them, with keepResources); the hub then lets the
	// deployment go. On a Cluster it is False, UninstallTimedOut, when the hub stopped waiting
	// for the agent to confirm a removal, until the agent reports again.
	UninstalledCondition = "Uninstalled"
	// AdmittedCondition (Cluster) is present, False, while the hub cannot admit the cluster
	// (its namespace belongs to another); absent once it is admitted.
	AdmittedCondition = "Admitted"
)

// Condition reasons shared by several kinds. Reasons are CamelCase and stable: tools match on them.
const (
	ProgressingReason = "Progressing"
	SucceededReason   = "Succeeded"
	FailedReason      = "Failed"
	// A bundle's failure policy (R5.6): rolling its newest revision back, or done with it.
	RollingBackReason          = "RollingBack"
	RolledBackReason           = "RolledBack"
	InvalidSpecReason          = "InvalidSpec"
	PausedReason               = "Paused"
	PartitionNotReadyReason    = "PartitionNotReady"
	BudgetExhaustedReason      = "MaxUnavailableReached"
	WaitingForApprovalReason   = "WaitingForApproval"
	WaitingForTimeReason       = "WaitingForTime"
	WindowClosedReason         = "MaintenanceWindowClosed"
	AuthenticationFailedReason = "AuthenticationFailed"
	UnreachableReason          = "Unreachable"
	RefNotFoundReason          = "RefNotFound"
	RenderFailedReason         = "RenderFailed"
	HeartbeatMissedReason      = "HeartbeatMissed"
	// InClusterAddressReason: a registration token holds no hub address, since the hub's own
	// is an in-cluster one that agents on other clusters cannot reach.
	InClusterAddressReason = "InClusterAddress"
	DriftDetectedReason    = "DriftDetected"
	ApprovedReason         = "Approved"
	NewerRunReason         = "NewerRun"

	// RestrictedReason: a FleetRestriction does not allow what was asked (a GitRepo's
	// repository, a bundle's namespace, service account or objects); the message names it.
	RestrictedReason = "Restricted"
	// UnverifiedReason: the commit or tag is not signed by a key the GitRepo allows.
	UnverifiedReason = "Unverified"
	// UnpartitionedClustersReason, UnsequencedClustersReason (Bundle UnpartitionedClusters):
	// targeted clusters in no partition or no group of the sequence, never released (R1.3).
	UnpartitionedClustersReason = "UnpartitionedClusters"
	UnsequencedClustersReason   = "UnsequencedClusters"
	// MaxUnavailable100PercentReason (Bundle UnsafeDefaults): the rollout does not wait (R1.14).
	MaxUnavailable100PercentReason = "MaxUnavailable100Percent"
	// SyncWindowReason (GitRepo RolloutPaused): a sync window holds the new commit.
	SyncWindowReason = "SyncWindow"
	// NamespaceConflictReason (Cluster Admitted, Ready): the cluster's namespace belongs to
	// another Cluster.
	NamespaceConflictReason = "NamespaceConflict"
	// AgentNotConnectedReason and OfflineReason (Cluster Ready): no agent reported yet, or the
	// agent missed its heartbeat deadline (R1.11).
	AgentNotConnectedReason = "AgentNotConnected"
	OfflineReason           = "Offline"
	// WaitingForAdmissionReason (ClusterRegistration Ready): its Cluster has not been given
	// a namespace, an identity and a Lease for longer than a registration normally takes.
	WaitingForAdmissionReason = "WaitingForAdmission"
	// DeletingReason (GitRepo Ready): the GitRepo is deleted and waits for its clusters to
	// remove its workloads; the message names them.
	DeletingReason = "Deleting"
	// UninstalledReason, ResourcesKeptReason (BundleDeployment Uninstalled) and
	// UninstallTimedOutReason (Cluster Uninstalled).
	UninstalledReason       = "Uninstalled"
	ResourcesKeptReason     = "ResourcesKept"
	UninstallTimedOutReason = "UninstallTimedOut"
	// Reasons the agent reports on a BundleDeployment.
	ApplyFailedReason = "ApplyFailed"
	// APINotServedReason (Applied): the cluster does not serve an API the released revision
	// uses; nothing of it was applied (ROLLOUT.md R1.15).
	APINotServedReason        = "APINotServed"
	InventoryUnreadableReason = "InventoryUnreadable"
	HealthCheckFailedReason   = "HealthCheckFailed"
	NotReadyReason            = "NotReady"
	DriftCheckFailedReason    = "DriftCheckFailed"
)

// ClusterState is the rollout state of one bundle on one cluster (ROLLOUT.md §0). It is computed
// in one place, the rollout package, and every status view shows the same value.
// +kubebuilder:validation:Enum=Pending;OutOfSync;WaitApplied;ErrApplied;NotReady;Modified;Ready
type ClusterState string

const (
	StatePending     ClusterState = "Pending"
	StateOutOfSync   ClusterState = "OutOfSync"
	StateWaitApplied ClusterState = "WaitApplied"
	StateErrApplied  ClusterState = "ErrApplied"
	StateNotReady    ClusterState = "NotReady"
	StateModified    ClusterState = "Modified"
	StateReady       ClusterState = "Ready"
)

// StateCounts counts clusters per ClusterState. DesiredReady is the number of targeted clusters.
type StateCounts struct {
	DesiredReady int32 `json:"desiredReady"`
	Ready        int32 `json:"ready,omitempty"`
	Pending      int32 `json:"pending,omitempty"`
	OutOfSync    int32 `json:"outOfSync,omitempty"`
	WaitApplied  int32 `json:"waitApplied,omitempty"`
	ErrApplied   int32 `json:"errApplied,omitempty"`
	NotReady     int32 `json:"notReady,omitempty"`
	Modified     int32 `json:"modified,omitempty"`
}

// Add returns the sum of two counts, for roll-ups (GitRepo, ClusterGroup).
func (s StateCounts) Add(o StateCounts) StateCounts {
	return StateCounts{DesiredReady: s.DesiredReady + o.DesiredReady, Ready: s.Ready + o.Ready, Pending: s.Pending + o.Pending,
		OutOfSync: s.OutOfSync + o.OutOfSync, WaitApplied: s.WaitApplied + o.WaitApplied, ErrApplied: s.ErrApplied + o.ErrApplied,
		NotReady: s.NotReady + o.NotReady, Modified: s.Modified + o.Modified}
}

// Finalizers the hub sets.
const (
	// UninstallFinalizer holds a deleted BundleDeployment until its agent confirms it removed
	// the workloads (UninstalledCondition), the cluster left the fleet, or the hub's uninstall
	// timeout passed.
	UninstallFinalizer = "flotilla.dev/uninstall"
	// DeploymentsFinalizer holds a deleted Bundle until its BundleDeployments are gone.
	DeploymentsFinalizer = "flotilla.dev/deployments"
)

// ShardLabel on a GitRepo names the hub shard that owns it (absent: the default shard); the
// shard puts it on the Bundles, BundleDeployments and Content it derives from the GitRepo.
const ShardLabel = "flotilla.dev/shard"

// ValuesFromLabel, "true" on a Secret of a fleet namespace, lets the repositories of that
// namespace read it with fleet.yaml's helm.valuesFrom (secretKeyRef): a repository's author
// names a Secret, and only those the operator marked for values can be named. ConfigMaps need
// no mark.
const ValuesFromLabel = "flotilla.dev/values-from"

// Annotations people and the hub set on the hub's objects.
const (
	// AnnotationSupersededBy on a StagedUpdateRun names the newer run that replaces it; the run
	// stops like Stop (R3.14).
	AnnotationSupersededBy = "flotilla.dev/superseded-by"
	// AnnotationRolledBack on a Bundle records the last rollback: to which revision, by whom, when.
	AnnotationRolledBack = "flotilla.dev/rolled-back"
	// LabelAutoRun marks the StagedUpdateRuns the hub created for a new revision (R3.14).
	LabelAutoRun = "flotilla.dev/auto-run"
)
