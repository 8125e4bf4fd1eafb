package k8s_test

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// latencyResult is what BenchmarkPolicyLatency measured on one chain.
type latencyResult struct {
	chain string
	// background names the objects created before the measurement.
	background []string
	// createCall is the policy create call's own duration; enforced is
	// from its return to every node enforcing, enforcedNode the same per
	// node (by node index); reopened from the delete call's return to
	// every probe connecting again.
	createCall, enforced, reopened []time.Duration
	enforcedNode                   [][]time.Duration
	// reach is by case (reachCase.name), cases in the order measured.
	cases []string
	reach map[string]*reachSamples
}

// reachSamples are one reachability case's rounds.
type reachSamples struct {
	// added is pod create to its ADD returning; noticed from that to
	// the test finding the cache entry (how late the probes start);
	// addReach and addConnect from ADD's return to the first answer
	// and to the first accepted connect; connect from the create.
	added, noticed, addReach, addConnect, connect []time.Duration
	// dropped counts the probes before the first answer that got none,
	// failed those that failed otherwise, over every round.
	dropped, failed int
}

// report gives the figures as the benchmark's metrics.
func (r *latencyResult) report(b *testing.B) {
	if len(r.enforced) > 0 {
		latencyMetrics(b, "enforced", r.enforced)
		latencyMetrics(b, "reopened", r.reopened)
	}
	for _, name := range r.cases {
		s := r.reach[name]
		latencyMetrics(b, name+"-add-reach", s.addReach)
		latencyMetrics(b, name+"-add-conn", s.addConnect)
		latencyMetrics(b, name+"-create-conn", s.connect)
	}
}

func latencyMetrics(b *testing.B, name string, ds []time.Duration) {
	b.ReportMetric(msOf(percentile(ds, 0.50)), name+"-p50-ms")
	b.ReportMetric(msOf(percentile(ds, 0.99)), name+"-p99-ms")
}

func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// pcts writes ds's p50 and p99 in milliseconds.
func pcts(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f / %.0f", msOf(percentile(ds, 0.50)), msOf(percentile(ds, 0.99)))
}

// latencyTables renders the results as two Markdown tables: policy
// enforcement (chains that enforce) and pod reachability.
func latencyTables(results []*latencyResult) string {
	var sb strings.Builder
	sb.WriteString("| chain | background | policy created → enforced, node 1 | node 2 | both nodes | policy deleted → open again | create call |\n")
	sb.WriteString("|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		if len(r.enforced) == 0 {
			continue
		}
		bg := strings.Join(r.background, ", ")
		if bg == "" {
			bg = "none"
		}
		fmt.Fprintf(&sb, "| %s | %s |", r.chain, bg)
		for _, ds := range r.enforcedNode {
			fmt.Fprintf(&sb, " %s |", pcts(ds))
		}
		fmt.Fprintf(&sb, " %s | %s | %s |\n", pcts(r.enforced), pcts(r.reopened), pcts(r.createCall))
	}
	sb.WriteString("\n| chain | pod | create → ADD returned | ADD returned → reachable | ADD returned → connected | create → connected | ADD returned → probing | probes dropped before reachable |\n")
	sb.WriteString("|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		for _, name := range r.cases {
			s := r.reach[name]
			drops := fmt.Sprint(s.dropped)
			if s.failed > 0 {
				drops += fmt.Sprintf(" (and %d failed)", s.failed)
			}
			fmt.Fprintf(&sb, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", r.chain, name,
				pcts(s.added), pcts(s.addReach), pcts(s.addConnect), pcts(s.connect), pcts(s.noticed), drops)
		}
	}
	return sb.String()
}
