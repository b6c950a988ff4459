package rollout

import (
	"fmt"
	"time"
)

// Target is one targeted cluster and what it holds of the bundle.
type Target struct {
	// Cluster is the cluster's name, unique in the input.
	Cluster string
	// Labels are the cluster's labels.
	Labels map[string]string
	// Groups are the names of the cluster groups the cluster belongs to.
	Groups []string
	// Deployment is the cluster's BundleDeployment; nil when it has none yet.
	Deployment *Deployment
	// Offline: the agent missed its heartbeat deadline (R1.11).
	Offline bool
	// Paused: the cluster takes no new releases (R1.13).
	Paused bool
	// Blocked, when set, says why the cluster may not be released anything now, e.g. a bundle
	// this one depends on is not ready there yet.
	Blocked string
	// Excluded: the cluster no longer matches the bundle's targets and is listed only because
	// it still carries the workload; a placement (§2) removes it. Ignored by §1.
	Excluded bool
}

// held says why the cluster takes no release now, or "" when it may.
func (t *Target) held() string {
	if t.Paused {
		return "cluster is paused"
	}
	return t.Blocked
}

// Deployment is the state of a BundleDeployment, by revision index (0 = none).
type Deployment struct {
	// Staged is the revision the cluster should eventually run.
	Staged int64
	// Released is the revision the agent may apply.
	Released int64
	// Applied is the revision the agent last applied successfully: Released once applied, 0
	// before that, except on an ineligible cluster (Unserved), which keeps running the
	// revision before (0: none).
	Applied int64
	// ApplyFailed: the agent failed to apply Released.
	ApplyFailed bool
	// Ready: every resource of Applied is ready.
	Ready bool
	// Modified: live objects drifted from Applied.
	Modified bool
	// AppliedAt is when Applied was applied (R2.5 counts from it).
	AppliedAt time.Time
	// ReleasedAt is when Released was released.
	ReleasedAt time.Time
	// WasReady: Applied has been Ready since it was applied; NotReady now is a regression
	// (R5.1). NotReadyAt is when it stopped being Ready (or its agent went offline).
	WasReady   bool
	NotReadyAt time.Time
	// LastGood is the newest revision that was Ready on the cluster before Released was
	// released (0: none); a rollback releases it again (R5.4). Rollback: Released is such a
	// restore.
	LastGood int64
	Rollback bool
	// Unserved names what Released uses that the cluster does not serve (apiVersion and kind),
	// as its agent found before applying anything: the cluster is ineligible for Released and
	// runs what it ran before (R1.15).
	Unserved []string
	// Analysis is what the Cluster checks the strategy judges on the cluster say of Applied
	// (the worst of them, Worst); nil when none was measured yet (§7).
	Analysis *Judgement
}

// Ineligible reports whether the cluster cannot run the revision released to it: it does not
// serve an API the revision uses (R1.15).
func (d *Deployment) Ineligible() bool { return d != nil && d.Released != 0 && len(d.Unserved) > 0 }

// ineligibleFor reports whether the cluster was released revision r and cannot run it.
func (d *Deployment) ineligibleFor(r int64) bool { return d.Ineligible() && d.Released == r }

// IneligibleReason says why the cluster cannot run its released revision, "" when it can.
func (d *Deployment) IneligibleReason() string {
	if !d.Ineligible() {
		return ""
	}
	return fmt.Sprintf("does not serve %s (R1.15)", abbreviate(d.Unserved, 3))
}

// ClusterGroup is a named set of clusters, with labels that clusterGroupSelector matches.
type ClusterGroup struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels,omitempty"`
}

// Match selects clusters; every field that is set must match. An empty Match matches nothing.
type Match struct {
	ClusterName          string    `json:"clusterName,omitempty"`
	ClusterSelector      *Selector `json:"clusterSelector,omitempty"`
	ClusterGroup         string    `json:"clusterGroup,omitempty"`
	ClusterGroupSelector *Selector `json:"clusterGroupSelector,omitempty"`
}

// Strategy is fleet.yaml's rolloutStrategy (ROLLOUT.md §1). Unset fields take R1.1's defaults.
type Strategy struct {
	MaxUnavailable           IntOrPercent `json:"maxUnavailable,omitempty"`
	MaxUnavailablePartitions IntOrPercent `json:"maxUnavailablePartitions,omitempty"`
	AutoPartitionSize        IntOrPercent `json:"autoPartitionSize,omitempty"`
	AutoPartitionThreshold   *int         `json:"autoPartitionThreshold,omitempty"`
	MaxNew                   *int         `json:"maxNew,omitempty"`
	Partitions               []Partition  `json:"partitions,omitempty"`
	// Analysis are the checks of the rollout (§7): a Cluster check on each cluster from its
	// apply, a Gate check once per partition once it is released.
	Analysis []Check `json:"analysis,omitempty"`
	// FailurePolicy is how the rollout answers a failing revision (§5), for partitions and
	// placements alike.
	FailurePolicy
}

