package policyrules

import (
	"net/netip"
	"slices"
)

// The named sets of the ruleset, rendered from the IR's on first use.

// sharedSet returns the name of the set of prefix and key (its comment
// what, then key), making it with the elements fill gives the first time
// a rule refers to it: every rule that refers to the same key shares the
// one set.
func (b *builder) sharedSet(prefix string, kind setKind, what, key string, fill func() []element) string {
	name := hashName(prefix, key)
	if _, ok := b.rs.sets[name]; !ok {
		b.rs.addrSet(name, kind, what+key).elems = fill()
	}
	return name
}

// peerSet returns the name of the family's set of peer key. The set is
// filled at the end of the build (fillPeerSets), and only if a chain
// still refers to it: a set whose every rule was folded is not written.
func (b *builder) peerSet(key string, fam uint8) string {
	prefix := "peer4"
	if fam == 6 {
		prefix = "peer6"
	}
	b.record(refPeer, key, fam)
	name := hashName(prefix, key)
	if _, ok := b.peerRefs[name]; !ok {
		b.peerRefs[name] = peerRef{key: key, fam: fam}
	}
	return name
}

// peerRef is a peer set a rule named: the IR's key and the family.
type peerRef struct {
	key string
	fam uint8
}

// peerAddrs are the family's addresses of peer set key.
func (b *builder) peerAddrs(key string, fam uint8) []netip.Addr {
	ps := b.peers[key]
	switch {
	case ps == nil:
		return nil
	case fam == 6:
		return ps.V6
	}
	return ps.V4
}

// fillPeerSets writes the peer sets the chains refer to.
func (b *builder) fillPeerSets() {
	for _, c := range b.rs.chains {
		for _, r := range c.rules {
			ref, ok := b.peerRefs[r.peer]
			if !ok || b.rs.sets[r.peer] != nil {
				continue
			}
			kind := kindAddr4
			if ref.fam == 6 {
				kind = kindAddr6
			}
			s := b.rs.addrSet(r.peer, kind, "peers "+ref.key)
			for _, a := range b.peerAddrs(ref.key, ref.fam) {
				s.elems = append(s.elems, element{addr: a.Unmap()})
			}
		}
	}
}

// cidrSet returns the name of the family's set of ipBlock key, or "" if
// the block has no addresses of that family (its key fixes its content,
// so the rules of a block never change with the cluster).
func (b *builder) cidrSet(key string, fam uint8) string {
	b.record(refCIDR, key, fam)
	cs := b.cidrs[key]
	if cs == nil {
		return ""
	}
	kind, prefix, ps := kindCIDR4, "cidr4", cs.V4
	if fam == 6 {
		kind, prefix, ps = kindCIDR6, "cidr6", cs.V6
	}
	if len(ps) == 0 {
		return ""
	}
	name := hashName(prefix, key)
	if _, ok := b.blocks[name]; !ok {
		b.blocks[name] = peerRef{key: key, fam: fam}
	}
	if _, ok := b.rs.sets[name]; !ok {
		s := b.rs.addrSet(name, kind, "ipBlock "+key)
		for _, p := range ps {
			p = unmapPrefix(p)
			end, _ := afterLast(p)
			s.elems = append(s.elems, element{addr: p.Addr(), end: end})
		}
	}
	return name
}

// unmapPrefix is p with an IPv4-mapped address as IPv4, masked.
func unmapPrefix(p netip.Prefix) netip.Prefix {
	bits := p.Bits()
	if p.Addr().Is4In6() {
		bits -= 96
	}
	return netip.PrefixFrom(p.Addr().Unmap(), bits).Masked()
}

func (b *builder) portSet(key string) string {
	b.record(refPorts, key, 0)
	return b.sharedSet("ports", kindPorts, "ports ", key, func() (out []element) {
		if ps := b.ports[key]; ps != nil {
			for _, r := range ps.Ranges {
				out = append(out, element{proto: r.Protocol, first: r.First, last: r.Last})
			}
		}
		return out
	})
}

func (b *builder) namedSet(key string, fam uint8) string {
	b.record(refNamed, key, fam)
	kind, prefix := kindNamed4, "named4"
	if fam == 6 {
		kind, prefix = kindNamed6, "named6"
	}
	return b.sharedSet(prefix, kind, "named port ", key, func() (out []element) {
		if ns := b.named[key]; ns != nil {
			elems := ns.V4
			if fam == 6 {
				elems = ns.V6
			}
			for _, e := range elems {
				out = append(out, element{addr: e.Addr.Unmap(), proto: e.Protocol, first: e.Port, last: e.Port})
			}
		}
		return out
	})
}

// canonical sorts the elements, drops duplicates and merges intervals
// that overlap or touch: the kernel refuses overlapping intervals, and
// a diff needs one spelling of each set.
func (s *set) canonical() {
	slices.SortFunc(s.elems, compareElements)
	s.elems = slices.Compact(s.elems)
	switch s.kind {
	case kindCIDR4, kindCIDR6:
		out := s.elems[:0]
		for _, e := range s.elems {
			if n := len(out); n > 0 && (!out[n-1].end.IsValid() || e.addr.Compare(out[n-1].end) <= 0) {
				if out[n-1].end.IsValid() && (!e.end.IsValid() || e.end.Compare(out[n-1].end) > 0) {
					out[n-1].end = e.end
				}
				continue
			}
			out = append(out, e)
		}
		s.elems = out
	case kindPorts:
		out := s.elems[:0]
		for _, e := range s.elems {
			if n := len(out); n > 0 && out[n-1].proto == e.proto && uint32(e.first) <= uint32(out[n-1].last)+1 {
				out[n-1].last = max(out[n-1].last, e.last)
				continue
			}
			out = append(out, e)
		}
		s.elems = out
	}
}

// afterLast is the first address after p, if there is one.
func afterLast(p netip.Prefix) (netip.Addr, bool) {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	last, _ := netip.AddrFromSlice(b)
	next := last.Next()
	return next, next.IsValid()
}
