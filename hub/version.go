package hub

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/hub/model"
)

// recordVersion writes the hub's version where the CLI finds it (model.HubVersionConfigMap),
// once when the hub starts and only if it changed.

func recordVersion(ctx context.Context, c client.Client, namespace, version string) error {
	if namespace == "" || version == "" {
		return nil
	}
	var cm corev1.ConfigMap
	err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: model.HubVersionConfigMap}, &cm)
	switch {
	case apierrors.IsNotFound(err):
		cm = corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: model.HubVersionConfigMap, Namespace: namespace, Labels: map[string]string{model.LabelHubVersion: "true"}},
			Data: map[string]string{"version": version}}
		err = c.Create(ctx, &cm)
	case err == nil && cm.Data["version"] != version:
		orig := cm.DeepCopy()
		cm.Data = map[string]string{"version": version}
		err = c.Patch(ctx, &cm, client.MergeFrom(orig))
	}
	if err != nil {
		return fmt.Errorf("failed to record the hub's version in %s/%s: %w", namespace, model.HubVersionConfigMap, err)
	}
	return nil
}
