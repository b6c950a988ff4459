package hub

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/model"
)

// The hub's record (model.HubVersionConfigMap in its own namespace) holds what others read of
// this hub: its version, for the CLI to compare agents' with, and the longest lifetime of an
// agent's token (agentTokenSeconds), which the admission policy
// flotilla-agent-token-lifetime-is-the-hubs holds agents' own renewals to. Written once when the
// hub starts, and only what changed.

// hubRecord is the record's data for a hub of version issuing agent tokens of agentTokenTTL.
func hubRecord(version string, agentTokenTTL time.Duration) map[string]string {
	data := map[string]string{v1alpha1.HubRecordAgentTokenSeconds: strconv.FormatInt(int64(agentTokenTTL.Seconds()), 10)}
	if version != "" {
		data["version"] = version
	}
	return data
}

// recordHub writes data into the hub's record in namespace, leaving keys it does not name.
func recordHub(ctx context.Context, c client.Client, namespace string, data map[string]string) error {
	if namespace == "" {
		return nil
	}
	var cm corev1.ConfigMap
	err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: model.HubVersionConfigMap}, &cm)
	switch {
	case apierrors.IsNotFound(err):
		cm = corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: model.HubVersionConfigMap, Namespace: namespace, Labels: map[string]string{model.LabelHubVersion: "true"}},
			Data: data}
		err = c.Create(ctx, &cm)
	case err == nil:
		merged := maps.Clone(cm.Data)
		if merged == nil {
			merged = map[string]string{}
		}
		maps.Copy(merged, data)
		if !maps.Equal(merged, cm.Data) {
			orig := cm.DeepCopy()
			cm.Data = merged
			err = c.Patch(ctx, &cm, client.MergeFrom(orig))
		}
	}
	if err != nil {
		return fmt.Errorf("failed to write the hub's record %s/%s: %w", namespace, model.HubVersionConfigMap, err)
	}
	return nil
}
