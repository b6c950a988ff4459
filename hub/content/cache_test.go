package content

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// contentObjects serves Content objects from memory and counts the reads.
type contentObjects struct {
	objects map[types.NamespacedName]v1alpha1.Content
	reads   int
}

func (c *contentObjects) get(_ context.Context, key types.NamespacedName, into *v1alpha1.Content) error {
	c.reads++
	o, ok := c.objects[key]
	if !ok {
		return apierrors.NewNotFound(schema.GroupResource{Group: "flotilla.dev", Resource: "contents"}, key.Name)
	}
	o.DeepCopyInto(into)
	return nil
}

// put stores manifests as one Content object, with the checksum given (the real one when empty).
func (c *contentObjects) put(t *testing.T, id, manifests, checksum string) int {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write([]byte(manifests)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if checksum == "" {
		sum := sha256.Sum256([]byte(manifests))
		checksum = hex.EncodeToString(sum[:])
	}
	if c.objects == nil {
		c.objects = map[types.NamespacedName]v1alpha1.Content{}
	}
	c.objects[types.NamespacedName{Namespace: "fleet", Name: id}] = v1alpha1.Content{Data: buf.Bytes(), Chunks: 1, SHA256: checksum}
	return buf.Len()
}

func TestCacheReadsEachContentOnceWithinItsBudget(t *testing.T) {
	ctx := context.Background()
	hub := &contentObjects{}
	size := hub.put(t, "a", "kind: ConfigMap\nmetadata: {name: a}\n", "")
	hub.put(t, "b", "kind: ConfigMap\nmetadata: {name: b}\n", "")
	hub.put(t, "c", "kind: ConfigMap\nmetadata: {name: c}\n", "")
	cache := &Cache{Budget: 2 * size} // two contents of this size
	read := func(id string) {
		t.Helper()
		out, err := cache.Read(ctx, hub.get, "bd-"+id, "fleet", id)
		if err != nil || !strings.Contains(string(out), "name: "+id) {
			t.Fatalf("content %s: %q, %v", id, out, err)
		}
	}
	read("a")
	read("a")
	read("b")
	read("a")
	if hub.reads != 2 {
		t.Errorf("a, a, b, a: %d reads from the hub, want 2", hub.reads)
	}
	read("c") // over the budget: b, the least recently read, goes
	if cache.Len() != 2 {
		t.Errorf("the cache keeps %d contents, want 2 within its budget", cache.Len())
	}
	read("a")
	read("b")
	if hub.reads != 4 {
		t.Errorf("after c, a was kept and b read again: %d reads in all, want 4", hub.reads)
	}
}

func TestCacheKeepsNoFailedRead(t *testing.T) {
	ctx := context.Background()
	hub := &contentObjects{}
	if _, err := (&Cache{}).Read(ctx, hub.get, "web", "fleet", "missing"); !apierrors.IsNotFound(err) {
		t.Fatalf("a missing content: %v, want NotFound (the agent waits for its grant)", err)
	}
	hub.put(t, "tampered", "kind: ConfigMap\n", strings.Repeat("0", 64))
	cache := &Cache{}
	for range 2 {
		if _, err := cache.Read(ctx, hub.get, "web", "fleet", "tampered"); err == nil || !strings.Contains(err.Error(), "checksum") {
			t.Fatalf("content that does not match its checksum: %v", err)
		}
	}
	if cache.Len() != 0 || hub.reads != 3 {
		t.Errorf("failed reads: %d kept, %d reads, want none kept and each failure read again", cache.Len(), hub.reads)
	}
	// Fixed on the hub: read and kept.
	hub.put(t, "tampered", "kind: ConfigMap\n", "")
	if _, err := cache.Read(ctx, hub.get, "web", "fleet", "tampered"); err != nil || cache.Len() != 1 {
		t.Errorf("the content fixed: %v, %d kept", err, cache.Len())
	}
}

// The cache keeps what the deployments run now: a content is dropped when the last deployment
// reading it moves to another or is gone, not kept until the budget pushes it out.
func TestCacheDropsContentNoDeploymentRuns(t *testing.T) {
	ctx := context.Background()
	hub := &contentObjects{}
	for _, id := range []string{"r1", "r2"} {
		hub.put(t, id, "kind: ConfigMap\nmetadata: {name: "+id+"}\n", "")
	}
	cache := &Cache{}
	read := func(holder, id string) {
		t.Helper()
		if out, err := cache.Read(ctx, hub.get, holder, "fleet", id); err != nil || !strings.Contains(string(out), "name: "+id) {
			t.Fatalf("%s reads %s: %q, %v", holder, id, out, err)
		}
	}
	read("web", "r1")
	read("api", "r1") // two deployments of one content
	read("web", "r2") // web moves on; api still runs r1
	if cache.Len() != 2 {
		t.Errorf("r1 run by api, r2 by web: %d kept, want 2", cache.Len())
	}
	read("api", "r2")
	if cache.Len() != 1 {
		t.Errorf("no deployment runs r1: %d kept, want 1", cache.Len())
	}
	read("api", "r2")
	read("web", "r2")
	if hub.reads != 2 {
		t.Errorf("%d reads from the hub, want one per content", hub.reads)
	}
	cache.Release("web")
	if cache.Len() != 1 {
		t.Errorf("api still runs r2: %d kept", cache.Len())
	}
	cache.Release("api")
	cache.Release("api") // released twice: nothing more happens
	if cache.Len() != 0 {
		t.Errorf("every deployment gone: %d kept", cache.Len())
	}
}

// A content kept is verified once, when read from the hub: later reads are decompressed only.
func TestCacheVerifiesAContentWhenItReadsIt(t *testing.T) {
	ctx := context.Background()
	hub := &contentObjects{}
	hub.put(t, "r1", "kind: ConfigMap\n", "")
	cache := &Cache{}
	if _, err := cache.Read(ctx, hub.get, "web", "fleet", "r1"); err != nil {
		t.Fatal(err)
	}
	// What the hub holds does not matter any more; what the cache holds was verified.
	hub.put(t, "r1", "kind: Secret\n", strings.Repeat("0", 64))
	out, err := cache.Read(ctx, hub.get, "web", "fleet", "r1")
	if err != nil || string(out) != "kind: ConfigMap\n" || hub.reads != 1 {
		t.Errorf("a second read: %q, %v, %d reads from the hub", out, err, hub.reads)
	}
}
