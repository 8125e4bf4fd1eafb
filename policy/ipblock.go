package policy

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	networkingv1 "k8s.io/api/networking/v1"
)

// cidrBlock is an ipBlock compiled: the CIDR minus its excepts as an
// exact list of disjoint prefixes in address order, ready for an
// nftables interval set of the CIDR's family.
type cidrBlock struct {
	key      string
	prefixes []netip.Prefix
}

// compileIPBlock compiles b. A CIDR or an except that does not parse makes
// the whole block match nothing (dropping only the except would allow
// what it was written to keep out). A CIDR with host bits set is taken as
// its network, as the API server has long accepted it.
func compileIPBlock(b *networkingv1.IPBlock) (cidrBlock, error) {
	cidr, err := netip.ParsePrefix(b.CIDR)
	if err != nil {
		return cidrBlock{}, fmt.Errorf("ipBlock cidr: %w", err)
	}
	cidr = cidr.Masked()
	var excepts []netip.Prefix
	for _, e := range b.Except {
		p, err := netip.ParsePrefix(e)
		if err != nil {
			return cidrBlock{}, fmt.Errorf("ipBlock except: %w", err)
		}
		p = p.Masked()
		// An except outside the CIDR takes nothing away; the API server
		// refuses it, and the key stays canonical without it.
		if p.Addr().Is4() == cidr.Addr().Is4() && p.Overlaps(cidr) {
			excepts = append(excepts, p)
		}
	}
	slices.SortFunc(excepts, comparePrefixes)
	excepts = slices.Compact(excepts)
	key := cidr.String()
	if len(excepts) > 0 {
		s := make([]string, len(excepts))
		for i, e := range excepts {
			s[i] = e.String()
		}
		key += " except " + strings.Join(s, " ")
	}
	return cidrBlock{key: key, prefixes: subtractPrefixes(nil, cidr, excepts)}, nil
}

// subtractPrefixes appends to out the prefixes that cover p minus the
// union of excepts, in address order. Halving p until each half is either
// clear of every except or inside one gives the smallest such cover.
func subtractPrefixes(out []netip.Prefix, p netip.Prefix, excepts []netip.Prefix) []netip.Prefix {
	var inside []netip.Prefix
	for _, e := range excepts {
		if !e.Overlaps(p) {
			continue
		}
		if e.Bits() <= p.Bits() {
			return out // e covers p
		}
		inside = append(inside, e)
	}
	if len(inside) == 0 {
		return append(out, p)
	}
	lo, hi := halves(p)
	out = subtractPrefixes(out, lo, inside)
	return subtractPrefixes(out, hi, inside)
}

// halves splits p (not a single address: an except overlapping it and
// longer than it exists) into its two halves.
func halves(p netip.Prefix) (netip.Prefix, netip.Prefix) {
	bits := p.Bits() + 1
	lo := netip.PrefixFrom(p.Addr(), bits)
	a := p.Addr().As16()
	n := bits - 1
	if p.Addr().Is4() {
		n += 96
	}
	a[n/8] |= 0x80 >> (n % 8)
	hiAddr := netip.AddrFrom16(a)
	if p.Addr().Is4() {
		hiAddr = hiAddr.Unmap()
	}
	return lo, netip.PrefixFrom(hiAddr, bits)
}

func comparePrefixes(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return a.Bits() - b.Bits()
}
