package dashboard

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/bdstate"
	"github.com/flotilla-dev/flotilla/hub/model"
	"github.com/flotilla-dev/flotilla/hub/report"
	"github.com/flotilla-dev/flotilla/rollout"
)

// Meta is what every view carries: who looks, where, and what the page cannot show.
type Meta struct {
	View      string    `json:"view"`
	User      string    `json:"user"`
	Namespace string    `json:"namespace"`
	Now       time.Time `json:"now"`
	Version   string    `json:"version"`
	// HubVersion is the hub's recorded version; OlderHub says why the page may miss things.
	HubVersion string `json:"hubVersion,omitempty"`
	OlderHub   string `json:"olderHub,omitempty"`
	// Refused are the kinds the viewer may not list, with the API server's reason.
	Refused []string `json:"refused,omitempty"`
	// Stale is a watch's last error: what the page shows may be out of date.
	Stale string `json:"stale,omitempty"`
}

// viewRequest is what a page asks for.
type viewRequest struct {
	Kind, Name string
	// Page and State page through a bundle's clusters, all of them or those of one chip.
	Page  int
	State Chip
}

// tablePage is how many clusters a bundle's table shows at once.
const tablePage = 100

func (s *Server) meta(ctx context.Context, v *viewer, view string) Meta {
	m := Meta{View: view, User: v.id.User, Namespace: v.namespace, Now: s.now().UTC(), Version: s.opts.Version, Stale: v.watchProblem()}
	m.HubVersion = v.hubVersionAt(ctx, s.now())
	if report.Older(m.HubVersion, s.opts.Version) {
		m.OlderHub = fmt.Sprintf("this hub runs %s, older than this dashboard (%s): what it does not report yet is not shown", m.HubVersion, s.opts.Version)
	}
	for _, k := range watchedKinds {
		if err := v.refused[k.resource]; err != nil {
			why := err.Error()
			if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
				why = "the hub's API has no " + k.resource + ": it is older than this dashboard"
			}
			m.Refused = append(m.Refused, k.resource+": "+why)
		}
	}
	return m
}

// FleetView is the namespace at a glance: GitRepos, bundles by state, clusters by state, label
// and group. Counts first; lists only of what needs a person.
type FleetView struct {
	Meta
	GitRepos []RepoRow      `json:"gitRepos"`
	Bundles  BundleCounts   `json:"bundles"`
	Clusters ClusterSummary `json:"clusters"`
}

// RepoRow is one GitRepo.
type RepoRow struct {
	Name     string   `json:"name"`
	Repo     string   `json:"repo"`
	Commit   string   `json:"commit,omitempty"`
	State    string   `json:"state,omitempty"`
	Ready    string   `json:"ready,omitempty"`
	Problems []string `json:"problems,omitempty"`
	Paused   bool     `json:"paused,omitempty"`
}

// BundleCounts are the bundles by state, and each bundle in a line.
type BundleCounts struct {
	ByState map[string]int `json:"byState"`
	Items   []BundleRow    `json:"items"`
}

// BundleRow is one bundle in a line.
type BundleRow struct {
	Name     string `json:"name"`
	GitRepo  string `json:"gitRepo,omitempty"`
	Revision int64  `json:"revision"`
	State    string `json:"state,omitempty"`
	Ready    string `json:"ready,omitempty"`
	Message  string `json:"message,omitempty"`
	Strategy string `json:"strategy"`
	Paused   bool   `json:"paused,omitempty"`
}

// ClusterSummary counts clusters online, offline and paused, in all and by label and group.
type ClusterSummary struct {
	Counts
	ByLabel []LabelCounts `json:"byLabel,omitempty"`
	ByGroup []NamedCounts `json:"byGroup,omitempty"`
	// OfflineNames are the offline clusters, by name (the first ones).
	OfflineNames []string `json:"offlineNames,omitempty"`
}

// Counts are clusters online, offline and paused.
type Counts struct {
	Total   int `json:"total"`
	Online  int `json:"online"`
	Offline int `json:"offline"`
	Paused  int `json:"paused"`
}

