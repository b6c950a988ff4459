// Package stale gives tests a client whose reads of one object return an older copy of it, as
// a cache that has not seen the object's latest writes yet does: what a controller decides on
// such a copy is what the test asserts.
package stale

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Object is an API type that copies itself: a pointer to T.
type Object[T any] interface {
	*T
	client.Object
	DeepCopyInto(*T)
}

// Reads is a client whose Get of Copy's kind, namespace and name returns Copy; every other read
// and every write goes to Client.
type Reads[T any, PT Object[T]] struct {
	client.Client
	Copy PT
}

func (c Reads[T, PT]) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if o, ok := obj.(PT); ok && key == client.ObjectKeyFromObject(c.Copy) {
		c.Copy.DeepCopyInto(o)
		return nil
	}
	return c.Client.Get(ctx, key, obj, opts...)
}
