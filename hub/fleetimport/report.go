package fleetimport

import (
	"fmt"
	"sort"
	"strings"
)

// Outcome is what became of one field of a Fleet object.
type Outcome string

const (
	// Renamed: carried over under Flotilla's name for it.
	Renamed Outcome = "renamed"
	// Changed: carried over with a meaning or shape Flotilla gives it; Detail says how.
	Changed Outcome = "changed"
	// Dropped: not carried over; Detail says why and what to use instead.
	Dropped Outcome = "dropped"
)

// Finding is one field of one object that was not carried over as it was.
type Finding struct {
	// Object is kind, namespace and name: "GitRepo fleet-default/shop".
	Object  string  `json:"object"`
	Field   string  `json:"field"`
	Outcome Outcome `json:"outcome"`
	Detail  string  `json:"detail"`
}

// Report is what an import did not carry over as it was, object by object.
type Report struct {
	Findings []Finding `json:"findings"`
	// Imported counts the objects converted, by kind.
	Imported map[string]int `json:"imported"`
}

// Dropped says whether anything was not carried over.
func (r *Report) Dropped() bool {
	for _, f := range r.Findings {
		if f.Outcome == Dropped {
			return true
		}
	}
	return false
}

func (r *Report) add(object, field string, outcome Outcome, format string, args ...any) {
	r.Findings = append(r.Findings, Finding{Object: object, Field: field, Outcome: outcome, Detail: fmt.Sprintf(format, args...)})
}

// Text is the report for people: the counts, then each finding under its object.
func (r *Report) Text() string {
	var b strings.Builder
	kinds := make([]string, 0, len(r.Imported))
	for k := range r.Imported {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	var counts []string
	for _, k := range kinds {
		counts = append(counts, fmt.Sprintf("%d %s", r.Imported[k], k))
	}
	if len(counts) == 0 {
		counts = []string{"nothing"}
	}
	fmt.Fprintf(&b, "imported: %s\n", strings.Join(counts, ", "))
	last := ""
	for _, f := range r.Findings {
		if f.Object != last {
			fmt.Fprintf(&b, "%s:\n", f.Object)
			last = f.Object
		}
		fmt.Fprintf(&b, "  %-8s %s: %s\n", f.Outcome, f.Field, f.Detail)
	}
	return b.String()
}
