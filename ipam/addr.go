package ipam

import (
	"encoding/binary"
	"math/bits"
	"net/netip"
)

// addUint returns a + v<<shift, wrapping within the address family.
// v<<shift may exceed 64 bits for IPv6, hence the 128-bit arithmetic.
func addUint(a netip.Addr, v uint64, shift int) netip.Addr {
	b := a.As16()
	hi := binary.BigEndian.Uint64(b[:8])
	lo := binary.BigEndian.Uint64(b[8:])
	var addHi, addLo uint64
	switch {
	case shift == 0:
		addLo = v
	case shift < 64:
		addLo = v << shift
		addHi = v >> (64 - shift)
	default:
		addHi = v << (shift - 64)
	}
	lo, carry := bits.Add64(lo, addLo, 0)
	hi, _ = bits.Add64(hi, addHi, carry)
	binary.BigEndian.PutUint64(b[:8], hi)
	binary.BigEndian.PutUint64(b[8:], lo)
	r := netip.AddrFrom16(b)
	if a.Is4() {
		return r.Unmap()
	}
	return r
}

// low16 returns the lowest 16 bits of a; block ordinals live there since a
// block has at most 1<<maxBlockHostBits addresses.
func low16(a netip.Addr) int {
	b := a.As16()
	return int(b[14])<<8 | int(b[15])
}

// withLow16 returns a with its lowest 16 bits ORed with v.
func withLow16(a netip.Addr, v int) netip.Addr {
	if a.Is4() {
		b := a.As4()
		b[2] |= byte(v >> 8)
		b[3] |= byte(v)
		return netip.AddrFrom4(b)
	}
	b := a.As16()
	b[14] |= byte(v >> 8)
	b[15] |= byte(v)
	return netip.AddrFrom16(b)
}
