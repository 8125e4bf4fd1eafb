package ipamcni

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/podnet/podnet/ipam/store/etcd/etcdtest"
)

// BenchmarkAddDel is one attachment's ADD and DEL as the podnet plugin
// runs them in process: the store opened for each operation, pools already
// in the store (steady state). On etcd every read is a round trip.
func BenchmarkAddDel(b *testing.B) {
	b.Run("bolt", func(b *testing.B) { benchAddDel(b, "bolt:"+filepath.Join(b.TempDir(), "ipam.db"), 0) })
	// With 150 pods on the node (three full blocks, one in use), as in
	// podnet bench's peak: an operation finds the handle among 4 blocks.
	b.Run("bolt-150pods", func(b *testing.B) { benchAddDel(b, "bolt:"+filepath.Join(b.TempDir(), "ipam.db"), 150) })
	b.Run("etcd", func(b *testing.B) {
		c := etcdtest.Start(b, 1)
		benchAddDel(b, "etcd://"+strings.TrimPrefix(c.Endpoints()[0], "http://"), 0)
	})
}

func benchAddDel(b *testing.B, store string, live int) {
	stdin := []byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":"net1","type":"podnet","ipam":{"type":"podnet-ipam","store":%q,"node":"n1",
		"pools":[{"name":"v4","cidr":"10.105.0.0/16"}]}}`, store))
	req, err := ParseRequest(stdin, nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	op := func(fn func(p *IPAM) error) {
		p, err := Open(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		defer p.Close()
		if err := fn(p); err != nil {
			b.Fatal(err)
		}
	}
	for i := range live {
		op(func(p *IPAM) error {
			_, err := p.AddAttachment(ctx, PodInterface{ContainerID: fmt.Sprintf("live%d", i), IfName: "eth0"})
			return err
		})
	}
	// The wall time is mostly the commits' fsyncs; the plugin's cost to
	// the node is its CPU, user and system, of every goroutine.
	cpu0 := processCPU(b)
	n := 0
	for ; b.Loop(); n++ {
		at := PodInterface{ContainerID: fmt.Sprintf("c%d", n), IfName: "eth0"}
		op(func(p *IPAM) error { _, err := p.AddAttachment(ctx, at); return err })
		op(func(p *IPAM) error { return p.DelAttachment(ctx, at) })
	}
	b.ReportMetric(float64(processCPU(b)-cpu0)/float64(n), "cpu-ns/op")
}

// processCPU is the process's user and system CPU time so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
