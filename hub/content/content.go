// Package content reads the rendered manifests the hub keeps as Content objects (written by
// contentstore.Store): joins their chunks, decompresses them within a bound and verifies their
// checksum. Agents read with a Cache (each content once) and their own client; the package links
// no API client, so that the agent stays small.
package content

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

	"k8s.io/apimachinery/pkg/types"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// MaxSize bounds what one content may decompress to.
const MaxSize = 64 << 20

// Getter reads one Content object into into: the hub's cached or uncached client, or an
// agent's own.
type Getter func(ctx context.Context, key types.NamespacedName, into *v1alpha1.Content) error

// Read reads and verifies content id in namespace.
func Read(ctx context.Context, get Getter, namespace, id string) ([]byte, error) {
	stored, err := fetch(ctx, get, namespace, id)
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

func fetch(ctx context.Context, get Getter, namespace, id string) (stored, error) {
	var head v1alpha1.Content
	if err := get(ctx, types.NamespacedName{Namespace: namespace, Name: id}, &head); err != nil {
		return stored{}, fmt.Errorf("failed to read content %s: %w", id, err)
	}
	data := append([]byte(nil), head.Data...)
	for i := 1; i < int(head.Chunks); i++ {
		var part v1alpha1.Content
		if err := get(ctx, types.NamespacedName{Namespace: namespace, Name: ChunkName(id, i)}, &part); err != nil {
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
	out, err := io.ReadAll(io.LimitReader(zr, MaxSize+1))
	if err != nil {
		return nil, fmt.Errorf("content %s is corrupt: %w", id, err)
	}
	if len(out) > MaxSize {
		return nil, fmt.Errorf("content %s is larger than %d MiB", id, MaxSize>>20)
	}
	return out, nil
}

// ChunkName names chunk i of content id: chunk 0 is the id itself.
func ChunkName(id string, i int) string {
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

// Read returns the content from the cache, or reads it with get and keeps it for holder. A failed
// read is not kept: the agent retries it. A kept content was verified when it was read; it is
// only decompressed again.
func (k *Cache) Read(ctx context.Context, get Getter, holder, namespace, id string) ([]byte, error) {
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
	s, err := fetch(ctx, get, namespace, id)
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
