package k8s_test

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/podnet/podnet/test/k8s/cluster"
)

// report gives the burst's figures as the benchmark's metrics, in
// milliseconds (per burst: -benchtime 1x makes one).
func (r burstResult) report(b *testing.B) {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(percentile(r.running, 0.50)), "run-p50-ms")
	b.ReportMetric(ms(percentile(r.running, 0.99)), "run-p99-ms")
	b.ReportMetric(1000*r.netAdd.Mean(), "cniadd-avg-ms")
	b.ReportMetric(1000*r.netAdd.Quantile(0.99), "cniadd-p99-ms")
	b.ReportMetric(1000*r.netDel.Mean(), "cnidel-avg-ms")
	b.ReportMetric(ms(percentile(r.gone, 0.50)), "del-p50-ms")
}

// percentile is the nearest-rank q-quantile of ds (of 20 pods, p99 is
// the slowest).
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(i, 0)]
}

// burstTable renders the results as a Markdown table. Times are seconds:
// per pod create->Running and delete->gone (p50, p99) as the API showed
// them; CNI ADD and DEL of the burst's sandboxes from containerd's
// histograms (the average is exact, p50 and p99 are interpolated in its
// buckets: 0.5, 1, 2.5, 5 s ...); runc's sandbox creation alike.
func burstTable(rows []burstResult) string {
	var sb strings.Builder
	sb.WriteString("| chain | N | create->Running p50 | p99 | all Running | CNI ADD avg | p50 | p99 | CNI DEL avg | p50 | p99 | delete->gone p50 | p99 | runc sandbox avg |\n")
	sb.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&sb, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			r.chain, countCol(r),
			secs(percentile(r.running, 0.50)), secs(percentile(r.running, 0.99)), secs(r.allRunning),
			histSecs(r.netAdd.Mean()), quantile(r.netAdd, 0.50), quantile(r.netAdd, 0.99),
			histSecs(r.netDel.Mean()), quantile(r.netDel, 0.50), quantile(r.netDel, 0.99),
			secs(percentile(r.gone, 0.50)), secs(percentile(r.gone, 0.99)),
			histSecs(r.runcCreate.Mean()))
	}
	return sb.String()
}

// countCol is the burst's size, and the CNI calls containerd timed if
// they were not one ADD and one DEL per pod.
func countCol(r burstResult) string {
	if r.netAdd.Count == float64(r.n) && r.netDel.Count == float64(r.n) {
		return fmt.Sprint(r.n)
	}
	return fmt.Sprintf("%d (ADD %v, DEL %v)", r.n, r.netAdd.Count, r.netDel.Count)
}

func secs(d time.Duration) string {
	return fmt.Sprintf("%.2f s", d.Seconds())
}

// quantile writes h's q-quantile, "> 10 s" if it is beyond the last
// finite bucket.
func quantile(h cluster.Histogram, q float64) string {
	if h.Overflows(q) {
		return fmt.Sprintf("> %.0f s", h.Quantile(q))
	}
	return histSecs(h.Quantile(q))
}

// histSecs writes v, seconds from a histogram; "-" if it has none.
func histSecs(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.2f s", v)
}