func (c *Counts) add(cl *v1alpha1.Cluster) {
	c.Total++
	if online(cl) {
		c.Online++
	} else {
		c.Offline++
	}
	if cl.Spec.Paused {
		c.Paused++
	}
}

// LabelCounts are the clusters per value of one label.
type LabelCounts struct {
	Key    string        `json:"key"`
	Values []NamedCounts `json:"values"`
}

// NamedCounts are the counts of one label value or group.
type NamedCounts struct {
	Name string `json:"name"`
	Counts
}

// maxLabelValues: a label with more values than this (a cluster id) is no way to group a fleet.
const maxLabelValues = 30

func strategyOf(b *v1alpha1.Bundle) string {
	switch {
	case b.Spec.StagedUpdate != nil:
		return "staged"
	case b.Spec.Sequence != nil:
		return "sequence"
	case b.Spec.Placement != nil && b.Spec.Placement.RollingUpdate != nil:
		return "placement"
	}
	return "partitions"
}

func (s *Server) fleetView(ctx context.Context, v *viewer) (*FleetView, error) {
	out := &FleetView{Meta: s.meta(ctx, v, "fleet"), GitRepos: []RepoRow{}, Bundles: BundleCounts{ByState: map[string]int{}, Items: []BundleRow{}}}
	var repos v1alpha1.GitRepoList
	if err := v.List(ctx, &repos, client.InNamespace(v.namespace)); err != nil {
		return nil, err
	}
	for i := range repos.Items {
		r := &repos.Items[i]
		out.GitRepos = append(out.GitRepos, RepoRow{Name: r.Name, Repo: r.Spec.Repo, Commit: r.Status.Commit, State: r.Status.Display.State, Ready: r.Status.Display.ReadyClusters,
			Problems: report.Problems(r), Paused: r.Spec.Paused})
	}
	var bundles v1alpha1.BundleList
	if err := v.List(ctx, &bundles, client.InNamespace(v.namespace)); err == nil {
		for i := range bundles.Items {
			b := &bundles.Items[i]
			state := cmp.Or(b.Status.Display.State, "Unknown")
			out.Bundles.ByState[state]++
			out.Bundles.Items = append(out.Bundles.Items, BundleRow{Name: b.Name, GitRepo: b.Spec.GitRepo, Revision: b.Status.ReleasingRevision, State: state,
				Ready: b.Status.Display.ReadyClusters, Message: b.Status.Display.Message, Strategy: strategyOf(b), Paused: b.Spec.Paused})
		}
	}
	var clusters v1alpha1.ClusterList
	if err := v.List(ctx, &clusters, client.InNamespace(v.namespace)); err == nil {
		out.Clusters = summarize(clusters.Items, s.groupsOf(ctx, v))
	}
	return out, nil
}

// groupsOf names the ClusterGroups of a cluster (none where the viewer may not read them).
func (s *Server) groupsOf(ctx context.Context, v *viewer) func(*v1alpha1.Cluster) map[string]map[string]string {
	f, err := model.ClusterGroups(ctx, v, v.namespace)
	if err != nil {
		return func(*v1alpha1.Cluster) map[string]map[string]string { return nil }
	}
	return f
}

