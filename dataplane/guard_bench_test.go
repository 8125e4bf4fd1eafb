package dataplane

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/podnet/podnet/dataplane/tag"
	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/netns"
)

// BenchmarkGuard measures what the source guard adds to ADD and DEL: one
// batch of a pod's elements in, and DEL's removal of them, by the
// addresses prevResult names (queued, then committed) and by listing
// the sets (DEL without prevResult, a repeated ADD). beside-100 has 100
// other pods guarded, which listing pays for and the rest should not.
// Before v2 the guard was a chain of its own per interface: 2.4-2.7 ms
// to install.
func BenchmarkGuard(b *testing.B) {
	b.Run("alone", func(b *testing.B) { benchGuard(b, 0) })
	b.Run("beside-100", func(b *testing.B) { benchGuard(b, 100) })
}

func benchGuard(b *testing.B, others int) {
	testutil.RequireRoot(b)
	_, host := testutil.NewNetNS(b)
	g := Guard{Owner: tag.Owner{Network: "n", ContainerID: "bench", IfName: "eth0"}, HostIf: HostVethName("bench", "eth0"),
		PodMAC: mustMAC("02:00:00:00:00:05"), Addrs: []netip.Addr{netip.MustParseAddr("10.1.0.5"), netip.MustParseAddr("fd00::5")}}
	err := netns.Do(host, func() error {
		gs, err := NewGuards()
		if err != nil {
			return err
		}
		defer gs.Close()
		for i := range others {
			k := g
			k.Owner.ContainerID = fmt.Sprintf("other%d", i)
			k.HostIf = HostVethName(k.Owner.ContainerID, "eth0")
			k.Addrs = []netip.Addr{netip.AddrFrom4([4]byte{10, 2, byte(i >> 8), byte(i)}), netip.MustParseAddr(fmt.Sprintf("fd00:2::%x", i))}
			if err := gs.Install(k); err != nil {
				return err
			}
		}
		// The table exists from here on, as on a node with pods.
		if err := gs.Install(g); err != nil {
			return err
		}
		if err := gs.Remove(g.HostIf); err != nil {
			return err
		}
		var install, queued, listed time.Duration
		for i := 0; b.Loop(); i++ {
			t0 := time.Now()
			if err := gs.Install(g); err != nil {
				return err
			}
			t1 := time.Now()
			install += t1.Sub(t0)
			if i%2 == 0 {
				if err := gs.QueueRemove(g); err != nil {
					return err
				}
				if err := gs.conn.Flush(); err != nil {
					return err
				}
				queued += time.Since(t1)
			} else {
				if err := gs.Remove(g.HostIf); err != nil {
					return err
				}
				listed += time.Since(t1)
			}
		}
		n := float64(b.N)
		b.ReportMetric(float64(install.Microseconds())/n, "install-µs/op")
		b.ReportMetric(float64(queued.Microseconds())/float64((b.N+1)/2), "remove-known-µs/op")
		if b.N > 1 {
			b.ReportMetric(float64(listed.Microseconds())/float64(b.N/2), "remove-listed-µs/op")
		}
		for i := range others {
			if err := gs.Remove(HostVethName(fmt.Sprintf("other%d", i), "eth0")); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
}
