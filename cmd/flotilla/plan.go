package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/bundle"
	"github.com/flotilla-dev/flotilla/rollout"
)

type planOptions struct {
	clustersFile    string
	fleetFile       string
	strategyFile    string
	sequenceFile    string
	approveAfter    time.Duration
	readyAfter      time.Duration
	fail            []string
	regress         []string
	offline         []string
	ineligible      []string
	analysisFail    []string
	checkFaults     []rollout.SimCheckFault
	firstDeployment bool
	output          *outputFlag
}

func newPlanCommand() *cobra.Command {
	o := &planOptions{}
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Preview how a rollout would progress through a fleet",
		Long: `plan splits the clusters into partitions as the hub would and simulates the rollout of a new
revision: which clusters are released when, and why the rollout waits. Nothing is contacted.

The clusters file is a YAML list of {name, labels, groups, maintenanceWindow, exclusions}, or an
object with "clusters" and "clusterGroups" ({name, labels}) lists. The rollout is the fleet.yaml's
rolloutStrategy or placement, a StagedUpdateStrategy (--strategy) or a RolloutSequence (--sequence).`,
		Example: `  flotilla plan --clusters clusters.yaml --fleet-yaml fleet.yaml
  flotilla plan --clusters clusters.yaml --fleet-yaml fleet.yaml --ready-after 2m --fail prod-eu-3 -o json
  flotilla plan --clusters clusters.yaml --sequence sequence.yaml --regress dev-1@45m
  flotilla plan --clusters clusters.yaml --sequence sequence.yaml --analysis-fail error-rate@20m
  flotilla plan --clusters clusters.yaml --strategy staged.yaml --approve-after 15m
  flotilla plan --clusters clusters.yaml --sequence sequence.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd.OutOrStdout()) },
	}
	f := cmd.Flags()
	f.StringVar(&o.clustersFile, "clusters", "", "YAML file listing the clusters (required)")
	f.StringVar(&o.fleetFile, "fleet-yaml", "", "fleet.yaml whose rolloutStrategy or placement to simulate (default: all defaults)")
	f.StringVar(&o.strategyFile, "strategy", "", "StagedUpdateStrategy (or its spec) to simulate as a staged run")
	f.StringVar(&o.sequenceFile, "sequence", "", "RolloutSequence (or its spec) to simulate")
	f.DurationVar(&o.approveAfter, "approve-after", -1, "simulated time a person takes to approve a gate; unset: nobody approves and the plan stops at the gate")
	f.DurationVar(&o.readyAfter, "ready-after", 30*time.Second, "simulated time from release to Ready")
	f.StringSliceVar(&o.fail, "fail", nil, "clusters that fail the new revision: NAME never becomes Ready, NAME@AFTER fails its apply AFTER its release (e.g. c1@5m)")
	f.StringSliceVar(&o.regress, "regress", nil, "clusters that become Ready on the new revision and NotReady AFTER its release: NAME@AFTER (e.g. c1@30m)")
	f.StringSliceVar(&o.offline, "offline", nil, "clusters whose agent is offline: NAME from the start, NAME@AFTER from AFTER on, NAME@AFTER..BACK until BACK (NAME@..BACK: from the start)")
	f.StringSliceVar(&o.ineligible, "ineligible", nil, "clusters that do not serve an API the new revision uses: they keep what they run and the rollout goes on without them (R1.15)")
	f.StringSliceVar(&o.analysisFail, "analysis-fail", nil, "analysis checks whose measurements fail from AFTER on (from the start of the rollout), on every cluster or gate they judge: NAME@AFTER (e.g. error-rate@20m)")
	f.BoolVar(&o.firstDeployment, "first-deployment", false, "simulate a first deployment instead of an update")
	o.output = addOutputFlag(cmd, "table")
	_ = cmd.MarkFlagRequired("clusters")
	return cmd
}

func (o *planOptions) run(out io.Writer) error {
	structured, err := o.output.structured()
	if err != nil {
		return err
	}
	clusters, groups, err := loadClusters(o.clustersFile)
	if err != nil {
		return err
	}
	modes := 0
	for _, f := range []string{o.fleetFile, o.strategyFile, o.sequenceFile} {
		if f != "" {
			modes++
		}
	}
	if modes > 1 {
		return badInput("choose one of --fleet-yaml, --strategy and --sequence")
	}
	var fleet fleetRollout
	if o.fleetFile != "" {
		if fleet, err = loadFleetRollout(o.fleetFile); err != nil {
			return err
		}
	}
	known := map[string]bool{}
	for _, c := range clusters {
		known[c.Name] = true
	}
	fail, err := clusterTimes("--fail", o.fail, false, known, o.clustersFile)
	if err != nil {
		return err
	}
	regress, err := clusterTimes("--regress", o.regress, true, known, o.clustersFile)
	if err != nil {
		return err
	}
	offline, err := offlineSpans(o.offline, known, o.clustersFile)
	if err != nil {
		return err
	}
	ineligible, err := clusterTimes("--ineligible", o.ineligible, false, known, o.clustersFile)
	if err != nil {
		return err
	}
	for name, at := range ineligible {
		if at != 0 {
			return badInput("--ineligible %s: a cluster is ineligible for the revision from its release on: give its name alone", name)
		}
	}
	for i := range clusters {
		c := &clusters[i]
		_, c.Ineligible = ineligible[c.Name]
		if after, ok := fail[c.Name]; ok {
			c.Fail, c.FailAfter = after == 0, after
		}
		c.RegressAfter = regress[c.Name]
		if span, ok := offline[c.Name]; ok {
			c.Offline, c.OfflineAt, c.BackAt = true, span.from, span.back
		}
	}
	for _, v := range o.analysisFail {
		f, err := rollout.ParseCheckFault(v)
		if err != nil {
			return badInput("--analysis-fail: %v", err)
		}
		o.checkFaults = append(o.checkFaults, f)
	}
	switch {
	case o.strategyFile != "":
		return o.runStaged(out, clusters)
	case o.sequenceFile != "":
		return o.runSequence(out, clusters)
	}
	checks := fleet.Strategy.Analysis
	if p := fleet.Placement; p != nil && p.RollingUpdate != nil {
		checks = append(checks, p.RollingUpdate.Analysis...)
	}
	if err := o.checkFaultsName(checks, o.fleetFile); err != nil {
		return err
	}
	tl := rollout.Simulate(rollout.Simulation{
		Clusters: clusters, Groups: groups, Strategy: fleet.Strategy, Placement: fleet.Placement,
		FirstDeployment: o.firstDeployment, ReadyAfter: o.readyAfter, CheckFaults: o.checkFaults,
	})
	report := newPlanReport(tl, len(clusters))
	if structured {
		return o.output.print(out, report)
	}
	return report.writeTable(out, fleet)
}

// checkFaultsName refuses an --analysis-fail that names no check of the rollout: a typo would
// simulate a rollout that never fails.
func (o *planOptions) checkFaultsName(checks []rollout.Check, file string) error {
	for _, f := range o.checkFaults {
		found := false
		for _, c := range checks {
			found = found || c.Name == f.Check
		}
		if !found {
			names := make([]string, len(checks))
			for i, c := range checks {
				names[i] = c.Name
			}
			if file == "" {
				file = "the default rollout"
			}
			list := "none"
			if len(names) > 0 {
				list = strings.Join(names, ", ")
			}
			return badInput("--analysis-fail: %s has no check %q (its checks: %s)", file, f.Check, list)
		}
	}
	return nil
}

// fleetRollout is the part of fleet.yaml that plan reads.
type fleetRollout struct {
	Strategy  rollout.Strategy
	Placement *rollout.Placement
}

func loadClusters(path string) ([]rollout.SimCluster, []rollout.ClusterGroup, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, badInput("%s: %v", path, err)
	}
	var file struct {
		Clusters      []rollout.SimCluster   `json:"clusters"`
		ClusterGroups []rollout.ClusterGroup `json:"clusterGroups"`
	}
	if trimmed := bytes.TrimSpace(data); bytes.HasPrefix(trimmed, []byte("-")) || bytes.HasPrefix(trimmed, []byte("[")) {
		err = decodeStrict(data, &file.Clusters)
	} else {
		err = decodeStrict(data, &file)
	}
	if err != nil {
		return nil, nil, badInput("%s: %v", path, err)
	}
	if len(file.Clusters) == 0 {
		return nil, nil, badInput("%s: clusters: no clusters listed", path)
	}
	seen := map[string]int{}
	for i, c := range file.Clusters {
		if c.Name == "" {
			return nil, nil, badInput("%s: clusters[%d].name: is required", path, i)
		}
		if prev, dup := seen[c.Name]; dup {
			return nil, nil, badInput("%s: clusters[%d].name: %q is already clusters[%d]", path, i, c.Name, prev)
		}
		seen[c.Name] = i
		if err := file.Clusters[i].Availability.Compile(); err != nil {
			return nil, nil, badInput("%s: clusters[%d].%v", path, i, err)
		}
	}
	return file.Clusters, file.ClusterGroups, nil
}

func loadFleetRollout(path string) (fleetRollout, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return fleetRollout{}, badInput("%s: %v", path, err)
	}
	// The same strict reading as the hub's: errors name the line and the field.
	f, err := bundle.DecodeFleetYAML(path, data)
	if err != nil {
		return fleetRollout{}, badInput("%v", err)
	}
	fr := fleetRollout{Placement: f.Placement}
	if f.RolloutStrategy != nil {
		fr.Strategy = *f.RolloutStrategy
	}
	return fr, nil
}

// decodeStrict decodes YAML or JSON, rejecting unknown fields.
func decodeStrict(data []byte, out any) error {
	if err := yaml.UnmarshalStrict(data, out); err != nil {
		return cleanDecodeError(err)
	}
	return nil
}

var decodeNoise = regexp.MustCompile(`^(error unmarshaling JSON: )?(while decoding JSON: )?(json: )?`)

// cleanDecodeError strips the decoder's layers so the message starts with the field.
func cleanDecodeError(err error) error {
	msg := decodeNoise.ReplaceAllString(err.Error(), "")
	msg = strings.Replace(msg, "cannot unmarshal", "wrong type:", 1)
	return fmt.Errorf("%s", msg)
}

// clusterTimes parses a flag's NAME[@AFTER] values (AFTER required with needAfter) into the
// time after release each named cluster does what the flag says (0: from the start).
func clusterTimes(flag string, values []string, needAfter bool, known map[string]bool, file string) (map[string]time.Duration, error) {
	out := map[string]time.Duration{}
	for _, v := range values {
		name, after, timed := strings.Cut(v, "@")
		if !known[name] {
			return nil, badInput("%s: cluster %q is not in %s", flag, name, file)
		}
		var d time.Duration
		switch {
		case timed:
			var err error
			if d, err = positiveDuration(flag, v, "AFTER", after); err != nil {
				return nil, err
			}
		case needAfter:
			return nil, badInput("%s %s: give the time after the release, as NAME@AFTER (e.g. %s@30m)", flag, v, name)
		}
		out[name] = d
	}
	return out, nil
}

// offlineSpan is when a cluster's agent is gone: from from on, until back if that is set.
type offlineSpan struct{ from, back time.Duration }

// offlineSpans reads --offline: NAME, NAME@AFTER, NAME@AFTER..BACK or NAME@..BACK.
func offlineSpans(values []string, known map[string]bool, file string) (map[string]offlineSpan, error) {
	const flag = "--offline"
	out := map[string]offlineSpan{}
	for _, v := range values {
		name, when, timed := strings.Cut(v, "@")
		if !known[name] {
			return nil, badInput("%s: cluster %q is not in %s", flag, name, file)
		}
		var span offlineSpan
		if timed {
			from, back, returns := strings.Cut(when, "..")
			var err error
			if from != "" || !returns {
				if span.from, err = positiveDuration(flag, v, "AFTER", from); err != nil {
					return nil, err
				}
			}
			if returns {
				if span.back, err = positiveDuration(flag, v, "BACK", back); err != nil {
					return nil, err
				}
				if span.back <= span.from {
					return nil, badInput("%s %s: BACK must come after AFTER", flag, v)
				}
			}
		}
		out[name] = span
	}
	return out, nil
}

// positiveDuration reads the part of a flag's value v called what.
func positiveDuration(flag, v, what, s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, badInput("%s %s: %s must be a positive duration such as 30m", flag, v, what)
	}
	return d, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// planReport is plan's output; its JSON form is stable for scripts.
type planReport struct {
	Partitions    []reportPartition `json:"partitions"`
	Unpartitioned []string          `json:"unpartitioned"`
	Steps         []reportStep      `json:"steps"`
	reportEnd
	Duration       string   `json:"duration"`
	Warnings       []string `json:"warnings,omitempty"`
	Clusters       int      `json:"clusters"`
	N              int      `json:"n"`
	MaxUnavailable int      `json:"maxUnavailable"`
	MaxSurge       int      `json:"maxSurge,omitempty"`
	Passes         int      `json:"passes"`
}

type reportPartition struct {
	Name           string   `json:"name"`
	Clusters       []string `json:"clusters"`
	MaxUnavailable int      `json:"maxUnavailable"`
}

type reportStep struct {
	At         string   `json:"at"`
	Released   []string `json:"released"`
	Removed    []string `json:"removed,omitempty"`
	RolledBack []string `json:"rolledBack"`
	Paused     string   `json:"paused"`
	Ready      int      `json:"ready"`
}

func newPlanReport(tl rollout.Timeline, clusters int) planReport {
	r := planReport{reportEnd: endOf(tl.SimEnd), Duration: tl.Duration.String(), Clusters: clusters, Passes: tl.Passes,
		Unpartitioned: []string{}, Partitions: []reportPartition{}, Steps: []reportStep{}}
	if d := tl.First; d != nil {
		for _, p := range d.Partitions {
			r.Partitions = append(r.Partitions, reportPartition{Name: p.Name, Clusters: p.Clusters, MaxUnavailable: p.MaxUnavailable})
		}
		if d.Unpartitioned != nil {
			r.Unpartitioned = d.Unpartitioned
		}
		r.N, r.MaxUnavailable, r.MaxSurge = d.N, d.MaxUnavailable, d.MaxSurge
		for _, w := range d.Warnings {
			r.Warnings = append(r.Warnings, w.Message)
		}
	}
	if d := tl.Last; d != nil {
		if w := d.Warning(rollout.WarnIneligible); w != "" {
			r.Warnings = append(r.Warnings, w)
		}
	}
	for _, s := range tl.Steps {
		released := s.Released
		if released == nil {
			released = []string{}
		}
		r.Steps = append(r.Steps, reportStep{At: s.At.String(), Released: released, Removed: s.Removed, RolledBack: nonNil(s.RolledBack), Paused: s.Paused, Ready: s.Ready})
	}
	return r
}

func (r planReport) writeTable(out io.Writer, fleet fleetRollout) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	if fleet.Placement != nil {
		fmt.Fprintf(w, "Rolling update to N = %d of %d clusters: keep at least %d available, at most %d carrying the workload\n", r.N, r.Clusters, r.N-r.MaxUnavailable, r.N+r.MaxSurge)
	} else {
		fmt.Fprintf(w, "Rollout of %d clusters in %d partitions: at most %d unavailable overall\n", r.Clusters, len(r.Partitions), r.MaxUnavailable)
	}
	for _, warn := range r.Warnings {
		fmt.Fprintf(w, "warning: %s\n", warn)
	}
	if len(r.Partitions) > 0 {
		fmt.Fprintln(w, "\nPARTITION\tCLUSTERS\tMAX-UNAVAILABLE\tMEMBERS")
		for _, p := range r.Partitions {
			fmt.Fprintf(w, "%s\t%d\t%d\t%s\n", p.Name, len(p.Clusters), p.MaxUnavailable, shortList(p.Clusters, 4))
		}
	}
	if len(r.Unpartitioned) > 0 {
		fmt.Fprintf(w, "(unpartitioned)\t%d\t-\t%s — never released\n", len(r.Unpartitioned), shortList(r.Unpartitioned, 4))
	}
	fmt.Fprintln(w, "\nAT\tRELEASED\tREADY\tWAITING")
	for _, s := range r.Steps {
		what := fmt.Sprintf("%d", len(s.Released))
		if len(s.Released) > 0 {
			what += ": " + shortList(s.Released, 3)
		}
		if len(s.Removed) > 0 {
			what += fmt.Sprintf(" (removed %d: %s)", len(s.Removed), shortList(s.Removed, 3))
		}
		what += rolledBackNote(s.RolledBack)
		fmt.Fprintf(w, "%s\t%s\t%d/%d\t%s\n", s.At, what, s.Ready, r.Clusters, s.Paused)
	}
	r.write(w, fmt.Sprintf("%s (%d planning passes)", r.Duration, r.Passes))
	return w.Flush()
}

func shortList(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:n], ", ") + fmt.Sprintf(" … (+%d)", len(names)-n)
}
