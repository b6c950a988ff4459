package model

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/hub/events"
)

// EventSink writes a Recorder's Events with the hub's client.
func EventSink(c client.Client) events.Sink { return eventSink{c} }

type eventSink struct{ c client.Client }

func (s eventSink) Create(ctx context.Context, ev *eventsv1.Event) error { return s.c.Create(ctx, ev) }

func (s eventSink) MergePatch(ctx context.Context, ev *eventsv1.Event, patch []byte) error {
	return s.c.Patch(ctx, ev, client.RawPatch(types.MergePatchType, patch))
}

// ReadStory reads the Events a controller ("" for every one) recorded in a namespace, oldest
// first (events.StoryOf).
func ReadStory(ctx context.Context, c client.Reader, namespace, controller string) (events.Story, error) {
	var list corev1.EventList
	if err := c.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("failed to list the events of namespace %s: %w", namespace, err)
	}
	return events.StoryOf(&list, controller), nil
}
