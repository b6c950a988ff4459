package model

import (
	"github.com/flotilla-dev/flotilla/bundle"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// TargetMatches are a GitRepo's targets as the renderer matches them (bundle.Selected).
func TargetMatches(targets []v1alpha1.Target) []bundle.TargetMatch {
	out := make([]bundle.TargetMatch, 0, len(targets))
	for _, rt := range targets {
		out = append(out, bundle.TargetMatch{Name: rt.Name, ClusterName: rt.ClusterName, ClusterGroup: rt.ClusterGroup,
			ClusterSelector: selector(rt.ClusterSelector), ClusterGroupSelector: selector(rt.ClusterGroupSelector)})
	}
	return out
}
