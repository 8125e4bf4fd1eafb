package cluster

import (
	"math"
	"strings"
	"testing"
)

// scrapeText is the shape containerd 1.6's /v1/metrics writes its CRI
// timers in (go-metrics: Prometheus' default buckets), with a labelled
// one and a counter that is not a histogram.
const scrapeText = `# HELP containerd_cri_sandbox_create_network_seconds time to create the network for a sandbox
# TYPE containerd_cri_sandbox_create_network_seconds histogram
containerd_cri_sandbox_create_network_seconds_bucket{le="0.005"} 0
containerd_cri_sandbox_create_network_seconds_bucket{le="0.25"} 2
containerd_cri_sandbox_create_network_seconds_bucket{le="0.5"} 6
containerd_cri_sandbox_create_network_seconds_bucket{le="1"} 10
containerd_cri_sandbox_create_network_seconds_bucket{le="+Inf"} 10
containerd_cri_sandbox_create_network_seconds_sum 4.5
containerd_cri_sandbox_create_network_seconds_count 10
# TYPE containerd_cri_sandbox_runtime_create_seconds histogram
containerd_cri_sandbox_runtime_create_seconds_bucket{runtime="io.containerd.runc.v2",le="1"} 3
containerd_cri_sandbox_runtime_create_seconds_bucket{runtime="io.containerd.runc.v2",le="+Inf"} 4
containerd_cri_sandbox_runtime_create_seconds_sum{runtime="io.containerd.runc.v2"} 6
containerd_cri_sandbox_runtime_create_seconds_count{runtime="io.containerd.runc.v2"} 4
containerd_cri_sandbox_runtime_create_seconds_bucket{runtime="other \"x\", y",le="1"} 1
containerd_cri_sandbox_runtime_create_seconds_bucket{runtime="other \"x\", y",le="+Inf"} 1
containerd_cri_sandbox_runtime_create_seconds_sum{runtime="other \"x\", y"} 0.5
containerd_cri_sandbox_runtime_create_seconds_count{runtime="other \"x\", y"} 1
# TYPE network_plugin_operations_total counter
network_plugin_operations_total{operation_type="set_up_pod"} 12
`

func TestParseHistograms(t *testing.T) {
	hs, err := ParseHistograms(strings.NewReader(scrapeText))
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 3 {
		t.Fatalf("series %v, want 3 histograms", hs)
	}
	add := hs[MetricSandboxCreateNetwork]
	if add.Count != 10 || add.Sum != 4.5 || len(add.Buckets) != 5 || !math.IsInf(add.Buckets[4].UpperBound, 1) {
		t.Fatalf("create network: %+v", add)
	}
	if got := add.Mean(); got != 0.45 {
		t.Errorf("mean %v, want 0.45", got)
	}
	// The 5th of 10 lies in (0.25, 0.5], 3 of its 4: 0.25 + 0.25*3/4.
	if got := add.Quantile(0.5); math.Abs(got-0.4375) > 1e-9 {
		t.Errorf("p50 %v, want 0.4375", got)
	}
	if got := add.Quantile(0.99); math.Abs(got-0.9875) > 1e-9 {
		t.Errorf("p99 %v, want 0.9875", got)
	}
	runc := hs.Merged(MetricSandboxRuntimeCreate)
	if runc.Count != 5 || runc.Sum != 6.5 || runc.Buckets[0].Count != 4 {
		t.Errorf("merged runtime create: %+v", runc)
	}
	// Beyond the last finite bound: the bound.
	if got := runc.Quantile(1); got != 1 || !runc.Overflows(1) {
		t.Errorf("p100 %v (overflows %v), want the last finite bound 1, overflowing", got, runc.Overflows(1))
	}
	if runc.Overflows(0.8) || add.Overflows(0.99) {
		t.Error("a quantile within the finite buckets overflows")
	}
}

func TestHistogramSub(t *testing.T) {
	before := Histogram{Sum: 1, Count: 2, Buckets: []Bucket{{0.5, 2}, {math.Inf(1), 2}}}
	after := Histogram{Sum: 4, Count: 5, Buckets: []Bucket{{0.5, 3}, {math.Inf(1), 5}}}
	d := after.Sub(before)
	if d.Count != 3 || d.Sum != 3 || d.Buckets[0] != (Bucket{0.5, 1}) || d.Buckets[1].Count != 3 {
		t.Fatalf("delta %+v", d)
	}
	if !math.IsNaN((Histogram{}).Mean()) || !math.IsNaN((Histogram{}).Quantile(0.5)) {
		t.Error("an empty histogram has no mean or quantile")
	}
}
