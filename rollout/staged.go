package rollout

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// StagedStrategy is a reusable staged rollout (ROLLOUT.md §3). Its JSON form is the
// StagedUpdateStrategy spec's, so the hub converts between the two by encoding.
type StagedStrategy struct {
	Stages []Stage `json:"stages"`
	// ClusterTimeout is how long a cluster may take to become Ready after its release before it
	// counts as failed. Default 10m.
	ClusterTimeout *Duration `json:"clusterTimeout,omitempty"`
	// FailurePolicy is how the run answers a failing revision (§5); a run times clusters out
	// with ClusterTimeout, so its failureTimeout is not used.
	FailurePolicy
}

// Stage is one stage (R3.1).
type Stage struct {
	Name string `json:"name"`
	// LabelSelector or Selector, its string form, selects the stage's clusters (R3.6).
	LabelSelector      *Selector    `json:"labelSelector,omitempty"`
	Selector           string       `json:"selector,omitempty"`
	SortingLabelKey    string       `json:"sortingLabelKey,omitempty"`
	MaxConcurrency     IntOrPercent `json:"maxConcurrency,omitempty"`
	MaxAllowedFailures IntOrPercent `json:"maxAllowedFailures,omitempty"`
	BeforeStageTasks   []Task       `json:"beforeStageTasks,omitempty"`
	AfterStageTasks    []Task       `json:"afterStageTasks,omitempty"`
	Groups             []StageGroup `json:"groups,omitempty"`
}

// StageGroup is a group of a stage (R3.5).
type StageGroup struct {
	Name string `json:"name"`
	// LabelSelector or Selector, its string form, selects the group's clusters (R3.6).
	LabelSelector      *Selector    `json:"labelSelector,omitempty"`
	Selector           string       `json:"selector,omitempty"`
	MaxConcurrency     IntOrPercent `json:"maxConcurrency,omitempty"`
	MaxAllowedFailures IntOrPercent `json:"maxAllowedFailures,omitempty"`
	BeforeGroupTasks   []Task       `json:"beforeGroupTasks,omitempty"`
	AfterGroupTasks    []Task       `json:"afterGroupTasks,omitempty"`
}

// TaskType names a gate.
type TaskType string

const (
	TaskApproval       TaskType = "Approval"
	TaskTimedWait      TaskType = "TimedWait"
	TaskScheduledStart TaskType = "ScheduledStart"
	// TaskAnalysis opens once its checks passed on the stage or group (§7).
	TaskAnalysis TaskType = "Analysis"
)

// Task is a gate before or after a stage or group (R3.4, R3.12).
type Task struct {
	Type           TaskType        `json:"type"`
	WaitTime       *Duration       `json:"waitTime,omitempty"`
	ScheduledStart *ScheduledStart `json:"scheduledStart,omitempty"`
	// Quorum is how many distinct people must approve an Approval task; default 1.
	Quorum int `json:"quorum,omitempty"`
	// Approvers are who may decide an Approval task; the API server holds records to them.
	Approvers []Approver `json:"approvers,omitempty"`
	// Analysis are the checks of an Analysis task, or those a TimedWait measures while it
	// waits: the task opens once they passed (§7).
	Analysis []Check `json:"analysis,omitempty"`
}

// Approver is a user, or a group of users, who may decide an approval gate.
type Approver struct {
	User  string `json:"user,omitempty"`
	Group string `json:"group,omitempty"`
}

// ScheduledStart opens at an absolute time, or at the next weekday and time of day at a UTC
// offset after the gate is reached (R3.12).
type ScheduledStart struct {
	At        *time.Time `json:"at,omitempty"`
	Weekday   string     `json:"weekday,omitempty"`
	TimeOfDay string     `json:"timeOfDay,omitempty"`
	UTCOffset string     `json:"utcOffset,omitempty"`
}

var weekdays = map[string]time.Weekday{"Sunday": time.Sunday, "Monday": time.Monday, "Tuesday": time.Tuesday,
	"Wednesday": time.Wednesday, "Thursday": time.Thursday, "Friday": time.Friday, "Saturday": time.Saturday}

