package nflog

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/mdlayher/netlink"
)

// message builds the data of an NFULNL_MSG_PACKET message as the kernel
// writes it.
func message(t *testing.T, family uint8, prefix string, payload []byte) []byte {
	t.Helper()
	ether := uint16(etherIPv4)
	if family == familyIPv6 {
		ether = etherIPv6
	}
	return etherMessage(t, family, ether, prefix, payload)
}

// etherMessage is message with the packet header's EtherType.
func etherMessage(t *testing.T, family uint8, ether uint16, prefix string, payload []byte) []byte {
	t.Helper()
	ae := netlink.NewAttributeEncoder()
	ae.Bytes(attrPacketHdr, append(binary.BigEndian.AppendUint16(nil, ether), 2, 0)) // hook 2: forward
	ae.Bytes(attrInDev, binary.BigEndian.AppendUint32(nil, 7))
	if prefix != "" {
		ae.Bytes(attrPrefix, append([]byte(prefix), 0))
	}
	if payload != nil {
		ae.Bytes(attrPayload, payload)
	}
	b, err := ae.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte{family, 0, 0, 100}, b...)
}

func ipv4(proto uint8, src, dst string, fragOff uint16, transport []byte) []byte {
	h := make([]byte, 20)
	h[0] = 0x45
	binary.BigEndian.PutUint16(h[6:8], fragOff)
	h[9] = proto
	s, d := netip.MustParseAddr(src).As4(), netip.MustParseAddr(dst).As4()
	copy(h[12:], s[:])
	copy(h[16:], d[:])
	return append(h, transport...)
}

func ipv6(next uint8, src, dst string, rest []byte) []byte {
	h := make([]byte, 40)
	h[0] = 0x60
	h[6] = next
	s, d := netip.MustParseAddr(src).As16(), netip.MustParseAddr(dst).As16()
	copy(h[8:], s[:])
	copy(h[24:], d[:])
	return append(h, rest...)
}

// arp is an ARP request for IPv4 over Ethernet.
func arp(sender, target string) []byte {
	h := []byte{0, 1, 8, 0, 6, 4, 0, 1, 2, 0, 0, 0, 0, 1}
	s, d := netip.MustParseAddr(sender).As4(), netip.MustParseAddr(target).As4()
	h = append(h, s[:]...)
	h = append(h, make([]byte, 6)...)
	return append(h, d[:]...)
}

func ports(src, dst uint16) []byte {
	return binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(nil, src), dst)
}

