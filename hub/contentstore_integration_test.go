package hub

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/contentstore"
)

func TestContentStoreLargeAndDeduplicated(t *testing.T) {
	c := apiClient(t)
	ns := namespace(t, c)
	store := &contentstore.Store{Client: c}
	// 5 MiB of manifests that compress poorly (random values), so the content needs chunks.
	rng := rand.New(rand.NewPCG(1, 2))
	var buf bytes.Buffer
	for i := 0; buf.Len() < 5<<20; i++ {
		fmt.Fprintf(&buf, "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm-%d}\ndata: {v: %q}\n", i, fmt.Sprintf("%x%x%x", rng.Uint64(), rng.Uint64(), rng.Uint64()))
	}
	manifests := buf.Bytes()
	ctx := context.Background()
	written, err := store.Put(ctx, ns, "s-big", manifests)
	if err != nil {
		t.Fatalf("put: %v", err)
	}
	if written < 2 {
		t.Errorf("a 5 MiB content was written as %d object(s); chunks expected", written)
	}
	got, err := store.Get(ctx, ns, "s-big")
	if err != nil || !bytes.Equal(got, manifests) {
		t.Fatalf("get: %d bytes, %v", len(got), err)
	}
	if again, err := store.Put(ctx, ns, "s-big", manifests); err != nil || again != 0 {
		t.Errorf("second put wrote %d objects (%v); content must be deduplicated", again, err)
	}
	var list v1alpha1.ContentList
	if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil || len(list.Items) != written {
		t.Errorf("%d content objects, want %d", len(list.Items), written)
	}
}
