package cluster

import (
	"encoding/binary"
	"net/netip"
	"testing"
)

// frame4 is an Ethernet frame of an IPv4 packet from src to dst of
// protocol proto whose transport header starts with l4.
func frame4(src, dst string, proto uint8, l4 []byte) []byte {
	f := make([]byte, 14, 14+20+len(l4))
	binary.BigEndian.PutUint16(f[12:], 0x0800)
	return append(f, ip4(src, dst, proto, l4)...)
}

func ip4(src, dst string, proto uint8, l4 []byte) []byte {
	h := make([]byte, 20)
	h[0], h[9] = 0x45, proto
	binary.BigEndian.PutUint16(h[2:], uint16(20+len(l4)))
	s, d := netip.MustParseAddr(src).As4(), netip.MustParseAddr(dst).As4()
	copy(h[12:], s[:])
	copy(h[16:], d[:])
	return append(h, l4...)
}

func ports(src, dst uint16) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint16(b, src)
	binary.BigEndian.PutUint16(b[2:], dst)
	return b
}

func TestParseFrame(t *testing.T) {
	udp := frame4("198.18.0.1", "198.18.0.2", 17, ports(51871, 51871))
	// Port unreachable (type 3 code 3) about that datagram.
	icmp := frame4("198.18.0.2", "198.18.0.1", 1, append([]byte{3, 3, 0, 0, 0, 0, 0, 0}, ip4("198.18.0.1", "198.18.0.2", 17, ports(51871, 51871))...))
	v6 := make([]byte, 14+40+4)
	binary.BigEndian.PutUint16(v6[12:], 0x86dd)
	v6[14], v6[14+6] = 0x60, 6
	a, b := netip.MustParseAddr("fd00::1").As16(), netip.MustParseAddr("fd00::2").As16()
	copy(v6[14+8:], a[:])
	copy(v6[14+24:], b[:])
	binary.BigEndian.PutUint16(v6[14+40:], 443)
	binary.BigEndian.PutUint16(v6[14+42:], 8080)
	arp := make([]byte, 42)
	binary.BigEndian.PutUint16(arp[12:], 0x0806)

	for _, tc := range []struct {
		name string
		f    []byte
		ok   bool
		want string
	}{
		{"udp", udp, true, "198.18.0.1:51871 -> 198.18.0.2:51871 proto 17"},
		{"icmp quoting udp", icmp, true, "198.18.0.2:0 -> 198.18.0.1:0 proto 1 quoting 198.18.0.1:51871 -> 198.18.0.2:51871 proto 17"},
		{"tcp over ipv6", v6, true, "fd00::1:443 -> fd00::2:8080 proto 6"},
		{"arp", arp, false, ""},
		{"short", udp[:20], false, ""},
		{"ip header cut", udp[:14+12], false, ""},
	} {
		p, ok := ParseFrame(tc.f)
		if ok != tc.ok || ok && p.String() != tc.want {
			t.Errorf("%s: %q, %v; want %q, %v", tc.name, p, ok, tc.want, tc.ok)
		}
	}
}
