package main

import (
	"testing"
	"time"

	"github.com/podnet/podnet/portmap"
)

// BenchmarkAddDel is one ADD and one DEL of the exec'd plugin for a pod
// in a host namespace whose table already exists (another pod holds a
// mapping), as on a node that runs pods. "none" is the same with no
// mappings: the cost of starting the process, which the difference
// leaves out.
func BenchmarkAddDel(b *testing.B) {
	for _, bc := range []struct {
		name     string
		mappings []portmap.RuntimeMapping
	}{
		{"none", nil},
		{"tcp", []portmap.RuntimeMapping{tcp(18090, 80)}},
		{"udp", []portmap.RuntimeMapping{udp(18090, 80)}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			tp := newTopo(b)
			other := tp.addPod(2, false)
			tp.mustExec("ADD", other, other.conf(b, []portmap.RuntimeMapping{tcp(18091, 80)}, true))
			p := tp.addPod(1, false)
			conf := p.conf(b, bc.mappings, true)
			var add, del time.Duration
			b.ResetTimer()
			for b.Loop() {
				t0 := time.Now()
				tp.mustExec("ADD", p, conf)
				t1 := time.Now()
				tp.mustExec("DEL", p, conf)
				add, del = add+t1.Sub(t0), del+time.Since(t1)
			}
			b.ReportMetric(float64(add.Microseconds())/float64(b.N), "add-µs/op")
			b.ReportMetric(float64(del.Microseconds())/float64(b.N), "del-µs/op")
		})
	}
}
