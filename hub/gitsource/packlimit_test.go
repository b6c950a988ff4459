package gitsource

import (
	"bytes"
	"compress/zlib"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flotilla-dev/flotilla/e2e/gitserver"
)

// A commit whose file inflates past the per-object limit is refused as its pack arrives: the
// fetch stops at the object's header, nothing of the pack is stored, and the commit is
// remembered, so the next poll fetches nothing until the branch moves.
func TestAnObjectPastTheLimitStopsTheFetchAtItsHeader(t *testing.T) {
	up := gitserver.New(t)
	bomb := up.Commit("main", map[string]string{"app/fleet.yaml": "defaultNamespace: a\n", "app/zeros.yaml": strings.Repeat("\x00", 24<<20)})
	srv, fetches := up.ServeFaulty(gitserver.Fault{}) // no fault: it counts the fetches
	c := &Client{CacheDir: t.TempDir(), MaxObjectBytes: 4 << 20}
	repo := Repo{URL: srv.URL + "/repo.git", Branch: "main"}

	var peak uint64
	var err error
	heapPeak(&peak, func() { _, err = c.Checkout(context.Background(), repo, bomb) })
	if !errors.Is(err, ErrObjectTooLarge) || !strings.Contains(err.Error(), "--git-max-object-bytes") || !strings.Contains(err.Error(), "24 MiB") {
		t.Fatalf("a 24 MiB file with a limit of 4 MiB: %v, want ErrObjectTooLarge naming its size and the flag", err)
	}
	// The pack was cut short before the object: go-git never held it (24 MiB), and stored no pack.
	if peak > 16<<20 {
		t.Errorf("the refused fetch took the heap %d MiB above where it started: the object was inflated", peak>>20)
	}
	packs, _ := filepath.Glob(filepath.Join(c.repoDir(repo), "repo.git", "objects", "pack", "*.pack"))
	if len(packs) != 0 {
		t.Errorf("a refused pack was stored: %v", packs)
	}
	if entries, _ := os.ReadDir(filepath.Join(c.repoDir(repo), "checkouts")); len(entries) != 0 {
		t.Errorf("a checkout of the refused commit was written: %v", entries)
	}

	fetched := fetches.Load()
	if _, err := c.Checkout(context.Background(), repo, bomb); !errors.Is(err, ErrCommitRefused) || !strings.Contains(err.Error(), "--git-max-object-bytes") {
		t.Fatalf("the refused commit again: %v, want ErrCommitRefused with the reason", err)
	}
	if n := fetches.Load(); n != fetched {
		t.Errorf("the refused commit was fetched again (%d fetches, %d before)", n, fetched)
	}

	// The branch moves past it: the next commit is fetched and checked out.
	fixed := up.Commit("main", map[string]string{"app/zeros.yaml": "a: 1\n"})
	dir, err := c.Checkout(context.Background(), repo, fixed)
	if err != nil {
		t.Fatalf("the commit after the refused one: %v", err)
	}
	if data, err := os.ReadFile(filepath.Join(dir, "app", "zeros.yaml")); err != nil || string(data) != "a: 1\n" {
		t.Errorf("the checkout after the refused commit: %q, %v", data, err)
	}
}

// A fetch of more objects than the limit is refused from the pack's header.
func TestAPackOfTooManyObjectsIsRefusedFromItsHeader(t *testing.T) {
	up := gitserver.New(t)
	files := map[string]string{}
	for i := range 30 {
		files["app/cm-"+strings.Repeat("x", i)+".yaml"] = strings.Repeat("y", i+1)
	}
	commit := up.Commit("main", files)
	srv := up.ServeHTTP("", "")
	c := &Client{CacheDir: t.TempDir(), MaxPackObjects: 10}
	_, err := c.Checkout(context.Background(), Repo{URL: srv.URL + "/repo.git", Branch: "main"}, commit)
	if !errors.Is(err, ErrPackTooManyObjects) || !strings.Contains(err.Error(), "--git-max-pack-objects") {
		t.Fatalf("a pack of 33 objects with a limit of 10: %v, want ErrPackTooManyObjects naming the flag", err)
	}
}

// packObject is one object of a hand-made pack: its header (type and size), for a delta its
// base, and its data deflated.
func packObject(typ byte, size int, base []byte, data []byte) []byte {
	var out []byte
	b := typ<<4 | byte(size&15)
	size >>= 4
	for size > 0 {
		out = append(out, b|0x80)
		b, size = byte(size&0x7f), size>>7
	}
	out = append(out, b)
	out = append(out, base...)
	var z bytes.Buffer
	w := zlib.NewWriter(&z)
	_, _ = w.Write(data)
	_ = w.Close()
	return append(out, z.Bytes()...)
}