// opensAt is when the gate opens, for a gate reached at reached.
func (s *ScheduledStart) opensAt(reached time.Time) (time.Time, error) {
	if s.At != nil {
		return *s.At, nil
	}
	hh, mm, err := parseClock(s.TimeOfDay)
	if err != nil {
		return time.Time{}, err
	}
	offset := 0
	if s.UTCOffset != "" {
		oh, om, err := parseClock(strings.TrimLeft(s.UTCOffset, "+-"))
		if err != nil {
			return time.Time{}, fmt.Errorf("invalid utcOffset %q", s.UTCOffset)
		}
		offset = (oh*60 + om) * 60
		if strings.HasPrefix(s.UTCOffset, "-") {
			offset = -offset
		}
	}
	loc := time.FixedZone(s.UTCOffset, offset)
	local := reached.In(loc)
	t := time.Date(local.Year(), local.Month(), local.Day(), hh, mm, 0, 0, loc)
	for t.Before(reached) || (s.Weekday != "" && t.Weekday() != weekdays[s.Weekday]) {
		t = t.AddDate(0, 0, 1)
	}
	return t, nil
}

func parseClock(s string) (h, m int, err error) {
	hs, ms, ok := strings.Cut(s, ":")
	h, err1 := strconv.Atoi(hs)
	m, err2 := strconv.Atoi(ms)
	if !ok || err1 != nil || err2 != nil || h < 0 || h > 23 || m < 0 || m > 59 {
		return 0, 0, fmt.Errorf("invalid time of day %q: want HH:MM", s)
	}
	return h, m, nil
}

// DefaultClusterTimeout is how long a released cluster may take to become Ready.
const DefaultClusterTimeout = 10 * time.Minute

func (s *StagedStrategy) clusterTimeout() time.Duration {
	if s.ClusterTimeout != nil && *s.ClusterTimeout > 0 {
		return time.Duration(*s.ClusterTimeout)
	}
	return DefaultClusterTimeout
}

// ValidateStaged checks a staged strategy; every problem names its field.
func ValidateStaged(s *StagedStrategy) error {
	var errs []error
	add := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
	}
	if len(s.Stages) == 0 {
		add("stages", "at least one stage is required")
	}
	if len(s.Stages) > MaxStages {
		add("stages", "at most %d stages, got %d", MaxStages, len(s.Stages))
	}
	s.FailurePolicy.validate("", add)
	if s.FailureTimeout != nil {
		add("failureTimeout", "staged runs time clusters out with clusterTimeout")
	}
	stageNames := map[string]bool{}
	for i, st := range s.Stages {
		f := fmt.Sprintf("stages[%d]", i)
		if st.Name == "" {
			add(f+".name", "is required")
		} else if stageNames[st.Name] {
			add(f+".name", "%q is used twice", st.Name)
		}
		stageNames[st.Name] = true
		checkSelector(add, f, st.LabelSelector, st.Selector)
		checkConcurrency(add, f+".maxConcurrency", st.MaxConcurrency)
		checkBudget(add, f+".maxAllowedFailures", st.MaxAllowedFailures)
		checkTasks(add, f+".beforeStageTasks", st.BeforeStageTasks, true)
		checkTasks(add, f+".afterStageTasks", st.AfterStageTasks, false)
		if len(st.Groups) > MaxStageGroups {
			add(f+".groups", "at most %d groups, got %d", MaxStageGroups, len(st.Groups))
		}
		groupNames := map[string]bool{}
		for j, g := range st.Groups {
			gf := fmt.Sprintf("%s.groups[%d]", f, j)
			if g.Name == "" {
				add(gf+".name", "is required")
			} else if groupNames[g.Name] {
				add(gf+".name", "%q is used twice", g.Name)
			}
			groupNames[g.Name] = true
			checkSelector(add, gf, g.LabelSelector, g.Selector)
			checkConcurrency(add, gf+".maxConcurrency", g.MaxConcurrency)
			checkBudget(add, gf+".maxAllowedFailures", g.MaxAllowedFailures)
			checkTasks(add, gf+".beforeGroupTasks", g.BeforeGroupTasks, true)
			checkTasks(add, gf+".afterGroupTasks", g.AfterGroupTasks, false)
		}
	}
	return joinErrors(errs)
}

