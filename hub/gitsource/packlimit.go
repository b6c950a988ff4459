package gitsource

import (
	"bufio"
	"compress/zlib"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/go-git/go-git/v5/storage/filesystem"
)

// Defaults of what one fetch may bring (the hub's --git-max-object-bytes and
// --git-max-pack-objects).
const (
	DefaultMaxObjectBytes = 64 << 20
	DefaultMaxPackObjects = 1_000_000
)

// ErrObjectTooLarge: an object of a fetched pack inflates past the per-object limit.
var ErrObjectTooLarge = errors.New("an object of the repository is larger than the hub's per-object limit")

// ErrPackTooManyObjects: a fetched pack holds more objects than the limit.
var ErrPackTooManyObjects = errors.New("the fetch brings more objects than the hub's limit")

// ErrPackMalformed: a fetched pack is not what git sends.
var ErrPackMalformed = errors.New("the fetched pack is malformed")

// packLimits bound one fetched pack as it arrives.
type packLimits struct {
	objectBytes int64
	objects     uint32
}

// boundedStorage is a cache's object storage whose fetched packs pass a packChecker before
// go-git stores them. go-git indexes a pack by inflating each of its objects whole into memory
// (and a delta's base beside it): a blob of zeros that is 1 MiB on the wire would take 1 GiB of
// the hub. The checker reads each object's size from its header (a delta's from the start of
// its data) and stops the fetch before the first byte of an object past the limit is stored.
type boundedStorage struct {
	*filesystem.Storage
	limits packLimits
}

// PackfileWriter is go-git's way in for a fetched pack (storer.PackfileWriter).
func (s boundedStorage) PackfileWriter() (io.WriteCloser, error) {
	w, err := s.Storage.PackfileWriter()
	if err != nil {
		return nil, err
	}
	return newPackChecker(w, s.limits), nil
}

// packChecker parses a pack as it is written and passes on to dst only what it has parsed:
// a pack past its limits ends at the header of the object that broke them.
type packChecker struct {
	in   *io.PipeWriter
	dst  io.WriteCloser
	done chan struct{}
	err  error // the check's outcome, set before done closes
}

func newPackChecker(dst io.WriteCloser, limits packLimits) *packChecker {
	pr, pw := io.Pipe()
	c := &packChecker{in: pw, dst: dst, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		r := &passOn{r: bufio.NewReaderSize(pr, 64<<10), dst: dst}
		err := checkPack(r, limits)
		if err == nil {
			_, err = io.Copy(io.Discard, r) // whatever follows the pack is passed on as is
		}
		if err == nil {
			err = r.flush()
		}
		c.err = err
		if err == nil {
			err = io.ErrClosedPipe
		}
		pr.CloseWithError(err) // the writer's next Write fails with the check's error
	}()
	return c
}

func (c *packChecker) Write(p []byte) (int, error) { return c.in.Write(p) }

// Close ends the pack, waits for the check and closes dst, which stores the pack only if it
// was whole: a refused pack was cut short and is not.
func (c *packChecker) Close() error {
	c.in.Close()
	<-c.done
	closeErr := c.dst.Close()
	if c.err != nil {
		return c.err
	}
	return closeErr
}

// passOn reads from r and passes each byte read on to dst, in batches: only what the check
// consumed. It is an io.ByteReader, so that a zlib reader over it reads no further than its
// stream's end.
type passOn struct {
	r       *bufio.Reader
	dst     io.Writer
	pending []byte
}

const passOnBatch = 64 << 10

func (p *passOn) ReadByte() (byte, error) {
	b, err := p.r.ReadByte()
	if err != nil {
		return b, err
	}
	p.pending = append(p.pending, b)
	if len(p.pending) >= passOnBatch {
		return b, p.flush()
	}
	return b, nil
}

func (p *passOn) Read(q []byte) (int, error) {
	n, err := p.r.Read(q)
	p.pending = append(p.pending, q[:n]...)
	if len(p.pending) >= passOnBatch {
		if ferr := p.flush(); ferr != nil {
			return n, ferr
		}
	}
	return n, err
}

func (p *passOn) flush() error {
	if len(p.pending) == 0 {
		return nil
	}
	_, err := p.dst.Write(p.pending)
	p.pending = p.pending[:0]
	return err
}

// Object types of git's pack format.
const (
	packCommit   = 1
	packTree     = 2
	packBlob     = 3
	packTag      = 4
	packOfsDelta = 6
	packRefDelta = 7
)

