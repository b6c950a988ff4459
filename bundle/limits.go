package bundle

import (
	"fmt"
	"io"
)

// Size limits protect the hub from repositories and chart servers that send too much.
const (
	maxFileSize     = 8 << 20  // one file of the checkout
	maxChartArchive = 20 << 20 // one chart archive
	maxIndexSize    = 32 << 20 // one Helm repository index
	maxRendered     = 64 << 20 // the rendered manifests of one bundle for one target
	maxCheckoutSize = 256 << 20
)

// readAllLimited reads r to the end, failing when it holds more than limit bytes.
func readAllLimited(r io.Reader, limit int64, what string) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, fmt.Errorf("failed to read %s: %w", what, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s is larger than the limit of %d MiB", what, limit>>20)
	}
	return data, nil
}
