package main

import (
	"time"

	"github.com/podnet/podnet/bench"
	"github.com/podnet/podnet/netplugin"
)

// benchReport is `bench -o json`: every chain's phases, each round's and
// their medians (the figures the table prints), times in milliseconds.
type benchReport struct {
	Loopback          string `json:"loopback"`
	ReferenceLoopback string `json:"referenceLoopback,omitempty"`
	// Policy is --policy: the podnet+policy chain's pods, selected or
	// unselected; empty without.
	Policy string             `json:"policy,omitempty"`
	Rounds int                `json:"rounds"`
	Chains []benchChainReport `json:"chains"`
}

type benchChainReport struct {
	Name string `json:"name"`
	// Median is each phase's median over the rounds.
	Median []benchPhase `json:"median"`
	// Rounds are the phases of every round (one round: Median's).
	Rounds [][]benchPhase `json:"rounds"`
}

type benchPhase struct {
	Name          string       `json:"name"`
	Parallel      int          `json:"parallel"`
	Add           benchLatency `json:"add"`
	Del           benchLatency `json:"del"`
	WallMs        float64      `json:"wallMs"`
	PodsPerSecond float64      `json:"podsPerSecond"`
}

type benchLatency struct {
	N      int     `json:"n"`
	P50Ms  float64 `json:"p50Ms"`
	P90Ms  float64 `json:"p90Ms"`
	P99Ms  float64 `json:"p99Ms"`
	MeanMs float64 `json:"meanMs"`
}

func (bo *benchOptions) jsonReport(opts *globalOptions, chains []benchChain, results [][][]bench.Phase) benchReport {
	rep := benchReport{Loopback: opts.loopback, Policy: bo.policy, Rounds: bo.rounds, Chains: []benchChainReport{}}
	if bo.compareBin != "" {
		rep.ReferenceLoopback = string(netplugin.LoopbackPlugin)
	}
	for c, ch := range chains {
		cr := benchChainReport{Name: ch.name, Median: benchPhases(bench.MedianOf(results[c]))}
		for _, round := range results[c] {
			cr.Rounds = append(cr.Rounds, benchPhases(round))
		}
		rep.Chains = append(rep.Chains, cr)
	}
	return rep
}

func benchPhases(ps []bench.Phase) []benchPhase {
	out := []benchPhase{}
	for _, p := range ps {
		out = append(out, benchPhase{Name: p.Name, Parallel: p.Parallel, Add: benchLatencyOf(p.Add), Del: benchLatencyOf(p.Del),
			WallMs: millis(p.Wall), PodsPerSecond: p.PodsPerSecond()})
	}
	return out
}

func benchLatencyOf(s bench.Summary) benchLatency {
	return benchLatency{N: s.N, P50Ms: millis(s.P50), P90Ms: millis(s.P90), P99Ms: millis(s.P99), MeanMs: millis(s.Mean)}
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
