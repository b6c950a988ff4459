package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/rollout"
)

// loadSpec reads a Kubernetes object of the given kind (its spec) or a bare spec, strictly.
func loadSpec(path, kind string, out any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return badInput("%s: %v", path, err)
	}
	var head struct {
		Kind string          `json:"kind"`
		Spec json.RawMessage `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &head); err != nil {
		return badInput("%s: %v", path, cleanDecodeError(err))
	}
	body, field := data, ""
	if head.Kind != "" {
		if head.Kind != kind {
			return badInput("%s: kind: %q, want %s", path, head.Kind, kind)
		}
		body, field = head.Spec, "spec: "
	}
	if err := decodeStrict(body, out); err != nil {
		return badInput("%s: %s%v", path, field, err)
	}
	return nil
}

// stagedReport is plan's output for a staged run.
type stagedReport struct {
	Stages []reportStage   `json:"stages"`
	Steps  []reportRunStep `json:"steps"`
	reportEnd
	ETA      string `json:"eta"`
	State    string `json:"state"`
	Failures int    `json:"failures"`
}

type reportStage struct {
	Name           string        `json:"name"`
	MaxConcurrency int           `json:"maxConcurrency"`
	Groups         []reportGroup `json:"groups"`
}

type reportGroup struct {
	Name     string   `json:"name"`
	Clusters []string `json:"clusters"`
}

type reportRunStep struct {
	At         string   `json:"at"`
	Started    []string `json:"started"`
	Completed  []string `json:"completed"`
	Failed     []string `json:"failed,omitempty"`
	RolledBack []string `json:"rolledBack"`
	Gate       string   `json:"gate"`
}

func (o *planOptions) runStaged(out io.Writer, clusters []rollout.SimCluster) error {
	var strategy rollout.StagedStrategy
	if err := loadSpec(o.strategyFile, "StagedUpdateStrategy", &strategy); err != nil {
		return err
	}
	if err := rollout.ValidateStaged(&strategy); err != nil {
		return badInput("%s: %s", o.strategyFile, strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	var checks []rollout.Check
	for _, st := range strategy.Stages {
		for _, task := range st.AfterStageTasks {
			checks = append(checks, task.Analysis...)
		}
		for _, g := range st.Groups {
			for _, task := range g.AfterGroupTasks {
				checks = append(checks, task.Analysis...)
			}
		}
	}
	if err := o.checkFaultsName(checks, o.strategyFile); err != nil {
		return err
	}
	tl := rollout.SimulateRun(rollout.RunSimulation{Name: "plan", Strategy: strategy, Clusters: clusters, ReadyAfter: o.readyAfter, ApproveAfter: o.approveAfter,
		CheckFaults: o.checkFaults})
	if len(tl.Plan.Stages) == 0 {
		return badInput("%s: %s", o.clustersFile, tl.Final.Message)
	}
	if strings.HasPrefix(tl.Stuck, "waiting for approval") && o.approveAfter < 0 {
		tl.Stuck += " (nobody approves in this plan: pass --approve-after to simulate a person)"
	}
	r := stagedReport{reportEnd: endOf(tl.SimEnd), State: string(tl.Final.State), Failures: tl.Final.FailureCount, Stages: []reportStage{}, Steps: []reportRunStep{}}
	if tl.Completed {
		r.ETA = tl.Duration.String()
	}
	startedAt := map[string]int{} // cluster → the step that started it
	for i, s := range tl.Steps {
		for _, c := range s.Started {
			if _, seen := startedAt[c]; !seen {
				startedAt[c] = i
			}
		}
	}
	for si, st := range tl.Plan.Stages {
		spec := strategy.Stages[si]
		size := 0
		rs := reportStage{Name: st.Name}
		for _, g := range st.Groups {
			rg := reportGroup{Name: g.Name, Clusters: []string{}}
			for _, c := range g.Clusters {
				rg.Clusters = append(rg.Clusters, c.Name)
			}
			// In the order the run starts them, as the hub would: windows open first (R3.13),
			// then by the sorting label; those never started keep the label's order, last.
			slices.SortStableFunc(rg.Clusters, func(a, b string) int {
				ia, oka := startedAt[a]
				ib, okb := startedAt[b]
				switch {
				case oka && okb:
					return cmp.Compare(ia, ib)
				case oka:
					return -1
				case okb:
					return 1
				}
				return 0
			})
			size += len(g.Clusters)
			rs.Groups = append(rs.Groups, rg)
		}
		rs.MaxConcurrency = size
		if len(spec.Groups) == 0 || spec.MaxConcurrency.IsSet() {
			rs.MaxConcurrency = spec.MaxConcurrency.Or(rollout.Int(1)).ScaleDown(size)
		}
		r.Stages = append(r.Stages, rs)
	}
	for _, s := range tl.Steps {
		r.Steps = append(r.Steps, reportRunStep{At: s.At.String(), Started: nonNil(s.Started), Completed: nonNil(s.Completed), Failed: s.Failed, RolledBack: nonNil(s.RolledBack), Gate: s.Gate})
	}
	if o.output.format != o.output.text {
		return o.output.print(out, r)
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "Staged run of %d clusters in %d stages\n\nSTAGE\tMAX-CONCURRENCY\tGROUP\tCLUSTERS (in order)\n", len(clusters), len(r.Stages))
	for _, st := range r.Stages {
		for _, g := range st.Groups {
			fmt.Fprintf(w, "%s\t%d\t%s\t%s\n", st.Name, st.MaxConcurrency, g.Name, shortList(g.Clusters, 5))
		}
	}
	fmt.Fprintln(w, "\nAT\tSTARTED\tCOMPLETED\tWAITING")
	for _, s := range r.Steps {
		done := shortList(s.Completed, 3)
		if len(s.Failed) > 0 {
			done += " failed: " + shortList(s.Failed, 3)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", s.At, shortList(s.Started, 3)+rolledBackNote(s.RolledBack), done, s.Gate)
	}
	r.write(w, r.ETA)
	return w.Flush()
}

// sequenceReport is plan's output for a rollout sequence.
type sequenceReport struct {
	Groups []reportSeqGroup `json:"groups"`
	Steps  []reportRunStep  `json:"steps"`
	reportEnd
	ETA string `json:"eta"`
}

type reportSeqGroup struct {
	Name     string   `json:"name"`
	Soak     string   `json:"soak"`
	Clusters []string `json:"clusters"`
}

func (o *planOptions) runSequence(out io.Writer, clusters []rollout.SimCluster) error {
	var seq rollout.Sequence
	if err := loadSpec(o.sequenceFile, "RolloutSequence", &seq); err != nil {
		return err
	}
	order, err := seq.ChainOrder()
	if err != nil {
		return badInput("%s: %v", o.sequenceFile, err)
	}
	var checks []rollout.Check
	for _, g := range seq.Groups {
		checks = append(checks, g.Analysis...)
	}
	if err := o.checkFaultsName(checks, o.sequenceFile); err != nil {
		return err
	}
	tl := rollout.SimulateSequence(rollout.SequenceSimulation{Sequence: seq, Clusters: clusters, ReadyAfter: o.readyAfter, Revisions: []rollout.SimRevision{{Index: 2}},
		CheckFaults: o.checkFaults})
	if tl.Err != nil {
		return badInput("%s: %v", o.sequenceFile, tl.Err)
	}
	r := sequenceReport{reportEnd: endOf(tl.SimEnd), Groups: []reportSeqGroup{}, Steps: []reportRunStep{}}
	if tl.Completed {
		r.ETA = tl.Duration.String()
	}
	for _, gi := range order {
		g := seq.Groups[gi]
		soak := rollout.DefaultSoak
		if g.Soak != nil {
			soak = time.Duration(*g.Soak)
		}
		rg := reportSeqGroup{Name: g.Name, Soak: soak.String(), Clusters: []string{}}
		for _, c := range clusters {
			if contains(c.Groups, g.ClusterGroup) && g.ClusterGroup != "" || g.ClusterSelector != nil && g.ClusterSelector.Matches(c.Labels) {
				rg.Clusters = append(rg.Clusters, c.Name)
			}
		}
		r.Groups = append(r.Groups, rg)
	}
	for _, s := range tl.Steps {
		r.Steps = append(r.Steps, reportRunStep{At: s.At.String(), Started: nonNil(s.Started), Completed: nonNil(s.Complete), RolledBack: nonNil(s.RolledBack), Gate: s.Gate})
	}
	if o.output.format != o.output.text {
		return o.output.print(out, r)
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "Rollout sequence of %d groups\n\nGROUP\tSOAK\tCLUSTERS\n", len(r.Groups))
	for _, g := range r.Groups {
		fmt.Fprintf(w, "%s\t%s\t%s\n", g.Name, g.Soak, shortList(g.Clusters, 5))
	}
	fmt.Fprintln(w, "\nAT\tRELEASED\tCOMPLETED\tWAITING")
	for _, s := range r.Steps {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", s.At, shortList(s.Started, 3)+rolledBackNote(s.RolledBack), shortList(s.Completed, 3), s.Gate)
	}
	r.write(w, r.ETA)
	return w.Flush()
}

// reportEnd is how a simulated rollout ended, the same in every plan report: its JSON fields
// and the last lines of its text.
type reportEnd struct {
	Completed bool             `json:"completed"`
	Outcome   rollout.Outcome  `json:"outcome,omitempty"`
	Failure   *rollout.Failure `json:"failure,omitempty"`
	Stuck     string           `json:"stuck,omitempty"`
	// ran is how long the simulation ran, for the text.
	ran string
}

func endOf(e rollout.SimEnd) reportEnd {
	return reportEnd{Completed: e.Completed, Outcome: e.Outcome, Failure: e.Failure, Stuck: e.Stuck, ran: e.Duration.String()}
}

// write ends the text output; eta is what a completed rollout took, as the report says it.
func (e reportEnd) write(w io.Writer, eta string) {
	switch {
	case e.Outcome == rollout.OutcomeRolledBack:
		fmt.Fprintf(w, "\nRolled back after %s: %s\n", e.ran, e.Failure.Message)
	case e.Completed && e.Failure == nil:
		fmt.Fprintf(w, "\nCompleted after %s.\n", eta)
	case e.Outcome == rollout.OutcomeFailed && e.Failure != nil:
		fmt.Fprintf(w, "\nFailed after %s: %s\n", e.ran, e.Failure.Message)
	default:
		fmt.Fprintf(w, "\nNot completed: stopped after %s: %s\n", e.ran, e.Stuck)
	}
	if e.Outcome != "" {
		fmt.Fprintf(w, "Outcome: %s\n", e.Outcome)
	}
}

// rolledBackNote says which clusters a step rolled back, for the steps table.
func rolledBackNote(names []string) string {
	if len(names) == 0 {
		return ""
	}
	return fmt.Sprintf(" (rolled back %d: %s)", len(names), shortList(names, 3))
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
