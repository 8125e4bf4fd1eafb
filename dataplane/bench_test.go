package dataplane

import (
	"net/netip"
	"testing"
	"time"

	"github.com/podnet/podnet/internal/testutil"
)

// BenchmarkVethCreateDelete measures the kernel side of a pod's veth:
// create with the peer in the pod's namespace, then delete, with more of
// routed mode's host configuration on it in each case. Deletion is
// dominated by the kernel's RCU waits; the cases show what adds to them.
func BenchmarkVethCreateDelete(b *testing.B) {
	cases := []struct {
		name string
		v4   bool // /32 route and permanent neighbour
		v6   bool // link-local address, /128 route and permanent neighbour
	}{
		{"bare", false, false},
		{"v4", true, false},
		{"v6", false, true},
		{"dual", true, true},
	}
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			testutil.RequireRoot(b)
			_, host := testutil.NewNetNS(b)
			_, ctr := testutil.NewNetNS(b)
			hh := handleIn(b, host)
			fd := nsFd(b, ctr)
			hmac, cmac := AttachmentMACs("bench", "eth0")
			var create, del time.Duration
			for b.Loop() {
				t0 := time.Now()
				idx, err := CreateVeth(hh, Veth{HostName: "pnbench", HostMAC: hmac, PeerName: "eth0", PeerMAC: cmac, PeerNSFd: fd})
				if err != nil {
					b.Fatal(err)
				}
				if bc.v4 {
					a := netip.MustParseAddr("10.100.0.2")
					if err := AddHostRoute(hh, idx, a); err != nil {
						b.Fatal(err)
					}
					if err := SetNeigh(hh, idx, a, cmac); err != nil {
						b.Fatal(err)
					}
				}
				if bc.v6 {
					a := netip.MustParseAddr("fd00:100::2")
					if err := AddAddr(hh, idx, netip.PrefixFrom(RoutedGateway6, 64)); err != nil {
						b.Fatal(err)
					}
					if err := AddHostRoute(hh, idx, a); err != nil {
						b.Fatal(err)
					}
					if err := SetNeigh(hh, idx, a, cmac); err != nil {
						b.Fatal(err)
					}
				}
				t1 := time.Now()
				if err := DeleteLink(hh, "pnbench"); err != nil {
					b.Fatal(err)
				}
				create, del = create+t1.Sub(t0), del+time.Since(t1)
			}
			b.ReportMetric(float64(create.Nanoseconds())/float64(b.N), "create-ns/op")
			b.ReportMetric(float64(del.Nanoseconds())/float64(b.N), "delete-ns/op")
		})
	}
}
