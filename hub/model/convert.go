package model

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/flotilla-dev/flotilla/bundle"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/rollout"
)

// Conversions between the API's types and the planner's (rollout/) and renderer's (bundle/),
// written out field by field: the two sides spell some fields differently (a count map and a
// struct of counts, IntOrString and IntOrPercent, metav1 and Go times), and a conversion that
// went through JSON would drop such a field without a word. convert_test.go sets every field
// of each source type in turn and fails when a conversion does not carry it.

// intOrPercent converts an IntOrString; field names it in the error.
func intOrPercent(v *intstr.IntOrString, field string) (rollout.IntOrPercent, error) {
	switch {
	case v == nil:
		return rollout.IntOrPercent{}, nil
	case v.Type == intstr.Int:
		return rollout.Int(int(v.IntVal)), nil
	}
	p, err := rollout.ParseIntOrPercent(v.StrVal)
	if err != nil {
		return p, fmt.Errorf("%s: %w", field, err)
	}
	return p, nil
}

// intOrString is intOrPercent's inverse; an unset value is nil.
func intOrString(v rollout.IntOrPercent) *intstr.IntOrString {
	if !v.IsSet() {
		return nil
	}
	s := v.String()
	if strings.HasSuffix(s, "%") {
		return new(intstr.FromString(s))
	}
	n, _ := strconv.Atoi(s)
	return new(intstr.FromInt(n))
}

func intPtr(v *int32) *int {
	if v == nil {
		return nil
	}
	return new(int(*v))
}

func duration(d *metav1.Duration) *rollout.Duration {
	if d == nil {
		return nil
	}
	return new(rollout.Duration(d.Duration))
}

func metaDuration(d *rollout.Duration) *metav1.Duration {
	if d == nil {
		return nil
	}
	return &metav1.Duration{Duration: time.Duration(*d)}
}

// selector converts a label selector; the planner's has the same fields.
func selector(s *metav1.LabelSelector) *rollout.Selector {
	if s == nil {
		return nil
	}
	out := &rollout.Selector{MatchLabels: s.MatchLabels}
	for _, r := range s.MatchExpressions {
		out.MatchExpressions = append(out.MatchExpressions, rollout.Requirement{Key: r.Key, Operator: rollout.Operator(r.Operator), Values: r.Values})
	}
	return out
}

func labelSelector(s *rollout.Selector) *metav1.LabelSelector {
	if s == nil {
		return nil
	}
	out := &metav1.LabelSelector{MatchLabels: s.MatchLabels}
	for _, r := range s.MatchExpressions {
		out.MatchExpressions = append(out.MatchExpressions, metav1.LabelSelectorRequirement{Key: r.Key, Operator: metav1.LabelSelectorOperator(r.Operator), Values: r.Values})
	}
	return out
}

func match(m v1alpha1.ClusterMatch) rollout.Match {
	return rollout.Match{ClusterName: m.ClusterName, ClusterSelector: selector(m.ClusterSelector), ClusterGroup: m.ClusterGroup, ClusterGroupSelector: selector(m.ClusterGroupSelector)}
}

// RolloutStrategy converts a Bundle's continuous rollout strategy (§1).
func RolloutStrategy(s *v1alpha1.RolloutStrategy) (rollout.Strategy, error) {
	var out rollout.Strategy
	if s == nil {
		return out, nil
	}
	var err error
	if out.MaxUnavailable, err = intOrPercent(s.MaxUnavailable, "rolloutStrategy.maxUnavailable"); err != nil {
		return out, err
	}
	if out.MaxUnavailablePartitions, err = intOrPercent(s.MaxUnavailablePartitions, "rolloutStrategy.maxUnavailablePartitions"); err != nil {
		return out, err
	}
	if out.AutoPartitionSize, err = intOrPercent(s.AutoPartitionSize, "rolloutStrategy.autoPartitionSize"); err != nil {
		return out, err
	}
	out.AutoPartitionThreshold, out.MaxNew = intPtr(s.AutoPartitionThreshold), intPtr(s.MaxNew)
	out.FailurePolicy, out.Analysis = failurePolicy(s.FailurePolicy), Checks(s.Analysis)
	for i, p := range s.Partitions {
		mu, err := intOrPercent(p.MaxUnavailable, fmt.Sprintf("rolloutStrategy.partitions[%d].maxUnavailable", i))
		if err != nil {
			return out, err
		}
		out.Partitions = append(out.Partitions, rollout.Partition{Name: p.Name, MaxUnavailable: mu, Match: match(p.ClusterMatch)})
	}
	return out, nil
}

