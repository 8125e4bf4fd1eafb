package testutil

import (
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/podnet/podnet/netns"
)

// Raw frames, for tests that send what a pod with CAP_NET_RAW can send
// (any source address, forged ARP and neighbour advertisements) and
// check that the node does not let it through.

// SendFrame writes a raw Ethernet frame on eth0 of the namespace.
func SendFrame(t testing.TB, ns string, frame []byte) {
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

// UDPFrame is an Ethernet frame with one UDP datagram, checksums right.
func UDPFrame(dstMAC, srcMAC net.HardwareAddr, src, dst netip.Addr, port uint16, payload []byte) []byte {
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

// GARPFrame is a broadcast gratuitous ARP reply: claimed is at mac.
func GARPFrame(mac net.HardwareAddr, claimed netip.Addr) []byte {
	arp := []byte{0, 1, 0x08, 0, 6, 4, 0, 2}
	arp = append(append(arp, mac...), claimed.AsSlice()...)
	arp = append(append(arp, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff), claimed.AsSlice()...)
	return append(ethHeader(net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, mac, unix.ETH_P_ARP), arp...)
}

// NAFrame is an unsolicited neighbour advertisement to all nodes, with
// the override flag: target is at mac.
func NAFrame(mac net.HardwareAddr, src, target netip.Addr) []byte {
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

// UDPArrivals sends tries UDP datagrams from each source in srcs, as raw
// frames on eth0 of the namespace from (Ethernet srcMAC to dstMAC), to
// dst in the namespace to, where a socket listens; it returns by source
// how many the socket received. Each datagram carries its source as
// text, so a rewritten source is still counted as the one sent.
func UDPArrivals(t testing.TB, from, to string, srcMAC, dstMAC net.HardwareAddr, dst netip.Addr, srcs []netip.Addr, tries int) map[netip.Addr]int {
	t.Helper()
	network := "udp6"
	if dst.Is4() {
		network = "udp4"
	}
	var conn *net.UDPConn
	if err := netns.Do(to, func() (err error) {
		conn, err = net.ListenUDP(network, &net.UDPAddr{IP: dst.AsSlice()})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	port := uint16(conn.LocalAddr().(*net.UDPAddr).Port)
	for _, src := range srcs {
		for range tries {
			SendFrame(t, from, UDPFrame(dstMAC, srcMAC, src, dst, port, []byte(src.String())))
		}
	}
	got := map[netip.Addr]int{}
	buf := make([]byte, 1500)
	for {
		conn.SetReadDeadline(time.Now().Add(time.Second))
		n, _, err := conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			return got
		}
		if a, err := netip.ParseAddr(string(buf[:n])); err == nil {
			got[a]++
		}
	}
}