// summarize counts clusters in all, per label value and per group.
func summarize(clusters []v1alpha1.Cluster, groupsOf func(*v1alpha1.Cluster) map[string]map[string]string) ClusterSummary {
	var out ClusterSummary
	byLabel := map[string]map[string]*Counts{}
	byGroup := map[string]*Counts{}
	for i := range clusters {
		cl := &clusters[i]
		out.add(cl)
		if !online(cl) && len(out.OfflineNames) < laneChips {
			out.OfflineNames = append(out.OfflineNames, cl.Name)
		}
		for k, val := range cl.Labels {
			if strings.HasPrefix(k, "flotilla.dev/") || strings.Contains(k, "kubernetes.io/") {
				continue
			}
			if byLabel[k] == nil {
				byLabel[k] = map[string]*Counts{}
			}
			if byLabel[k][val] == nil {
				byLabel[k][val] = &Counts{}
			}
			byLabel[k][val].add(cl)
		}
		for g := range groupsOf(cl) {
			if byGroup[g] == nil {
				byGroup[g] = &Counts{}
			}
			byGroup[g].add(cl)
		}
	}
	for k, vals := range byLabel {
		if len(vals) > maxLabelValues {
			continue
		}
		lc := LabelCounts{Key: k}
		for val, c := range vals {
			lc.Values = append(lc.Values, NamedCounts{Name: val, Counts: *c})
		}
		slices.SortFunc(lc.Values, func(a, b NamedCounts) int { return strings.Compare(a.Name, b.Name) })
		out.ByLabel = append(out.ByLabel, lc)
	}
	slices.SortFunc(out.ByLabel, func(a, b LabelCounts) int { return strings.Compare(a.Key, b.Key) })
	for g, c := range byGroup {
		out.ByGroup = append(out.ByGroup, NamedCounts{Name: g, Counts: *c})
	}
	slices.SortFunc(out.ByGroup, func(a, b NamedCounts) int { return strings.Compare(a.Name, b.Name) })
	sort.Strings(out.OfflineNames)
	return out
}