// Partition is a manual partition (R1.3).
type Partition struct {
	Name           string       `json:"name"`
	MaxUnavailable IntOrPercent `json:"maxUnavailable,omitempty"`
	Match          `json:",inline"`
}

// Defaults of R1.1 and R2.3.
var (
	DefaultMaxUnavailable           = Percent(100)
	DefaultMaxUnavailablePartitions = Int(0)
	DefaultAutoPartitionSize        = Percent(25)
	DefaultAutoPartitionThreshold   = 200
	DefaultMaxNew                   = 50

	DefaultRollingMaxUnavailable   = Percent(25)
	DefaultRollingMaxSurge         = Percent(25)
	DefaultUnavailablePeriodSecond = 60
)

// PlacementType says how a placement chooses clusters (R2.1).
type PlacementType string

const (
	PickAll   PlacementType = "PickAll"
	PickN     PlacementType = "PickN"
	PickFixed PlacementType = "PickFixed"
)

// Placement is a RollingUpdate placement (ROLLOUT.md §2).
type Placement struct {
	Type             PlacementType  `json:"type,omitempty"`
	NumberOfClusters *int           `json:"numberOfClusters,omitempty"`
	ClusterNames     []string       `json:"clusterNames,omitempty"`
	Affinity         *Affinity      `json:"affinity,omitempty"`
	RollingUpdate    *RollingUpdate `json:"rollingUpdate,omitempty"`
}

// Affinity narrows and orders the clusters PickAll and PickN take (R2.1), in the shape of
// Azure Fleet's policy.affinity.
type Affinity struct {
	ClusterAffinity *ClusterAffinity `json:"clusterAffinity,omitempty"`
}

// ClusterAffinity: a cluster must match one of the required terms, and PickN prefers the
// clusters whose matching preferred terms weigh the most.
type ClusterAffinity struct {
	Required  *ClusterSelector       `json:"requiredDuringSchedulingIgnoredDuringExecution,omitempty"`
	Preferred []PreferredClusterTerm `json:"preferredDuringSchedulingIgnoredDuringExecution,omitempty"`
}

// ClusterSelector is a list of terms, any of which a cluster may match.
type ClusterSelector struct {
	ClusterSelectorTerms []ClusterSelectorTerm `json:"clusterSelectorTerms"`
}

// ClusterSelectorTerm selects clusters by their labels.
type ClusterSelectorTerm struct {
	LabelSelector *Selector `json:"labelSelector,omitempty"`
}

// PreferredClusterTerm adds its weight (−100 to 100) to the score of each cluster it matches.
type PreferredClusterTerm struct {
	Weight     int                 `json:"weight"`
	Preference ClusterSelectorTerm `json:"preference"`
}

// required reports whether the affinity admits a cluster with these labels: no required terms
// admit every cluster; a term without a selector matches every cluster.
func (a *Affinity) required(labels map[string]string) bool {
	if a == nil || a.ClusterAffinity == nil || a.ClusterAffinity.Required == nil {
		return true
	}
	for _, term := range a.ClusterAffinity.Required.ClusterSelectorTerms {
		if term.matches(labels) {
			return true
		}
	}
	return false
}

// score is the sum of the weights of the preferred terms a cluster matches.
func (a *Affinity) score(labels map[string]string) int {
	if a == nil || a.ClusterAffinity == nil {
		return 0
	}
	s := 0
	for _, term := range a.ClusterAffinity.Preferred {
		if term.Preference.matches(labels) {
			s += term.Weight
		}
	}
	return s
}

func (t ClusterSelectorTerm) matches(labels map[string]string) bool {
	return t.LabelSelector == nil || t.LabelSelector.Matches(labels)
}

// RollingUpdate bounds a placement's rollout (R2.3–R2.5).
type RollingUpdate struct {
	MaxUnavailable           IntOrPercent `json:"maxUnavailable,omitempty"`
	MaxSurge                 IntOrPercent `json:"maxSurge,omitempty"`
	UnavailablePeriodSeconds *int         `json:"unavailablePeriodSeconds,omitempty"`
	// Analysis are Cluster checks (§7): a cluster counts as available once they passed.
	Analysis []Check `json:"analysis,omitempty"`
	// FailurePolicy is how the rolling update answers a failing revision (§5).
	FailurePolicy
}

