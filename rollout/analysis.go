package rollout

import (
	"fmt"
	"regexp"
	"time"
)

// Analysis gates (ROLLOUT.md §7): checks of what the workload does, measured by the hub from
// providers the operator defined, judged here. A check's measurements are the hub's; what they
// mean (passed, still held, failed) and what a failure does are decided in this file and by
// the strategies, from inputs like readiness: Deployment.Analysis for a cluster's checks,
// Analyses for a gate's. Each strategy reports the checks it judges now (ActiveCheck), and
// the hub measures exactly those.

// CheckScope says where a check runs and whose failure it is (R7.2).
type CheckScope string

const (
	// ScopeCluster measures the check on each cluster; a failure is the cluster's: it counts
	// like a regression (R5.1), against the strategy's budgets and its failure policy.
	ScopeCluster CheckScope = "Cluster"
	// ScopeGate measures the check once for the partition, stage or group; a failure is the
	// gate's: the policy applies at once.
	ScopeGate CheckScope = "Gate"
)

// Defaults of R7.4 and R7.5.
const (
	DefaultCheckInterval     = time.Minute
	MinCheckInterval         = 5 * time.Second
	DefaultInconclusiveLimit = 5 * time.Minute
	// MaxChecks bounds the checks of one strategy, a task or a group: each is measured per
	// cluster or gate while it is judged.
	MaxChecks = 10
)

// Check is one analysis check (R7.2): which provider of the bundle's namespace to ask, what
// query to send (a template of the cluster, bundle and revision), the CEL condition that the
// result must meet, how often, and how much failure it tolerates.
type Check struct {
	Name string `json:"name"`
	// Provider names an AnalysisProvider in the bundle's namespace: never a URL (R7.1).
	Provider string `json:"provider"`
	// Query is sent to the provider; a Go template of .Cluster.Name, .Cluster.Labels,
	// .Bundle, .Namespace, .Revision, and, for a gate, .Gate and .Clusters.
	Query string `json:"query"`
	// Condition is a CEL expression over result (a number, or a list for several series)
	// that holds while the workload is healthy, e.g. "result < 0.01".
	Condition string `json:"condition"`
	// Interval between measurements; default 1m, at least 5s.
	Interval *Duration `json:"interval,omitempty"`
	// FailureLimit is how many failed measurements are tolerated (default 0).
	FailureLimit int `json:"failureLimit,omitempty"`
	// InconclusiveLimit is how long the check may be inconclusive before that counts as a
	// failure (default 5m).
	InconclusiveLimit *Duration `json:"inconclusiveLimit,omitempty"`
	// Scope: Cluster (default) or Gate.
	Scope CheckScope `json:"scope,omitempty"`
}

// EffectiveScope is the check's scope, Cluster when unset.
func (c *Check) EffectiveScope() CheckScope {
	if c.Scope == "" {
		return ScopeCluster
	}
	return c.Scope
}

// EffectiveInterval is the time between measurements.
func (c *Check) EffectiveInterval() time.Duration {
	if c.Interval == nil {
		return DefaultCheckInterval
	}
	return time.Duration(*c.Interval)
}

func (c *Check) inconclusiveLimit() time.Duration {
	if c.InconclusiveLimit == nil {
		return DefaultInconclusiveLimit
	}
	return time.Duration(*c.InconclusiveLimit)
}

var checkName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// validateChecks names the problems of checks under field (e.g. "rolloutStrategy.analysis").
// gates says whether the strategy has gates for a Gate check (a placement has none). What the
// query and condition say is checked by the hub's compiler (bundle/analysisexpr).
func validateChecks(field string, checks []Check, gates bool, add addFunc) {
	if len(checks) > MaxChecks {
		add(field, "%d checks; at most %d", len(checks), MaxChecks)
	}
	seen := map[string]bool{}
	for i, c := range checks {
		f := fmt.Sprintf("%s[%d].", field, i)
		switch {
		case !checkName.MatchString(c.Name):
			add(f+"name", "%q is not a name: lower-case letters, digits and '-', at most 63", c.Name)
		case seen[c.Name]:
			add(f+"name", "a second check named %q", c.Name)
		}
		seen[c.Name] = true
		if !checkName.MatchString(c.Provider) {
			add(f+"provider", "%q is not the name of an AnalysisProvider of the bundle's namespace (a repository names a provider the operator defined, never an address)", c.Provider)
		}
		if c.Query == "" {
			add(f+"query", "is required")
		}
		if c.Condition == "" {
			add(f+"condition", "is required: a CEL expression over result, such as result < 0.01")
		}
		if c.Interval != nil && time.Duration(*c.Interval) < MinCheckInterval {
			add(f+"interval", "must be at least %s", MinCheckInterval)
		}
		if c.InconclusiveLimit != nil && *c.InconclusiveLimit <= 0 {
			add(f+"inconclusiveLimit", "must be above 0")
		}
		if c.FailureLimit < 0 {
			add(f+"failureLimit", "must not be negative")
		}
		switch c.Scope {
		case "", ScopeCluster:
		case ScopeGate:
			if !gates {
				add(f+"scope", "Gate needs a partition, stage or group to judge; a rolling update has none: use Cluster")
			}
		default:
			add(f+"scope", "%q is not one of Cluster, Gate", c.Scope)
		}
	}
}

