package main

import (
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/podnet/podnet/dataplane"
	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/netns"
)

// TestSpoofedSources: a pod sends from addresses that are not its own
// (another pod's, an unused one of the pool, one outside it), IPv4 and
// IPv6, with nothing but a packet socket (CAP_NET_RAW, which every
// container has by default), to a pod on its node; none arrives, while
// the same packets from its own address do. In bridge mode, forged ARP
// and neighbour advertisements for another pod's or the gateway's
// address change no one's neighbour entry. The node's rp_filter is 0,
// Debian's default: the guard must not depend on it.
func TestSpoofedSources(t *testing.T) {
	for _, mode := range []string{
		`"mode":"routed","ipMasq":true`,
		`"mode":"bridge","bridge":"pnbr0","ipMasq":true`,
	} {
		name := strings.Split(mode, `"`)[3]
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, false)
			setSysctls(t, e.host, map[string]string{
				"net/ipv4/conf/all/rp_filter": "0", "net/ipv4/conf/default/rp_filter": "0",
			})
			conf := e.conf(mode)
			attacker, victim, other := e.newPod("attacker"), e.newPod("victim"), e.newPod("other")
			for _, p := range []*pod{attacker, victim, other} {
				e.add(conf, p)
			}
			defer func() {
				for _, p := range []*pod{attacker, victim, other} {
					e.del(conf, p)
				}
				e.requireClean()
			}()
			// The frames' next hop: in routed mode the host end (one MAC
			// for all), on a bridge the victim itself.
			dstMAC := dataplane.RoutedHostMAC
			if name == "bridge" {
				dstMAC = podMAC(t, victim)
			}
			for _, v4 := range []bool{true, false} {
				// Another pod's address (not the victim's own: the victim's
				// kernel drops a packet from its own IPv4 address anyway),
				// an unused one of the pool, one outside it.
				forged := []netip.Addr{other.addr(v4), other.addr(v4).Next().Next(), netip.MustParseAddr("10.200.0.9")}
				if !v4 {
					forged[2] = netip.MustParseAddr("fd00:200::9")
				}
				got := testutil.UDPArrivals(t, attacker.ns, victim.ns, podMAC(t, attacker), dstMAC, victim.addr(v4),
					append([]netip.Addr{attacker.addr(v4)}, forged...), spoofTries)
				if got[attacker.addr(v4)] == 0 {
					t.Fatalf("IPv4=%v: not even the attacker's own address got through (%v): the test proves nothing", v4, got)
				}
				for _, src := range forged {
					if got[src] != 0 {
						t.Errorf("IPv4=%v: %d of %d packets from forged source %s reached the victim", v4, got[src], spoofTries, src)
					}
				}
			}
			if name == "bridge" {
				testForgedNeighbours(t, e, attacker, victim, other)
			}

			// CHECK knows the guard; a repeated ADD restores it.
			if _, err := e.run("CHECK", withPrev(conf, attacker.res), attacker); err != nil {
				t.Fatalf("CHECK: %v", err)
			}
			hostIf := dataplane.HostVethName(attacker.id, "eth0")
			if err := netns.Do(e.host, func() error {
				gs, err := dataplane.NewGuards()
				if err != nil {
					return err
				}
				defer gs.Close()
				return gs.Remove(hostIf)
			}); err != nil {
				t.Fatal(err)
			}
			if _, err := e.run("CHECK", withPrev(conf, attacker.res), attacker); err == nil || !strings.Contains(err.Error(), "source guard of "+hostIf) {
				t.Errorf("CHECK without the guard: %v", err)
			}
			e.add(conf, attacker)
			if _, err := e.run("CHECK", withPrev(conf, attacker.res), attacker); err != nil {
				t.Errorf("CHECK after a repeated ADD: %v", err)
			}
		})
	}
}

const spoofTries = 3

