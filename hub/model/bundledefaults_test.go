package model

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/flotilla-dev/flotilla/bundle"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// What a GitRepo sets for every bundle lands over each fleet.yaml as Fleet's GitRepo does it.
func TestBundleDefaultsOverFleetYAML(t *testing.T) {
	fleetYAML := func() bundle.FleetYAML {
		f := bundle.FleetYAML{TargetCustomizations: []bundle.TargetCustomization{{}, {}}}
		f.Namespace, f.ServiceAccount, f.ForceSyncGeneration = "own", "own-sa", 3
		f.CorrectDrift = &bundle.CorrectDrift{Enabled: true}
		f.TargetCustomizations[1].Namespace = "prod-own"
		return f
	}
	for _, tc := range []struct {
		name     string
		defaults v1alpha1.BundleDefaults
		want     func(f *bundle.FleetYAML)
	}{
		{"none: the fleet.yaml as written", v1alpha1.BundleDefaults{}, func(*bundle.FleetYAML) {}},
		{"targetNamespace replaces the bundle's and every customization's", v1alpha1.BundleDefaults{TargetNamespace: "team-a"}, func(f *bundle.FleetYAML) {
			f.Namespace = "team-a"
			f.TargetCustomizations[0].Namespace, f.TargetCustomizations[1].Namespace = "team-a", "team-a"
		}},
		{"serviceAccount and forceSyncGeneration replace the bundle's", v1alpha1.BundleDefaults{ServiceAccount: "deployer", ForceSyncGeneration: 7}, func(f *bundle.FleetYAML) {
			f.ServiceAccount, f.ForceSyncGeneration = "deployer", 7
		}},
		{"keepResources and deleteNamespace hold when set", v1alpha1.BundleDefaults{KeepResources: true, DeleteNamespace: true}, func(f *bundle.FleetYAML) {
			f.KeepResources, f.DeleteNamespace = true, true
		}},
		{"correctDrift enabled replaces the bundle's", v1alpha1.BundleDefaults{CorrectDrift: &v1alpha1.CorrectDrift{Enabled: true, Force: true}}, func(f *bundle.FleetYAML) {
			f.CorrectDrift = &bundle.CorrectDrift{Enabled: true, Force: true}
		}},
		{"correctDrift not enabled leaves the bundle's", v1alpha1.BundleDefaults{CorrectDrift: &v1alpha1.CorrectDrift{Force: true}}, func(*bundle.FleetYAML) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, want := fleetYAML(), fleetYAML()
			ApplyBundleDefaults(&got, tc.defaults)
			tc.want(&want)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
