package rollout

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const day = 24 * time.Hour

func seqGroup(name, upstream string, soak time.Duration) SequenceGroup {
	return SequenceGroup{Name: name, Upstream: upstream, ClusterSelector: sel("tier=" + name), Soak: dur(soak)}
}

func tierClusters(spec map[string]int) []SimCluster {
	var out []SimCluster
	for _, tier := range []string{"dev", "staging", "prod", "edge", "lab", "extra"} {
		for i := range spec[tier] {
			out = append(out, SimCluster{Name: fmt.Sprintf("%s-%d", tier, i), Labels: map[string]string{"tier": tier}})
		}
	}
	return out
}

func TestR4_1_ChainValidation(t *testing.T) {
	cases := []struct {
		name   string
		groups []SequenceGroup
		want   string
	}{
		{"two first groups", []SequenceGroup{seqGroup("a", "", 0), seqGroup("b", "", 0)}, "both have no upstream"},
		{"branch", []SequenceGroup{seqGroup("a", "", 0), seqGroup("b", "a", 0), seqGroup("c", "a", 0)}, "sequences do not branch"},
		{"cycle outside the chain", []SequenceGroup{seqGroup("a", "", 0), seqGroup("b", "c", 0), seqGroup("c", "b", 0)}, "cycle outside the chain: b, c"},
		{"unknown upstream", []SequenceGroup{seqGroup("a", "", 0), seqGroup("b", "zz", 0)}, `groups[1].upstream: no group named "zz"`},
		{"self upstream", []SequenceGroup{seqGroup("a", "", 0), seqGroup("b", "b", 0)}, "its own upstream"},
		{"soak above 30 days", []SequenceGroup{seqGroup("a", "", 31*day)}, "groups[0].soak: must be between 0 and 30 days"},
	}
	for _, c := range cases {
		s := Sequence{Groups: c.groups}
		if _, err := s.ChainOrder(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		}
	}
	// Five groups written out of order: the chain follows the upstream links.
	s := Sequence{Groups: []SequenceGroup{seqGroup("prod", "staging", 0), seqGroup("lab", "", 0), seqGroup("edge", "prod", 0), seqGroup("dev", "lab", 0), seqGroup("staging", "dev", 0)}}
	order, err := s.ChainOrder()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, i := range order {
		names = append(names, s.Groups[i].Name)
	}
	if diff := cmp.Diff([]string{"lab", "dev", "staging", "prod", "edge"}, names); diff != "" {
		t.Errorf("chain (-want +got):\n%s", diff)
	}
}

func TestR4_2_SoakTimes(t *testing.T) {
	seq := Sequence{Groups: []SequenceGroup{seqGroup("dev", "", 14*day), seqGroup("staging", "dev", 7*day), seqGroup("prod", "staging", 0)}}
	clusters := tierClusters(map[string]int{"dev": 2, "staging": 2, "prod": 3})
	tl := SimulateSequence(SequenceSimulation{Sequence: seq, Clusters: clusters, Revisions: []SimRevision{{Index: 2}}})
	if !tl.Completed {
		t.Fatalf("stuck: %s", tl.Stuck)
	}
	// dev 30s + 14d soak, staging 30s + 7d soak, prod 30s + no soak.
	if want := 21*day + 90*time.Second; tl.Duration != want {
		t.Errorf("duration %s, want %s", tl.Duration, want)
	}
	t.Run("default soak is 7 days", func(t *testing.T) {
		seq := Sequence{Groups: []SequenceGroup{{Name: "dev", ClusterSelector: sel("tier=dev")}, seqGroup("prod", "dev", 0)}}
		tl := SimulateSequence(SequenceSimulation{Sequence: seq, Clusters: tierClusters(map[string]int{"dev": 1, "prod": 1}), Revisions: []SimRevision{{Index: 2}}})
		if want := 7*day + time.Minute; tl.Duration != want {
			t.Errorf("duration %s, want %s", tl.Duration, want)
		}
	})
	for _, c := range []struct {
		override time.Duration
		want     time.Duration
	}{{0, 7*day + 90*time.Second}, {30 * day, 7*day + 30*day + 90*time.Second}} {
		t.Run(fmt.Sprintf("dev soak overridden to %s for this revision", c.override), func(t *testing.T) {
			seq := seq
			seq.Revisions = []RevisionControl{{Index: 2, SoakOverrides: []SoakOverride{{Group: "dev", Soak: Duration(c.override)}}}}
			tl := SimulateSequence(SequenceSimulation{Sequence: seq, Clusters: clusters, Revisions: []SimRevision{{Index: 2}}})
			if !tl.Completed || tl.Duration != c.want {
				t.Errorf("completed %v after %s, want %s", tl.Completed, tl.Duration, c.want)
			}
		})
	}
}

