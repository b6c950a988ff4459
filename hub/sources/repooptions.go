package sources

import (
	"github.com/flotilla-dev/flotilla/bundle"
	"github.com/flotilla-dev/flotilla/hub/model"
)

// discover finds the bundles of a checkout of repo, each with what its GitRepo sets for every
// bundle applied over its fleet.yaml (model.ApplyBundleDefaults): a render and a render again for a
// cluster that joins later see the same options.
func discover(checkout string, repo Origin) ([]bundle.Source, error) {
	sources, err := bundle.Discover(checkout, repo.Name, repo.Spec.Paths)
	if err != nil {
		return nil, err
	}
	for i := range sources {
		model.ApplyBundleDefaults(&sources[i].Fleet, repo.Spec.BundleDefaults)
	}
	return sources, nil
}
