package bench

import (
	"slices"
	"time"
)

// Summary describes a set of durations.
type Summary struct {
	N             int
	P50, P90, P99 time.Duration
	Mean          time.Duration
}

// Summarize computes percentiles by the nearest-rank method.
func Summarize(ds []time.Duration) Summary {
	if len(ds) == 0 {
		return Summary{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	var total time.Duration
	for _, d := range s {
		total += d
	}
	rank := func(p float64) time.Duration {
		i := int(p*float64(len(s))+0.999999) - 1 // ceil(p*n) - 1
		return s[max(0, min(i, len(s)-1))]
	}
	return Summary{N: len(s), P50: rank(0.50), P90: rank(0.90), P99: rank(0.99), Mean: total / time.Duration(len(s))}
}
