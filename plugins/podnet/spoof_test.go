package main

import (
	"encoding/binary"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/podnet/podnet/dataplane"
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
				forged := []netip.Addr{victim.addr(v4), other.addr(v4).Next().Next(), netip.MustParseAddr("10.200.0.9")}
				if !v4 {
					forged[2] = netip.MustParseAddr("fd00:200::9")
				}
				got := udpArrivals(t, attacker, victim, dstMAC, v4, append([]netip.Addr{attacker.addr(v4)}, forged...))
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

// udpArrivals sends spoofTries UDP datagrams from each source in srcs,
// as raw Ethernet frames on the attacker's eth0, to the victim, and
// counts by source what the victim's socket received.
func udpArrivals(t *testing.T, attacker, victim *pod, dstMAC net.HardwareAddr, v4 bool, srcs []netip.Addr) map[netip.Addr]int {
	t.Helper()
	dst := victim.addr(v4)
	network := "udp6"
	if v4 {
		network = "udp4"
	}
	var conn *net.UDPConn
	if err := netns.Do(victim.ns, func() (err error) {
		conn, err = net.ListenUDP(network, &net.UDPAddr{IP: dst.AsSlice()})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	port := uint16(conn.LocalAddr().(*net.UDPAddr).Port)
	srcMAC := podMAC(t, attacker)
	for _, src := range srcs {
		for range spoofTries {
			sendFrame(t, attacker.ns, udpFrame(dstMAC, srcMAC, src, dst, port, []byte(src.String())))
		}
	}
	got := map[netip.Addr]int{}
	buf := make([]byte, 1500)
	for {
		conn.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		n, _, err := conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			return got
		}
		if a, err := netip.ParseAddr(string(buf[:n])); err == nil {
			got[a]++
		}
	}
}

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
			sendFrame(t, attacker.ns, garpFrame(attackerMAC, claimed))
		}
	}
	for range spoofTries {
		sendFrame(t, attacker.ns, naFrame(attackerMAC, dataplane.EUI64LinkLocal(attackerMAC), victim.addr(false)))
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

// sendFrame writes a raw Ethernet frame on eth0 of the namespace.
func sendFrame(t *testing.T, ns string, frame []byte) {
	t.Helper()
	err := netns.Do(ns, func() error {
		l, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return unix.Sendto(fd, frame, 0, &unix.SockaddrLinklayer{Ifindex: l.Attrs().Index, Halen: 6})
	})
	if err != nil {
		t.Fatalf("send a raw frame: %v", err)
	}
}

func ethHeader(dst, src net.HardwareAddr, ethertype uint16) []byte {
	b := append(append([]byte{}, dst...), src...)
	return binary.BigEndian.AppendUint16(b, ethertype)
}

// udpFrame is an Ethernet frame with one UDP datagram, checksums right.
func udpFrame(dstMAC, srcMAC net.HardwareAddr, src, dst netip.Addr, port uint16, payload []byte) []byte {
	udp := binary.BigEndian.AppendUint16(nil, 40000)
	udp = binary.BigEndian.AppendUint16(udp, port)
	udp = binary.BigEndian.AppendUint16(udp, uint16(8+len(payload)))
	udp = append(udp, 0, 0)
	udp = append(udp, payload...)
	if src.Is4() {
		ip := []byte{0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, unix.IPPROTO_UDP, 0, 0}
		binary.BigEndian.PutUint16(ip[2:], uint16(20+len(udp)))
		ip = append(append(ip, src.AsSlice()...), dst.AsSlice()...)
		binary.BigEndian.PutUint16(ip[10:], checksum(ip))
		binary.BigEndian.PutUint16(udp[6:], l4Checksum(src, dst, unix.IPPROTO_UDP, udp))
		return append(append(ethHeader(dstMAC, srcMAC, unix.ETH_P_IP), ip...), udp...)
	}
	binary.BigEndian.PutUint16(udp[6:], l4Checksum(src, dst, unix.IPPROTO_UDP, udp))
	return append(append(ethHeader(dstMAC, srcMAC, unix.ETH_P_IPV6), ipv6Header(src, dst, unix.IPPROTO_UDP, len(udp), 64)...), udp...)
}

func ipv6Header(src, dst netip.Addr, next byte, plen int, hops byte) []byte {
	ip := []byte{0x60, 0, 0, 0, 0, 0, next, hops}
	binary.BigEndian.PutUint16(ip[4:], uint16(plen))
	return append(append(ip, src.AsSlice()...), dst.AsSlice()...)
}

// garpFrame is a broadcast gratuitous ARP reply: claimed is at mac.
func garpFrame(mac net.HardwareAddr, claimed netip.Addr) []byte {
	arp := []byte{0, 1, 0x08, 0, 6, 4, 0, 2}
	arp = append(append(arp, mac...), claimed.AsSlice()...)
	arp = append(append(arp, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff), claimed.AsSlice()...)
	return append(ethHeader(net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, mac, unix.ETH_P_ARP), arp...)
}

// naFrame is an unsolicited neighbour advertisement to all nodes, with
// the override flag: target is at mac.
func naFrame(mac net.HardwareAddr, src, target netip.Addr) []byte {
	allNodes := netip.MustParseAddr("ff02::1")
	icmp := []byte{136, 0, 0, 0, 0x20, 0, 0, 0}
	icmp = append(icmp, target.AsSlice()...)
	icmp = append(append(icmp, 2, 1), mac...) // target link-layer address option
	binary.BigEndian.PutUint16(icmp[2:], l4Checksum(src, allNodes, unix.IPPROTO_ICMPV6, icmp))
	dstMAC := net.HardwareAddr{0x33, 0x33, 0, 0, 0, 1}
	return append(append(ethHeader(dstMAC, mac, unix.ETH_P_IPV6), ipv6Header(src, allNodes, unix.IPPROTO_ICMPV6, len(icmp), 255)...), icmp...)
}

func checksum(b []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}

// l4Checksum is the UDP or ICMPv6 checksum over the pseudo-header.
func l4Checksum(src, dst netip.Addr, proto byte, seg []byte) uint16 {
	ph := append(append([]byte{}, src.AsSlice()...), dst.AsSlice()...)
	if src.Is4() {
		ph = append(ph, 0, proto)
		ph = binary.BigEndian.AppendUint16(ph, uint16(len(seg)))
	} else {
		ph = binary.BigEndian.AppendUint32(ph, uint32(len(seg)))
		ph = append(ph, 0, 0, 0, proto)
	}
	c := checksum(append(ph, seg...))
	if c == 0 && proto == unix.IPPROTO_UDP {
		c = 0xffff
	}
	return c
}
