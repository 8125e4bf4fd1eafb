package testutil

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/google/nftables"
)

// SetContents renders a set's elements: addresses, or for an interval
// set its intervals, as prefixes where they are ones.
func SetContents(s *nftables.Set, elems []nftables.SetElement) []string {
	type bound struct {
		a   netip.Addr
		end bool
	}
	var bs []bound
	var out []string
	for _, e := range elems {
		a, ok := netip.AddrFromSlice(e.Key)
		if !ok {
			out = append(out, fmt.Sprintf("key %x", e.Key))
			continue
		}
		if !s.Interval {
			out = append(out, a.Unmap().String())
			continue
		}
		bs = append(bs, bound{a.Unmap(), e.IntervalEnd})
	}
	// By address; at one address an interval's end comes before the
	// start of the next.
	slices.SortFunc(bs, func(x, y bound) int {
		if c := x.a.Compare(y.a); c != 0 {
			return c
		}
		if x.end == y.end {
			return 0
		}
		if x.end {
			return -1
		}
		return 1
	})
	for i := 0; i < len(bs); i++ {
		switch {
		case bs[i].end:
			out = append(out, "end "+bs[i].a.String()+" without a start")
		case i+1 < len(bs) && bs[i+1].end:
			out = append(out, interval(bs[i].a, bs[i+1].a, true))
			i++
		default: // open to the top of the address space
			out = append(out, interval(bs[i].a, netip.Addr{}, false))
		}
	}
	return out
}

// interval renders [first, end) (end absent: to the top of the address
// space) as a prefix if it is one.
func interval(first, end netip.Addr, hasEnd bool) string {
	for bits := 0; bits <= first.BitLen(); bits++ {
		p := netip.PrefixFrom(first, bits)
		if p.Masked().Addr() != first {
			continue
		}
		next, ok := afterPrefix(p)
		if ok == hasEnd && (!ok || next == end) {
			return p.String()
		}
	}
	if !hasEnd {
		return first.String() + "-top"
	}
	return first.String() + "-" + end.String()
}

// afterPrefix is the first address after p, if there is one.
func afterPrefix(p netip.Prefix) (netip.Addr, bool) {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	last, _ := netip.AddrFromSlice(b)
	next := last.Next()
	return next, next.IsValid()
}