func TestR4_3_R4_4_QualificationAndNewestQualifiedRevision(t *testing.T) {
	seq := Sequence{Groups: []SequenceGroup{seqGroup("dev", "", time.Hour), seqGroup("staging", "dev", time.Hour)}}
	clusters := tierClusters(map[string]int{"dev": 1, "staging": 1})
	// Staging is frozen for the first 10 hours, so dev qualifies revisions 2 and 3 meanwhile.
	clusters[1].Exclusions = []TimeRange{{Start: SimStart, End: SimStart.Add(10 * time.Hour)}}
	if err := clusters[1].Availability.Compile(); err != nil {
		t.Fatal(err)
	}
	var released []string
	tl := SimulateSequence(SequenceSimulation{Sequence: seq, Clusters: clusters, Revisions: []SimRevision{{Index: 2}, {Index: 3, At: 2 * time.Hour}},
		Observe: func(_ SequenceStatus, _ []SequenceCluster, res SequenceResult, now time.Time) {
			for c, r := range res.Release {
				released = append(released, fmt.Sprintf("%s@%d@%s", c, r, now.Sub(SimStart)))
			}
		}})
	if !tl.Completed {
		t.Fatalf("stuck: %s", tl.Stuck)
	}
	want := []string{"dev-0@2@0s", "dev-0@3@2h0m0s", "staging-0@3@10h0m0s"}
	if diff := cmp.Diff(want, released); diff != "" {
		t.Errorf("releases (-want +got):\n%s", diff)
	}
}

func TestR4_5_R4_9_ExclusionHoldsGroupUntilForcedSoak(t *testing.T) {
	seq := Sequence{Groups: []SequenceGroup{seqGroup("dev", "", day), seqGroup("prod", "dev", 0)}}
	clusters := tierClusters(map[string]int{"dev": 2, "prod": 1})
	clusters[1].Exclusions = []TimeRange{{Start: SimStart, End: SimStart.Add(60 * day)}}
	if err := clusters[1].Availability.Compile(); err != nil {
		t.Fatal(err)
	}
	var states []SequenceState
	tl := SimulateSequence(SequenceSimulation{Sequence: seq, Clusters: clusters, Revisions: []SimRevision{{Index: 2}},
		Observe: func(_ SequenceStatus, _ []SequenceCluster, res SequenceResult, _ time.Time) {
			if s := res.Status.Groups[0].Revisions[0].State; len(states) == 0 || states[len(states)-1] != s {
				states = append(states, s)
			}
		}})
	if !tl.Completed {
		t.Fatalf("stuck: %s", tl.Stuck)
	}
	if diff := cmp.Diff([]SequenceState{SeqInProgress, SeqForcedSoaking, SeqComplete}, states); diff != "" {
		t.Errorf("dev states (-want +got):\n%s", diff)
	}
	// 30 days, then the 1-day soak, then prod's 30s: the last group completes; the rollout
	// does when the excluded dev cluster catches up, once its exclusion ends at 60 days.
	if want := 60*day + 30*time.Second; tl.Duration != want {
		t.Errorf("duration %s, want %s", tl.Duration, want)
	}
	waited, forced := false, false
	for _, s := range tl.Steps {
		waited = waited || s.At == 31*day+30*time.Second && strings.Contains(s.Gate, "1 clusters do not run revision 2: dev-1")
		forced = forced || s.At == 30*day && strings.Contains(s.Gate, "dev FORCED_SOAKING revision 2 until") &&
			strings.Contains(s.Gate, "soaking anyway; 1 of 2 clusters done (R4.5); 1 clusters wait for their maintenance window or an exclusion to end")
	}
	if !forced {
		t.Errorf("the plan does not show dev's forced soak as such, with what holds it: %+v", tl.Steps)
	}
	if !waited {
		t.Errorf("the plan never said dev-1 does not run revision 2 after prod completed: %+v", tl.Steps)
	}
}