// deltaData is a delta's data as far as its sizes: of its base and of its result.
func deltaData(baseSize, resultSize uint64) []byte {
	out := binary.AppendUvarint(nil, baseSize)
	return binary.AppendUvarint(out, resultSize)
}

func packOf(objects ...[]byte) []byte {
	out := []byte("PACK\x00\x00\x00\x02")
	out = binary.BigEndian.AppendUint32(out, uint32(len(objects)))
	for _, o := range objects {
		out = append(out, o...)
	}
	return append(out, make([]byte, 20)...) // the checksum: go-git's to verify, not the checker's
}

// writeCloser records what the checker passes on.
type writeCloser struct{ bytes.Buffer }

func (*writeCloser) Close() error { return nil }

// The checker reads a pack's headers and a delta's sizes as the pack arrives, and passes on
// nothing of an object past its limits.
func TestPackCheckerRefusesAtTheFirstObjectPastItsLimits(t *testing.T) {
	const limit = 1 << 20
	blob := packObject(packBlob, 5, nil, []byte("hello"))
	ofsDelta := func(result uint64) []byte {
		d := deltaData(5, result)
		return packObject(packOfsDelta, len(d), []byte{0x05}, d)
	}
	refDelta := func(result uint64) []byte {
		d := deltaData(5, result)
		return packObject(packRefDelta, len(d), make([]byte, 20), d)
	}
	for _, tc := range []struct {
		name string
		pack []byte
		want error
	}{
		{"a blob and deltas within the limit", packOf(blob, ofsDelta(limit), refDelta(100)), nil},
		{"a blob past the limit by its header", packOf(blob, packObject(packBlob, limit+1, nil, nil)), ErrObjectTooLarge},
		{"a blob whose header claims 2^60 bytes", packOf(packObject(packBlob, 1<<60, nil, nil)), ErrObjectTooLarge},
		{"an offset delta whose result is past the limit", packOf(blob, ofsDelta(1<<30)), ErrObjectTooLarge},
		{"a reference delta whose result is past the limit", packOf(blob, refDelta(limit+1)), ErrObjectTooLarge},
		{"a delta whose data is past the limit", packOf(blob, packObject(packRefDelta, limit+1, make([]byte, 20), deltaData(5, 10))), ErrObjectTooLarge},
		{"more objects than the limit", packOf(blob, blob, blob, blob, blob), ErrPackTooManyObjects},
		{"no pack signature", append([]byte("KCAP"), packOf(blob)[4:]...), ErrPackMalformed},
		{"an unknown object type", packOf(packObject(5, 5, nil, []byte("hello"))), ErrPackMalformed},
		{"cut short in an object", packOf(blob)[:20], ErrPackMalformed},
		{"a size that never ends", append(packOf()[:8], 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff), ErrPackMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := &writeCloser{}
			c := newPackChecker(dst, packLimits{objectBytes: limit, objects: 4})
			_, writeErr := c.Write(tc.pack)
			err := c.Close()
			if tc.want == nil {
				if writeErr != nil || err != nil {
					t.Fatalf("a pack within the limits: write %v, close %v", writeErr, err)
				}
				if !bytes.Equal(dst.Bytes(), tc.pack) {
					t.Errorf("the pack passed on differs from the pack written (%d bytes of %d)", dst.Len(), len(tc.pack))
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("close: %v, want %v", err, tc.want)
			}
			if writeErr != nil && !errors.Is(writeErr, tc.want) {
				t.Errorf("write: %v, want nil or %v", writeErr, tc.want)
			}
			// Passed on in batches, and never the batch holding the object refused.
			if dst.Len() != 0 {
				t.Errorf("%d bytes of a refused pack were passed on to go-git", dst.Len())
			}
		})
	}
}

// BenchmarkGitBombs reports what fetching a commit of one 1 GiB file of zeros (about 1 MiB on
// the wire) costs the hub in memory with the default limits: the heap's peak above where it
// started, the fetch refused at the object's header (e2e/scale/README.md keeps the figures).
func BenchmarkGitBombs(b *testing.B) {
	up := gitserver.New(b)
	commit := up.Commit("main", map[string]string{"zeros.yaml": strings.Repeat("\x00", 1<<30)})
	srv := up.ServeHTTP("", "")
	var peak uint64
	for b.Loop() {
		c := &Client{CacheDir: b.TempDir()}
		var err error
		heapPeak(&peak, func() {
			_, err = c.Checkout(context.Background(), Repo{URL: srv.URL + "/repo.git", Branch: "main"}, commit)
		})
		if !errors.Is(err, ErrObjectTooLarge) {
			b.Fatalf("the 1 GiB file: %v, want ErrObjectTooLarge", err)
		}
	}
	b.ReportMetric(float64(peak)/(1<<20), "MiB-heap-peak-above-start")
}
