package model

import "time"

// PositiveOr is v, or def when v is not set (zero or negative): how options take their defaults.
func PositiveOr[T int | int64 | time.Duration](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}

// Sooner is the earlier of two requeue delays, zero meaning none.
func Sooner(a, b time.Duration) time.Duration {
	if a == 0 || b > 0 && b < a {
		return b
	}
	return a
}
