// Package wait is how Flotilla's tests wait for the system to reach a state: they poll a
// condition until it holds or time runs out, and then fail with what they waited for and the
// objects they waited on, as last seen. The system under test watches; a test reads, so it
// polls, first often (most states come within milliseconds) and then every 200 ms. No test
// sleeps a fixed time to synchronise.
package wait

import (
	"testing"
	"time"
)

// Until polls cond until it holds. When timeout passes first it fails t with what it waited
// for and what each show returns: the objects it waited on.
func Until(t testing.TB, what string, timeout time.Duration, cond func() bool, show ...func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	interval := 10 * time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			msg := "timed out after " + timeout.String() + " waiting until " + what
			for _, s := range show {
				msg += "\n" + s()
			}
			t.Fatal(msg)
		}
		time.Sleep(interval)
		interval = min(2*interval, 200*time.Millisecond)
	}
}