func TestParsePacket(t *testing.T) {
	hopByHop := append([]byte{17, 0, 1, 4, 0, 0, 0, 0}, ports(5353, 53)...) // next UDP, 8 bytes
	tests := []struct {
		name    string
		data    []byte
		want    Record
		wantErr bool
	}{{
		name: "IPv4 TCP",
		data: message(t, familyIPv4, "podnet-deny in x/db", ipv4(6, "10.244.0.1", "10.244.0.2", 0x4000, append(ports(40000, 5432), 0, 0, 0, 0))),
		want: Record{EtherType: etherIPv4, Prefix: "podnet-deny in x/db", Hook: 2, InDev: 7, Src: netip.MustParseAddr("10.244.0.1"), Dst: netip.MustParseAddr("10.244.0.2"),
			Protocol: 6, SrcPort: 40000, DstPort: 5432},
	}, {
		name: "IPv4 later fragment: no ports",
		data: message(t, familyIPv4, "p", ipv4(17, "10.0.0.1", "10.0.0.2", 0x0010, ports(1, 2))),
		want: Record{EtherType: etherIPv4, Prefix: "p", Hook: 2, InDev: 7, Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"), Protocol: 17},
	}, {
		name: "IPv4 copied short of the ports",
		data: message(t, familyIPv4, "p", ipv4(6, "10.0.0.1", "10.0.0.2", 0, []byte{1, 2})),
		want: Record{EtherType: etherIPv4, Prefix: "p", Hook: 2, InDev: 7, Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"), Protocol: 6},
	}, {
		name: "IPv6 UDP behind a hop-by-hop header",
		data: message(t, familyIPv6, "podnet-deny out y/c", ipv6(0, "fd00::1", "fd00::2", hopByHop)),
		want: Record{EtherType: etherIPv6, Prefix: "podnet-deny out y/c", Hook: 2, InDev: 7, Src: netip.MustParseAddr("fd00::1"), Dst: netip.MustParseAddr("fd00::2"),
			Protocol: 17, SrcPort: 5353, DstPort: 53},
	}, {
		name: "IPv6 SCTP, no prefix",
		data: message(t, familyIPv6, "", ipv6(132, "fd00::1", "fd00::2", ports(9, 10))),
		want: Record{EtherType: etherIPv6, Hook: 2, InDev: 7, Src: netip.MustParseAddr("fd00::1"), Dst: netip.MustParseAddr("fd00::2"), Protocol: 132, SrcPort: 9, DstPort: 10},
	}, {
		name: "IPv6 ICMPv6: no ports",
		data: message(t, familyIPv6, "p", ipv6(58, "fd00::1", "fd00::2", []byte{128, 0, 0, 0})),
		want: Record{EtherType: etherIPv6, Prefix: "p", Hook: 2, InDev: 7, Src: netip.MustParseAddr("fd00::1"), Dst: netip.MustParseAddr("fd00::2"), Protocol: 58},
	}, {
		name: "bridge IPv4 UDP (the source guard of a bridge port)",
		data: etherMessage(t, familyBridge, etherIPv4, "podnet-guard", ipv4(17, "10.0.0.99", "10.0.0.1", 0, ports(1, 9999))),
		want: Record{EtherType: etherIPv4, Prefix: "podnet-guard", Hook: 2, InDev: 7, Src: netip.MustParseAddr("10.0.0.99"), Dst: netip.MustParseAddr("10.0.0.1"),
			Protocol: 17, SrcPort: 1, DstPort: 9999},
	}, {
		name: "bridge IPv6 TCP",
		data: etherMessage(t, familyBridge, etherIPv6, "podnet-guard", ipv6(6, "fd00::99", "fd00::1", ports(2, 80))),
		want: Record{EtherType: etherIPv6, Prefix: "podnet-guard", Hook: 2, InDev: 7, Src: netip.MustParseAddr("fd00::99"), Dst: netip.MustParseAddr("fd00::1"),
			Protocol: 6, SrcPort: 2, DstPort: 80},
	}, {
		name: "bridge ARP: sender and target",
		data: etherMessage(t, familyBridge, etherARP, "podnet-guard", arp("10.0.0.99", "10.0.0.1")),
		want: Record{EtherType: etherARP, Prefix: "podnet-guard", Hook: 2, InDev: 7, Src: netip.MustParseAddr("10.0.0.99"), Dst: netip.MustParseAddr("10.0.0.1")},
	},
		{name: "bridge, another EtherType", data: etherMessage(t, familyBridge, 0x88cc, "p", make([]byte, 40)), wantErr: true},
		{name: "bridge, short ARP", data: etherMessage(t, familyBridge, etherARP, "p", make([]byte, 20)), wantErr: true},
		{name: "no payload", data: message(t, familyIPv4, "p", nil), wantErr: true},
		{name: "not IPv4", data: message(t, familyIPv4, "p", ipv6(6, "fd00::1", "fd00::2", nil)), wantErr: true},
		{name: "short header", data: message(t, familyIPv6, "p", make([]byte, 20)), wantErr: true},
		{name: "cut attribute", data: message(t, familyIPv4, "p", ipv4(6, "10.0.0.1", "10.0.0.2", 0, nil))[:30], wantErr: true},
		{name: "empty", data: []byte{2, 0}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parsePacket(tt.data)
			if (err != nil) != tt.wantErr {
				t.Fatalf("error %v, want error %v", err, tt.wantErr)
			}
			if err == nil && got != tt.want {
				t.Errorf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// FuzzParsePacket: no input makes the parser panic.
func FuzzParsePacket(f *testing.F) {
	f.Add([]byte{2, 0, 0, 1, 8, 0, 10, 0, 'p', 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) { _, _ = parsePacket(b) })
}