func TestR4_6_StatusCounts(t *testing.T) {
	seq := Sequence{Groups: []SequenceGroup{seqGroup("dev", "", day), seqGroup("prod", "dev", day)}}
	fleet := []SequenceCluster{
		{Name: "d1", Labels: map[string]string{"tier": "dev"}, Deployment: &Deployment{Released: 2, Applied: 2, Ready: true}},
		{Name: "d2", Labels: map[string]string{"tier": "dev"}, Deployment: &Deployment{Released: 1, Applied: 1, Ready: true}},
		{Name: "p1", Labels: map[string]string{"tier": "prod"}, Deployment: &Deployment{Released: 1, Applied: 1, Ready: true}},
	}
	res, err := StepSequence(&seq, SequenceStatus{}, []int64{2}, fleet, t0)
	if err != nil {
		t.Fatal(err)
	}
	dev := res.Status.Groups[0].Revisions[0]
	if dev.State != SeqInProgress || dev.Counts[Ready] != 1 || dev.Counts[OutOfSync] != 1 {
		t.Errorf("dev: %s %v", dev.State, dev.Counts)
	}
	if prod := res.Status.Groups[1].Revisions[0]; prod.State != SeqIneligible || !strings.Contains(prod.Message, "waiting for group dev") {
		t.Errorf("prod: %s %q", prod.State, prod.Message)
	}
	if diff := cmp.Diff(map[string]int64{"d2": 2}, res.Release); diff != "" {
		t.Errorf("release (-want +got):\n%s", diff)
	}
}

func TestR4_7_ClustersAheadAreIgnored(t *testing.T) {
	seq := Sequence{Groups: []SequenceGroup{seqGroup("dev", "", 0)}}
	fleet := []SequenceCluster{
		{Name: "ahead", Labels: map[string]string{"tier": "dev"}, Deployment: &Deployment{Released: 3, Applied: 3}},
		{Name: "d1", Labels: map[string]string{"tier": "dev"}, Deployment: &Deployment{Released: 2, Applied: 2, Ready: true}},
	}
	res, _ := StepSequence(&seq, SequenceStatus{}, []int64{2}, fleet, t0)
	if got := res.Status.Groups[0].Revisions[0].State; got != SeqComplete || len(res.Release) != 0 {
		t.Errorf("state %s, release %v: the cluster ahead must neither block nor be rolled back", got, res.Release)
	}
	t.Run("a group whose every cluster is ahead still soaks", func(t *testing.T) {
		seq := Sequence{Groups: []SequenceGroup{seqGroup("dev", "", time.Hour), seqGroup("prod", "dev", 0)}}
		fleet := []SequenceCluster{
			{Name: "ahead", Labels: map[string]string{"tier": "dev"}, Deployment: &Deployment{Released: 3, Applied: 3, Ready: true}},
			{Name: "p1", Labels: map[string]string{"tier": "prod"}, Deployment: &Deployment{Released: 1, Applied: 1, Ready: true}},
		}
		res, _ := StepSequence(&seq, SequenceStatus{}, []int64{2}, fleet, t0)
		dev := res.Status.Groups[0].Revisions[0]
		if dev.State != SeqSoaking || !dev.SoakUntil.Equal(t0.Add(time.Hour)) || len(res.Release) != 0 {
			t.Fatalf("dev: %s until %s, release %v; want SOAKING an hour and prod not released", dev.State, dev.SoakUntil, res.Release)
		}
		res, _ = StepSequence(&seq, res.Status, []int64{2}, fleet, t0.Add(time.Hour))
		if got := res.Status.Groups[0].Revisions[0].State; got != SeqComplete || res.Release["p1"] != 2 {
			t.Errorf("after the soak: dev %s, release %v; want COMPLETE and p1 released", got, res.Release)
		}
	})
}