// BundleView is one bundle's rollout: a lane per part in order, why it waits, when it moves on,
// how its newest revision ended, and a page of its clusters.
type BundleView struct {
	Meta
	Name     string   `json:"name"`
	GitRepo  string   `json:"gitRepo,omitempty"`
	Path     string   `json:"path,omitempty"`
	Commit   string   `json:"commit,omitempty"`
	Revision int64    `json:"revision"`
	State    string   `json:"state,omitempty"`
	Ready    string   `json:"ready,omitempty"`
	Waiting  string   `json:"waiting,omitempty"`
	Doing    string   `json:"doing,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
	Strategy string   `json:"strategy"`
	Paused   bool     `json:"paused,omitempty"`
	Lanes    []Lane   `json:"lanes"`
	// Counts are every cluster's chips; Pending those the rollout has not created a deployment for.
	Counts  map[Chip]int `json:"counts"`
	Pending int32        `json:"pending,omitempty"`
	// ETA is the last moment known ahead (a soak's end, a timed wait); Approvals the gates still
	// waiting for people, which come on top.
	ETA         *Countdown       `json:"eta,omitempty"`
	Approvals   int              `json:"approvals,omitempty"`
	Outcome     *OutcomeView     `json:"outcome,omitempty"`
	Quarantined []QuarantineView `json:"quarantined,omitempty"`
	Revisions   []RevisionRow    `json:"revisions"`
	Runs        []RunRow         `json:"runs,omitempty"`
	Table       ClusterTable     `json:"table"`
	Events      []EventRow       `json:"events"`
}

// OutcomeView is how the newest revision's rollout ended under its failure policy (R5.6).
type OutcomeView struct {
	Revision int64    `json:"revision"`
	Outcome  string   `json:"outcome"`
	What     string   `json:"what"`
	Rule     string   `json:"rule,omitempty"`
	Clusters []string `json:"clusters,omitempty"`
	Message  string   `json:"message,omitempty"`
	Restored int64    `json:"restored,omitempty"`
}

// QuarantineView is a revision nothing releases until a person retries it (R5.5).
type QuarantineView struct {
	Revision int64     `json:"revision"`
	Since    time.Time `json:"since"`
	Rule     string    `json:"rule,omitempty"`
	Message  string    `json:"message,omitempty"`
	Retry    string    `json:"retry"`
}

// RevisionRow is one revision of the history.
type RevisionRow struct {
	Index      int64     `json:"index"`
	Commit     string    `json:"commit,omitempty"`
	Created    time.Time `json:"created"`
	Deployable bool      `json:"deployable"`
}

// RunRow is one staged run of the bundle.
type RunRow struct {
	Name      string `json:"name"`
	Requested string `json:"requested"`
	State     string `json:"state,omitempty"`
	Revision  int64  `json:"revision,omitempty"`
	Message   string `json:"message,omitempty"`
	Current   bool   `json:"current,omitempty"`
}

// ClusterTable is one page of a bundle's clusters, of one chip or all.
type ClusterTable struct {
	State Chip          `json:"state,omitempty"`
	Page  int           `json:"page"`
	Pages int           `json:"pages"`
	Total int           `json:"total"`
	Rows  []ClusterChip `json:"rows"`
}

// EventRow is one Event, for timelines.
type EventRow struct {
	Time   time.Time `json:"time"`
	Type   string    `json:"type"`
	Reason string    `json:"reason"`
	Note   string    `json:"note"`
	Object string    `json:"object"`
	Count  int32     `json:"count,omitempty"`
}

// timelineEvents is how many Events a timeline shows, newest first.
const timelineEvents = 60

func (s *Server) bundleView(ctx context.Context, v *viewer, req viewRequest) (*BundleView, error) {
	var b v1alpha1.Bundle
	if err := v.Get(ctx, client.ObjectKey{Namespace: v.namespace, Name: req.Name}, &b); err != nil {
		return nil, err
	}
	rep, err := report.CollectBundle(ctx, v, &b)
	if err != nil {
		return nil, err
	}
	now := s.now()
	out := &BundleView{Meta: s.meta(ctx, v, "bundle"), Name: b.Name, GitRepo: b.Spec.GitRepo, Path: b.Spec.Path, Commit: b.Status.Commit, Revision: b.Status.ReleasingRevision,
		State: b.Status.Display.State, Ready: b.Status.Display.ReadyClusters, Waiting: rep.Waiting, Doing: rep.Now, Warnings: rep.Warnings, Strategy: strategyOf(&b),
		Paused: b.Spec.Paused, Pending: b.Status.Summary.Pending, Counts: map[Chip]int{}, Revisions: []RevisionRow{}, Events: []EventRow{}}
	in := rolloutInput{Bundle: &b, Report: rep, Facts: map[string]clusterFacts{}, Deploys: map[string]*v1alpha1.BundleDeployment{}, Requests: map[string]*v1alpha1.ApprovalRequest{}, Now: now}
	var clusters v1alpha1.ClusterList
	if err := v.List(ctx, &clusters, client.InNamespace(v.namespace)); err == nil {
		groupsOf := s.groupsOf(ctx, v)
		seen := map[string]bool{}
		for i := range clusters.Items {
			cl := &clusters.Items[i]
			groups := groupsOf(cl)
			f := clusterFacts{Labels: cl.Labels, Offline: !online(cl), Paused: cl.Spec.Paused}
			for g, gl := range groups {
				f.Groups = append(f.Groups, g)
				if !seen[g] {
					seen[g] = true
					in.Groups = append(in.Groups, rollout.ClusterGroup{Name: g, Labels: gl})
				}
			}
			sort.Strings(f.Groups)
			in.Facts[cl.Name] = f
		}
	}
	var bds v1alpha1.BundleDeploymentList
	if err := v.List(ctx, &bds, client.MatchingLabels{model.LabelBundle: b.Name, model.LabelBundleNamespace: b.Namespace}); err == nil {
		for i := range bds.Items {
			in.Deploys[bds.Items[i].Labels[model.LabelCluster]] = &bds.Items[i]
		}
	}
	if b.Spec.StagedUpdate != nil {
		s.stagedInputs(ctx, v, &b, &in, out)
	}
	if b.Spec.Sequence != nil {
		var seq v1alpha1.RolloutSequence
		if err := v.Get(ctx, client.ObjectKey{Namespace: v.namespace, Name: b.Spec.Sequence.Name}, &seq); err == nil {
			in.Sequence = &seq
		}
	}
	if out.Lanes, err = lanes(in); err != nil {
		return nil, err
	}
	var all []ClusterChip
	for _, l := range out.Lanes {
		for c, n := range l.Counts {
			out.Counts[c] += n
		}
		if l.Countdown != nil && l.Countdown.Until.After(now) && (out.ETA == nil || l.Countdown.Until.After(out.ETA.Until)) {
			out.ETA = l.Countdown
		}
		for _, g := range l.Gates {
			if g.State != string(v1alpha1.RunCompleted) && g.State != string(v1alpha1.RunSkipped) && g.Rejected == "" {
				out.Approvals++
			}
		}
	}
	for _, c := range rep.Clusters {
		all = append(all, ClusterChip{Name: c.Name, Chip: chipOf(c.State, in.Deploys[c.Name], in.Facts[c.Name], ""), Detail: c.Detail, Applied: c.Applied, Staged: c.Staged})
	}
	out.Table = page(all, req.State, req.Page)
	out.Outcome, out.Quarantined = outcomeOf(&b)
	for _, r := range b.Spec.Revisions {
		out.Revisions = append(out.Revisions, RevisionRow{Index: r.Index, Commit: r.Commit, Created: r.Created.Time, Deployable: r.TargetsID != ""})
	}
	out.Events = eventRows(s.events(ctx, v, func(ev *eventsv1.Event) bool {
		r := ev.Regarding
		return r.Kind == "Bundle" && r.Name == b.Name || r.Kind == "StagedUpdateRun" && slices.ContainsFunc(out.Runs, func(run RunRow) bool { return run.Name == r.Name })
	}))
	return out, nil
}

// stagedInputs reads a staged bundle's runs, the current one, and its gates' requests.
func (s *Server) stagedInputs(ctx context.Context, v *viewer, b *v1alpha1.Bundle, in *rolloutInput, out *BundleView) {
	var runs v1alpha1.StagedUpdateRunList
	if err := v.List(ctx, &runs, client.InNamespace(v.namespace)); err != nil {
		return
	}
	var mine []v1alpha1.StagedUpdateRun
	for _, r := range runs.Items {
		if r.Spec.Bundle == b.Name {
			mine = append(mine, r)
		}
	}
	current := rollout.CurrentRun(bdstate.RunRefs(mine), in.Now)
	slices.SortFunc(mine, func(a, b v1alpha1.StagedUpdateRun) int { return b.CreationTimestamp.Compare(a.CreationTimestamp.Time) })
	for i := range mine {
		r := &mine[i]
		out.Runs = append(out.Runs, RunRow{Name: r.Name, Requested: string(r.Spec.State), State: string(r.Status.State), Revision: r.Status.RevisionIndex, Message: r.Status.Message, Current: r.Name == current})
		if r.Name == current {
			in.Run = r
		}
	}
	var requests v1alpha1.ApprovalRequestList
	if err := v.List(ctx, &requests, client.InNamespace(v.namespace)); err == nil {
		for i := range requests.Items {
			in.Requests[requests.Items[i].Name] = &requests.Items[i]
		}
	}
}

// page returns one page of clusters, those that need attention first.
func page(all []ClusterChip, state Chip, n int) ClusterTable {
	var rows []ClusterChip
	for _, c := range all {
		if state == "" || c.Chip == state {
			rows = append(rows, c)
		}
	}
	slices.SortStableFunc(rows, func(a, b ClusterChip) int {
		return cmp.Or(cmp.Compare(attentionRank(a.Chip), attentionRank(b.Chip)), cmp.Compare(a.Name, b.Name))
	})
	t := ClusterTable{State: state, Total: len(rows), Pages: max(1, (len(rows)+tablePage-1)/tablePage)}
	t.Page = min(max(n, 0), t.Pages-1)
	t.Rows = rows[min(t.Page*tablePage, len(rows)):min((t.Page+1)*tablePage, len(rows))]
	if t.Rows == nil {
		t.Rows = []ClusterChip{}
	}
	return t
}

// outcomeOf says how the newest revision ended (R5.6) and what is quarantined (R5.5), in the
// words `flotilla status` uses.
func outcomeOf(b *v1alpha1.Bundle) (*OutcomeView, []QuarantineView) {
	var out *OutcomeView
	if o := b.Status.Outcome; o != nil {
		out = &OutcomeView{Revision: o.Revision, Outcome: string(o.Outcome), What: string(o.Outcome), Restored: o.RestoredRevision}
		if f := o.Failure; f != nil {
			out.Rule, out.Clusters, out.Message = string(f.Rule), f.Clusters, f.Message
			switch {
			case o.Outcome == v1alpha1.OutcomeRolledBack && o.RestoredRevision != 0:
				out.What = fmt.Sprintf("rolled back to revision %d", o.RestoredRevision)
			case o.Outcome == v1alpha1.OutcomeRolledBack:
				out.What = "rolled back, removed"
			case f.Action == v1alpha1.FailureActionRollback:
				out.What = "rolling back"
			default:
				out.What = "failed"
			}
		}
	}
	var qs []QuarantineView
	for _, q := range b.Status.Quarantined {
		qs = append(qs, QuarantineView{Revision: q.Revision, Since: q.At.Time, Rule: string(q.Rule), Message: q.Message,
			Retry: fmt.Sprintf("flotilla rollout retry %s --revision %d", b.Name, q.Revision)})
	}
	return out, qs
}

// events are the fleet namespace's Events that match.
func (s *Server) events(ctx context.Context, v *viewer, match func(*eventsv1.Event) bool) []eventsv1.Event {
	var evs eventsv1.EventList
	if err := v.List(ctx, &evs, client.InNamespace(v.namespace)); err != nil {
		return nil
	}
	return slices.DeleteFunc(evs.Items, func(ev eventsv1.Event) bool { return !match(&ev) })
}

// eventRows is a timeline of Events, newest first.
func eventRows(evs []eventsv1.Event) []EventRow {
	out := []EventRow{}
	for i := range evs {
		ev := &evs[i]
		row := EventRow{Time: eventTime(ev), Type: ev.Type, Reason: ev.Reason, Note: ev.Note, Object: ev.Regarding.Kind + "/" + ev.Regarding.Name}
		if ev.Series != nil {
			row.Count = ev.Series.Count
		}
		out = append(out, row)
	}
	slices.SortFunc(out, func(a, b EventRow) int { return b.Time.Compare(a.Time) })
	if len(out) > timelineEvents {
		out = out[:timelineEvents]
	}
	return out
}

func eventTime(ev *eventsv1.Event) time.Time {
	switch {
	case ev.Series != nil && !ev.Series.LastObservedTime.IsZero():
		return ev.Series.LastObservedTime.Time
	case !ev.EventTime.IsZero():
		return ev.EventTime.Time
	case ev.DeprecatedLastTimestamp.Time.After(time.Time{}):
		return ev.DeprecatedLastTimestamp.Time
	}
	return ev.CreationTimestamp.Time
}

// ClusterView is one cluster: its agent, its heartbeat, its deployments and its events.
type ClusterView struct {
	Meta
	Name         string            `json:"name"`
	HubNamespace string            `json:"hubNamespace,omitempty"`
	Online       bool              `json:"online"`
	State        string            `json:"state,omitempty"`
	Message      string            `json:"message,omitempty"`
	AgentVersion string            `json:"agentVersion,omitempty"`
	OlderAgent   bool              `json:"olderAgent,omitempty"`
	Heartbeat    *time.Time        `json:"heartbeat,omitempty"`
	Paused       bool              `json:"paused,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
	Deployments  []DeploymentRow   `json:"deployments"`
	Events       []EventRow        `json:"events"`
	EventsNote   string            `json:"eventsNote,omitempty"`
}