// checkPack reads a pack (git's pack format, versions 2 and 3) to its trailer, inflating each
// object to io.Discard to find where the next begins, and refuses it at the first object past
// limits: a whole object larger than limits.objectBytes, or a delta whose data or result is.
func checkPack(r *passOn, limits packLimits) error {
	var header [12]byte
	if _, err := io.ReadFull(r, header[:]); err != nil {
		return fmt.Errorf("%w: %v", ErrPackMalformed, err)
	}
	if string(header[:4]) != "PACK" {
		return fmt.Errorf("%w: no pack signature", ErrPackMalformed)
	}
	if v := binary.BigEndian.Uint32(header[4:8]); v != 2 && v != 3 {
		return fmt.Errorf("%w: version %d", ErrPackMalformed, v)
	}
	count := binary.BigEndian.Uint32(header[8:])
	if count > limits.objects {
		return fmt.Errorf("%w: %d objects, past %d (the hub's --git-max-pack-objects)", ErrPackTooManyObjects, count, limits.objects)
	}
	tooLarge := func(what string, size uint64) error {
		return fmt.Errorf("%w: %s of %d MiB, past %d MiB (the hub's --git-max-object-bytes)", ErrObjectTooLarge, what, size>>20, limits.objectBytes>>20)
	}
	var z io.ReadCloser
	for i := uint32(0); i < count; i++ {
		typ, size, err := objectHeader(r)
		if err != nil {
			return err
		}
		switch typ {
		case packCommit, packTree, packBlob, packTag:
			if size > uint64(limits.objectBytes) {
				return tooLarge("an object", size)
			}
		case packOfsDelta:
			if err := skipOffset(r); err != nil {
				return err
			}
		case packRefDelta:
			if _, err := io.ReadFull(r, make([]byte, 20)); err != nil {
				return fmt.Errorf("%w: %v", ErrPackMalformed, err)
			}
		default:
			return fmt.Errorf("%w: object type %d", ErrPackMalformed, typ)
		}
		if typ == packOfsDelta || typ == packRefDelta {
			if size > uint64(limits.objectBytes) {
				return tooLarge("a delta", size)
			}
		}
		if z == nil {
			if z, err = zlib.NewReader(r); err != nil {
				return fmt.Errorf("%w: %v", ErrPackMalformed, err)
			}
		} else if err := z.(zlib.Resetter).Reset(r, nil); err != nil {
			return fmt.Errorf("%w: %v", ErrPackMalformed, err)
		}
		if typ == packOfsDelta || typ == packRefDelta {
			// A delta's data starts with the sizes of its base and of its result.
			br := bufio.NewReaderSize(z, 16)
			if _, err := binary.ReadUvarint(br); err != nil {
				return fmt.Errorf("%w: %v", ErrPackMalformed, err)
			}
			result, err := binary.ReadUvarint(br)
			if err != nil {
				return fmt.Errorf("%w: %v", ErrPackMalformed, err)
			}
			if result > uint64(limits.objectBytes) {
				return tooLarge("an object (a delta's result)", result)
			}
			if _, err := io.Copy(io.Discard, br); err != nil {
				return fmt.Errorf("%w: %v", ErrPackMalformed, err)
			}
			continue
		}
		if _, err := io.Copy(io.Discard, z); err != nil {
			return fmt.Errorf("%w: %v", ErrPackMalformed, err)
		}
	}
	if _, err := io.ReadFull(r, make([]byte, 20)); err != nil { // the pack's checksum
		return fmt.Errorf("%w: %v", ErrPackMalformed, err)
	}
	return nil
}

// objectHeader reads an object's type and size (for a delta, the size of its data).
func objectHeader(r io.ByteReader) (typ byte, size uint64, err error) {
	b, err := r.ReadByte()
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %v", ErrPackMalformed, err)
	}
	typ, size = (b>>4)&7, uint64(b&15)
	for shift := uint(4); b&0x80 != 0; shift += 7 {
		if b, err = r.ReadByte(); err != nil {
			return 0, 0, fmt.Errorf("%w: %v", ErrPackMalformed, err)
		}
		if shift > 63 || (shift > 57 && uint64(b&0x7f)>>(64-shift) != 0) {
			return 0, 0, fmt.Errorf("%w: an object's size overflows 64 bits", ErrPackMalformed)
		}
		size |= uint64(b&0x7f) << shift
	}
	return typ, size, nil
}

// skipOffset reads past an offset delta's base offset (git's own variable-length encoding).
func skipOffset(r io.ByteReader) error {
	for i := 0; ; i++ {
		b, err := r.ReadByte()
		if err != nil {
			return fmt.Errorf("%w: %v", ErrPackMalformed, err)
		}
		if b&0x80 == 0 {
			return nil
		}
		if i > 9 {
			return fmt.Errorf("%w: a delta's offset overflows", ErrPackMalformed)
		}
	}
}
