package rollout

import (
	"fmt"
	"slices"
	"time"
)

// Outcome-gated rollouts (ROLLOUT.md §5): what the three strategies share. Each strategy
// watches its own gates (a partition, a stage, a soak); this file says when a cluster fails a
// revision, how a rollout's policy answers, and how a rollback picks what each cluster gets
// back.

// RegressionAction is what a gate does when a member that was Ready on the revision is no
// longer (R5.2).
type RegressionAction string

const (
	// RegressionFail counts the regressed cluster as a failure of its partition, stage or
	// group (the default).
	RegressionFail RegressionAction = "Fail"
	// RegressionRestart restarts the wait or soak from the moment the cluster is Ready again.
	RegressionRestart RegressionAction = "Restart"
	// RegressionIgnore keeps the gate as it was: only readiness at the moment counts.
	RegressionIgnore RegressionAction = "Ignore"
)

// FailureAction is what a rollout does once its failures exceed what its strategy tolerates
// (R5.3).
type FailureAction string

const (
	// FailurePause holds the rollout, as R1.6 and R3.10 do (the default).
	FailurePause FailureAction = "Pause"
	// FailureRollback releases every cluster that received the revision its last good one
	// again (R5.4) and quarantines the revision (R5.5).
	FailureRollback FailureAction = "Rollback"
)

// DefaultFailureTimeout is how long failing clusters may hold a rollout before its policy
// applies (R5.3), and how long a cluster may take to become Ready before it counts as failing.
const DefaultFailureTimeout = 10 * time.Minute

// FailurePolicy is a strategy's answer to a failing revision. The zero value is the default:
// regressions fail, failures pause, after 10 minutes, with no health window.
type FailurePolicy struct {
	OnRegression RegressionAction `json:"onRegression,omitempty"`
	OnFailure    FailureAction    `json:"onFailure,omitempty"`
	// FailureTimeout: failing clusters hold a partition this long before the policy applies;
	// a cluster that is not Ready this long after its release fails.
	FailureTimeout *Duration `json:"failureTimeout,omitempty"`
	// HealthWindow: a regression still counts this long after the stage, partition or soak
	// finished (R5.1).
	HealthWindow *Duration `json:"healthWindow,omitempty"`
}

func (p FailurePolicy) regression() RegressionAction {
	if p.OnRegression == "" {
		return RegressionFail
	}
	return p.OnRegression
}

func (p FailurePolicy) action() FailureAction {
	if p.OnFailure == "" {
		return FailurePause
	}
	return p.OnFailure
}

func (p FailurePolicy) timeout() time.Duration {
	if p.FailureTimeout == nil {
		return DefaultFailureTimeout
	}
	return time.Duration(*p.FailureTimeout)
}

func (p FailurePolicy) window() time.Duration {
	if p.HealthWindow == nil {
		return 0
	}
	return time.Duration(*p.HealthWindow)
}

// validate names the problems of the policy's fields under prefix (e.g. "rolloutStrategy.").
func (p FailurePolicy) validate(prefix string, add addFunc) {
	switch p.OnRegression {
	case "", RegressionFail, RegressionRestart, RegressionIgnore:
	default:
		add(prefix+"onRegression", "%q is not one of Fail, Restart, Ignore", p.OnRegression)
	}
	switch p.OnFailure {
	case "", FailurePause, FailureRollback:
	default:
		add(prefix+"onFailure", "%q is not one of Pause, Rollback", p.OnFailure)
	}
	if p.FailureTimeout != nil && *p.FailureTimeout <= 0 {
		add(prefix+"failureTimeout", "must be above 0")
	}
	if p.HealthWindow != nil && *p.HealthWindow < 0 {
		add(prefix+"healthWindow", "must not be negative")
	}
}

// Outcome is how a rollout of one revision ended (R5.6).
type Outcome string

const (
	OutcomeCompleted  Outcome = "Completed"
	OutcomeFailed     Outcome = "Failed"
	OutcomeRolledBack Outcome = "RolledBack"
)

// Rules that fire in §5, named in a Failure.
const (
	// RuleRegression: a member regressed and its gate counts it as a failure (R5.2).
	RuleRegression = "R5.2"
	// RuleFailureBudget: failures exceeded what the strategy tolerates (R5.3).
	RuleFailureBudget = "R5.3"
)

// Failure is a revision failing under a strategy's policy: the rule that fired, the clusters
// that failed and what the policy does. With FailureRollback the revision is quarantined
// (R5.5): the caller records the Failure, and passes it back as a quarantine until a new
// revision or a person's retry lifts it.
type Failure struct {
	Revision int64         `json:"revision"`
	Rule     string        `json:"rule"`
	Action   FailureAction `json:"action"`
	Clusters []string      `json:"clusters"`
	Message  string        `json:"message"`
	// At is when the failure was found.
	At time.Time `json:"at"`
}

// Restore is a cluster that a rollback releases again (R5.4): To is its last good revision, 0
// when it had none and the bundle is removed from it.
type Restore struct {
	Cluster string `json:"cluster"`
	To      int64  `json:"to"`
}

// fault is why a cluster that was released a revision is unavailable through the revision's
// fault (R5.1, R5.3).
type fault int

const (
	noFault fault = iota
	// faultApply: the agent failed to apply the revision.
	faultApply
	// faultRegression: the revision was Ready on the cluster and is no longer (R5.1).
	faultRegression
	// faultNotReady: applied, never Ready yet; a failure once the policy's timeout passed.
	faultNotReady
	// faultAnalysis: a Cluster check failed on the revision (R7.6). It counts like a
	// regression under onRegression Fail, at once: the check's failureLimit and
	// inconclusiveLimit were its tolerance.
	faultAnalysis
)

