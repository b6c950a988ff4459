package rollout

import (
	"errors"
	"fmt"
)

// FieldError is a validation error for one field, named by its fleet.yaml path.
type FieldError struct {
	Field   string
	Message string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Message }

// The limits of lists the API server refuses beyond (the CRDs' maxItems); the planner refuses
// the same, so that `flotilla plan` fails where applying would (R3.1, R3.5, R4.1).
const (
	MaxStages         = 31
	MaxStageGroups    = 50
	MaxSequenceGroups = 20
	MaxPartitions     = 100
)

// Validate checks a rolloutStrategy and an optional placement. It returns every problem at
// once (errors.Join of *FieldError), each naming its field, e.g.
// "rolloutStrategy.partitions[1]: needs clusterName, clusterSelector, clusterGroup or clusterGroupSelector".
func Validate(s *Strategy, p *Placement) error {
	var errs []error
	add := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
	}
	if s != nil {
		validateStrategy(s, add)
	}
	if p != nil {
		validatePlacement(p, add)
		if s != nil && p.RollingUpdate != nil && !s.isEmpty() {
			add("placement.rollingUpdate", "cannot be combined with rolloutStrategy: choose one way to roll out")
		}
		if s != nil && p.RollingUpdate != nil && s.FailurePolicy != (FailurePolicy{}) {
			add("rolloutStrategy", "a rolling update's failure policy belongs under placement.rollingUpdate (onFailure, onRegression, failureTimeout, healthWindow)")
		}
	}
	return joinErrors(errs)
}

// joinErrors is errors.Join, kept in one place so every validator reports alike.
func joinErrors(errs []error) error { return errors.Join(errs...) }

func (s *Strategy) isEmpty() bool {
	return !s.MaxUnavailable.IsSet() && !s.MaxUnavailablePartitions.IsSet() && !s.AutoPartitionSize.IsSet() &&
		s.AutoPartitionThreshold == nil && s.MaxNew == nil && len(s.Partitions) == 0 && len(s.Analysis) == 0
}

type addFunc func(field, format string, args ...any)

func validateStrategy(s *Strategy, add addFunc) {
	const f = "rolloutStrategy."
	checkRange := func(field string, v IntOrPercent) {
		if err := v.validate(); err != nil {
			add(field, "%v", err)
		}
	}
	s.FailurePolicy.validate(f, add)
	validateChecks(f+"analysis", s.Analysis, true, add)
	if len(s.Partitions) > MaxPartitions {
		add(f+"partitions", "at most %d partitions, got %d", MaxPartitions, len(s.Partitions))
	}
	checkRange(f+"maxUnavailable", s.MaxUnavailable)
	checkRange(f+"maxUnavailablePartitions", s.MaxUnavailablePartitions)
	checkRange(f+"autoPartitionSize", s.AutoPartitionSize)
	if s.AutoPartitionSize.IsZero() {
		add(f+"autoPartitionSize", "must be above 0: a partition needs at least one cluster")
	}
	if s.AutoPartitionThreshold != nil && *s.AutoPartitionThreshold < 0 {
		add(f+"autoPartitionThreshold", "%d is negative", *s.AutoPartitionThreshold)
	}
	if s.MaxNew != nil && *s.MaxNew < 1 {
		add(f+"maxNew", "must be at least 1, got %d", *s.MaxNew)
	}
	seen := map[string]int{}
	for i, p := range s.Partitions {
		field := fmt.Sprintf("%spartitions[%d]", f, i)
		switch prev, dup := seen[p.Name]; {
		case p.Name == "":
			add(field+".name", "is required")
		case dup:
			add(field+".name", "%q is already the name of partitions[%d]", p.Name, prev)
		default:
			seen[p.Name] = i
		}
		if p.ClusterName == "" && p.ClusterSelector == nil && p.ClusterGroup == "" && p.ClusterGroupSelector == nil {
			add(field, "needs clusterName, clusterSelector, clusterGroup or clusterGroupSelector")
		}
		checkRange(field+".maxUnavailable", p.MaxUnavailable)
		if err := p.ClusterSelector.validate(); err != nil {
			add(field+".clusterSelector", "%v", err)
		}
		if err := p.ClusterGroupSelector.validate(); err != nil {
			add(field+".clusterGroupSelector", "%v", err)
		}
	}
}

