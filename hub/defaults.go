package hub

import "time"

// positiveOr is v, or def when v is not set (zero or negative): how options take their defaults.
func positiveOr[T int | int64 | time.Duration](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}

// sooner is the earlier of two requeue delays, zero meaning none.
func sooner(a, b time.Duration) time.Duration {
	if a == 0 || b > 0 && b < a {
		return b
	}
	return a
}
