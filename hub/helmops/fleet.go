package helmops

import (
	"encoding/json"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// Version is the chart version a HelmOp deploys: what its server lists at a poll.
type Version struct {
	Version string
	// Digest is the OCI manifest's digest (sha256:<hex>) the version was verified and is
	// pulled at, or the archive's sha256 a Helm repository's index gives (hex, may be empty).
	Digest string
}

// isOCI reports whether the HelmOp's chart lives in an OCI registry.
func isOCI(op *v1alpha1.HelmOp) bool { return strings.HasPrefix(op.Spec.Helm.Repo, "oci://") }

// chartRef is an OCI chart's reference: the repo, and the chart's name beneath it when given.
func chartRef(op *v1alpha1.HelmOp) string {
	ref := strings.TrimSuffix(op.Spec.Helm.Repo, "/")
	if op.Spec.Helm.Chart != "" {
		ref += "/" + op.Spec.Helm.Chart
	}
	return ref
}

// constraint is the HelmOp's version range; empty means the newest release.
func constraint(op *v1alpha1.HelmOp) string {
	if c := strings.TrimSpace(op.Spec.Helm.Version); c != "" {
		return c
	}
	return "*"
}

// repoView is the HelmOp as the bundler sees a source: a repository of one bundle at its root,
// with the HelmOp's targets, chart credentials (sent to its chart server exactly), CA bundle,
// pause and history. It is never written.
func repoView(op *v1alpha1.HelmOp) *v1alpha1.GitRepo {
	view := &v1alpha1.GitRepo{
		ObjectMeta: metav1.ObjectMeta{Name: op.Name, Namespace: op.Namespace, Labels: op.Labels, UID: op.UID, Generation: op.Generation},
		Spec: v1alpha1.GitRepoSpec{Repo: op.Spec.Helm.Repo, HelmSecretRef: op.Spec.HelmSecretRef, CABundle: op.Spec.CABundle,
			Targets: op.Spec.Targets, Paused: op.Spec.Paused, RevisionHistoryLimit: op.Spec.RevisionHistoryLimit},
	}
	if op.Spec.HelmSecretRef != nil {
		view.Spec.HelmRepoURL = op.Spec.Helm.Repo
	}
	return view
}

// fleetFile is the fleet.yaml of a HelmOp's version: the chart pinned to v, its values and
// namespaces, and the rollout strategy. It is the HelmOp's whole bundle.
func fleetFile(op *v1alpha1.HelmOp, v Version) ([]byte, error) {
	h := op.Spec.Helm
	helm := map[string]any{"releaseName": h.ReleaseName}
	if h.ReleaseName == "" {
		helm["releaseName"] = op.Name
	}
	if isOCI(op) {
		if v.Digest == "" {
			return nil, fmt.Errorf("version %s of %s has no digest to pin", v.Version, chartRef(op))
		}
		helm["chart"], helm["version"] = chartRef(op), v.Version+"@"+v.Digest
	} else {
		helm["repo"], helm["chart"], helm["version"] = h.Repo, h.Chart, v.Version
	}
	if h.Values != nil && len(h.Values.Raw) > 0 {
		var values map[string]any
		if err := json.Unmarshal(h.Values.Raw, &values); err != nil {
			return nil, fmt.Errorf("spec.helm.values: %w", err)
		}
		helm["values"] = values
	}
	if h.TimeoutSeconds > 0 {
		helm["timeoutSeconds"] = h.TimeoutSeconds
	}
	fleet := map[string]any{"helm": helm}
	if op.Spec.DefaultNamespace != "" {
		fleet["defaultNamespace"] = op.Spec.DefaultNamespace
	}
	if op.Spec.Namespace != "" {
		fleet["namespace"] = op.Spec.Namespace
	}
	// The Bundle's rollout types are fleet.yaml's, in the same JSON.
	if s := op.Spec.RolloutStrategy; s != nil {
		fleet["rolloutStrategy"] = s
	}
	if s := op.Spec.StagedUpdate; s != nil {
		fleet["stagedUpdate"] = s
	}
	if s := op.Spec.Sequence; s != nil {
		fleet["sequence"] = s
	}
	out, err := yaml.Marshal(fleet)
	if err != nil {
		return nil, fmt.Errorf("failed to write the HelmOp's fleet.yaml: %w", err)
	}
	return out, nil
}
