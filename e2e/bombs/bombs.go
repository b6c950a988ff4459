// Package bombs builds the hostile inputs tests feed the hub: archives small on the wire that
// are large, or many, once unpacked.
package bombs

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
)

// Layer is a gzipped tar of files entries (f/0.yaml …), each of size bytes of zeros: one file
// of 1 GiB is about 1 MiB gzipped, 200,000 empty ones about as much.
func Layer(files int, size int64) ([]byte, error) {
	var buf bytes.Buffer
	gz, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(gz)
	zeros := make([]byte, 1<<20)
	for i := range files {
		if err := tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("f/%d.yaml", i), Typeflag: tar.TypeReg, Mode: 0o644, Size: size}); err != nil {
			return nil, err
		}
		for left := size; left > 0; left -= int64(len(zeros)) {
			if _, err := tw.Write(zeros[:min(left, int64(len(zeros)))]); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