// Placement converts a Bundle's placement with its rolling update (§2).
func Placement(p *v1alpha1.Placement) (*rollout.Placement, error) {
	if p == nil {
		return nil, nil
	}
	out := &rollout.Placement{Type: rollout.PlacementType(p.Type), NumberOfClusters: intPtr(p.NumberOfClusters), ClusterNames: p.ClusterNames,
		Affinity: affinity(p.Affinity)}
	if ru := p.RollingUpdate; ru != nil {
		out.RollingUpdate = &rollout.RollingUpdate{UnavailablePeriodSeconds: intPtr(ru.UnavailablePeriodSeconds), FailurePolicy: failurePolicy(ru.FailurePolicy),
			Analysis: Checks(ru.Analysis)}
		var err error
		if out.RollingUpdate.MaxUnavailable, err = intOrPercent(ru.MaxUnavailable, "placement.rollingUpdate.maxUnavailable"); err != nil {
			return nil, err
		}
		if out.RollingUpdate.MaxSurge, err = intOrPercent(ru.MaxSurge, "placement.rollingUpdate.maxSurge"); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// affinity converts a placement's affinity (R2.1).
func affinity(a *v1alpha1.Affinity) *rollout.Affinity {
	if a == nil || a.ClusterAffinity == nil {
		return nil
	}
	term := func(t v1alpha1.ClusterSelectorTerm) rollout.ClusterSelectorTerm {
		return rollout.ClusterSelectorTerm{LabelSelector: selector(t.LabelSelector)}
	}
	out := &rollout.ClusterAffinity{}
	if r := a.ClusterAffinity.Required; r != nil {
		out.Required = &rollout.ClusterSelector{}
		for _, t := range r.ClusterSelectorTerms {
			out.Required.ClusterSelectorTerms = append(out.Required.ClusterSelectorTerms, term(t))
		}
	}
	for _, p := range a.ClusterAffinity.Preferred {
		out.Preferred = append(out.Preferred, rollout.PreferredClusterTerm{Weight: int(p.Weight), Preference: term(p.Preference)})
	}
	return &rollout.Affinity{ClusterAffinity: out}
}

// StagedStrategy converts a StagedUpdateStrategy's spec (§3).
func StagedStrategy(s *v1alpha1.StagedUpdateStrategySpec) (rollout.StagedStrategy, error) {
	var out rollout.StagedStrategy
	if s == nil {
		return out, nil
	}
	out.ClusterTimeout, out.FailurePolicy = duration(s.ClusterTimeout), failurePolicy(s.FailurePolicy)
	for i, st := range s.Stages {
		field := fmt.Sprintf("stages[%d]", i)
		stage := rollout.Stage{Name: st.Name, LabelSelector: selector(st.LabelSelector), Selector: st.Selector, SortingLabelKey: st.SortingLabelKey,
			BeforeStageTasks: tasks(st.BeforeStageTasks), AfterStageTasks: tasks(st.AfterStageTasks)}
		var err error
		if stage.MaxConcurrency, err = intOrPercent(st.MaxConcurrency, field+".maxConcurrency"); err != nil {
			return out, err
		}
		if stage.MaxAllowedFailures, err = intOrPercent(st.MaxAllowedFailures, field+".maxAllowedFailures"); err != nil {
			return out, err
		}
		for j, g := range st.Groups {
			group := rollout.StageGroup{Name: g.Name, LabelSelector: selector(g.LabelSelector), Selector: g.Selector,
				BeforeGroupTasks: tasks(g.BeforeGroupTasks), AfterGroupTasks: tasks(g.AfterGroupTasks)}
			gfield := fmt.Sprintf("%s.groups[%d]", field, j)
			if group.MaxConcurrency, err = intOrPercent(g.MaxConcurrency, gfield+".maxConcurrency"); err != nil {
				return out, err
			}
			if group.MaxAllowedFailures, err = intOrPercent(g.MaxAllowedFailures, gfield+".maxAllowedFailures"); err != nil {
				return out, err
			}
			stage.Groups = append(stage.Groups, group)
		}
		out.Stages = append(out.Stages, stage)
	}
	return out, nil
}

// stagedStrategySpec is StagedStrategy's inverse: a run's status keeps the strategy it froze.
func stagedStrategySpec(s *rollout.StagedStrategy) *v1alpha1.StagedUpdateStrategySpec {
	if s == nil {
		return nil
	}
	out := &v1alpha1.StagedUpdateStrategySpec{ClusterTimeout: metaDuration(s.ClusterTimeout), FailurePolicy: failurePolicySpec(s.FailurePolicy)}
	for _, st := range s.Stages {
		stage := v1alpha1.StageConfig{Name: st.Name, LabelSelector: labelSelector(st.LabelSelector), Selector: st.Selector, SortingLabelKey: st.SortingLabelKey,
			MaxConcurrency: intOrString(st.MaxConcurrency), MaxAllowedFailures: intOrString(st.MaxAllowedFailures),
			BeforeStageTasks: stageTasks(st.BeforeStageTasks), AfterStageTasks: stageTasks(st.AfterStageTasks)}
		for _, g := range st.Groups {
			stage.Groups = append(stage.Groups, v1alpha1.StageGroup{Name: g.Name, LabelSelector: labelSelector(g.LabelSelector), Selector: g.Selector,
				MaxConcurrency: intOrString(g.MaxConcurrency), MaxAllowedFailures: intOrString(g.MaxAllowedFailures),
				BeforeGroupTasks: stageTasks(g.BeforeGroupTasks), AfterGroupTasks: stageTasks(g.AfterGroupTasks)})
		}
		out.Stages = append(out.Stages, stage)
	}
	return out
}

func tasks(ts []v1alpha1.StageTask) []rollout.Task {
	var out []rollout.Task
	for _, t := range ts {
		task := rollout.Task{Type: rollout.TaskType(t.Type), WaitTime: duration(t.WaitTime), Quorum: int(t.Quorum), Approvers: Approvers(t.Approvers), Analysis: Checks(t.Analysis)}
		if s := t.ScheduledStart; s != nil {
			task.ScheduledStart = &rollout.ScheduledStart{Weekday: s.Weekday, TimeOfDay: s.TimeOfDay, UTCOffset: s.UTCOffset}
			if s.At != nil {
				task.ScheduledStart.At = new(s.At.Time)
			}
		}
		out = append(out, task)
	}
	return out
}

func stageTasks(ts []rollout.Task) []v1alpha1.StageTask {
	var out []v1alpha1.StageTask
	for _, t := range ts {
		task := v1alpha1.StageTask{Type: v1alpha1.StageTaskType(t.Type), WaitTime: metaDuration(t.WaitTime), Quorum: int32(t.Quorum), Approvers: ApproverSpecs(t.Approvers), Analysis: checkSpecs(t.Analysis)}
		if s := t.ScheduledStart; s != nil {
			task.ScheduledStart = &v1alpha1.ScheduledStart{Weekday: s.Weekday, TimeOfDay: s.TimeOfDay, UTCOffset: s.UTCOffset}
			if s.At != nil {
				task.ScheduledStart.At = &metav1.Time{Time: *s.At}
			}
		}
		out = append(out, task)
	}
	return out
}

// Approvers are a task's approvers as the planner carries them.
func Approvers(as []v1alpha1.Approver) []rollout.Approver {
	var out []rollout.Approver
	for _, a := range as {
		out = append(out, rollout.Approver{User: a.User, Group: a.Group})
	}
	return out
}

// ApproverSpecs are the planner's approvers as the API writes them.
func ApproverSpecs(as []rollout.Approver) []v1alpha1.Approver {
	var out []v1alpha1.Approver
	for _, a := range as {
		out = append(out, v1alpha1.Approver{User: a.User, Group: a.Group})
	}
	return out
}

func Skips(ss []v1alpha1.RunSkip) []rollout.Skip {
	var out []rollout.Skip
	for _, s := range ss {
		out = append(out, rollout.Skip{Stage: s.Stage, Group: s.Group, Cluster: s.Cluster, Gate: s.Gate})
	}
	return out
}

// Times: the planner's zero time is the API's absent one.

func goTime(t *metav1.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.Time
}

func metaTime(t time.Time) *metav1.Time {
	if t.IsZero() {
		return nil
	}
	return &metav1.Time{Time: t}
}

// RunStatus converts what a run reported, for the planner's next step.
func RunStatus(st *v1alpha1.StagedUpdateRunStatus) (rollout.RunStatus, error) {
	out := rollout.RunStatus{State: rollout.RunState(st.State), Message: st.Message, RevisionIndex: st.RevisionIndex, FailureCount: int(st.FailureCount),
		Unstaged: st.UnstagedClusters, SupersededBy: st.SupersededBy, Failure: FailureOf(st.Failure)}
	if st.StartedAt != nil {
		out.StartedAt = rollout.MicroTime{Time: st.StartedAt.Time}
	}
	if st.Strategy != nil {
		strategy, err := StagedStrategy(st.Strategy)
		if err != nil {
			return out, fmt.Errorf("status.strategy.%w", err)
		}
		out.Strategy = &strategy
	}
	for _, s := range st.Stages {
		stage := rollout.StageStatus{Name: s.Name, State: rollout.RunState(s.State), Message: s.Message, FailureCount: int(s.FailureCount),
			StartedAt: goTime(s.StartedAt), FinishedAt: goTime(s.FinishedAt), BeforeTasks: taskStates(s.BeforeTasks), AfterTasks: taskStates(s.AfterTasks)}
		for _, g := range s.Groups {
			group := rollout.GroupStatus{Name: g.Name, State: rollout.RunState(g.State), Message: g.Message, FailureCount: int(g.FailureCount),
				BeforeTasks: taskStates(g.BeforeTasks), AfterTasks: taskStates(g.AfterTasks)}
			for _, c := range g.Clusters {
				group.Clusters = append(group.Clusters, rollout.ClusterRunStatus{Name: c.Name, State: rollout.RunState(c.State), Message: c.Message,
					StartedAt: goTime(c.StartedAt), FinishedAt: goTime(c.FinishedAt)})
			}
			stage.Groups = append(stage.Groups, group)
		}
		out.Stages = append(out.Stages, stage)
	}
	return out, nil
}

// RunStatusOf is RunStatus's inverse: the planner's status as the run reports it (the hub
// adds observedGeneration and the conditions).
func RunStatusOf(st rollout.RunStatus) v1alpha1.StagedUpdateRunStatus {
	out := v1alpha1.StagedUpdateRunStatus{State: v1alpha1.RunState(st.State), Message: st.Message, RevisionIndex: st.RevisionIndex, FailureCount: int32(st.FailureCount),
		Strategy: stagedStrategySpec(st.Strategy), UnstagedClusters: st.Unstaged, SupersededBy: st.SupersededBy, Failure: RevisionFailure(st.Failure)}
	if !st.StartedAt.IsZero() {
		out.StartedAt = &metav1.MicroTime{Time: st.StartedAt.Time}
	}
	for _, s := range st.Stages {
		stage := v1alpha1.StageRunStatus{Name: s.Name, State: v1alpha1.RunState(s.State), Message: s.Message, FailureCount: int32(s.FailureCount),
			StartedAt: metaTime(s.StartedAt), FinishedAt: metaTime(s.FinishedAt), BeforeTasks: taskStatuses(s.BeforeTasks), AfterTasks: taskStatuses(s.AfterTasks)}
		for _, g := range s.Groups {
			group := v1alpha1.GroupRunStatus{Name: g.Name, State: v1alpha1.RunState(g.State), Message: g.Message, FailureCount: int32(g.FailureCount),
				BeforeTasks: taskStatuses(g.BeforeTasks), AfterTasks: taskStatuses(g.AfterTasks)}
			for _, c := range g.Clusters {
				group.Clusters = append(group.Clusters, v1alpha1.ClusterRunStatus{Name: c.Name, State: v1alpha1.RunState(c.State), Message: c.Message,
					StartedAt: metaTime(c.StartedAt), FinishedAt: metaTime(c.FinishedAt)})
			}
			stage.Groups = append(stage.Groups, group)
		}
		out.Stages = append(out.Stages, stage)
	}
	return out
}

func taskStates(ts []v1alpha1.TaskStatus) []rollout.TaskStatus {
	var out []rollout.TaskStatus
	for _, t := range ts {
		out = append(out, rollout.TaskStatus{Type: rollout.TaskType(t.Type), State: rollout.RunState(t.State), ApprovalRequest: t.ApprovalRequest, WaitUntil: goTime(t.WaitUntil),
			Message: t.Message})
	}
	return out
}

func taskStatuses(ts []rollout.TaskStatus) []v1alpha1.TaskStatus {
	var out []v1alpha1.TaskStatus
	for _, t := range ts {
		out = append(out, v1alpha1.TaskStatus{Type: v1alpha1.StageTaskType(t.Type), State: v1alpha1.RunState(t.State), ApprovalRequest: t.ApprovalRequest, WaitUntil: metaTime(t.WaitUntil),
			Message: Truncate(t.Message, MaxConditionMessage)})
	}
	return out
}

// Sequence converts a RolloutSequence's spec (§4).
func Sequence(s *v1alpha1.RolloutSequenceSpec) rollout.Sequence {
	out := rollout.Sequence{FailurePolicy: failurePolicy(s.FailurePolicy)}
	for _, g := range s.Groups {
		out.Groups = append(out.Groups, rollout.SequenceGroup{Name: g.Name, Upstream: g.Upstream, ClusterSelector: selector(g.ClusterSelector), Selector: g.Selector,
			ClusterGroup: g.ClusterGroup, Soak: duration(g.Soak), Analysis: Checks(g.Analysis)})
	}
	for _, r := range s.Revisions {
		rc := rollout.RevisionControl{Index: r.Index, Paused: r.Paused, Cancelled: r.Cancelled}
		for _, o := range r.SoakOverrides {
			rc.SoakOverrides = append(rc.SoakOverrides, rollout.SoakOverride{Group: o.Group, Soak: rollout.Duration(o.Soak.Duration)})
		}
		out.Revisions = append(out.Revisions, rc)
	}
	return out
}

// SequenceProgress converts what a Bundle reports of its sequence, for the planner's next step.
func SequenceProgress(gs []v1alpha1.SequenceGroupStatus) []rollout.SequenceGroupStatus {
	var out []rollout.SequenceGroupStatus
	for _, g := range gs {
		group := rollout.SequenceGroupStatus{Name: g.Name, Clusters: int(g.Clusters)}
		for _, r := range g.Revisions {
			group.Revisions = append(group.Revisions, rollout.SequenceRevisionStatus{Index: r.Index, State: rollout.SequenceState(r.State),
				StartedAt: goTime(r.StartedAt), FinishedAt: goTime(r.FinishedAt), SoakUntil: goTime(r.SoakUntil), Counts: counts(r.Summary), Message: r.Message})
		}
		out = append(out, group)
	}
	return out
}

// SequenceStatus is SequenceProgress's inverse.
func SequenceStatus(gs []rollout.SequenceGroupStatus) []v1alpha1.SequenceGroupStatus {
	var out []v1alpha1.SequenceGroupStatus
	for _, g := range gs {
		group := v1alpha1.SequenceGroupStatus{Name: g.Name, Clusters: int32(g.Clusters)}
		for _, r := range g.Revisions {
			group.Revisions = append(group.Revisions, v1alpha1.SequenceRevisionStatus{Index: r.Index, State: v1alpha1.SequenceState(r.State),
				StartedAt: metaTime(r.StartedAt), FinishedAt: metaTime(r.FinishedAt), SoakUntil: metaTime(r.SoakUntil), Summary: summaryOf(r.Counts), Message: r.Message})
		}
		out = append(out, group)
	}
	return out
}

// counts is a summary's per-state counts (its desiredReady is their sum, not a state).
func counts(s v1alpha1.StateCounts) rollout.Counts {
	out := rollout.Counts{}
	for state, n := range map[rollout.State]int32{rollout.Ready: s.Ready, rollout.Pending: s.Pending, rollout.OutOfSync: s.OutOfSync, rollout.WaitApplied: s.WaitApplied,
		rollout.ErrApplied: s.ErrApplied, rollout.NotReady: s.NotReady, rollout.Modified: s.Modified} {
		if n != 0 {
			out[state] = int(n)
		}
	}
	return out
}

// summaryOf is counts' inverse, desiredReady the total.
func summaryOf(c rollout.Counts) v1alpha1.StateCounts {
	total := 0
	for _, n := range c {
		total += n
	}
	return StateCounts(c, total)
}

// deploymentOptions converts the renderer's options of a deployment into the API's, which the
// agent reads.
func deploymentOptions(o bundle.DeploymentOptions) v1alpha1.DeploymentOptions {
	out := v1alpha1.DeploymentOptions{DefaultNamespace: o.DefaultNamespace, TargetNamespace: o.TargetNamespace, NamespaceLabels: o.NamespaceLabels,
		NamespaceAnnotations: o.NamespaceAnnotations, CorrectDrift: o.CorrectDrift, KeepResources: o.KeepResources, DeleteNamespace: o.DeleteNamespace,
		IgnoreConditions: o.IgnoreConditions, ServiceAccount: o.ServiceAccount, TakeOwnership: o.TakeOwnership, Force: o.Force,
		TimeoutSeconds: int32(o.TimeoutSeconds), WaitForJobs: o.WaitForJobs}
	for _, h := range o.HealthChecks {
		out.HealthChecks = append(out.HealthChecks, v1alpha1.HealthCheck(h))
	}
	for _, p := range o.ComparePatches {
		// Remove operations are pointers by now (bundle.deploymentOptions).
		out.ComparePatches = append(out.ComparePatches, v1alpha1.ComparePatch{APIVersion: p.APIVersion, Kind: p.Kind, Namespace: p.Namespace, Name: p.Name, JSONPointers: p.JSONPointers})
	}
	return out
}

// Checks converts a strategy's analysis checks (§7).
func Checks(cs []v1alpha1.AnalysisCheck) []rollout.Check {
	var out []rollout.Check
	for _, c := range cs {
		out = append(out, rollout.Check{Name: c.Name, Provider: c.Provider, Query: c.Query, Condition: c.Condition, Interval: duration(c.Interval),
			FailureLimit: int(c.FailureLimit), InconclusiveLimit: duration(c.InconclusiveLimit), Scope: rollout.CheckScope(c.Scope)})
	}
	return out
}

// checkSpecs is Checks' inverse: a run's status keeps the strategy it froze.
func checkSpecs(cs []rollout.Check) []v1alpha1.AnalysisCheck {
	var out []v1alpha1.AnalysisCheck
	for _, c := range cs {
		out = append(out, v1alpha1.AnalysisCheck{Name: c.Name, Provider: c.Provider, Query: c.Query, Condition: c.Condition, Interval: metaDuration(c.Interval),
			FailureLimit: int32(c.FailureLimit), InconclusiveLimit: metaDuration(c.InconclusiveLimit), Scope: string(c.Scope)})
	}
	return out
}

// failurePolicy converts a strategy's failure policy (§5).
func failurePolicy(p v1alpha1.FailurePolicy) rollout.FailurePolicy {
	return rollout.FailurePolicy{OnRegression: rollout.RegressionAction(p.OnRegression), OnFailure: rollout.FailureAction(p.OnFailure),
		FailureTimeout: duration(p.FailureTimeout), HealthWindow: duration(p.HealthWindow)}
}

// failurePolicySpec is failurePolicy's inverse: a run's status keeps the strategy it froze.
func failurePolicySpec(p rollout.FailurePolicy) v1alpha1.FailurePolicy {
	return v1alpha1.FailurePolicy{OnRegression: string(p.OnRegression), OnFailure: string(p.OnFailure),
		FailureTimeout: metaDuration(p.FailureTimeout), HealthWindow: metaDuration(p.HealthWindow)}
}

// FailureOf converts a recorded failure (R5.6), for the planner: a run's, or a quarantine.
func FailureOf(f *v1alpha1.RevisionFailure) *rollout.Failure {
	if f == nil {
		return nil
	}
	return &rollout.Failure{Revision: f.Revision, Rule: f.Rule, Action: rollout.FailureAction(f.Action), Clusters: f.Clusters, Message: f.Message, At: f.At.Time}
}

// maxFailedNamed is how many failed clusters a recorded failure names.
const maxFailedNamed = 50

// RevisionFailure is FailureOf's inverse: a failure as the API records it.
func RevisionFailure(f *rollout.Failure) *v1alpha1.RevisionFailure {
	if f == nil {
		return nil
	}
	clusters := f.Clusters
	if len(clusters) > maxFailedNamed {
		clusters = clusters[:maxFailedNamed]
	}
	return &v1alpha1.RevisionFailure{Revision: f.Revision, Rule: f.Rule, Action: string(f.Action), Clusters: clusters, Message: f.Message, At: metav1.Time{Time: f.At}}
}

func StateCounts(c rollout.Counts, total int) v1alpha1.StateCounts {
	return v1alpha1.StateCounts{DesiredReady: int32(total), Ready: int32(c[rollout.Ready]), Pending: int32(c[rollout.Pending]), OutOfSync: int32(c[rollout.OutOfSync]),
		WaitApplied: int32(c[rollout.WaitApplied]), ErrApplied: int32(c[rollout.ErrApplied]), NotReady: int32(c[rollout.NotReady]), Modified: int32(c[rollout.Modified])}
}

// WorstState names the least advanced state with clusters in it, for printer columns.
func WorstState(c rollout.Counts) string {
	for _, s := range []rollout.State{rollout.ErrApplied, rollout.NotReady, rollout.WaitApplied, rollout.OutOfSync, rollout.Pending, rollout.Modified} {
		if c[s] > 0 {
			return string(s)
		}
	}
	return string(rollout.Ready)
}
