package interop

import (
	"fmt"
	"slices"
	"strings"
)

// dpRow is one path's line of the report.
type dpRow struct {
	key, name string
	sample    // medians over the rounds
	// tputRatio and rrRatio are the medians over the rounds of the
	// path's figure over its base's in the same round; hasRatio is false
	// for the bases and for a path whose base was not measured.
	tputRatio, rrRatio, crrRatio float64
	hasRatio                     bool
	base                         string // the base's name
}

// summarize turns each path's samples, one per round in round order,
// into its row.
func summarize(paths []*dpPath, samples map[string][]sample) []dpRow {
	names := map[string]string{}
	for _, p := range paths {
		names[p.key] = p.name
	}
	var rows []dpRow
	for _, p := range paths {
		s := samples[p.key]
		r := dpRow{key: p.key, name: p.name, sample: sample{
			Gbps:  median(s, func(x sample) float64 { return x.Gbps }),
			RRps:  median(s, func(x sample) float64 { return x.RRps }),
			P50:   median(s, func(x sample) float64 { return x.P50 }),
			P99:   median(s, func(x sample) float64 { return x.P99 }),
			CRRps: median(s, func(x sample) float64 { return x.CRRps }),
		}}
		if base, ok := samples[p.base]; ok && p.base != "" {
			var tput, rr, crr []float64
			for i := range min(len(s), len(base)) {
				tput = append(tput, s[i].Gbps/base[i].Gbps)
				rr = append(rr, s[i].RRps/base[i].RRps)
				if base[i].CRRps > 0 {
					crr = append(crr, s[i].CRRps/base[i].CRRps)
				}
			}
			r.tputRatio, r.rrRatio, r.crrRatio = medianOf(tput), medianOf(rr), medianOf(crr)
			r.hasRatio, r.base = len(tput) > 0, names[p.base]
		}
		rows = append(rows, r)
	}
	return rows
}

func median(s []sample, f func(sample) float64) float64 {
	var v []float64
	for _, x := range s {
		v = append(v, f(x))
	}
	return medianOf(v)
}

func medianOf(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	v = slices.Clone(v)
	slices.Sort(v)
	if n := len(v); n%2 == 0 {
		return (v[n/2-1] + v[n/2]) / 2
	}
	return v[len(v)/2]
}

// markdownTable renders the rows as the table docs/performance.md shows.
func markdownTable(rows []dpRow) string {
	var b strings.Builder
	b.WriteString("| path | Gbit/s | RR tx/s | p50 µs | p99 µs | CRR conn/s | tput ratio | RR ratio | CRR ratio | against |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		tput, rr, crr, against := "", "", "", ""
		if r.hasRatio {
			tput, rr, crr, against = fmt.Sprintf("%.2f", r.tputRatio), fmt.Sprintf("%.2f", r.rrRatio), fmt.Sprintf("%.2f", r.crrRatio), r.base
		}
		fmt.Fprintf(&b, "| %s | %.2f | %.0f | %.1f | %.1f | %.0f | %s | %s | %s | %s |\n",
			r.name, r.Gbps, r.RRps, r.P50, r.P99, r.CRRps, tput, rr, crr, against)
	}
	return b.String()
}
