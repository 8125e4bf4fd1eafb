package interop

import (
	"math"
	"strings"
	"testing"
)

// The data-path benchmark's parsing and arithmetic, without root or
// tools: what it reads of iperf3 and sockperf, and how rounds become a
// row.

func TestParseIperf3(t *testing.T) {
	tests := []struct {
		name, out string
		want      float64
		err       string
	}{
		{name: "receiver's rate", want: 19.6,
			out: `{"start": {}, "end": {"sum_sent": {"bits_per_second": 19.9e9, "retransmits": 3}, "sum_received": {"bits_per_second": 19.6e9}}}`},
		{name: "error", out: `{"start": {}, "end": {}, "error": "unable to connect to server"}`, err: "unable to connect"},
		{name: "no rate", out: `{"end": {"sum_received": {}}}`, err: "no received rate"},
		{name: "not JSON", out: `iperf3: error`, err: "iperf3 output"},
	}
	for _, tt := range tests {
		got, err := parseIperf3([]byte(tt.out))
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: error %v, want one containing %q", tt.name, err, tt.err)
			}
			continue
		}
		if err != nil || math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("%s: %v, %v; want %v", tt.name, got, err, tt.want)
		}
	}
}

// sockperfOut is the shape of sockperf 3.7's ping-pong report with
// --full-rtt, colour escapes included.
const sockperfOut = "sockperf: \x1b[2;35m== version #3.7-no.git == \x1b[0m\n" +
	"sockperf: [Total Run] RunTime=3.001 sec; Warm up time=400 msec; SentMessages=60001; ReceivedMessages=60000\n" +
	"sockperf: ========= Printing statistics for Server No: 0\n" +
	"sockperf: [Valid Duration] RunTime=2.500 sec; SentMessages=50000; ReceivedMessages=50000\n" +
	"sockperf: \x1b[2;35m====> avg-rtt=50.000 (std-dev=9.000)\x1b[0m\n" +
	"sockperf: Summary: Round trip is 50.000 usec\n" +
	"sockperf: ---> <MAX> observation = 1200.500\n" +
	"sockperf: ---> percentile 99.999 = 1100.000\n" +
	"sockperf: ---> percentile 99.000 =  120.250\n" +
	"sockperf: ---> percentile 90.000 =   60.000\n" +
	"sockperf: ---> percentile 50.000 =   45.125\n" +
	"sockperf: ---> <MIN> observation =   30.000\n"

func TestParseSockperf(t *testing.T) {
	rr, p50, p99, err := parseSockperf([]byte(sockperfOut))
	if err != nil || rr != 20000 || p50 != 45.125 || p99 != 120.25 {
		t.Errorf("got %v tx/s, p50 %v, p99 %v, %v; want 20000, 45.125, 120.25", rr, p50, p99, err)
	}
	noValid := strings.Replace(sockperfOut, "[Valid Duration]", "[Other]", 1)
	if _, _, _, err := parseSockperf([]byte(noValid)); err == nil {
		t.Error("a report without its valid duration parsed")
	}
	noP99 := strings.Replace(sockperfOut, "percentile 99.000", "percentile 98.000", 1)
	if _, _, _, err := parseSockperf([]byte(noP99)); err == nil {
		t.Error("a report without the 99th percentile parsed")
	}
	none := strings.Replace(sockperfOut, "ReceivedMessages=50000", "ReceivedMessages=0", 1)
	if _, _, _, err := parseSockperf([]byte(none)); err == nil {
		t.Error("a report of no transactions parsed")
	}
}

func TestListensOn(t *testing.T) {
	table := "  sl  local_address rem_address   st tx_queue rx_queue\n" +
		"   0: 0100007F:2B67 00000000:0000 0A 00000000:00000000\n" + // 127.0.0.1:11111, LISTEN
		"   1: 0200F40A:1451 0100F40A:9C40 01 00000000:00000000\n" // 10.244.0.2:5201, ESTABLISHED
	for port, want := range map[int]bool{11111: true, 5201: false, 80: false} {
		if got := listensOn([]byte(table), port); got != want {
			t.Errorf("port %d: listening %v, want %v", port, got, want)
		}
	}
}

// Ratios are taken within each round, then the median over the rounds:
// a round where the whole machine was slow leaves them alone.
func TestSummarize(t *testing.T) {
	paths := []*dpPath{{key: "veth", name: "veth floor"}, {key: "routed", name: "routed", base: "veth"}, {key: "vxlan", name: "vxlan", base: "underlay"}}
	samples := map[string][]sample{
		"veth":   {{Gbps: 20, RRps: 20000, P50: 40, P99: 80, CRRps: 4000}, {Gbps: 10, RRps: 10000, P50: 80, P99: 160, CRRps: 2000}, {Gbps: 18, RRps: 18000, P50: 45, P99: 90, CRRps: 4000}},
		"routed": {{Gbps: 18, RRps: 19000, P50: 42, P99: 85, CRRps: 3000}, {Gbps: 9, RRps: 9500, P50: 84, P99: 170, CRRps: 1600}, {Gbps: 9, RRps: 9000, P50: 90, P99: 180, CRRps: 3200}},
		"vxlan":  {{Gbps: 5, RRps: 1000, P50: 1, P99: 2}},
	}
	rows := summarize(paths, samples)
	veth, routed, vxlan := rows[0], rows[1], rows[2]
	if veth.Gbps != 18 || veth.RRps != 18000 || veth.P50 != 45 || veth.P99 != 90 || veth.hasRatio {
		t.Errorf("veth floor: %+v, want the medians 18, 18000, 45, 90 and no ratio", veth)
	}
	// Per round: 0.9, 0.9, 0.5 -> 0.9; the ratio of the medians would be 0.5.
	if !routed.hasRatio || routed.tputRatio != 0.9 || routed.rrRatio != 0.95 || routed.crrRatio != 0.8 || routed.base != "veth floor" {
		t.Errorf("routed: %+v, want tput ratio 0.9, RR ratio 0.95 and CRR ratio 0.8 against veth floor", routed)
	}
	if vxlan.hasRatio {
		t.Errorf("vxlan without its base measured: %+v, want no ratio", vxlan)
	}
	table := markdownTable(rows)
	for _, want := range []string{"| path | Gbit/s | RR tx/s | p50 µs | p99 µs | CRR conn/s | tput ratio | RR ratio | CRR ratio | against |",
		"| routed | 9.00 | 9500 | 84.0 | 170.0 | 3000 | 0.90 | 0.95 | 0.80 | veth floor |", "| vxlan | 5.00 | 1000 | 1.0 | 2.0 | 0 |  |  |  |  |"} {
		if !strings.Contains(table, want+"\n") {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
}

func TestDPSettings(t *testing.T) {
	secs, want, err := dpSettings("", "")
	if err != nil || secs != 3 || len(want) != len(dpPaths) {
		t.Errorf("defaults: %d s, %v, %v; want 3 s and every path", secs, want, err)
	}
	secs, want, err = dpSettings("1", "veth, routed")
	if err != nil || secs != 1 || len(want) != 2 || !want["veth"] || !want["routed"] {
		t.Errorf("1, veth,routed: %d s, %v, %v", secs, want, err)
	}
	for _, bad := range [][2]string{{"0", ""}, {"1.5", ""}, {"", "veth,nope"}} {
		if _, _, err := dpSettings(bad[0], bad[1]); err == nil {
			t.Errorf("%q, %q: no error", bad[0], bad[1])
		}
	}
}
