package dataplane

import (
	"crypto/sha256"
	"encoding/hex"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/podnet/podnet/dataplane/tag"
)

// GuardTableName is the netdev-family table of the source guards: one
// base chain per pod interface, hooked at the ingress of its host end,
// so that it sees every frame the pod sends before the bridge, the
// host's IP stack or conntrack does, and costs nothing to any other
// interface.
const GuardTableName = "podnet"

// guardPriority runs the guard before any other ingress hook.
const guardPriority = -500

// Guard is what one pod interface may send: frames from its own MAC,
// IPv4 and IPv6 from its own addresses (and Allowed), ARP that speaks
// for its own IPv4 addresses only, neighbour advertisements for its own
// IPv6 addresses only, no router advertisement or redirect, and no other
// EtherType (VLAN tags included).
type Guard struct {
	Owner  tag.Owner
	HostIf string // the host end of the pod's veth, where the hook sits
	PodMAC net.HardwareAddr
	Addrs  []netip.Addr
	// Allowed are further source prefixes the pod may send from (a pod
	// that routes for others); their family needs no address of the pod.
	Allowed []netip.Prefix
}

// guardObjects are the nftables objects of one guard.
type guardObjects struct {
	table *nftables.Table
	chain *nftables.Chain
}

func guardChainName(hostIf string) string { return "guard-" + hostIf }

func newGuardObjects(hostIf string) *guardObjects {
	t := &nftables.Table{Name: GuardTableName, Family: nftables.TableFamilyNetdev}
	policy := nftables.ChainPolicyAccept
	return &guardObjects{
		table: t,
		chain: &nftables.Chain{
			Name:     guardChainName(hostIf),
			Table:    t,
			Type:     nftables.ChainTypeFilter,
			Hooknum:  nftables.ChainHookIngress,
			Priority: nftables.ChainPriorityRef(guardPriority),
			Policy:   &policy,
			Device:   hostIf,
		},
	}
}

// guardTagPrefix starts the user data of a guard's first rule, which
// names the owner (for GC) and a digest of what the rules allow (for
// CHECK and a repeated ADD).
const guardTagPrefix = "podnet guard v1 "

func (g Guard) tag() []byte {
	return []byte(guardTagPrefix + g.Owner.String() + " " + g.digest())
}

// digest covers everything the rules are made from, in a canonical order.
func (g Guard) digest() string {
	var parts []string
	parts = append(parts, g.HostIf, g.PodMAC.String())
	for _, a := range g.Addrs {
		parts = append(parts, "a="+a.Unmap().String())
	}
	for _, p := range g.Allowed {
		parts = append(parts, "p="+p.Masked().String())
	}
	slices.Sort(parts[2:])
	h := sha256.Sum256([]byte(strings.Join(parts, ",")))
	return hex.EncodeToString(h[:8])
}

// parseGuardTag reads the owner and digest from a first rule's user data.
func parseGuardTag(b []byte) (owner tag.Owner, digest string, ok bool) {
	rest, ok := strings.CutPrefix(string(b), guardTagPrefix)
	if !ok {
		return tag.Owner{}, "", false
	}
	i := strings.LastIndexByte(rest, ' ')
	if i < 0 {
		return tag.Owner{}, "", false
	}
	owner, ok = tag.ParseOwner(rest[:i])
	return owner, rest[i+1:], ok
}

// guardSources are the prefixes of each family the pod may send from,
// and the IPv6 addresses it may advertise.
type guardSources struct {
	src4, arp4, src6, own6 []netip.Prefix
}

func (g Guard) sources() guardSources {
	var s guardSources
	for _, a := range g.Addrs {
		a = a.Unmap()
		if a.Is4() {
			s.src4 = append(s.src4, netip.PrefixFrom(a, 32))
		} else {
			s.src6 = append(s.src6, netip.PrefixFrom(a, 128))
			s.own6 = append(s.own6, netip.PrefixFrom(a, 128))
		}
	}
	for _, p := range g.Allowed {
		if p.Addr().Is4() {
			s.src4 = append(s.src4, p.Masked())
		} else {
			s.src6 = append(s.src6, p.Masked())
		}
	}
	if len(s.src4) > 0 {
		// An ARP probe (sender 0.0.0.0) updates no one's cache.
		s.arp4 = append(slices.Clone(s.src4), netip.MustParsePrefix("0.0.0.0/32"))
	}
	if len(s.src6) > 0 {
		ll := netip.PrefixFrom(LinkLocalOf(g.PodMAC), 128)
		s.src6 = append(s.src6, ll)
		s.own6 = append(s.own6, ll)
	}
	s.src4, s.arp4, s.src6, s.own6 = mergePrefixes(s.src4), mergePrefixes(s.arp4), mergePrefixes(s.src6), mergePrefixes(s.own6)
	return s
}

