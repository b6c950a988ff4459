package model

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
)

// Labels the hub puts on what it creates.
const (
	LabelGitRepo         = "flotilla.dev/gitrepo"
	LabelHelmOp          = "flotilla.dev/helmop"
	LabelBundle          = "flotilla.dev/bundle"
	LabelBundleNamespace = "flotilla.dev/bundle-namespace"
	LabelCluster         = "flotilla.dev/cluster"
)

// The hub records its version where the CLI finds it: a ConfigMap in its own namespace,
// labelled LabelHubVersion.
const (
	HubVersionConfigMap = v1alpha1.HubRecordConfigMap
	LabelHubVersion     = "flotilla.dev/hub-version"
)

// DeploymentName is the BundleDeployment of a bundle in a cluster's namespace: names of bundles
// from different namespaces must not collide there.
func DeploymentName(bundleNamespace, bundleName string) string {
	name := bundleNamespace + "-" + bundleName
	if len(name) <= 63 {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return strings.TrimRight(name[:54], "-") + "-" + hex.EncodeToString(sum[:])[:8]
}

// LabelAgentOf marks the Roles of a cluster's agent with a hash of its Cluster's namespace and
// name, so that they can all be found when the Cluster goes.
const LabelAgentOf = "flotilla.dev/agent-of"

func AgentOf(cl *v1alpha1.Cluster) string {
	sum := sha256.Sum256([]byte(OwnerOf(cl)))
	return hex.EncodeToString(sum[:])[:20]
}

// LabelContentGrant marks a shared grant's Role and RoleBinding; its value is the content id.
const LabelContentGrant = "flotilla.dev/content-grant"

// labelExists selects the objects that carry the label key.
func labelExists(key string) labels.Selector {
	req, err := labels.NewRequirement(key, selection.Exists, nil)
	if err != nil {
		panic(err) // a constant, valid label key
	}
	return labels.NewSelector().Add(*req)
}

func OwnerOf(cl *v1alpha1.Cluster) string { return cl.Namespace + "/" + cl.Name }
