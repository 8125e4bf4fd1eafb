package dataplane

import (
	"net/netip"
	"testing"
	"time"

	"github.com/podnet/podnet/dataplane/tag"
	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/netns"
)

// BenchmarkGuard measures what the source guard adds to ADD and DEL: one
// batch that makes the interface's ingress chain (a hook on the device)
// and its rules, and one that deletes it, on a pod veth that exists.
func BenchmarkGuard(b *testing.B) {
	b.Run("alone", func(b *testing.B) { benchGuard(b, false) })
	b.Run("beside-another", func(b *testing.B) { benchGuard(b, true) })
	b.Run("chain-only", benchGuardChain)
}

// benchGuardChain is the guard's chain hooked to the device, without its
// rules and sets: what the hook costs of an install.
func benchGuardChain(b *testing.B) {
	testutil.RequireRoot(b)
	_, host := testutil.NewNetNS(b)
	_, ctr := testutil.NewNetNS(b)
	hh := handleIn(b, host)
	name := HostVethName("bench", "eth0")
	hmac, cmac := AttachmentMACs("bench", "eth0")
	if _, err := CreateVeth(hh, Veth{HostName: name, HostMAC: hmac, PeerName: "eth0", PeerMAC: cmac, PeerNSFd: nsFd(b, ctr)}); err != nil {
		b.Fatal(err)
	}
	err := netns.Do(host, func() error {
		gs, err := NewGuards()
		if err != nil {
			return err
		}
		defer gs.Close()
		var install time.Duration
		for b.Loop() {
			o := newGuardObjects(name)
			t0 := time.Now()
			gs.conn.AddTable(o.table)
			gs.conn.AddChain(o.chain)
			if err := gs.conn.Flush(); err != nil {
				return err
			}
			install += time.Since(t0)
			if err := gs.Remove(name); err != nil {
				return err
			}
		}
		b.ReportMetric(float64(install.Microseconds())/float64(b.N), "install-µs/op")
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
}

func benchGuard(b *testing.B, keep bool) {
	testutil.RequireRoot(b)
	_, host := testutil.NewNetNS(b)
	_, ctr := testutil.NewNetNS(b)
	hh := handleIn(b, host)
	name := HostVethName("bench", "eth0")
	hmac, cmac := AttachmentMACs("bench", "eth0")
	if _, err := CreateVeth(hh, Veth{HostName: name, HostMAC: hmac, PeerName: "eth0", PeerMAC: cmac, PeerNSFd: nsFd(b, ctr)}); err != nil {
		b.Fatal(err)
	}
	g := Guard{Owner: tag.Owner{Network: "n", ContainerID: "bench", IfName: "eth0"}, HostIf: name, PodMAC: cmac,
		Addrs: []netip.Addr{netip.MustParseAddr("10.1.0.5"), netip.MustParseAddr("fd00::5")}}
	if keep {
		kname := HostVethName("keep", "eth0")
		kmac, kcmac := AttachmentMACs("keep", "eth0")
		if _, err := CreateVeth(hh, Veth{HostName: kname, HostMAC: kmac, PeerName: "eth1", PeerMAC: kcmac, PeerNSFd: nsFd(b, ctr)}); err != nil {
			b.Fatal(err)
		}
		k := g
		k.HostIf, k.PodMAC = kname, kcmac
		if err := netns.Do(host, func() error {
			gs, err := NewGuards()
			if err != nil {
				return err
			}
			defer gs.Close()
			return gs.Install(k)
		}); err != nil {
			b.Fatal(err)
		}
	}
	err := netns.Do(host, func() error {
		var install, remove time.Duration
		for b.Loop() {
			t0 := time.Now()
			gs, err := NewGuards()
			if err != nil {
				return err
			}
			if err := gs.Install(g); err != nil {
				return err
			}
			t1 := time.Now()
			if err := gs.Remove(name); err != nil {
				return err
			}
			remove += time.Since(t1)
			install += t1.Sub(t0)
			gs.Close()
		}
		b.ReportMetric(float64(install.Microseconds())/float64(b.N), "install-µs/op")
		b.ReportMetric(float64(remove.Microseconds())/float64(b.N), "remove-µs/op")
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
}
