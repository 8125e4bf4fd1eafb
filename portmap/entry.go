package portmap

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"

	"github.com/podnet/podnet/dataplane/tag"
)

// Names of the maps and sets of the table. The digit is the IP family of
// the container address the element leads to.
const (
	SetDNAT4   = "dnat4"   // inet_proto . inet_service : ipv4_addr . inet_service
	SetHostIP4 = "hostip4" // ipv4_addr . inet_proto . inet_service : ipv4_addr . inet_service
	SetSNAT4   = "snat4"   // ipv4_addr . ipv4_addr (pod . pod)
	SetDNAT6   = "dnat6"
	SetHostIP6 = "hostip6"
	SetSNAT6   = "snat6"
)

// AllSets lists every map and set of the table.
var AllSets = []string{SetDNAT4, SetHostIP4, SetSNAT4, SetDNAT6, SetHostIP6, SetSNAT6}

// SetsOf lists the maps and sets of one IP family.
func SetsOf(is4 bool) []string {
	if is4 {
		return []string{SetDNAT4, SetHostIP4, SetSNAT4}
	}
	return []string{SetDNAT6, SetHostIP6, SetSNAT6}
}

// EntryKind says what an entry does.
type EntryKind uint8

const (
	// DNAT sends a host port to the container: an element of dnat4,
	// dnat6 (any host address) or hostip4, hostip6 (one host address).
	DNAT EntryKind = iota
	// SNAT masquerades hairpin and localhost traffic to the container:
	// an element of snat4 or snat6.
	SNAT
)

// Entry is one element of the table, described as data.
type Entry struct {
	Kind     EntryKind
	Proto    Protocol   // DNAT only
	HostIP   netip.Addr // DNAT only; the zero Addr for any address
	HostPort uint16     // DNAT only
	PodIP    netip.Addr
	PodPort  uint16 // DNAT only
	// Owner is the attachment the element belongs to, stored as the
	// element's comment (Owner.String), so DEL and GC can find an
	// attachment's elements without any state of their own.
	Owner tag.Owner
}

func (e Entry) is4() bool { return e.PodIP.Is4() }

// Set is the name of the map or set that holds the entry.
func (e Entry) Set() string {
	switch {
	case e.Kind == SNAT && e.is4():
		return SetSNAT4
	case e.Kind == SNAT:
		return SetSNAT6
	case e.HostIP.IsValid() && e.is4():
		return SetHostIP4
	case e.HostIP.IsValid():
		return SetHostIP6
	case e.is4():
		return SetDNAT4
	}
	return SetDNAT6
}

// Key is the element's key, laid out as nftables lays out a
// concatenation: each field padded to a multiple of 4 bytes, ports and
// addresses in network order.
func (e Entry) Key() []byte {
	var b []byte
	if e.Kind == SNAT {
		b = append(b, e.PodIP.AsSlice()...)
		return append(b, e.PodIP.AsSlice()...)
	}
	if e.HostIP.IsValid() {
		b = append(b, e.HostIP.AsSlice()...)
	}
	b = append(b, byte(e.Proto), 0, 0, 0)
	b = binary.BigEndian.AppendUint16(b, e.HostPort)
	return append(b, 0, 0)
}

// Value is the element's data: the container address and port, or nil
// for a set element.
func (e Entry) Value() []byte {
	if e.Kind == SNAT {
		return nil
	}
	b := e.PodIP.AsSlice()
	b = binary.BigEndian.AppendUint16(b, e.PodPort)
	return append(b, 0, 0)
}

// SameElement reports whether e and o are the same element of the same
// map (same key), whatever their data and owner.
func (e Entry) SameElement(o Entry) bool {
	return e.Set() == o.Set() && bytes.Equal(e.Key(), o.Key())
}

func (e Entry) String() string {
	if e.Kind == SNAT {
		return fmt.Sprintf("%s %s (%s)", e.Set(), e.PodIP, e.Owner)
	}
	host := "*"
	if e.HostIP.IsValid() {
		host = e.HostIP.String()
	}
	return fmt.Sprintf("%s %s %s:%d -> %s (%s)", e.Set(), e.Proto, host, e.HostPort, netip.AddrPortFrom(e.PodIP, e.PodPort), e.Owner)
}

// DecodeEntry reads an element of set back into an Entry. The owner is
// zero Owner when the comment is not podnet's.
func DecodeEntry(set string, key, val []byte, comment string) (Entry, error) {
	var e Entry
	e.Owner, _ = tag.ParseOwner(comment)
	alen := 4
	if strings.HasSuffix(set, "6") {
		alen = 16
	}
	addr := func(b []byte) netip.Addr {
		a, _ := netip.AddrFromSlice(b)
		return a
	}
	bad := func() (Entry, error) {
		return Entry{}, fmt.Errorf("portmap: element of %s with key %x and data %x is not one podnet writes", set, key, val)
	}
	switch set {
	case SetSNAT4, SetSNAT6:
		if len(key) != 2*alen || !bytes.Equal(key[:alen], key[alen:]) {
			return bad()
		}
		e.Kind, e.PodIP = SNAT, addr(key[:alen])
		return e, nil
	case SetHostIP4, SetHostIP6:
		if len(key) < alen {
			return bad()
		}
		e.HostIP, key = addr(key[:alen]), key[alen:]
	case SetDNAT4, SetDNAT6:
	default:
		return Entry{}, fmt.Errorf("portmap: no set %q", set)
	}
	if len(key) != 8 || len(val) != alen+4 {
		return bad()
	}
	e.Kind = DNAT
	e.Proto = Protocol(key[0])
	e.HostPort = binary.BigEndian.Uint16(key[4:6])
	e.PodIP = addr(val[:alen])
	e.PodPort = binary.BigEndian.Uint16(val[alen : alen+2])
	return e, nil
}
