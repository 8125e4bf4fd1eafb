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

// MedianOf combines the phases of several rounds of the same workload:
// each figure of phase i is the median of that figure over the rounds
// (the lower middle for an even count). Run to run noise on a shared
// machine moves whole runs at once; the median of a few rounds, with the
// chains compared taking turns, is steadier than any one run. A round
// that lacks phase i does not count for it.
func MedianOf(rounds [][]Phase) []Phase {
	if len(rounds) == 0 {
		return nil
	}
	out := make([]Phase, len(rounds[0]))
	for i := range out {
		var ps []Phase
		for _, r := range rounds {
			if i < len(r) {
				ps = append(ps, r[i])
			}
		}
		med := func(get func(Phase) time.Duration) time.Duration {
			ds := make([]time.Duration, len(ps))
			for j, p := range ps {
				ds[j] = get(p)
			}
			slices.Sort(ds)
			return ds[(len(ds)-1)/2]
		}
		sum := func(get func(Phase) Summary) Summary {
			return Summary{
				N:    get(ps[0]).N,
				P50:  med(func(p Phase) time.Duration { return get(p).P50 }),
				P90:  med(func(p Phase) time.Duration { return get(p).P90 }),
				P99:  med(func(p Phase) time.Duration { return get(p).P99 }),
				Mean: med(func(p Phase) time.Duration { return get(p).Mean }),
			}
		}
		out[i] = Phase{
			Name: ps[0].Name, Parallel: ps[0].Parallel,
			Add:  sum(func(p Phase) Summary { return p.Add }),
			Del:  sum(func(p Phase) Summary { return p.Del }),
			Wall: med(func(p Phase) time.Duration { return p.Wall }),
		}
	}
	return out
}