// R4.3: a cluster that joins a group after the group completed a revision receives that
// revision (what its group reached), not the soak and qualification again; a group that has not
// qualified it gives a joiner nothing.
func TestR4_3_JoiningClusterGetsWhatItsGroupCompleted(t *testing.T) {
	seq := Sequence{Groups: []SequenceGroup{seqGroup("dev", "", 0), seqGroup("prod", "dev", time.Hour)}}
	dev := func(name string, d *Deployment) SequenceCluster {
		return SequenceCluster{Name: name, Labels: map[string]string{"tier": "dev"}, Deployment: d}
	}
	prod := func(name string, d *Deployment) SequenceCluster {
		return SequenceCluster{Name: name, Labels: map[string]string{"tier": "prod"}, Deployment: d}
	}
	on := func(r int64) *Deployment { return &Deployment{Staged: r, Released: r, Applied: r, Ready: true} }
	res, _ := StepSequence(&seq, SequenceStatus{}, []int64{2}, []SequenceCluster{dev("d1", on(2)), prod("p1", on(1))}, t0)
	if got := res.Status.Groups[0].Revisions[0].State; got != SeqComplete || res.Release["p1"] != 2 {
		t.Fatalf("dev %s, release %v; want dev COMPLETE and prod started", got, res.Release)
	}
	joined := []SequenceCluster{dev("d1", on(2)), dev("d2", nil), prod("p1", on(2)), prod("p2", nil)}
	res, _ = StepSequence(&seq, res.Status, []int64{2}, joined, t0.Add(time.Minute))
	if diff := cmp.Diff(map[string]int64{"d2": 2, "p2": 2}, res.Release); diff != "" {
		t.Errorf("release (-want +got):\n%s", diff)
	}
	if got := res.Status.Groups[0].Revisions[0]; got.State != SeqComplete || !strings.Contains(got.Message, "1 clusters that joined") {
		t.Errorf("dev: %s %q; want it COMPLETE, saying the joiner receives the revision", got.State, got.Message)
	}
	// prod had not finished revision 2 when p2 joined: p2 is one more member the group waits
	// for before its soak (R4.2), released by the group's own progress.
	// A joiner that only newer revisions were rendered for neither gets revision 2 nor holds
	// the group: it waits for the group's next revision.
	later := dev("d4", nil)
	later.Since = 3
	res2, _ := StepSequence(&seq, res.Status, []int64{2}, []SequenceCluster{dev("d1", on(2)), later}, t0.Add(2*time.Minute))
	if _, ok := res2.Release["d4"]; ok || !strings.Contains(res2.Status.Groups[0].Revisions[0].Message, "1 clusters joined after revision 2 was rendered") {
		t.Errorf("a cluster without a rendering of revision 2: release %v, dev %q", res2.Release, res2.Status.Groups[0].Revisions[0].Message)
	}
	paused := seq
	paused.Paused = true
	if res, _ := StepSequence(&paused, res.Status, []int64{2}, []SequenceCluster{dev("d1", on(2)), dev("d3", nil)}, t0.Add(time.Minute)); len(res.Release) != 0 {
		t.Errorf("a paused sequence released %v to a joiner (R1.13)", res.Release)
	}
}

func TestR4_8_EmptyGroups(t *testing.T) {
	t.Run("an empty first group qualifies nothing", func(t *testing.T) {
		seq := Sequence{Groups: []SequenceGroup{seqGroup("dev", "", 0), seqGroup("prod", "dev", 0)}}
		tl := SimulateSequence(SequenceSimulation{Sequence: seq, Clusters: tierClusters(map[string]int{"prod": 2}), Revisions: []SimRevision{{Index: 2}}})
		if tl.Completed || tl.Final.Groups[1].Revisions[0].State != SeqIneligible {
			t.Errorf("completed %v, prod %s", tl.Completed, tl.Final.Groups[1].Revisions[0].State)
		}
		if !strings.Contains(tl.Final.Groups[0].Revisions[0].Message, "first group has no clusters") {
			t.Errorf("dev message %q", tl.Final.Groups[0].Revisions[0].Message)
		}
	})
	t.Run("an empty group with an upstream passes revisions through", func(t *testing.T) {
		seq := Sequence{Groups: []SequenceGroup{seqGroup("dev", "", 0), seqGroup("staging", "dev", 5*day), seqGroup("prod", "staging", 0)}}
		tl := SimulateSequence(SequenceSimulation{Sequence: seq, Clusters: tierClusters(map[string]int{"dev": 1, "prod": 1}), Revisions: []SimRevision{{Index: 2}}})
		if !tl.Completed || tl.Duration != time.Minute {
			t.Errorf("completed %v after %s, want 1m (no soak in the empty group)", tl.Completed, tl.Duration)
		}
	})
}

