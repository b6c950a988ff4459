package strategy

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// R1.8, R1.10: a pass hands its batch of releases to the write workers and returns once no
// more than `ahead` of them wait for a worker, so that the bundle's next pass plans while the
// rest are written; it neither waits for its last writes to start nor leaves its whole batch
// queued. Each write here waits at a gate the test opens one write at a time.
func TestR1_8_R1_10_APassReturnsOnceNoMoreThanAheadOfItsWritesWait(t *testing.T) {
	for _, tc := range []struct{ writes, workers, ahead int }{
		{writes: 50, workers: 8, ahead: 16}, // a maxNew batch: returns once 26 are written
		{writes: 25, workers: 8, ahead: 16}, // one written
		{writes: 24, workers: 8, ahead: 16}, // at once: 8 writing, 16 waiting
		{writes: 3, workers: 8, ahead: 16},
		{writes: 0, workers: 8, ahead: 16},
		{writes: 30, workers: 2, ahead: 0}, // the last two writing
	} {
		t.Run(fmt.Sprintf("%d writes, %d workers, %d ahead", tc.writes, tc.workers, tc.ahead), func(t *testing.T) {
			gate := make(chan struct{})
			var finished, running, mostRunning atomic.Int32
			writes := make([]func(), tc.writes)
			for i := range writes {
				writes[i] = func() {
					n := running.Add(1)
					for m := mostRunning.Load(); n > m && !mostRunning.CompareAndSwap(m, n); m = mostRunning.Load() {
					}
					<-gate
					running.Add(-1)
					finished.Add(1)
				}
			}
			type returned struct {
				finished int32
				done     <-chan struct{}
			}
			back := make(chan returned, 1)
			go func() {
				done := startWrites(writes, tc.workers, tc.ahead)
				back <- returned{finished.Load(), done}
			}()
			// A write's worker is free for the next only once it has returned: so the pass
			// can return only after this many writes are through.
			need := max(0, tc.writes-tc.ahead-tc.workers)
			for range need {
				gate <- struct{}{}
			}
			var r returned
			select {
			case r = <-back:
			case <-time.After(time.Minute):
				t.Fatalf("the pass did not return with %d writes through and %d waiting for a worker", need, tc.writes-need-tc.workers)
			}
			if r.finished != int32(need) {
				t.Fatalf("the pass returned with %d writes through, want %d: more than %d were still waiting for a worker", r.finished, need, tc.ahead)
			}
			for range tc.writes - need {
				gate <- struct{}{}
			}
			select {
			case <-r.done:
			case <-time.After(time.Minute):
				t.Fatal("the batch did not finish once every write could")
			}
			if got := finished.Load(); got != int32(tc.writes) {
				t.Fatalf("%d of %d writes ran", got, tc.writes)
			}
			if got := mostRunning.Load(); got > int32(tc.workers) {
				t.Fatalf("%d writes ran at once, more than the %d workers", got, tc.workers)
			}
		})
	}
}
