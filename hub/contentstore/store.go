// Package contentstore keeps rendered manifests on the hub as Content objects: gzip-compressed,
// named by content id (so equal renders are stored once), split into chunks when larger than an
// object may be. The hub writes and reads with Store; agents read with package content.
package contentstore

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/content"
)

// contentChunk is the most gzip data one Content object holds: with base64 and metadata it
// stays well below the API server's 1.5 MiB object limit.
const contentChunk = 768 << 10

// Store keeps rendered manifests as Content objects: compressed, named by content id,
// written once (an existing id is not written again) and split into chunks when large.
type Store struct {
	// Client writes, and reads through the hub's cache.
	Client client.Client
	// Labels go on the objects Put writes (a hub shard's label).
	Labels map[string]string
	// Uncached, when set, reads what the cache does not show: content another shard wrote.
	Uncached client.Reader
}

// Put stores manifests under id in namespace, unless they are stored already. It returns the
// number of objects written (0 when deduplicated).
func (s *Store) Put(ctx context.Context, namespace, id string, manifests []byte) (int, error) {
	var existing v1alpha1.Content
	err := s.Client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: id}, &existing)
	if err == nil {
		return 0, nil
	}
	if !apierrors.IsNotFound(err) {
		return 0, fmt.Errorf("failed to look up content %s: %w", id, err)
	}
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if _, err := zw.Write(manifests); err != nil {
		return 0, fmt.Errorf("failed to compress content %s: %w", id, err)
	}
	if err := zw.Close(); err != nil {
		return 0, fmt.Errorf("failed to compress content %s: %w", id, err)
	}
	data := buf.Bytes()
	chunks := (len(data) + contentChunk - 1) / contentChunk
	sum := sha256.Sum256(manifests)
	// Chunk 0 last: its existence means the whole content is there.
	written := 0
	for i := chunks - 1; i >= 0; i-- {
		part := data[i*contentChunk : min((i+1)*contentChunk, len(data))]
		c := &v1alpha1.Content{ObjectMeta: metav1.ObjectMeta{Name: content.ChunkName(id, i), Namespace: namespace, Labels: s.Labels}, ContentID: id, Chunk: int32(i), Data: part}
		if i == 0 {
			c.Chunks, c.Size, c.SHA256 = int32(chunks), int64(len(manifests)), hex.EncodeToString(sum[:])
		}
		if err := s.Client.Create(ctx, c); err != nil && !apierrors.IsAlreadyExists(err) {
			return written, fmt.Errorf("failed to store content %s chunk %d: %w", id, i, err)
		}
		written++
	}
	return written, nil
}

// Get reads and verifies content.
func (s *Store) Get(ctx context.Context, namespace, id string) ([]byte, error) {
	data, err := Read(ctx, s.Client, namespace, id)
	if apierrors.IsNotFound(err) && s.Uncached != nil {
		return Read(ctx, s.Uncached, namespace, id)
	}
	return data, err
}

// Read reads and verifies content with a reader of the hub's.
func Read(ctx context.Context, c client.Reader, namespace, id string) ([]byte, error) {
	return content.Read(ctx, Getter(c), namespace, id)
}

// Getter reads Content objects with a reader of the hub's.
func Getter(c client.Reader) content.Getter {
	return func(ctx context.Context, key types.NamespacedName, into *v1alpha1.Content) error {
		return c.Get(ctx, key, into)
	}
}