func TestR4_10_PauseResumeCancel(t *testing.T) {
	seq := Sequence{Groups: []SequenceGroup{seqGroup("dev", "", 0), seqGroup("prod", "dev", 0)}}
	fleet := func() []SequenceCluster {
		return []SequenceCluster{
			{Name: "d1", Labels: map[string]string{"tier": "dev"}, Deployment: &Deployment{Released: 1, Applied: 1, Ready: true}},
			{Name: "p1", Labels: map[string]string{"tier": "prod"}, Deployment: &Deployment{Released: 1, Applied: 1, Ready: true}},
		}
	}
	seq.Revisions = []RevisionControl{{Index: 2, Paused: true}}
	res, _ := StepSequence(&seq, SequenceStatus{}, []int64{2}, fleet(), t0)
	if len(res.Release) != 0 || !strings.Contains(res.Status.Groups[0].Revisions[0].Message, "paused") {
		t.Errorf("paused: release %v, message %q", res.Release, res.Status.Groups[0].Revisions[0].Message)
	}
	seq.Revisions = nil // resumed
	if res, _ = StepSequence(&seq, res.Status, []int64{2}, fleet(), t0); len(res.Release) != 1 {
		t.Errorf("resumed: release %v", res.Release)
	}
	// Cancelled while d1 is in flight: it finishes, prod never receives revision 2.
	seq.Revisions = []RevisionControl{{Index: 2, Cancelled: true}}
	f := fleet()
	f[0].Deployment = &Deployment{Released: 2, Applied: 2, Ready: true}
	res, _ = StepSequence(&seq, res.Status, []int64{2}, f, t0.Add(time.Hour))
	if len(res.Release) != 0 || res.Status.Groups[1].Revisions[0].State != SeqIneligible || res.Status.Groups[0].Revisions[0].Message != "revision cancelled" {
		t.Errorf("cancelled: release %v, statuses %+v", res.Release, res.Status.Groups)
	}
}

// TestRandomizedSequences checks at every step that no group receives a revision its upstream
// has not completed (R4.3) and that no cluster is released outside its window (R4.9).
func TestRandomizedSequences(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	tiers := []string{"dev", "staging", "prod", "edge", "lab"}
	for i := range 300 {
		n := 1 + rng.IntN(5)
		var groups []SequenceGroup
		for g := range n {
			up := ""
			if g > 0 {
				up = tiers[g-1]
			}
			groups = append(groups, seqGroup(tiers[g], up, time.Duration(rng.IntN(72))*time.Hour))
		}
		seq := Sequence{Groups: groups}
		spec := map[string]int{}
		for _, tier := range tiers[:n] {
			spec[tier] = rng.IntN(4)
		}
		clusters := tierClusters(spec)
		for j := range clusters {
			clusters[j].ReadyAfter = time.Duration(rng.IntN(3600)) * time.Second
			if rng.IntN(4) == 0 {
				clusters[j].Availability = Availability{Window: &Window{Schedule: fmt.Sprintf("0 %d * * *", rng.IntN(24)), Duration: Duration(time.Duration(1+rng.IntN(5)) * time.Hour)}}
			}
			if rng.IntN(8) == 0 {
				clusters[j].Exclusions = []TimeRange{{Start: SimStart, End: SimStart.Add(time.Duration(rng.IntN(50*24)) * time.Hour)}}
			}
			if err := clusters[j].Availability.Compile(); err != nil {
				t.Fatal(err)
			}
		}
		var revs []SimRevision
		for r := range 1 + rng.IntN(4) {
			revs = append(revs, SimRevision{Index: int64(2 + r), At: time.Duration(rng.IntN(20*24)) * time.Hour})
		}
		order, _ := seq.ChainOrder()
		avail := map[string]*Availability{}
		groupOf := map[string]int{}
		for j := range clusters {
			avail[clusters[j].Name] = &clusters[j].Availability
			for k, gi := range order {
				if seq.Groups[gi].ClusterSelector.Matches(clusters[j].Labels) {
					groupOf[clusters[j].Name] = k
				}
			}
		}
		tl := SimulateSequence(SequenceSimulation{Sequence: seq, Clusters: clusters, Revisions: revs,
			Observe: func(_ SequenceStatus, _ []SequenceCluster, res SequenceResult, now time.Time) {
				for c, r := range res.Release {
					if !avail[c].OpenAt(now) {
						t.Fatalf("R4.9: %s released at %s outside its window", c, now)
					}
					k := groupOf[c]
					if k == 0 {
						continue
					}
					if st := revisionState(res.Status.Groups[k-1], r); st != SeqComplete {
						t.Fatalf("R4.3: %s (group %d) released revision %d, upstream state %s", c, k, r, st)
					}
				}
			}})
		if tl.Err != nil {
			t.Fatal(tl.Err)
		}
		if spec[tiers[0]] > 0 && !tl.Completed {
			t.Fatalf("simulation %d stuck: %s", i, tl.Stuck)
		}
	}
}