// mergePrefixes drops the prefixes that another one holds, so that an
// interval set never gets overlapping elements (the kernel refuses them).
func mergePrefixes(ps []netip.Prefix) []netip.Prefix {
	slices.SortFunc(ps, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	var out []netip.Prefix
	for _, p := range ps {
		if len(out) > 0 && out[len(out)-1].Overlaps(p) {
			continue // sorted: the earlier one is the wider, or equal
		}
		out = append(out, p)
	}
	return out
}

// Offsets of the fields the guard reads.
const (
	offEtherSrc  = 6  // link-layer header
	offARPSender = 8  // ARP for Ethernet and IPv4: sender MAC, then IPv4
	offARPSendIP = 14 //
	offIPv4Src   = 12
	offIPv6Src   = 8
	offNATarget  = 8 // ICMPv6 neighbour advertisement, from its header
)

const (
	icmp6RouterAdvert   = 134
	icmp6NeighborAdvert = 136
	icmp6Redirect       = 137
)

// guardRules are the chain's rules, in order; sets are the anonymous
// sets they look up, to be added in the same batch before them.
//
//	ether saddr != MAC drop
//	meta protocol ip ip saddr @src4 accept
//	meta protocol ip6 meta l4proto != ipv6-icmp ip6 saddr @src6 accept
//	meta protocol ip6 meta l4proto ipv6-icmp icmpv6 type { nd-router-advert, nd-redirect } drop
//	meta protocol ip6 meta l4proto ipv6-icmp icmpv6 type nd-neighbor-advert nd target != @own6 drop
//	meta protocol ip6 ip6 saddr @src6 accept
//	meta protocol arp arp saddr ether MAC arp saddr ip @arp4 accept
//	drop
//
// The common case, IPv4 or IPv6 data, takes the first two or three
// rules. A family the pod has no source of has no accepting rule.
func (g Guard) rules(o *guardObjects) (sets []*nftables.Set, setElems [][]nftables.SetElement, rules []*nftables.Rule) {
	s := g.sources()
	var nextID uint32
	anon := func(key nftables.SetDatatype, ps []netip.Prefix) *nftables.Set {
		nextID++
		// Addresses alone (the usual pod) make a hash set; only a wider
		// allowed prefix needs an interval set, which costs the kernel
		// several times more to build: it was most of the guard's share
		// of an ADD.
		interval := slices.ContainsFunc(ps, func(p netip.Prefix) bool { return !p.IsSingleIP() })
		set := &nftables.Set{
			Table: o.table, ID: nextID, Name: "__set%d", KeyType: key,
			Anonymous: true, Constant: true, Interval: interval,
		}
		var elems []nftables.SetElement
		for _, p := range ps {
			if !interval {
				elems = append(elems, nftables.SetElement{Key: p.Addr().AsSlice()})
				continue
			}
			elems = append(elems, intervalElements(p)...)
		}
		sets = append(sets, set)
		setElems = append(setElems, elems)
		return set
	}
	rule := func(exprs ...expr.Any) {
		r := &nftables.Rule{Table: o.table, Chain: o.chain, Exprs: exprs}
		if len(rules) == 0 {
			r.UserData = g.tag()
		}
		rules = append(rules, r)
	}
	drop := &expr.Verdict{Kind: expr.VerdictDrop}
	accept := &expr.Verdict{Kind: expr.VerdictAccept}
	proto := func(ethertype uint16) []expr.Any {
		return []expr.Any{
			&expr.Meta{Key: expr.MetaKeyPROTOCOL, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(ethertype)},
		}
	}
	load := func(base expr.PayloadBase, off, n uint32) expr.Any {
		return &expr.Payload{DestRegister: 1, Base: base, Offset: off, Len: n}
	}
	in := func(set *nftables.Set, invert bool) expr.Any {
		return &expr.Lookup{SourceRegister: 1, SetName: set.Name, SetID: set.ID, Invert: invert}
	}
	l4 := func(op expr.CmpOp, p byte) []expr.Any {
		return []expr.Any{
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
			&expr.Cmp{Op: op, Register: 1, Data: []byte{p}},
		}
	}
	icmp6Type := func(t byte) []expr.Any {
		return []expr.Any{load(expr.PayloadBaseTransportHeader, 0, 1), &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{t}}}
	}
	join := func(parts ...[]expr.Any) []expr.Any { return slices.Concat(parts...) }

	rule(load(expr.PayloadBaseLLHeader, offEtherSrc, 6), &expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: g.PodMAC}, drop)
	if len(s.src4) > 0 {
		rule(join(proto(unix.ETH_P_IP), []expr.Any{load(expr.PayloadBaseNetworkHeader, offIPv4Src, 4), in(anon(nftables.TypeIPAddr, s.src4), false), accept})...)
	}
	if len(s.src6) > 0 {
		// An anonymous set serves one lookup: each rule gets its own.
		rule(join(proto(unix.ETH_P_IPV6), l4(expr.CmpOpNeq, unix.IPPROTO_ICMPV6),
			[]expr.Any{load(expr.PayloadBaseNetworkHeader, offIPv6Src, 16), in(anon(nftables.TypeIP6Addr, s.src6), false), accept})...)
		for _, t := range []byte{icmp6RouterAdvert, icmp6Redirect} {
			rule(join(proto(unix.ETH_P_IPV6), l4(expr.CmpOpEq, unix.IPPROTO_ICMPV6), icmp6Type(t), []expr.Any{drop})...)
		}
		rule(join(proto(unix.ETH_P_IPV6), l4(expr.CmpOpEq, unix.IPPROTO_ICMPV6), icmp6Type(icmp6NeighborAdvert),
			[]expr.Any{load(expr.PayloadBaseTransportHeader, offNATarget, 16), in(anon(nftables.TypeIP6Addr, s.own6), true), drop})...)
		rule(join(proto(unix.ETH_P_IPV6), []expr.Any{load(expr.PayloadBaseNetworkHeader, offIPv6Src, 16), in(anon(nftables.TypeIP6Addr, s.src6), false), accept})...)
	}
	if len(s.arp4) > 0 {
		rule(join(proto(unix.ETH_P_ARP), []expr.Any{
			load(expr.PayloadBaseNetworkHeader, offARPSender, 6), &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: g.PodMAC},
			load(expr.PayloadBaseNetworkHeader, offARPSendIP, 4), in(anon(nftables.TypeIPAddr, s.arp4), false), accept,
		})...)
	}
	rule(drop)
	return sets, setElems, rules
}