// checkSelector checks that exactly one of a structured selector and its string form is set,
// and that it reads.
func checkSelector(add addFunc, field string, structured *Selector, text string) {
	switch {
	case structured == nil && text == "":
		add(field+".labelSelector", "is required (or selector, its string form)")
	case structured != nil && text != "":
		add(field, "set labelSelector or selector, not both")
	case structured != nil:
		if err := structured.validate(); err != nil {
			add(field+".labelSelector", "%v", err)
		}
	default:
		if _, err := ParseSelector(text); err != nil {
			add(field+".selector", "%v", err)
		}
	}
}

func checkConcurrency(add addFunc, field string, v IntOrPercent) {
	if err := v.validate(); err != nil {
		add(field, "%v", err)
	} else if v.IsZero() {
		add(field, "must be at least 1 or 1%%")
	}
}

func checkBudget(add addFunc, field string, v IntOrPercent) {
	if err := v.validate(); err != nil {
		add(field, "%v", err)
	}
}

// checkTasks applies R3.4 and R7.2: before a stage or group at most one gate, an Approval or a
// ScheduledStart; after it at most three, one of each of Approval, TimedWait and Analysis.
// An Analysis task has checks; a TimedWait may have checks it measures while it waits.
func checkTasks(add addFunc, field string, tasks []Task, before bool) {
	if before && len(tasks) > 1 {
		add(field, "at most one task, got %d", len(tasks))
	}
	if !before && len(tasks) > 3 {
		add(field, "at most three tasks, got %d", len(tasks))
	}
	seen := map[TaskType]bool{}
	for i, t := range tasks {
		tf := fmt.Sprintf("%s[%d]", field, i)
		switch {
		case t.Type != TaskApproval && t.Type != TaskTimedWait && t.Type != TaskScheduledStart && t.Type != TaskAnalysis:
			add(tf+".type", "%q is not one of Approval, TimedWait, ScheduledStart, Analysis", t.Type)
		case before && (t.Type == TaskTimedWait || t.Type == TaskAnalysis):
			add(tf+".type", "%s cannot come before a stage or group: there is nothing to judge yet", t.Type)
		case !before && t.Type == TaskScheduledStart:
			add(tf+".type", "ScheduledStart can only come before a stage or group")
		case seen[t.Type]:
			add(tf+".type", "a second %s task", t.Type)
		}
		seen[t.Type] = true
		switch {
		case t.Type == TaskAnalysis && len(t.Analysis) == 0:
			add(tf+".analysis", "is required for an Analysis task")
		case len(t.Analysis) > 0 && t.Type != TaskAnalysis && t.Type != TaskTimedWait:
			add(tf+".analysis", "is only valid for Analysis and TimedWait tasks")
		default:
			validateChecks(tf+".analysis", t.Analysis, true, add)
		}
		if (t.Type == TaskTimedWait) != (t.WaitTime != nil) {
			add(tf+".waitTime", "is required for TimedWait and only valid there")
		} else if t.WaitTime != nil && *t.WaitTime <= 0 {
			add(tf+".waitTime", "must be positive")
		}
		if (t.Type == TaskScheduledStart) != (t.ScheduledStart != nil) {
			add(tf+".scheduledStart", "is required for ScheduledStart and only valid there")
		} else if t.ScheduledStart != nil {
			if _, err := t.ScheduledStart.opensAt(time.Unix(0, 0)); err != nil {
				add(tf+".scheduledStart", "%v", err)
			}
			if t.ScheduledStart.Weekday != "" {
				if _, ok := weekdays[t.ScheduledStart.Weekday]; !ok {
					add(tf+".scheduledStart.weekday", "%q is not a weekday name", t.ScheduledStart.Weekday)
				}
			}
		}
	}
}