// R4.6: a group whose clusters are in flight reports when it started, even when the step that
// released them was never recorded (its status write was lost or read back stale).
func TestR4_6_InFlightGroupWithoutRecordedStartReportsOne(t *testing.T) {
	seq := &Sequence{Groups: []SequenceGroup{seqGroup("dev", "", 0)}}
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	fleet := []SequenceCluster{{Name: "dev-0", Labels: map[string]string{"tier": "dev"}, Deployment: &Deployment{Staged: 3, Released: 3}, Availability: &Availability{}}}
	res, err := StepSequence(seq, SequenceStatus{}, []int64{3}, fleet, now)
	if err != nil {
		t.Fatal(err)
	}
	got := res.Status.Groups[0].Revisions[0]
	if got.State != SeqInProgress || !got.StartedAt.Equal(now) || len(res.Release) != 0 {
		t.Errorf("got %+v, release %v; want IN_PROGRESS started now, nothing released again", got, res.Release)
	}
}

// R4.9, failing closed: a member whose window does not compile holds its group, and the group
// says which cluster and field.
func TestR4_9_InvalidWindowHoldsTheGroup(t *testing.T) {
	seq := Sequence{Groups: []SequenceGroup{seqGroup("dev", "", 0)}}
	fleet := []SequenceCluster{
		{Name: "d1", Labels: map[string]string{"tier": "dev"}, Deployment: &Deployment{Released: 1, Applied: 1, Ready: true}},
		{Name: "d2", Labels: map[string]string{"tier": "dev"}, Deployment: &Deployment{Released: 1, Applied: 1, Ready: true},
			Availability: InvalidAvailability(errors.New("Cluster fleet/d2 spec.maintenanceWindow.schedule: invalid cron schedule \"0 25 * * *\""))},
	}
	res, err := StepSequence(&seq, SequenceStatus{}, []int64{2}, fleet, t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, released := res.Release["d2"]; released || res.Release["d1"] != 2 {
		t.Errorf("release %v: want d1 only", res.Release)
	}
	if msg := res.Status.Groups[0].Revisions[0].Message; !strings.Contains(msg, "no work starts while a maintenance window is invalid: Cluster fleet/d2 spec.maintenanceWindow.schedule") {
		t.Errorf("group message %q", msg)
	}
}

// R1.13 and R1.11 in sequences: a paused bundle releases nothing, a paused cluster and one
// whose agent is offline are held (named in the group's message) while the others go on.
func TestR1_13_R1_11_SequencesHoldPausedAndOfflineClusters(t *testing.T) {
	seq := Sequence{Groups: []SequenceGroup{seqGroup("dev", "", 0)}}
	fleet := func() []SequenceCluster {
		var out []SequenceCluster
		for _, name := range []string{"d1", "d2", "d3"} {
			out = append(out, SequenceCluster{Name: name, Labels: map[string]string{"tier": "dev"}, Deployment: &Deployment{Released: 1, Applied: 1, Ready: true}})
		}
		return out
	}
	f := fleet()
	f[0].Paused, f[1].Offline = true, true
	res, _ := StepSequence(&seq, SequenceStatus{}, []int64{2}, f, t0)
	if len(res.Release) != 1 || res.Release["d3"] != 2 {
		t.Errorf("a paused and an offline cluster beside a ready one: released %v, want d3 only", res.Release)
	}
	if msg := res.Status.Groups[0].Revisions[0].Message; !strings.Contains(msg, "2 clusters paused or offline wait") || !strings.Contains(msg, "d1, d2") {
		t.Errorf("the group's message %q does not name the held clusters", msg)
	}
	back := fleet()
	back[2].Deployment = &Deployment{Released: 2} // d3 in flight
	if res, _ = StepSequence(&seq, res.Status, []int64{2}, back, t0.Add(time.Minute)); res.Release["d1"] != 2 || res.Release["d2"] != 2 {
		t.Errorf("unpaused and back online: released %v, want d1 and d2", res.Release)
	}

	seq.Paused = true
	res, _ = StepSequence(&seq, SequenceStatus{}, []int64{2}, fleet(), t0)
	if len(res.Release) != 0 || res.Status.Groups[0].Revisions[0].Message != "bundle paused: nothing new starts (R1.13)" {
		t.Errorf("a paused bundle: released %v, message %q", res.Release, res.Status.Groups[0].Revisions[0].Message)
	}
}

// R4.2: a soak override set while the group soaks takes effect at once: 0 completes it, a
// longer one holds it longer.
func TestR4_2_SoakOverrideSetMidSoak(t *testing.T) {
	for _, tc := range []struct {
		name     string
		override time.Duration
		complete bool
	}{
		{"override to 0: done now", 0, true},
		{"override to 3h: still soaking at 2h", 3 * time.Hour, false},
		{"no override: the 1h soak is over at 2h", -1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seq := Sequence{Groups: []SequenceGroup{seqGroup("dev", "", time.Hour), seqGroup("prod", "dev", 0)}}
			fleet := []SequenceCluster{
				{Name: "d1", Labels: map[string]string{"tier": "dev"}, Deployment: &Deployment{Released: 2, Applied: 2, Ready: true}},
				{Name: "p1", Labels: map[string]string{"tier": "prod"}, Deployment: &Deployment{Released: 1, Applied: 1, Ready: true}},
			}
			res, _ := StepSequence(&seq, SequenceStatus{}, []int64{2}, fleet, t0)
			if st := res.Status.Groups[0].Revisions[0].State; st != SeqSoaking {
				t.Fatalf("dev finished revision 2: %s, want SOAKING", st)
			}
			if tc.override >= 0 {
				seq.Revisions = []RevisionControl{{Index: 2, SoakOverrides: []SoakOverride{{Group: "dev", Soak: Duration(tc.override)}}}}
			}
			at := t0.Add(time.Minute)
			if !tc.complete || tc.override < 0 {
				at = t0.Add(2 * time.Hour)
			}
			res, _ = StepSequence(&seq, res.Status, []int64{2}, fleet, at)
			if done := res.Status.Groups[0].Revisions[0].State == SeqComplete; done != tc.complete {
				t.Errorf("at %s: dev %s, want complete %v", at.Sub(t0), res.Status.Groups[0].Revisions[0].State, tc.complete)
			}
			if released := res.Release["p1"] == 2; released != tc.complete {
				t.Errorf("prod released %v, want %v", res.Release, tc.complete)
			}
		})
	}
}

// R1.3 for sequences: a targeted cluster in no group of the sequence is never released, and
// is named so that it is seen.
func TestR1_3_SequencesNameTheClustersInNoGroup(t *testing.T) {
	seq := Sequence{Groups: []SequenceGroup{seqGroup("dev", "", 0), seqGroup("prod", "dev", 0)}}
	fleet := []SequenceCluster{
		{Name: "d1", Labels: map[string]string{"tier": "dev"}, Deployment: &Deployment{Released: 1, Applied: 1, Ready: true}},
		{Name: "x2", Labels: map[string]string{"tier": "lab"}, Deployment: &Deployment{Released: 1, Applied: 1, Ready: true}},
		{Name: "x1", Labels: map[string]string{}, Deployment: &Deployment{Released: 1, Applied: 1, Ready: true}},
	}
	res, err := StepSequence(&seq, SequenceStatus{}, []int64{2}, fleet, t0)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Unsequenced, []string{"x1", "x2"}) {
		t.Errorf("clusters in no group: %v, want [x1 x2]", res.Unsequenced)
	}
	if _, released := res.Release["x1"]; released {
		t.Errorf("a cluster in no group was released: %v", res.Release)
	}
}
