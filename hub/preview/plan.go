package preview

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/flotilla-dev/flotilla/bundle"
	"github.com/flotilla-dev/flotilla/rollout"
)

// planOf simulates how the head's revision of a changed bundle rolls out to the clusters the
// head deploys it to, with the strategy its fleet.yaml chooses, as `flotilla plan` does.
func planOf(ctx context.Context, change BundleChange, src *bundle.Source, fleet Fleet, opts Options) *Plan {
	if src == nil || src.Err != nil || change.Status == StatusBroken || len(change.targeted) == 0 {
		return nil
	}
	clusters := make([]rollout.SimCluster, 0, len(change.targeted))
	for _, t := range change.targeted {
		clusters = append(clusters, rollout.SimCluster{Name: t.ClusterName, Labels: t.Labels, Groups: slices.Sorted(maps.Keys(t.Groups))})
	}
	p := &Plan{Clusters: len(clusters), Steps: []PlanStep{}}
	f := src.Fleet
	switch {
	case f.StagedUpdate != nil:
		p.Strategy = "stagedUpdate " + f.StagedUpdate.Strategy
		strategy, err := lookup(ctx, fleet.Strategies, "StagedUpdateStrategy", f.StagedUpdate.Strategy, Strategies.Staged)
		if err != nil {
			p.NotSimulated = err.Error()
			return p
		}
		tl := rollout.SimulateRun(rollout.RunSimulation{Name: change.Name, Strategy: *strategy, Clusters: clusters, ReadyAfter: opts.ReadyAfter, ApproveAfter: -1})
		for _, m := range tl.Steps {
			p.step(m.At, m.Started, m.Gate)
		}
		p.end(tl.SimEnd)
	case f.Sequence != nil:
		p.Strategy = "sequence " + f.Sequence.Name
		seq, err := lookup(ctx, fleet.Strategies, "RolloutSequence", f.Sequence.Name, Strategies.Sequence)
		if err != nil {
			p.NotSimulated = err.Error()
			return p
		}
		tl := rollout.SimulateSequence(rollout.SequenceSimulation{Sequence: *seq, Clusters: clusters, ReadyAfter: opts.ReadyAfter, Revisions: []rollout.SimRevision{{Index: 2}}})
		if tl.Err != nil {
			p.NotSimulated = fmt.Sprintf("RolloutSequence %s: %v", f.Sequence.Name, tl.Err)
			return p
		}
		for _, m := range tl.Steps {
			p.step(m.At, m.Started, m.Gate)
		}
		p.end(tl.SimEnd)
	default:
		sim := rollout.Simulation{Clusters: clusters, Groups: fleet.ClusterGroups, Placement: f.Placement, ReadyAfter: opts.ReadyAfter,
			FirstDeployment: change.Status == StatusAdded}
		switch {
		case f.Placement != nil:
			p.Strategy = "placement"
		case f.RolloutStrategy != nil:
			p.Strategy, sim.Strategy = "rolloutStrategy", *f.RolloutStrategy
		default:
			p.Strategy = "default rolloutStrategy"
		}
		tl := rollout.Simulate(sim)
		for _, m := range tl.Steps {
			p.step(m.At, m.Released, m.Paused)
		}
		p.end(tl.SimEnd)
	}
	return p
}

// lookup finds a strategy object a bundle names, saying why when it cannot.
func lookup[T any](ctx context.Context, s Strategies, kind, name string, get func(Strategies, context.Context, string) (*T, error)) (*T, error) {
	if s == nil {
		return nil, fmt.Errorf("%s %s is an object of the hub, not of the repository: compare against the hub's fleet to plan it", kind, name)
	}
	v, err := get(s, ctx, name)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", kind, name, err)
	}
	return v, nil
}

func (p *Plan) step(at time.Duration, started []string, waiting string) {
	if len(started) == 0 && waiting == "" {
		return
	}
	if n := len(p.Steps); n > 0 && len(started) == 0 && p.Steps[n-1].Waiting == waiting {
		return // still waiting for the same thing
	}
	p.Steps = append(p.Steps, PlanStep{At: at.String(), Started: started, Waiting: waiting})
}

func (p *Plan) end(e rollout.SimEnd) {
	p.Completed, p.Stuck = e.Completed, e.Stuck
	if e.Completed {
		p.eta, p.ETA = e.Duration, e.Duration.String()
	}
}
