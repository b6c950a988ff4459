// Package contentstore keeps rendered manifests on the hub as Content objects: gzip-compressed,
// named by content id (so equal renders are stored once), split into chunks when larger than an
// object may be. The hub writes with Store; agents read with Read, using their own client.
package contentstore

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// contentChunk is the most gzip data one Content object holds: with base64 and metadata it
// stays well below the API server's 1.5 MiB object limit.
const contentChunk = 768 << 10

// maxContent bounds what one content may decompress to.
const maxContent = 64 << 20

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
		c := &v1alpha1.Content{ObjectMeta: metav1.ObjectMeta{Name: chunkName(id, i), Namespace: namespace, Labels: s.Labels}, ContentID: id, Chunk: int32(i), Data: part}
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

// Read reads content with any reader of Content objects (the agent uses its own client).
func Read(ctx context.Context, c client.Reader, namespace, id string) ([]byte, error) {
	var head v1alpha1.Content
	if err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: id}, &head); err != nil {
		return nil, fmt.Errorf("failed to read content %s: %w", id, err)
	}
	data := append([]byte(nil), head.Data...)
	for i := 1; i < int(head.Chunks); i++ {
		var part v1alpha1.Content
		if err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: chunkName(id, i)}, &part); err != nil {
			return nil, fmt.Errorf("failed to read content %s chunk %d: %w", id, i, err)
		}
		data = append(data, part.Data...)
	}
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("content %s is corrupt: %w", id, err)
	}
	out, err := io.ReadAll(io.LimitReader(zr, maxContent+1))
	if err != nil {
		return nil, fmt.Errorf("content %s is corrupt: %w", id, err)
	}
	if len(out) > maxContent {
		return nil, fmt.Errorf("content %s is larger than %d MiB", id, maxContent>>20)
	}
	sum := sha256.Sum256(out)
	if hex.EncodeToString(sum[:]) != head.SHA256 {
		return nil, fmt.Errorf("content %s does not match its checksum", id)
	}
	return out, nil
}

func chunkName(id string, i int) string {
	if i == 0 {
		return id
	}
	return fmt.Sprintf("%s-%d", id, i)
}
