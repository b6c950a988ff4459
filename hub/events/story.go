package events

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Story is what Events tell of a namespace, oldest first, one line each:
// "Kind/name Reason: message", with "(×n)" for an Event seen n times.
type Story []string

// StoryOf tells the Events a controller (its reportingController; "" for every one) recorded,
// as `kubectl get events` lists them through the core API, oldest first.
func StoryOf(list *corev1.EventList, controller string) Story {
	evs := slices.DeleteFunc(slices.Clone(list.Items), func(e corev1.Event) bool { return controller != "" && e.ReportingController != controller })
	slices.SortStableFunc(evs, func(a, b corev1.Event) int { return eventTime(&a).Compare(eventTime(&b)) })
	story := make(Story, 0, len(evs))
	for _, e := range evs {
		line := fmt.Sprintf("%s/%s %s: %s", e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
		if e.Series != nil && e.Series.Count > 1 {
			line += fmt.Sprintf(" (×%d)", e.Series.Count)
		}
		story = append(story, line)
	}
	return story
}

// eventTime is when an Event was first seen: its eventTime (events.k8s.io), or for Events of
// the older API its firstTimestamp.
func eventTime(e *corev1.Event) time.Time {
	if !e.EventTime.IsZero() {
		return e.EventTime.Time
	}
	return e.FirstTimestamp.Time
}

// Tells reports whether the story has a line containing each of wants, in that order (other
// lines may come between).
func (s Story) Tells(wants ...string) bool {
	i := 0
	for _, line := range s {
		if i < len(wants) && strings.Contains(line, wants[i]) {
			i++
		}
	}
	return i == len(wants)
}

// Count is how many lines contain what.
func (s Story) Count(what string) int {
	n := 0
	for _, line := range s {
		if strings.Contains(line, what) {
			n++
		}
	}
	return n
}

func (s Story) String() string { return strings.Join(s, "\n") }
