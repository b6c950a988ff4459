package bundle

import "github.com/flotilla-dev/flotilla/rollout"

// FleetYAML is a bundle's fleet.yaml: Rancher Fleet's schema plus Flotilla's extensions
// (placement, stagedUpdate, sequence). Decode reads it strictly.
type FleetYAML struct {
	// Name overrides the bundle name derived from the repository and path.
	Name   string            `json:"name,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`

	Options `json:",inline"`

	TargetCustomizations []TargetCustomization `json:"targetCustomizations,omitempty"`
	// OverrideTargets replace the GitRepo's targets for this bundle.
	OverrideTargets []TargetMatch `json:"overrideTargets,omitempty"`
	DependsOn       []Dependency  `json:"dependsOn,omitempty"`
	Paused          bool          `json:"paused,omitempty"`

	RolloutStrategy *rollout.Strategy  `json:"rolloutStrategy,omitempty"`
	Placement       *rollout.Placement `json:"placement,omitempty"`
	StagedUpdate    *StagedUpdateRef   `json:"stagedUpdate,omitempty"`
	Sequence        *SequenceRef       `json:"sequence,omitempty"`
}

// Options are what a target customization may override: how the bundle renders and deploys.
type Options struct {
	DefaultNamespace     string            `json:"defaultNamespace,omitempty"`
	Namespace            string            `json:"namespace,omitempty"`
	NamespaceLabels      map[string]string `json:"namespaceLabels,omitempty"`
	NamespaceAnnotations map[string]string `json:"namespaceAnnotations,omitempty"`
	ServiceAccount       string            `json:"serviceAccount,omitempty"`
	Helm                 *Helm             `json:"helm,omitempty"`
	Kustomize            *Kustomize        `json:"kustomize,omitempty"`
	YAML                 *YAMLOptions      `json:"yaml,omitempty"`
	Diff                 *Diff             `json:"diff,omitempty"`
	CorrectDrift         *CorrectDrift     `json:"correctDrift,omitempty"`
	KeepResources        bool              `json:"keepResources,omitempty"`
	DeleteNamespace      bool              `json:"deleteNamespace,omitempty"`
	Ignore               *Ignore           `json:"ignore,omitempty"`
	// HealthChecks judge the kinds they name by CEL instead of kstatus; a target
	// customization's list replaces the bundle's.
	HealthChecks        []HealthCheck `json:"healthChecks,omitempty"`
	ForceSyncGeneration int64         `json:"forceSyncGeneration,omitempty"`
}

// Helm says how to render a Helm chart.
type Helm struct {
	// Chart is a path in the repository, a chart name in Repo, or an oci:// reference.
	Chart string `json:"chart,omitempty"`
	// Repo is a Helm repository URL.
	Repo string `json:"repo,omitempty"`
	// Version is a chart version or a semver constraint.
	Version                 string         `json:"version,omitempty"`
	ReleaseName             string         `json:"releaseName,omitempty"`
	Values                  map[string]any `json:"values,omitempty"`
	ValuesFiles             []string       `json:"valuesFiles,omitempty"`
	ValuesFrom              []ValuesFrom   `json:"valuesFrom,omitempty"`
	TakeOwnership           bool           `json:"takeOwnership,omitempty"`
	Force                   bool           `json:"force,omitempty"`
	Atomic                  bool           `json:"atomic,omitempty"`
	TimeoutSeconds          int            `json:"timeoutSeconds,omitempty"`
	WaitForJobs             bool           `json:"waitForJobs,omitempty"`
	MaxHistory              int            `json:"maxHistory,omitempty"`
	DisablePreProcess       bool           `json:"disablePreProcess,omitempty"`
	DisableDNS              bool           `json:"disableDNS,omitempty"`
	SkipSchemaValidation    bool           `json:"skipSchemaValidation,omitempty"`
	DisableDependencyUpdate bool           `json:"disableDependencyUpdate,omitempty"`
}

// ValuesFrom takes Helm values from a ConfigMap or Secret key on the hub.
type ValuesFrom struct {
	ConfigMapKeyRef *KeyRef `json:"configMapKeyRef,omitempty"`
	SecretKeyRef    *KeyRef `json:"secretKeyRef,omitempty"`
}

// KeyRef names a key of a ConfigMap or Secret.
type KeyRef struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace,omitempty"`
	Key       string `json:"key,omitempty"`
}

// Kustomize says where the kustomization is.
type Kustomize struct {
	Dir string `json:"dir,omitempty"`
}

// YAMLOptions selects overlays: overlays/<name>/ directories applied in order.
type YAMLOptions struct {
	Overlays []string `json:"overlays,omitempty"`
}

// Diff tunes drift detection.
type Diff struct {
	ComparePatches []ComparePatch `json:"comparePatches,omitempty"`
}

// ComparePatch excludes fields of matching objects from drift detection.
type ComparePatch struct {
	APIVersion   string      `json:"apiVersion,omitempty"`
	Kind         string      `json:"kind,omitempty"`
	Name         string      `json:"name,omitempty"`
	Namespace    string      `json:"namespace,omitempty"`
	Operations   []Operation `json:"operations,omitempty"`
	JSONPointers []string    `json:"jsonPointers,omitempty"`
}

// Operation is a JSON patch operation.
type Operation struct {
	Op    string `json:"op,omitempty"`
	Path  string `json:"path,omitempty"`
	Value string `json:"value,omitempty"`
}

// CorrectDrift undoes changes made outside Flotilla.
type CorrectDrift struct {
	Enabled         bool `json:"enabled,omitempty"`
	Force           bool `json:"force,omitempty"`
	KeepFailHistory bool `json:"keepFailHistory,omitempty"`
}

// Ignore lists conditions that do not make a resource unready.
type Ignore struct {
	Conditions []map[string]string `json:"conditions,omitempty"`
}

// HealthCheck judges objects of one kind by CEL expressions (agent/healthcheck).
type HealthCheck struct {
	APIVersion string `json:"apiVersion,omitempty"`
	Kind       string `json:"kind,omitempty"`
	Current    string `json:"current,omitempty"`
	InProgress string `json:"inProgress,omitempty"`
	Failed     string `json:"failed,omitempty"`
}

// TargetMatch selects clusters; every field that is set must match.
type TargetMatch struct {
	Name                 string            `json:"name,omitempty"`
	ClusterName          string            `json:"clusterName,omitempty"`
	ClusterSelector      *rollout.Selector `json:"clusterSelector,omitempty"`
	ClusterGroup         string            `json:"clusterGroup,omitempty"`
	ClusterGroupSelector *rollout.Selector `json:"clusterGroupSelector,omitempty"`
}

// TargetCustomization overrides options for the clusters it matches; the first that matches a
// cluster applies.
type TargetCustomization struct {
	TargetMatch `json:",inline"`
	Options     `json:",inline"`
	// DoNotDeploy: matching clusters get no deployment.
	DoNotDeploy bool `json:"doNotDeploy,omitempty"`
}

// Dependency names a bundle that must be ready first.
type Dependency struct {
	Name     string            `json:"name,omitempty"`
	Selector *rollout.Selector `json:"selector,omitempty"`
}

// StagedUpdateRef rolls the bundle out through a StagedUpdateStrategy.
type StagedUpdateRef struct {
	Strategy string `json:"strategy"`
	AutoRun  bool   `json:"autoRun,omitempty"`
}

// SequenceRef rolls the bundle out through a RolloutSequence.
type SequenceRef struct {
	Name string `json:"name"`
}