// testForgedNeighbours: the attacker claims the victim's and the
// gateway's IPv4 addresses by gratuitous ARP, and the victim's IPv6
// address by an unsolicited, overriding neighbour advertisement sent
// from its own link-local address. The entries that the host and the
// other pod hold for them must keep their MACs.
func testForgedNeighbours(t *testing.T, e *env, attacker, victim, other *pod) {
	gw4 := netip.Addr{}
	for _, ip := range other.res.IPs {
		if ip.Address.Addr().Is4() {
			gw4 = ip.Gateway
		}
	}
	victimMAC, attackerMAC := podMAC(t, victim), podMAC(t, attacker)
	// Traffic first, so that the entries exist: a gratuitous ARP only
	// updates an entry that is there.
	for _, v4 := range []bool{true, false} {
		if _, err := echo(t, other.ns, victim.ns, victim.addr(v4)); err != nil {
			t.Fatal(err)
		}
		if _, err := echo(t, e.host, victim.ns, victim.addr(v4)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := echo(t, other.ns, e.host, gw4); err != nil {
		t.Fatal(err)
	}
	before := map[string]string{
		"host " + victim.addr(true).String():  neighMAC(t, e.host, "pnbr0", victim.addr(true)),
		"host " + victim.addr(false).String(): neighMAC(t, e.host, "pnbr0", victim.addr(false)),
		"pod " + victim.addr(true).String():   neighMAC(t, other.ns, "eth0", victim.addr(true)),
		"pod " + victim.addr(false).String():  neighMAC(t, other.ns, "eth0", victim.addr(false)),
		"pod " + gw4.String():                 neighMAC(t, other.ns, "eth0", gw4),
	}
	if before["host "+victim.addr(true).String()] != victimMAC.String() {
		t.Fatalf("the host's entries before the attack: %v (victim is %s)", before, victimMAC)
	}
	// Past the neighbour tables' locktime (1 s by default), within
	// which the kernel ignores a new MAC for a fresh entry anyway.
	time.Sleep(1500 * time.Millisecond)
	for _, claimed := range []netip.Addr{victim.addr(true), gw4} {
		for range spoofTries {
			testutil.SendFrame(t, attacker.ns, testutil.GARPFrame(attackerMAC, claimed))
		}
	}
	for range spoofTries {
		testutil.SendFrame(t, attacker.ns, testutil.NAFrame(attackerMAC, dataplane.LinkLocalOf(attackerMAC), victim.addr(false)))
	}
	time.Sleep(300 * time.Millisecond)
	after := map[string]string{
		"host " + victim.addr(true).String():  neighMAC(t, e.host, "pnbr0", victim.addr(true)),
		"host " + victim.addr(false).String(): neighMAC(t, e.host, "pnbr0", victim.addr(false)),
		"pod " + victim.addr(true).String():   neighMAC(t, other.ns, "eth0", victim.addr(true)),
		"pod " + victim.addr(false).String():  neighMAC(t, other.ns, "eth0", victim.addr(false)),
		"pod " + gw4.String():                 neighMAC(t, other.ns, "eth0", gw4),
	}
	for k, v := range before {
		if after[k] != v {
			t.Errorf("neighbour entry %s: %s before the forged ARP/NA, %s after (attacker %s)", k, v, after[k], attackerMAC)
		}
	}
}

func setSysctls(t *testing.T, ns string, kv map[string]string) {
	t.Helper()
	err := netns.Do(ns, func() error {
		for k, v := range kv {
			if err := os.WriteFile("/proc/sys/"+k, []byte(v), 0); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func podMAC(t *testing.T, p *pod) net.HardwareAddr {
	t.Helper()
	for _, i := range p.res.Interfaces {
		if i.Sandbox != "" {
			m, err := net.ParseMAC(i.Mac)
			if err != nil {
				t.Fatal(err)
			}
			return m
		}
	}
	t.Fatalf("no sandbox interface in %s", p.res.Bytes())
	return nil
}

// neighMAC is the MAC of ns's neighbour entry for ip on dev, or "none".
func neighMAC(t *testing.T, ns, dev string, ip netip.Addr) string {
	t.Helper()
	mac := "none"
	err := onLink(ns, dev, func(h *netlink.Handle, l netlink.Link) error {
		family := netlink.FAMILY_V6
		if ip.Is4() {
			family = netlink.FAMILY_V4
		}
		ns, err := h.NeighList(l.Attrs().Index, family)
		for _, n := range ns {
			if a, ok := netip.AddrFromSlice(n.IP); ok && a.Unmap() == ip && n.HardwareAddr != nil {
				mac = n.HardwareAddr.String()
			}
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return mac
}
