package main

import (
	"slices"
	"testing"
	"time"

	"github.com/podnet/podnet/internal/testutil"
)

// BenchmarkAddDel measures the plugin as a runtime sees it: one exec of
// podnet for ADD (which execs the test IPAM) and one for DEL, in a test
// host namespace, with masquerade on. add-ns/op and del-ns/op split the
// two; p50-add-ns is the median ADD.
func BenchmarkAddDel(b *testing.B) {
	for _, bc := range []struct {
		name, extra string
		loopback    bool // the pod's whole chain: loopback, then podnet
	}{
		{"routed", `"mode":"routed","ipMasq":true`, false},
		{"bridge", `"mode":"bridge","bridge":"pnbr0","ipMasq":true`, false},
		{"loopback+routed", `"mode":"routed","ipMasq":true`, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			e := newEnv(b, false)
			conf := e.conf(bc.extra)
			lo := `{"cniVersion":"1.1.0","name":"lo","type":"loopback"}`
			if bc.loopback {
				testutil.BuildBinary(b, "./plugins/loopback", e.binDir)
			}
			p := e.newPod("bench")
			var adds, dels []time.Duration
			for b.Loop() {
				t0 := time.Now()
				if bc.loopback {
					if _, err := e.runPlugin("loopback", "ADD", lo, p); err != nil {
						b.Fatal(err)
					}
				}
				if _, err := e.run("ADD", conf, p); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				if _, err := e.run("DEL", conf, p); err != nil {
					b.Fatal(err)
				}
				if bc.loopback {
					if _, err := e.runPlugin("loopback", "DEL", lo, p); err != nil {
						b.Fatal(err)
					}
				}
				adds, dels = append(adds, t1.Sub(t0)), append(dels, time.Since(t1))
			}
			b.ReportMetric(float64(mean(adds)), "add-ns/op")
			b.ReportMetric(float64(mean(dels)), "del-ns/op")
			b.ReportMetric(float64(median(adds)), "p50-add-ns")
			b.ReportMetric(float64(median(dels)), "p50-del-ns")
		})
	}
}

func mean(d []time.Duration) time.Duration {
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return sum / time.Duration(max(len(d), 1))
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
