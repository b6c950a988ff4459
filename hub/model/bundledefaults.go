package model

import (
	"github.com/flotilla-dev/flotilla/bundle"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// ApplyBundleDefaults applies what a GitRepo sets for every bundle over one bundle's fleet.yaml,
// with the meaning Fleet gives its GitRepo's fields: a target namespace replaces the bundle's
// namespace and every target customization's, a ServiceAccount and a sync generation replace
// the bundle's, keepResources and deleteNamespace hold when set, and correctDrift replaces the
// bundle's when enabled.
func ApplyBundleDefaults(f *bundle.FleetYAML, d v1alpha1.BundleDefaults) {
	if d.TargetNamespace != "" {
		f.Namespace = d.TargetNamespace
		for i := range f.TargetCustomizations {
			f.TargetCustomizations[i].Namespace = d.TargetNamespace
		}
	}
	if d.ServiceAccount != "" {
		f.ServiceAccount = d.ServiceAccount
	}
	if d.ForceSyncGeneration != 0 {
		f.ForceSyncGeneration = d.ForceSyncGeneration
	}
	f.KeepResources = f.KeepResources || d.KeepResources
	f.DeleteNamespace = f.DeleteNamespace || d.DeleteNamespace
	if c := d.CorrectDrift; c != nil && c.Enabled {
		f.CorrectDrift = &bundle.CorrectDrift{Enabled: true, Force: c.Force, KeepFailHistory: c.KeepFailHistory}
	}
}