// DeploymentRow is one bundle on the cluster.
type DeploymentRow struct {
	Bundle   string                `json:"bundle"`
	Chip     Chip                  `json:"chip"`
	State    v1alpha1.ClusterState `json:"state"`
	Staged   int64                 `json:"staged"`
	Released int64                 `json:"released,omitempty"`
	Applied  int64                 `json:"applied"`
	Detail   string                `json:"detail,omitempty"`
}

func (s *Server) clusterView(ctx context.Context, v *viewer, name string) (*ClusterView, error) {
	var cl v1alpha1.Cluster
	if err := v.Get(ctx, client.ObjectKey{Namespace: v.namespace, Name: name}, &cl); err != nil {
		return nil, err
	}
	out := &ClusterView{Meta: s.meta(ctx, v, "cluster"), Name: cl.Name, HubNamespace: cl.Status.Namespace, Online: online(&cl), State: cl.Status.Display.State,
		Message: cl.Status.Display.Message, AgentVersion: cl.Status.AgentVersion, Paused: cl.Spec.Paused, Labels: cl.Labels, Deployments: []DeploymentRow{}}
	out.OlderAgent = report.Older(cl.Status.AgentVersion, out.HubVersion)
	if c := meta.FindStatusCondition(cl.Status.Conditions, v1alpha1.ReadyCondition); c != nil && out.Message == "" {
		out.Message = c.Message
	}
	if t := cl.Status.AgentLastSeen; t != nil {
		out.Heartbeat = &t.Time
	}
	if cl.Status.Namespace != "" {
		var lease coordinationv1.Lease
		if err := v.direct.Get(ctx, client.ObjectKey{Namespace: cl.Status.Namespace, Name: "flotilla-agent"}, &lease); err == nil && lease.Spec.RenewTime != nil {
			out.Heartbeat = &lease.Spec.RenewTime.Time
		}
	}
	var bundles v1alpha1.BundleList
	_ = v.List(ctx, &bundles, client.InNamespace(v.namespace))
	byName := map[string]*v1alpha1.Bundle{}
	for i := range bundles.Items {
		byName[bundles.Items[i].Name] = &bundles.Items[i]
	}
	var bds v1alpha1.BundleDeploymentList
	if err := v.List(ctx, &bds, client.MatchingLabels{model.LabelCluster: cl.Name, model.LabelBundleNamespace: v.namespace}); err == nil {
		facts := clusterFacts{Offline: !out.Online, Paused: cl.Spec.Paused}
		for i := range bds.Items {
			bd := &bds.Items[i]
			state := model.DeploymentState(byName[bd.Spec.Bundle], bd)
			row := DeploymentRow{Bundle: bd.Spec.Bundle, State: state, Chip: chipOf(state, bd, facts, ""), Staged: bd.Spec.Staged.Index, Applied: bd.Status.AppliedRevision}
			if bd.Spec.Released != nil {
				row.Released = bd.Spec.Released.Index
			}
			for _, t := range []string{v1alpha1.AppliedCondition, v1alpha1.ReadyCondition, v1alpha1.InSyncCondition} {
				if c := meta.FindStatusCondition(bd.Status.Conditions, t); c != nil && c.Status == "False" && row.Detail == "" {
					row.Detail = c.Message
				}
			}
			out.Deployments = append(out.Deployments, row)
		}
		slices.SortFunc(out.Deployments, func(a, b DeploymentRow) int { return strings.Compare(a.Bundle, b.Bundle) })
	}
	// The hub's Events about the cluster are in the fleet namespace; its agent's, in the
	// cluster's own, which the viewer may or may not read.
	evs := s.events(ctx, v, func(ev *eventsv1.Event) bool { return ev.Regarding.Kind == "Cluster" && ev.Regarding.Name == cl.Name })
	if cl.Status.Namespace != "" {
		var agentEvents eventsv1.EventList
		if err := v.direct.List(ctx, &agentEvents, client.InNamespace(cl.Status.Namespace)); err != nil {
			out.EventsNote = "the agent's events: " + err.Error()
		} else {
			evs = append(evs, agentEvents.Items...)
		}
	}
	out.Events = eventRows(evs)
	return out, nil
}
