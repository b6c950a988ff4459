package bundle

import (
	"context"
	"os"
	"strings"
	"testing"
)

// Rancher's fleet-examples render as Fleet renders them, every example for clusters labelled as
// its README suggests (env=dev, test, prod), but for those whose chart is on the internet,
// which this machine cannot reach and which fail alone, naming the chart. Opt in with
// FLOTILLA_FLEET_EXAMPLES, a checkout of rancher/fleet-examples: it is not part of this
// repository.
func TestFleetExamplesRender(t *testing.T) {
	root := os.Getenv("FLOTILLA_FLEET_EXAMPLES")
	if root == "" {
		t.Skip("FLOTILLA_FLEET_EXAMPLES is not set: point it at a checkout of rancher/fleet-examples to render every example")
	}
	// The examples, as their README's GitRepos name them (tests/ holds Fleet's own fixtures).
	sources, err := Discover(root, "fleet-examples", []string{"simple", "hardened", "single-cluster/*", "multi-cluster/*"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRenderer(root, RendererOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rendered := 0
	for i := range sources {
		src := &sources[i]
		needsInternet := src.Fleet.Helm != nil && (strings.HasPrefix(src.Fleet.Helm.Chart, "https://") || src.Fleet.Helm.Repo != "")
		for _, env := range []string{"dev", "test", "prod"} {
			res, err := r.Render(context.Background(), src, Target{ClusterName: env + "-1", Labels: map[string]string{"env": env}})
			switch {
			case needsInternet && err == nil:
				t.Errorf("%s for %s rendered a chart from the internet", src.Dir, env)
			case needsInternet:
				if !strings.Contains(err.Error(), src.FleetFile+": helm") {
					t.Errorf("%s for %s: the error does not name the chart: %v", src.Dir, env, err)
				}
			case err != nil:
				t.Errorf("%s for %s: %v", src.Dir, env, err)
			case len(res.Objects) == 0:
				t.Errorf("%s for %s rendered nothing", src.Dir, env)
			default:
				rendered++
			}
		}
	}
	t.Logf("%d bundles, %d renders", len(sources), rendered)
}