// Outcome of one measurement.
type MeasurementOutcome string

const (
	// MeasuredPass: the condition held.
	MeasuredPass MeasurementOutcome = "Pass"
	// MeasuredFail: the condition did not hold.
	MeasuredFail MeasurementOutcome = "Fail"
	// MeasuredInconclusive: no verdict could be had: the provider was unreachable or refused,
	// the query returned no data, or the condition could not be evaluated (R7.5).
	MeasuredInconclusive MeasurementOutcome = "Inconclusive"
)

// Measurements are what the hub measured of one check on one cluster or gate since the check
// started being judged there.
type Measurements struct {
	Passes, Failures int
	// Last is the newest measurement's outcome, "" before the first; LastAt when it was taken.
	Last   MeasurementOutcome
	LastAt time.Time
	// InconclusiveSince is when the current run of inconclusive measurements began.
	InconclusiveSince time.Time
	// FailedAt is when Failures first exceeded the check's FailureLimit.
	FailedAt time.Time
	// Since is when the check began to be measured (the measurer tracked it); zero when not
	// known. A check not measured within its pending limit of it is inconclusive.
	Since time.Time
	// Message says what the newest measurement found (the value, or why there was none).
	Message string
}

// Verdict is what a check says of a cluster or gate now (R7.4).
type Verdict string

const (
	// VerdictPending: not measured yet; the gate waits.
	VerdictPending Verdict = "Pending"
	// VerdictPassed: the newest measurement passed and the failures are within the limit.
	VerdictPassed Verdict = "Passed"
	// VerdictFailing: the newest measurement failed, within the failure limit; the gate waits.
	VerdictFailing Verdict = "Failing"
	// VerdictInconclusive: the newest measurement had no verdict; the gate waits (R7.5).
	VerdictInconclusive Verdict = "Inconclusive"
	// VerdictFailed: failures exceeded the limit, or inconclusive lasted past its limit. Final
	// for the revision where it was judged.
	VerdictFailed Verdict = "Failed"
)

// holds reports whether a verdict keeps its gate closed without failing it.
func (v Verdict) holds() bool {
	return v == VerdictPending || v == VerdictFailing || v == VerdictInconclusive
}

// rank orders verdicts from best to worst, for the worst of several.
func (v Verdict) rank() int {
	switch v {
	case VerdictPassed:
		return 0
	case VerdictFailing:
		return 2
	case VerdictInconclusive:
		return 3
	case VerdictFailed:
		return 4
	}
	return 1 // Pending
}

// Judgement is a check's verdict on a cluster or gate: since when it holds, and why.
type Judgement struct {
	Check   string    `json:"check"`
	Verdict Verdict   `json:"verdict"`
	Since   time.Time `json:"since,omitzero"`
	Message string    `json:"message,omitempty"`
}

