// Package fleetimport converts the objects of a Rancher Fleet installation (fleet.cattle.io/v1alpha1,
// read as `kubectl get -o yaml` writes them) into Flotilla's, and reports every field it carried
// over, renamed, or could not carry, with why and what to use instead: nothing is dropped
// silently. It reads Fleet's objects as unstructured, by their documented schema (Fleet's API
// module is not served by the module proxy), and does no I/O: `flotilla import fleet` reads the
// files or the Fleet hub and writes the result.
package fleetimport
