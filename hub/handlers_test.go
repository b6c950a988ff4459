package hub

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Progress-only writes are spaced out per object; significant ones go out at once.
func TestProgressThrottleSpacesOutProgressOnly(t *testing.T) {
	p := &progressThrottle{every: 3 * time.Second}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, step := range []struct {
		name        string
		uid         string
		significant bool
		at          time.Duration
		wait        time.Duration
	}{
		{"first write", "a", false, 0, 0},
		{"progress a second later waits for the rest", "a", false, time.Second, 2 * time.Second},
		{"another object is not held", "b", false, time.Second, 0},
		{"a significant change goes out at once", "a", true, 2 * time.Second, 0},
		{"progress right after it waits again", "a", false, 2500 * time.Millisecond, 2500 * time.Millisecond},
		{"progress after the interval goes out", "a", false, 5 * time.Second, 0},
	} {
		if got := p.hold(types.UID(step.uid), step.significant, t0.Add(step.at)); got != step.wait {
			t.Errorf("%s: hold = %v, want %v", step.name, got, step.wait)
		}
	}
}
