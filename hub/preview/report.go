package preview

import (
	"time"

	"github.com/flotilla-dev/flotilla/bundle"
)

// Report is what a change does to the fleet; its JSON form is stable for tools.
type Report struct {
	Base Revision `json:"base"`
	Head Revision `json:"head"`
	// Clusters is the size of the fleet compared.
	Clusters int            `json:"clusters"`
	Summary  Summary        `json:"summary"`
	Bundles  []BundleChange `json:"bundles"`
}

// Summary counts what the report holds.
type Summary struct {
	Bundles   int `json:"bundles"`
	Added     int `json:"added"`
	Changed   int `json:"changed"`
	Removed   int `json:"removed"`
	Broken    int `json:"broken"`
	Unchanged int `json:"unchanged"`
	// ClustersAffected are the clusters whose deployment of at least one bundle changes.
	ClustersAffected int `json:"clustersAffected"`
	// Longest is the longest ETA of the bundles' plans, "" when none completes.
	Longest string `json:"longestETA,omitempty"`
}

// Status is what happens to a bundle.
type Status string

const (
	StatusAdded     Status = "added"
	StatusChanged   Status = "changed"
	StatusRemoved   Status = "removed"
	StatusBroken    Status = "broken"
	StatusUnchanged Status = "unchanged"
)

// BundleChange is one bundle's part of the report.
type BundleChange struct {
	Name   string `json:"name"`
	Dir    string `json:"dir,omitempty"`
	Status Status `json:"status"`
	// Targeted is how many clusters the head deploys the bundle to; Unchanged how many of the
	// clusters it deploys to render it as the base does.
	Targeted  int `json:"targeted"`
	Unchanged int `json:"unchanged"`
	// Joining and Leaving are the clusters whose targets change: the head deploys the bundle
	// to them and the base does not, or the other way round.
	Joining []string `json:"joining,omitempty"`
	Leaving []string `json:"leaving,omitempty"`
	// Groups are the clusters that render alike, each with what changes for it, largest first.
	Groups []GroupChange `json:"groups"`
	// BaseFailure and HeadFailure are the clusters a side does not render for, and why.
	BaseFailure *RenderFailure `json:"baseFailure,omitempty"`
	HeadFailure *RenderFailure `json:"headFailure,omitempty"`
	Plan        *Plan          `json:"plan,omitempty"`

	// targeted are the clusters the head deploys the bundle to, for its plan.
	targeted []bundle.Target
}

// GroupChange is what changes for clusters whose base and head render alike.
type GroupChange struct {
	Count    int      `json:"count"`
	Clusters []string `json:"clusters"`
	// CommonLabels and ClusterGroups are what every cluster of the group has.
	CommonLabels      map[string]string `json:"commonLabels,omitempty"`
	ClusterGroups     []string          `json:"clusterGroups,omitempty"`
	BaseCustomization string            `json:"baseCustomization,omitempty"`
	HeadCustomization string            `json:"headCustomization,omitempty"`
	Objects           []ObjectChange    `json:"objects"`
	// Options is a diff of how the agent deploys (namespace, drift correction, health checks…)
	// when that changes.
	Options string `json:"optionsDiff,omitempty"`
}

// Change is what happens to an object.
type Change string

const (
	ObjectAdded   Change = "added"
	ObjectChanged Change = "changed"
	ObjectRemoved Change = "removed"
)

// ObjectChange is one object added, changed or removed.
type ObjectChange struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name"`
	Change     Change `json:"change"`
	// Diff is a unified diff of the object's YAML, Secrets' values redacted.
	Diff string `json:"diff,omitempty"`
}

// RenderFailure is why a revision does not render a bundle, and for which clusters.
type RenderFailure struct {
	Message  string   `json:"message"`
	Count    int      `json:"count"`
	Clusters []string `json:"clusters"`
}

// maxFailureClusters bounds the clusters a failure lists; Count has them all.
const maxFailureClusters = 20

func (f *RenderFailure) add(cluster string, err error) *RenderFailure {
	if f == nil {
		f = &RenderFailure{Message: err.Error()}
	}
	f.Count++
	if len(f.Clusters) < maxFailureClusters {
		f.Clusters = append(f.Clusters, cluster)
	}
	return f
}

// Plan is how the head's revision of a bundle would roll out.
type Plan struct {
	// Strategy names what plans it: "rolloutStrategy", "placement", "stagedUpdate NAME",
	// "sequence NAME", or "default rolloutStrategy".
	Strategy string `json:"strategy"`
	Clusters int    `json:"clusters"`
	// Completed: every cluster is Ready on the revision at ETA.
	Completed bool   `json:"completed"`
	ETA       string `json:"eta,omitempty"`
	// Stuck says why the rollout does not complete by itself (a gate nobody approves).
	Stuck string     `json:"stuck,omitempty"`
	Steps []PlanStep `json:"steps"`
	// NotSimulated says why there is no plan (a strategy object that is not at hand).
	NotSimulated string `json:"notSimulated,omitempty"`

	eta time.Duration
}

// PlanStep is a moment of the plan: clusters released or started, or what it waits for.
type PlanStep struct {
	At      string   `json:"at"`
	Started []string `json:"started,omitempty"`
	Waiting string   `json:"waiting,omitempty"`
}

// Changed reports whether the head deploys, removes or breaks anything the base does not.
func (r *Report) Changed() bool {
	for _, b := range r.Bundles {
		if b.Status != StatusUnchanged {
			return true
		}
	}
	return false
}

// Broken reports whether some bundle of the head does not render for some cluster.
func (r *Report) Broken() bool { return r.Summary.Broken > 0 }

func (r *Report) summarize() {
	s := Summary{Bundles: len(r.Bundles)}
	affected := map[string]bool{}
	var longest time.Duration
	for _, b := range r.Bundles {
		switch b.Status {
		case StatusAdded:
			s.Added++
		case StatusChanged:
			s.Changed++
		case StatusRemoved:
			s.Removed++
		case StatusBroken:
			s.Broken++
		default:
			s.Unchanged++
		}
		for _, g := range b.Groups {
			for _, c := range g.Clusters {
				affected[c] = true
			}
		}
		if p := b.Plan; p != nil && p.Completed && p.eta > longest {
			longest, s.Longest = p.eta, p.ETA
		}
	}
	s.ClustersAffected = len(affected)
	r.Summary = s
}
