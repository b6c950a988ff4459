// Package upgrade tests that Flotilla upgrades in place: objects stored under the previous
// release's CRDs stay readable and writable under the current ones (CRDs change only
// compatibly within v1alpha1).
//
// testdata/previous holds the previous release's CRDs and samples. When a release is cut, its
// manifests/crds and manifests/samples replace them (the file PREVIOUS names the commit).
package upgrade
