package nflog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// nfnetlink_log's message attributes (linux/netfilter/nfnetlink_log.h).
const (
	attrPacketHdr = 1  // NFULA_PACKET_HDR: hw_protocol be16, hook u8, pad
	attrInDev     = 4  // NFULA_IFINDEX_INDEV, be32
	attrOutDev    = 5  // NFULA_IFINDEX_OUTDEV, be32
	attrPayload   = 9  // NFULA_PAYLOAD: the packet from its network header
	attrPrefix    = 10 // NFULA_PREFIX: NUL-terminated
)

// IP protocol numbers the parser reads ports of.
const (
	protoTCP  = 6
	protoUDP  = 17
	protoSCTP = 132
)

// Record is one logged packet.
type Record struct {
	// Prefix is the log statement's prefix.
	Prefix string
	// Hook is the netfilter hook the packet was logged at (NF_INET_*).
	Hook uint8
	// EtherType is the packet's link-layer protocol (0x0800, 0x86dd;
	// 0x0806 for ARP, which a bridge family's rule may log: then Src
	// and Dst are the sender's and the target's IPv4 addresses).
	EtherType uint16
	// InDev and OutDev are the interface indexes, 0 when none.
	InDev, OutDev uint32
	Src, Dst      netip.Addr
	// Protocol is the transport protocol (IPv6 extension headers
	// skipped); SrcPort and DstPort are set for TCP, UDP and SCTP when
	// the packet was copied far enough, else 0.
	Protocol         uint8
	SrcPort, DstPort uint16
}

// errShort is a message or packet cut before what must be there.
var errShort = errors.New("nflog: message too short")

// parsePacket reads the data of one NFULNL_MSG_PACKET message: the
// nfgenmsg header, then attributes.
func parsePacket(data []byte) (Record, error) {
	var r Record
	if len(data) < 4 {
		return r, errShort
	}
	family := data[0]
	var payload []byte
	for b := data[4:]; len(b) > 0; {
		if len(b) < 4 {
			return r, errShort
		}
		n := int(binary.NativeEndian.Uint16(b[0:2]))
		typ := binary.NativeEndian.Uint16(b[2:4]) &^ (1<<15 | 1<<14) // NLA_F_NESTED, NLA_F_NET_BYTEORDER
		if n < 4 || n > len(b) {
			return r, fmt.Errorf("nflog: attribute %d of length %d in %d bytes", typ, n, len(b))
		}
		v := b[4:n]
		switch typ {
		case attrPacketHdr:
			if len(v) >= 3 {
				r.EtherType = binary.BigEndian.Uint16(v[0:2])
				r.Hook = v[2]
			}
		case attrInDev:
			if len(v) >= 4 {
				r.InDev = binary.BigEndian.Uint32(v)
			}
		case attrOutDev:
			if len(v) >= 4 {
				r.OutDev = binary.BigEndian.Uint32(v)
			}
		case attrPayload:
			payload = v
		case attrPrefix:
			r.Prefix, _, _ = strings.Cut(string(v), "\x00")
		}
		b = b[min(align4(n), len(b)):]
	}
	if payload == nil {
		return r, errors.New("nflog: no payload (is the group's copy mode packet?)")
	}
	return r, r.parseNetwork(family, payload)
}

func align4(n int) int { return (n + 3) &^ 3 }

// Address families of nfgenmsg (NFPROTO_IPV4, NFPROTO_IPV6,
// NFPROTO_BRIDGE), and the EtherTypes a bridge family's packet is read
// by.
const (
	familyIPv4   = 2
	familyIPv6   = 10
	familyBridge = 7
	etherIPv4    = 0x0800
	etherIPv6    = 0x86dd
	etherARP     = 0x0806
)

// parseNetwork reads the network and transport headers of p, a packet of
// family. A packet copied short of its transport header keeps what could
// be read.
func (r *Record) parseNetwork(family uint8, p []byte) error {
	if family == familyBridge {
		// A bridge family's rule sees every frame: the EtherType says
		// what the payload (from the network header on) is.
		switch r.EtherType {
		case etherIPv4:
			family = familyIPv4
		case etherIPv6:
			family = familyIPv6
		case etherARP:
			return r.parseARP(p)
		}
	}
	var rest []byte
	switch family {
	case familyIPv4:
		if len(p) < 20 || p[0]>>4 != 4 {
			return fmt.Errorf("nflog: not an IPv4 header (%d bytes)", len(p))
		}
		ihl := int(p[0]&0x0f) * 4
		r.Src = netip.AddrFrom4([4]byte(p[12:16]))
		r.Dst = netip.AddrFrom4([4]byte(p[16:20]))
		r.Protocol = p[9]
		// A fragment after the first carries no transport header.
		if binary.BigEndian.Uint16(p[6:8])&0x1fff != 0 || ihl < 20 || ihl > len(p) {
			return nil
		}
		rest = p[ihl:]
	case familyIPv6:
		if len(p) < 40 || p[0]>>4 != 6 {
			return fmt.Errorf("nflog: not an IPv6 header (%d bytes)", len(p))
		}
		r.Src = netip.AddrFrom16([16]byte(p[8:24]))
		r.Dst = netip.AddrFrom16([16]byte(p[24:40]))
		r.Protocol, rest = skipExtensions(p[6], p[40:])
		if rest == nil {
			return nil
		}
	default:
		return fmt.Errorf("nflog: family %d", family)
	}
	switch r.Protocol {
	case protoTCP, protoUDP, protoSCTP:
		if len(rest) >= 4 {
			r.SrcPort = binary.BigEndian.Uint16(rest[0:2])
			r.DstPort = binary.BigEndian.Uint16(rest[2:4])
		}
	}
	return nil
}

// skipExtensions walks IPv6 extension headers from next, the first
// header's type, over b; it returns the upper-layer protocol and its
// header, or nil when it cannot be reached (a later fragment, a cut
// copy).
func skipExtensions(next uint8, b []byte) (uint8, []byte) {
	for {
		switch next {
		case 0, 43, 60: // hop-by-hop, routing, destination options
			if len(b) < 8 {
				return next, nil
			}
			n := (int(b[1]) + 1) * 8
			if n > len(b) {
				return b[0], nil
			}
			next, b = b[0], b[n:]
		case 44: // fragment
			if len(b) < 8 {
				return next, nil
			}
			if binary.BigEndian.Uint16(b[2:4])&0xfff8 != 0 {
				return b[0], nil // not the first fragment
			}
			next, b = b[0], b[8:]
		default:
			return next, b
		}
	}
}

// parseARP reads an ARP packet for IPv4 over Ethernet: Src is the
// sender's protocol address, Dst the target's; Protocol stays 0.
func (r *Record) parseARP(p []byte) error {
	if len(p) < 28 || p[4] != 6 || p[5] != 4 {
		return fmt.Errorf("nflog: not an ARP packet for IPv4 over Ethernet (%d bytes)", len(p))
	}
	r.Src = netip.AddrFrom4([4]byte(p[14:18]))
	r.Dst = netip.AddrFrom4([4]byte(p[24:28]))
	return nil
}