// regresses reports whether a fault fails a cluster that had finished the revision: the gates
// that watch (R5.2) judge both kinds alike.
func (f fault) regresses() bool { return f == faultRegression || f == faultAnalysis }

// faultOf says whether the cluster is unavailable through a fault of revision r, of which kind,
// and since when. A cluster that moved on to another revision cannot fail r; an offline
// cluster that never was Ready on r is the network's fault, not the revision's (R1.11 holds it),
// and a cluster that cannot run r is ineligible, not failing (R1.15).
func faultOf(d *Deployment, r int64, offline bool) (fault, time.Time) {
	switch {
	case d == nil || d.Released != r || d.Ineligible():
		return noFault, time.Time{}
	case d.ApplyFailed:
		return faultApply, d.ReleasedAt
	}
	if failed, since := analysisFault(d, r); failed {
		return faultAnalysis, since
	}
	switch {
	case d.Applied == r && d.WasReady && (!d.Ready || offline):
		return faultRegression, latest(d.NotReadyAt, d.ReleasedAt)
	case offline || d.Applied == r && d.Ready:
		return noFault, time.Time{}
	}
	return faultNotReady, d.ReleasedAt
}

// failedAt is when a cluster with fault f since since counts as a failure of its gate: an
// apply failure at once, a regression at once under Fail (never under Restart or Ignore), a
// cluster that is not Ready once the timeout passed. ok is false when it does not count.
func (p FailurePolicy) failedAt(f fault, since time.Time) (at time.Time, ok bool) {
	switch f {
	case faultApply, faultAnalysis:
		return since, true
	case faultRegression:
		return since, p.regression() == RegressionFail
	case faultNotReady:
		// A release of unknown time (recorded before releases were) is never timed out.
		return since.Add(p.timeout()), !since.IsZero()
	}
	return time.Time{}, false
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// quarantined returns the recorded failure that quarantines revision r, nil when r is free.
func quarantined(q []Failure, r int64) *Failure {
	for i := range q {
		if q[i].Revision == r && q[i].Action == FailureRollback {
			return &q[i]
		}
	}
	return nil
}

// restoreCandidate is a cluster a rollback of revision r considers: one still released r, or
// one the rollback released its last good revision and that is not available again yet.
type restoreCandidate struct {
	name string
	d    *Deployment
	// failed: one of the clusters whose failure fired the policy. Their unavailability is what
	// the rollback repairs: they neither wait for the budget nor count against it (R5.4).
	failed bool
	// held: the cluster may not be released now (paused, or its maintenance window is
	// closed); a failed cluster is restored all the same.
	held bool
}

// restoring reports whether the candidate was released its last good revision and is not
// available on it yet: it counts against the budget. A removal is done once written.
func (c *restoreCandidate) restoring(r int64) bool {
	return c.d != nil && c.d.Rollback && c.d.Released != r && c.d.Released != 0 && !ClusterState(c.d, c.d.Released).Available()
}

// lastGoodBefore is the revision a cluster on the failing revision r goes back to: its last
// good one, if older than r and not quarantined itself. A last good revision that is r (recorded
// when a rollback of a newer revision restored r) or one rolled back since is no good any more,
// and no older one is known: the cluster has none, and the bundle is removed (R5.4, R5.5),
// rather than restored to a failed revision, or to r again and again.
func (c *restoreCandidate) lastGoodBefore(r int64, quarantine []Failure) int64 {
	if c.d.LastGood >= r || quarantined(quarantine, c.d.LastGood) != nil {
		return 0
	}
	return c.d.LastGood
}

// planRestores releases the last good revision to the candidates still on revision r: failed
// ones at once, the others as many as limit allows given how many are being restored now. It
// returns the restores, in the candidates' order, and how many candidates are still on r, being
// restored by these restores, or being restored and not available again (0: the rollback is
// done).
func planRestores(r int64, quarantine []Failure, cands []restoreCandidate, limit func(busy int) int) (restores []Restore, left int) {
	busy := 0
	for i := range cands {
		if !cands[i].failed && cands[i].restoring(r) {
			busy++
		}
	}
	allowed := limit(busy)
	for i := range cands {
		c := &cands[i]
		switch {
		case c.d == nil || c.d.Released != r:
			if !c.failed && c.restoring(r) {
				left++
			}
		case c.failed:
			restores = append(restores, Restore{Cluster: c.name, To: c.lastGoodBefore(r, quarantine)})
			left++ // done once written: the step that writes it does not end the rollback
		case c.held || allowed <= 0:
			left++
		default:
			restores = append(restores, Restore{Cluster: c.name, To: c.lastGoodBefore(r, quarantine)})
			allowed--
			left++
		}
	}
	return restores, left
}

// failureMessage says what failed, for a Failure and the status that shows it.
func failureMessage(rule string, action FailureAction, what string, clusters []string) string {
	then := "the rollout holds (onFailure: Pause)"
	if action == FailureRollback {
		then = "rolling back to each cluster's last good revision (onFailure: Rollback)"
	}
	return fmt.Sprintf("%s: %s (%s); %s", what, abbreviate(clusters, 5), rule, then)
}

// sortedNames returns names sorted, without duplicates.
func sortedNames(names []string) []string {
	out := slices.Clone(names)
	slices.Sort(out)
	return slices.Compact(out)
}