// Judge turns a check's measurements into its verdict at now (R7.4, R7.5). It is the one
// place where failures are counted against the limit and an inconclusive run becomes a
// failure: the hub calls it after every measurement and before every pass that reads it.
func (c *Check) Judge(m Measurements, now time.Time) Judgement {
	j := Judgement{Check: c.Name, Message: m.Message}
	switch {
	case m.Failures > c.FailureLimit:
		j.Verdict, j.Since = VerdictFailed, m.FailedAt
		j.Message = fmt.Sprintf("%d failed measurements, more than failureLimit %d: %s", m.Failures, c.FailureLimit, m.Message)
	case m.Last == MeasuredInconclusive && !now.Before(m.InconclusiveSince.Add(c.inconclusiveLimit())):
		j.Verdict, j.Since = VerdictFailed, m.InconclusiveSince.Add(c.inconclusiveLimit())
		j.Message = fmt.Sprintf("inconclusive for %s, longer than inconclusiveLimit %s (R7.5): %s", c.inconclusiveLimit(), c.inconclusiveLimit(), m.Message)
	case m.Last == MeasuredInconclusive:
		j.Verdict, j.Since = VerdictInconclusive, m.InconclusiveSince
		j.Message = fmt.Sprintf("inconclusive since %s, a failure at %s (R7.5): %s", m.InconclusiveSince.UTC().Format(time.RFC3339),
			m.InconclusiveSince.Add(c.inconclusiveLimit()).UTC().Format(time.RFC3339), m.Message)
	case m.Last == MeasuredFail:
		j.Verdict, j.Since = VerdictFailing, m.LastAt
		j.Message = fmt.Sprintf("%d of %d failures tolerated: %s", m.Failures, c.FailureLimit, m.Message)
	case m.Last == MeasuredPass:
		j.Verdict, j.Since = VerdictPassed, m.LastAt
	case !m.Since.IsZero() && !now.Before(m.Since.Add(c.PendingLimit())):
		// Never measured, long past when it should have been: inconclusive from then on,
		// failed an inconclusive limit later (R7.5), so that a gate never waits forever on
		// measurements that do not come.
		stuck := m.Since.Add(c.PendingLimit())
		j.Verdict, j.Since = VerdictInconclusive, stuck
		j.Message = fmt.Sprintf("not measured within %s of being tracked (the provider does not answer, or the hub's measurements are all in use)", c.PendingLimit())
		if !now.Before(stuck.Add(c.inconclusiveLimit())) {
			j.Verdict, j.Since = VerdictFailed, stuck.Add(c.inconclusiveLimit())
			j.Message = fmt.Sprintf("not measured within %s, and inconclusive %s longer than inconclusiveLimit (R7.5)", c.PendingLimit(), c.inconclusiveLimit())
		}
	default:
		j.Verdict = VerdictPending
		j.Message = "not measured yet"
	}
	return j
}

// PendingLimit is how long a check may go unmeasured once tracked before it is inconclusive:
// two intervals, and at least a minute.
func (c *Check) PendingLimit() time.Duration {
	return max(2*c.EffectiveInterval(), time.Minute)
}

// WakeAt is when the verdict of the measurements changes without a new measurement: an
// inconclusive run reaching its limit. Zero when only a measurement changes it.
func (c *Check) WakeAt(m Measurements) time.Time {
	switch {
	case m.Last == MeasuredInconclusive && m.Failures <= c.FailureLimit:
		return m.InconclusiveSince.Add(c.inconclusiveLimit())
	case m.Last == "" && !m.Since.IsZero():
		return m.Since.Add(c.PendingLimit()) // and, once inconclusive, its limit: woken again then
	}
	return time.Time{}
}

// Worst is the worst of several judgements (Failed, then Inconclusive, Failing, Pending,
// Passed): what a cluster's or gate's checks say together. The zero Judgement for none.
func Worst(js []Judgement) Judgement {
	var w Judgement
	for i, j := range js {
		if i == 0 || j.Verdict.rank() > w.Verdict.rank() {
			w = j
		}
	}
	return w
}

// AnalysisKey names one check judged on one cluster or gate for one revision.
type AnalysisKey struct {
	Check    string
	Revision int64
	// Cluster is set for a Cluster check, Gate for a Gate check: "partition canary",
	// "stage prod", "group eu".
	Cluster, Gate string
}

// Analyses are gate checks' judgements, by key (Gate set, Cluster empty).
type Analyses map[AnalysisKey]Judgement

// ActiveCheck is a check a strategy judges now: the hub measures it until a pass no longer
// lists it (R7.3). Clusters are a Gate check's clusters, for its query.
type ActiveCheck struct {
	Key      AnalysisKey
	Check    *Check
	Clusters []string
}

// analysisFault reports whether the cluster's checks on revision r failed, and since when:
// a failure of the cluster under R7.6, which counts like a regression.
func analysisFault(d *Deployment, r int64) (bool, time.Time) {
	if d == nil || d.Applied != r || d.Released != r || d.Analysis == nil || d.Analysis.Verdict != VerdictFailed {
		return false, time.Time{}
	}
	return true, d.Analysis.Since
}

