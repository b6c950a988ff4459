package rollout

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// SimCheckFault makes a check misbehave in a simulation (§7): from After on (simulated time
// since the start) its measurements fail, or, with Inconclusive, have no verdict; on the
// named clusters only when Clusters is set (a Gate check's measurement fails whatever they
// are). `flotilla plan --analysis-fail NAME@AFTER` is one of these.
type SimCheckFault struct {
	Check        string        `json:"check"`
	After        time.Duration `json:"after"`
	Inconclusive bool          `json:"inconclusive,omitempty"`
	Clusters     []string      `json:"clusters,omitempty"`
}

// ParseCheckFault reads NAME@AFTER, e.g. "error-rate@10m".
func ParseCheckFault(s string) (SimCheckFault, error) {
	name, after, ok := strings.Cut(s, "@")
	if !ok || name == "" {
		return SimCheckFault{}, fmt.Errorf("%q is not NAME@AFTER, such as error-rate@10m", s)
	}
	d, err := time.ParseDuration(after)
	if err != nil || d < 0 {
		return SimCheckFault{}, fmt.Errorf("%q: %q is not a duration such as 10m", s, after)
	}
	return SimCheckFault{Check: name, After: d}, nil
}

// simChecks plays the hub's analysis runner in a simulation: it measures the checks each
// pass lists as active, every interval from when they became active, and drops those a pass
// no longer lists, as the runner does. A measurement passes unless a fault says otherwise.
type simChecks struct {
	faults   []SimCheckFault
	measured map[AnalysisKey]*simMeasured
	// judged are the clusters whose deployment carries a judgement of the last pass.
	judged map[string]bool
}

type simMeasured struct {
	check *Check
	next  time.Duration // when the next measurement is taken
	m     Measurements
}

func newSimChecks(faults []SimCheckFault) *simChecks {
	return &simChecks{faults: faults, measured: map[AnalysisKey]*simMeasured{}, judged: map[string]bool{}}
}

// track makes the active checks those measured from now on: a new one is measured at once.
func (s *simChecks) track(active []ActiveCheck, now time.Duration) {
	keep := make(map[AnalysisKey]bool, len(active))
	for _, a := range active {
		keep[a.Key] = true
		if _, ok := s.measured[a.Key]; !ok {
			s.measured[a.Key] = &simMeasured{check: a.Check, next: now}
		}
	}
	for k := range s.measured {
		if !keep[k] {
			delete(s.measured, k)
		}
	}
}

// measure takes the measurements due by now.
func (s *simChecks) measure(now time.Duration) {
	for k, sm := range s.measured {
		for sm.next <= now {
			at := SimStart.Add(sm.next)
			switch s.outcome(k, sm.next) {
			case MeasuredInconclusive:
				if sm.m.Last != MeasuredInconclusive {
					sm.m.InconclusiveSince = at
				}
				sm.m.Last, sm.m.Message = MeasuredInconclusive, "simulated: the provider does not answer"
			case MeasuredFail:
				sm.m.Failures++
				if sm.m.Failures > sm.check.FailureLimit && sm.m.FailedAt.IsZero() {
					sm.m.FailedAt = at
				}
				sm.m.Last, sm.m.Message = MeasuredFail, "simulated: the condition does not hold"
			default:
				sm.m.Passes++
				sm.m.Last, sm.m.Message = MeasuredPass, "simulated: the condition holds"
			}
			sm.m.LastAt = at
			sm.next += sm.check.EffectiveInterval()
		}
	}
}

func (s *simChecks) outcome(k AnalysisKey, at time.Duration) MeasurementOutcome {
	for _, f := range s.faults {
		if f.Check != k.Check || at < f.After || k.Cluster != "" && len(f.Clusters) > 0 && !slices.Contains(f.Clusters, k.Cluster) {
			continue
		}
		if f.Inconclusive {
			return MeasuredInconclusive
		}
		return MeasuredFail
	}
	return MeasuredPass
}

// judgements gives the planner what the runner would: each deployment's Cluster checks'
// worst judgement (set on the deployment), and the Gate checks' judgements.
func (s *simChecks) judgements(now time.Duration, deployments func(cluster string) *Deployment) Analyses {
	gates := Analyses{}
	perCluster := map[string][]Judgement{}
	for k, sm := range s.measured {
		j := sm.check.Judge(sm.m, SimStart.Add(now))
		if k.Cluster == "" {
			gates[k] = j
			continue
		}
		if d := deployments(k.Cluster); d != nil && d.Applied == k.Revision {
			perCluster[k.Cluster] = append(perCluster[k.Cluster], j)
		}
	}
	for cluster := range s.judged {
		if _, still := perCluster[cluster]; !still {
			if d := deployments(cluster); d != nil {
				d.Analysis = nil // no check judges it any more
			}
			delete(s.judged, cluster)
		}
	}
	for cluster, js := range perCluster {
		w := Worst(js)
		deployments(cluster).Analysis = &w
		s.judged[cluster] = true
	}
	return gates
}

// changesAt is when a measurement of the check can next change its verdict: the first one,
// one that counts another failure towards the limit, or the first at or after a fault's start
// that makes it differ from the last. Others are not simulated events: a simulation of checks
// that keep passing still ends.
func (s *simChecks) changesAt(k AnalysisKey, sm *simMeasured) (time.Duration, bool) {
	switch {
	case sm.m.Last == "", sm.m.Last == MeasuredFail && sm.m.Failures <= sm.check.FailureLimit:
		return sm.next, true
	case s.outcome(k, sm.next) != sm.m.Last:
		return sm.next, true
	}
	interval := sm.check.EffectiveInterval()
	var first time.Duration
	found := false
	for _, f := range s.faults {
		if f.Check != k.Check || f.After <= sm.next {
			continue
		}
		// The first measurement at or after the fault's start.
		at := sm.next + (f.After-sm.next+interval-1)/interval*interval
		if s.outcome(k, at) != sm.m.Last && (!found || at < first) {
			first, found = at, true
		}
	}
	return first, found
}

// next is when the next measurement is due, or an inconclusive run reaches its limit.
func (s *simChecks) next(now time.Duration) (time.Duration, bool) {
	var times []time.Duration
	for k, sm := range s.measured {
		if at, ok := s.changesAt(k, sm); ok && at >= now {
			times = append(times, at)
		}
		if at := sm.check.WakeAt(sm.m); !at.IsZero() && at.Sub(SimStart) > now {
			times = append(times, at.Sub(SimStart))
		}
	}
	if len(times) == 0 {
		return 0, false
	}
	return slices.Min(times), true
}