// Input is everything Plan decides from. Plan does not modify it.
type Input struct {
	// Revision is the index being rolled out.
	Revision int64
	// Strategy is used when Placement is nil.
	Strategy Strategy
	// Placement, when set, rolls out by §2 instead of §1.
	Placement *Placement
	// Targets are the targeted clusters (§1) or the clusters a placement may pick from (§2),
	// plus, under §2, Excluded clusters that still carry the workload.
	Targets []Target
	// Groups are the cluster groups, for clusterGroupSelector.
	Groups []ClusterGroup
	// Paused: the bundle releases nothing (R1.13).
	Paused bool
	// Now is the current time (R2.5).
	Now time.Time
	// CompletedAt is when the rollout of Revision completed, zero while it has not: a
	// regression counts until the health window after it has passed (R5.1).
	CompletedAt time.Time
	// Quarantine are the revisions that failed under onFailure Rollback (R5.5). When Revision
	// is one, the pass rolls it back (R5.4) instead of releasing it.
	Quarantine []Failure
	// Analyses are the judgements of the Gate checks the hub measured (§7).
	Analyses Analyses
}

// Decision is the outcome of one planning pass.
type Decision struct {
	// Release are the clusters to release Revision to now, sorted by name.
	Release []string
	// Remove are the clusters that must lose the workload now (§2), sorted by name.
	Remove []string
	// Partitions report each partition after this pass's releases (§1).
	Partitions []PartitionStatus
	// Unpartitioned are targeted clusters in no manual partition: never released (R1.3).
	Unpartitioned []string
	// Clusters are every target's state after this pass, sorted by name.
	Clusters []ClusterStatus
	// Paused says why the rollout waits, or is empty while it can move on.
	Paused string
	// Warnings are conditions a person should see (unpartitioned clusters, unsafe defaults).
	Warnings []Warning
	// RequeueAfter is when to plan again even without an event (R2.5); 0 means on events only.
	RequeueAfter time.Duration
	// More: this pass stopped at maxNew (R1.8); plan again as soon as its releases are written.
	More bool
	// Complete: every cluster that should run Revision runs it and is Ready.
	Complete bool
	// Outcome is how the rollout of Revision ended, "" while it goes on (R5.6).
	Outcome Outcome
	// Failure is the revision's failure found in this pass (R5.3); with Action Rollback the
	// caller records it as a quarantine, and Restore already rolls it back.
	Failure *Failure
	// Restore are the clusters a rollback releases their last good revision now (R5.4).
	Restore []Restore
	// Analysis are the checks judged now (§7, R7.3): the hub measures them until a pass no
	// longer lists them.
	Analysis []ActiveCheck
	// N is the cluster count the thresholds are computed against: the targets (§1), or the
	// clusters the placement picks (§2, R2.2).
	N int
	// Thresholds resolved for this pass, for status and the CLI.
	MaxUnavailable           int
	MaxUnavailablePartitions int
	MaxSurge                 int
}

// WarningKind says what a Warning is about: the hub shows each kind as a condition of its own.
type WarningKind string

const (
	// WarnUnpartitioned: targeted clusters match no manual partition and are never released (R1.3).
	WarnUnpartitioned WarningKind = "UnpartitionedClusters"
	// WarnUnsafeDefaults: maxUnavailable 100% lets the rollout pass every partition at once (R1.14).
	WarnUnsafeDefaults WarningKind = "MaxUnavailable100Percent"
	// WarnIneligible: clusters do not serve an API of the revision and run what they ran
	// before (R1.15).
	WarnIneligible WarningKind = "IneligibleClusters"
	// WarnPlacementShort: a placement wants more clusters than it finds; N stays (R2.2).
	WarnPlacementShort WarningKind = "PlacementShort"
)

// Warning is a condition a person should see, with what it is about.
type Warning struct {
	Kind    WarningKind `json:"kind"`
	Message string      `json:"message"`
}

// Warning returns the message of the decision's first warning of kind k, "" when there is none.
func (d *Decision) Warning(k WarningKind) string {
	for _, w := range d.Warnings {
		if w.Kind == k {
			return w.Message
		}
	}
	return ""
}

// PartitionStatus is one partition's state (R1.6, R1.12).
type PartitionStatus struct {
	Name           string   `json:"name"`
	Clusters       []string `json:"clusters"`
	MaxUnavailable int      `json:"maxUnavailable"`
	Unavailable    int      `json:"unavailable"`
	Ready          bool     `json:"ready"`
	Counts         Counts   `json:"counts"`
	// Analysis is what the partition's Gate checks say, when it has some (§7).
	Analysis *Judgement `json:"analysis,omitempty"`
}

// ClusterStatus is one target's state after the pass.
type ClusterStatus struct {
	Name      string `json:"name"`
	Partition string `json:"partition,omitempty"`
	State     State  `json:"state"`
	// Unavailable counts against the budgets.
	Unavailable bool `json:"unavailable"`
	// Wait is why the cluster has not been released Revision yet, empty otherwise.
	Wait string `json:"wait,omitempty"`
}
