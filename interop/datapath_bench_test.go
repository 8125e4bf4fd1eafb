package interop

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// BenchmarkDataPath measures what a pod's packets cost on each data path
// (dpPaths: the veth floor, podnet routed and bridge and the reference
// ptp and bridge on one node, the underlay, podnet host-gw and VXLAN
// across nodes, each also with WireGuard encryption on): TCP throughput
// of one iperf3 stream, and sockperf TCP ping-pong transactions per
// second with the round trip's p50 and p99.
//
// Every path is set up first; then each iteration is one round that
// measures every path once, so rounds are set by -benchtime=Nx. The
// paths take turns within a round and each round starts one path further
// on, so that the machine's drift reaches every path alike. Each path's
// figure is the median of its rounds; each ratio (a same-node path
// against the veth floor, a cross-node path against the underlay) is
// the median of the ratios within each round.
//
// Root, iperf3 and sockperf (make bench-datapath installs them). It only
// sends traffic between namespaces it creates, and removes them, the
// processes and the files it made when it ends, pass or fail.
//
// PODNET_DATAPATH_SECONDS (default 3) is the length of each iperf3 and
// each sockperf run; PODNET_DATAPATH_PATHS (comma-separated keys of
// dpPaths, default all) measures fewer paths; a cross-node path has
// its ratio only with underlay among them.
func BenchmarkDataPath(b *testing.B) {
	requireRoot(b)
	var missing []string
	for _, tool := range dpTools {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if len(missing) > 0 {
		b.Skipf("needs %s on PATH (Debian packages iperf3 and sockperf; make bench-datapath installs them)", strings.Join(missing, " and "))
	}
	secs, want, err := dpSettings(os.Getenv("PODNET_DATAPATH_SECONDS"), os.Getenv("PODNET_DATAPATH_PATHS"))
	if err != nil {
		b.Fatal(err)
	}
	paths := buildPaths(b, want)
	startLoad := loadAverage()
	samples := map[string][]sample{}
	for round := 0; b.Loop(); round++ {
		for i := range paths {
			p := paths[(i+round)%len(paths)]
			samples[p.key] = append(samples[p.key], measure(b, p, secs))
		}
	}
	rows := summarize(paths, samples)
	conditions := fmt.Sprintf("data path: %d round(s) of %d s per iperf3 and per sockperf run; %d CPUs, Linux %s; load average %s at the start, %s at the end",
		len(samples[paths[0].key]), secs, runtime.NumCPU(), kernelRelease(), startLoad, loadAverage())
	// The table goes to stdout, since a benchmark's log is cut at ten
	// lines; but only with -v, where the benchmark's name and figures are
	// printed after it returns. Without -v the name may already stand at
	// the start of the line its figures end, and a table in between would
	// break that line for benchstat.
	if testing.Verbose() {
		fmt.Printf("\n%s\n\n%s\n", conditions, markdownTable(rows))
	} else {
		b.Log(conditions + " (the table: run with -v)")
	}
	// ns/op would be the length of a round, which the settings fix.
	b.ReportMetric(0, "ns/op")
	for _, r := range rows {
		b.ReportMetric(r.Gbps, r.key+"-Gbit/s")
		b.ReportMetric(r.RRps, r.key+"-tx/s")
		b.ReportMetric(r.P50, r.key+"-p50-us")
		b.ReportMetric(r.P99, r.key+"-p99-us")
		b.ReportMetric(r.CRRps, r.key+"-crr/s")
		if r.hasRatio {
			b.ReportMetric(r.tputRatio, r.key+"-tput-ratio")
			b.ReportMetric(r.rrRatio, r.key+"-rr-ratio")
			b.ReportMetric(r.crrRatio, r.key+"-crr-ratio")
		}
	}
}

// dpSettings reads the benchmark's environment: the seconds of each run
// and the set of path keys to measure.
func dpSettings(seconds, paths string) (int, map[string]bool, error) {
	secs := 3
	if seconds != "" {
		n, err := strconv.Atoi(seconds)
		if err != nil || n < 1 {
			return 0, nil, fmt.Errorf("PODNET_DATAPATH_SECONDS=%q: want a whole number of seconds, at least 1", seconds)
		}
		secs = n
	}
	want := map[string]bool{}
	var known []string
	for _, d := range dpPaths {
		known = append(known, d.key)
	}
	if paths == "" {
		for _, k := range known {
			want[k] = true
		}
		return secs, want, nil
	}
	for _, k := range strings.Split(paths, ",") {
		k = strings.TrimSpace(k)
		if !slices.Contains(known, k) {
			return 0, nil, fmt.Errorf("PODNET_DATAPATH_PATHS: unknown path %q; known: %s", k, strings.Join(known, ","))
		}
		want[k] = true
	}
	return secs, want, nil
}

// loadAverage is the machine's 1-, 5- and 15-minute load average: the
// figures mean little on a busy machine, and the log says how busy.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func kernelRelease() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}