func validatePlacement(p *Placement, add addFunc) {
	const f = "placement."
	switch p.Type {
	case "", PickAll:
	case PickN:
		if p.NumberOfClusters == nil {
			add(f+"numberOfClusters", "is required when type is PickN")
		} else if *p.NumberOfClusters < 0 {
			add(f+"numberOfClusters", "%d is negative", *p.NumberOfClusters)
		}
	case PickFixed:
		if len(p.ClusterNames) == 0 {
			add(f+"clusterNames", "is required when type is PickFixed")
		}
	default:
		add(f+"type", "%q is not one of PickAll, PickN, PickFixed", p.Type)
	}
	if p.Type != PickN && p.NumberOfClusters != nil {
		add(f+"numberOfClusters", "is only valid with type PickN")
	}
	if p.Type != PickFixed && len(p.ClusterNames) > 0 {
		add(f+"clusterNames", "is only valid with type PickFixed")
	}
	validateAffinity(p, add)
	seen := map[string]bool{}
	for i, n := range p.ClusterNames {
		if seen[n] {
			add(fmt.Sprintf("%sclusterNames[%d]", f, i), "%q is listed twice", n)
		}
		seen[n] = true
	}
	if ru := p.RollingUpdate; ru != nil {
		ru.FailurePolicy.validate(f+"rollingUpdate.", add)
		validateChecks(f+"rollingUpdate.analysis", ru.Analysis, false, add)
		for _, c := range []struct {
			field string
			v     IntOrPercent
		}{{"maxUnavailable", ru.MaxUnavailable}, {"maxSurge", ru.MaxSurge}} {
			field, v := c.field, c.v
			if err := v.validate(); err != nil {
				add(f+"rollingUpdate."+field, "%v", err)
			} else if v.IsZero() {
				add(f+"rollingUpdate."+field, "must not be 0 (R2.3): zero would block the rollout; use 1 or 1%%")
			}
		}
		if ru.UnavailablePeriodSeconds != nil && *ru.UnavailablePeriodSeconds < 0 {
			add(f+"rollingUpdate.unavailablePeriodSeconds", "%d is negative", *ru.UnavailablePeriodSeconds)
		}
	}
}

// validateAffinity checks a placement's affinity (R2.1): PickFixed names its clusters and takes
// none; required terms need at least one term, weights lie in −100…100, selectors are valid.
func validateAffinity(p *Placement, add addFunc) {
	if p.Affinity == nil || p.Affinity.ClusterAffinity == nil {
		return
	}
	const f = "placement.affinity.clusterAffinity."
	if p.Type == PickFixed {
		add("placement.affinity", "is not valid with type PickFixed: it names its clusters")
	}
	ca := p.Affinity.ClusterAffinity
	term := func(field string, t ClusterSelectorTerm) {
		if err := t.LabelSelector.validate(); err != nil {
			add(field+".labelSelector", "%v", err)
		}
	}
	if r := ca.Required; r != nil {
		field := f + "requiredDuringSchedulingIgnoredDuringExecution.clusterSelectorTerms"
		if len(r.ClusterSelectorTerms) == 0 {
			add(field, "needs at least one term")
		}
		for i, t := range r.ClusterSelectorTerms {
			term(fmt.Sprintf("%s[%d]", field, i), t)
		}
	}
	if len(ca.Preferred) > 0 && p.Type != PickN {
		add(f+"preferredDuringSchedulingIgnoredDuringExecution", "orders the clusters PickN takes: only valid with type PickN")
	}
	for i, pt := range ca.Preferred {
		field := fmt.Sprintf("%spreferredDuringSchedulingIgnoredDuringExecution[%d]", f, i)
		if pt.Weight < -100 || pt.Weight > 100 {
			add(field+".weight", "%d is not within -100 and 100", pt.Weight)
		}
		term(field+".preference", pt.Preference)
	}
}