// analysisHolds reports whether a cluster with cluster checks (checked) still waits for them
// on revision r: not measured yet, failing within the limit, or inconclusive (R7.4). A cluster
// counts as available only once they passed.
func analysisHolds(d *Deployment, checked bool) bool {
	if !checked {
		return false
	}
	return d == nil || d.Analysis == nil || d.Analysis.Verdict.holds()
}

// clusterOnly and gateOnly split checks by scope.
func clusterOnly(checks []Check) []Check { return byScope(checks, ScopeCluster) }
func gateOnly(checks []Check) []Check    { return byScope(checks, ScopeGate) }

func byScope(checks []Check, scope CheckScope) []Check {
	var out []Check
	for _, c := range checks {
		if c.EffectiveScope() == scope {
			out = append(out, c)
		}
	}
	return out
}

// clusterChecks are the checks of scope Cluster among checks.
func clusterChecks(checks []Check) []*Check {
	var out []*Check
	for i := range checks {
		if checks[i].EffectiveScope() == ScopeCluster {
			out = append(out, &checks[i])
		}
	}
	return out
}

// gateJudgement is what the Gate checks among checks say of gate on revision r: the worst of
// their judgements, a missing one Pending. ok is false when there are none.
func gateJudgement(checks []Check, a Analyses, r int64, gate string) (j Judgement, ok bool) {
	var js []Judgement
	for i := range checks {
		c := &checks[i]
		if c.EffectiveScope() != ScopeGate {
			continue
		}
		got, found := a[AnalysisKey{Check: c.Name, Revision: r, Gate: gate}]
		if !found {
			got = Judgement{Check: c.Name, Verdict: VerdictPending, Message: "not measured yet"}
		}
		js = append(js, got)
	}
	if len(js) == 0 {
		return Judgement{}, false
	}
	return Worst(js), true
}

// activate lists checks as active: the Cluster ones on each of clusters, the Gate ones once
// for gate over clusters.
func activate(out []ActiveCheck, checks []Check, r int64, gate string, clusters []string) []ActiveCheck {
	for i := range checks {
		c := &checks[i]
		if c.EffectiveScope() == ScopeGate {
			out = append(out, ActiveCheck{Key: AnalysisKey{Check: c.Name, Revision: r, Gate: gate}, Check: c, Clusters: clusters})
			continue
		}
		for _, cl := range clusters {
			out = append(out, ActiveCheck{Key: AnalysisKey{Check: c.Name, Revision: r, Cluster: cl}, Check: c})
		}
	}
	return out
}

// clusterCheckFailure says which Cluster check failed a cluster and what it found, for a
// failure's message: "analysis error-rate failed on eu-1: result 0.4 …" (R7.6).
func clusterCheckFailure(name string, d *Deployment) string {
	return fmt.Sprintf("analysis %s failed on %s: %s", d.Analysis.Check, name, d.Analysis.Message)
}

// analysisWait says why a cluster its checks hold waits: "eu-1: analysis error-rate
// Inconclusive: …" (R7.8).
func analysisWait(name string, d *Deployment) string {
	if d == nil || d.Analysis == nil {
		return name + ": analysis not measured yet"
	}
	return analysisHolding(name, *d.Analysis)
}

// analysisMessage says why a gate failed by its checks, with what the check found.
func analysisMessage(what string, j Judgement) string {
	return fmt.Sprintf("%s: analysis %s %s: %s", what, j.Check, j.Verdict, j.Message)
}

// analysisHolding says why a gate waits on its checks: the check and its verdict, not its
// latest value, so that the message (a condition, a run's task) changes with the verdict and
// not with every measurement. The values are in the Bundle's status.analysis (R7.9).
func analysisHolding(what string, j Judgement) string {
	return fmt.Sprintf("%s: analysis %s %s", what, j.Check, j.Verdict)
}

// gateFailed says what a failed Gate check failed, for a Failure's message: "revision 2
// failed in partition canary (analysis latency Failed: …) on" (the clusters follow).
func gateFailed(what string, j Judgement) string {
	return fmt.Sprintf("%s (analysis %s %s: %s) on", what, j.Check, j.Verdict, j.Message)
}

// Rules of §7 that fire, named in a Failure.
const (
	// RuleAnalysis: a Cluster check failed on clusters, more than the strategy tolerates (R7.6).
	RuleAnalysis = "R7.6"
	// RuleGateAnalysis: a Gate check failed its partition, stage or group (R7.7).
	RuleGateAnalysis = "R7.7"
)
