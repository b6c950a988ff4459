// Package contentstore keeps rendered manifests on the hub as Content objects: gzip-compressed,
// named by content id (so equal renders are stored once), split into chunks when larger than an
// object may be. The hub writes with Store; agents read with a Cache (each content once) or Read,
// using their own client.
package contentstore

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"sync"

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
	stored, err := fetch(ctx, c, namespace, id)
	if err != nil {
		return nil, err
	}
	return stored.open(id)
}

// stored is a content as the hub keeps it: its gzip data, chunks joined, and the checksum of
// what it decompresses to.
type stored struct {
	gzip   []byte
	sha256 string
}

func fetch(ctx context.Context, c client.Reader, namespace, id string) (stored, error) {
	var head v1alpha1.Content
	if err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: id}, &head); err != nil {
		return stored{}, fmt.Errorf("failed to read content %s: %w", id, err)
	}
	data := append([]byte(nil), head.Data...)
	for i := 1; i < int(head.Chunks); i++ {
		var part v1alpha1.Content
		if err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: chunkName(id, i)}, &part); err != nil {
			return stored{}, fmt.Errorf("failed to read content %s chunk %d: %w", id, i, err)
		}
		data = append(data, part.Data...)
	}
	return stored{gzip: data, sha256: head.SHA256}, nil
}

// open decompresses and verifies the content.
func (s stored) open(id string) ([]byte, error) {
	out, err := s.decompress(id)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(out)
	if hex.EncodeToString(sum[:]) != s.sha256 {
		return nil, fmt.Errorf("content %s does not match its checksum", id)
	}
	return out, nil
}

// decompress decompresses the content, bounded, without checking its checksum.
func (s stored) decompress(id string) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(s.gzip))
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
	return out, nil
}

func chunkName(id string, i int) string {
	if i == 0 {
		return id
	}
	return fmt.Sprintf("%s-%d", id, i)
}

// Cache keeps the contents an agent's deployments run, compressed, so that its resyncs
// (readiness and drift, every half minute for every deployment) ask the hub for nothing: a
// content id names one render, and the hub never writes another under it. Each read names its
// holder (a deployment); a content no holder reads any more is dropped at once (Release, or
// the holder reading another), and the cache holds at most Budget bytes of gzip data
// (DefaultCacheBudget when zero), dropping the least recently read first.
type Cache struct {
	Budget int

	mu      sync.Mutex
	entries map[types.NamespacedName]*cached
	// heldBy is the content each holder read last.
	heldBy map[string]types.NamespacedName
	size   int
	clock  uint64
}

type cached struct {
	stored
	used    uint64
	holders int
}

// DefaultCacheBudget holds the compressed contents of a few hundred typical bundles.
const DefaultCacheBudget = 16 << 20

// Read returns the content from the cache, or reads it with c and keeps it for holder. A failed
// read is not kept: the agent retries it. A kept content was verified when it was read; it is
// only decompressed again.
func (k *Cache) Read(ctx context.Context, c client.Reader, holder, namespace, id string) ([]byte, error) {
	key := types.NamespacedName{Namespace: namespace, Name: id}
	k.mu.Lock()
	e, ok := k.entries[key]
	if ok {
		k.clock++
		e.used = k.clock
		k.holdLocked(holder, key)
	}
	k.mu.Unlock()
	if ok {
		return e.decompress(id)
	}
	s, err := fetch(ctx, c, namespace, id)
	if err != nil {
		return nil, err
	}
	out, err := s.open(id)
	if err != nil {
		return nil, err // corrupt: not kept, read again next time
	}
	k.keep(holder, key, s)
	return out, nil
}

// Release drops holder's content unless another holder reads it: its deployment is gone.
func (k *Cache) Release(holder string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.releaseLocked(holder)
}

func (k *Cache) releaseLocked(holder string) {
	key, ok := k.heldBy[holder]
	if !ok {
		return
	}
	delete(k.heldBy, holder)
	if e, ok := k.entries[key]; ok {
		if e.holders--; e.holders <= 0 {
			k.size -= len(e.gzip)
			delete(k.entries, key)
		}
	}
}

// holdLocked records that holder reads key now, releasing what it read before.
func (k *Cache) holdLocked(holder string, key types.NamespacedName) {
	if prev, ok := k.heldBy[holder]; ok && prev == key {
		return
	}
	k.releaseLocked(holder)
	if k.heldBy == nil {
		k.heldBy = map[string]types.NamespacedName{}
	}
	k.heldBy[holder] = key
	if e, ok := k.entries[key]; ok {
		e.holders++
	}
}

func (k *Cache) keep(holder string, key types.NamespacedName, s stored) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.entries == nil {
		k.entries = map[types.NamespacedName]*cached{}
	}
	if old, ok := k.entries[key]; ok {
		// Read twice at once: the first kept it.
		k.clock++
		old.used = k.clock
		k.holdLocked(holder, key)
		return
	}
	k.clock++
	k.entries[key] = &cached{stored: s, used: k.clock}
	k.size += len(s.gzip)
	k.holdLocked(holder, key)
	budget := k.Budget
	if budget <= 0 {
		budget = DefaultCacheBudget
	}
	for k.size > budget && len(k.entries) > 1 {
		var oldest types.NamespacedName
		var at uint64 = math.MaxUint64
		for key, e := range k.entries {
			if e.used < at {
				oldest, at = key, e.used
			}
		}
		k.size -= len(k.entries[oldest].gzip)
		delete(k.entries, oldest)
		for h, key := range k.heldBy {
			if key == oldest {
				delete(k.heldBy, h) // it reads the content from the hub again
			}
		}
	}
}

// Len is the number of contents kept.
func (k *Cache) Len() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.entries)
}
