package dataplane

import (
	"net"
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/podnet/podnet/dataplane/tag"
)

// GuardTableName is the table of the source guards, in the inet family
// for routed pods and in the bridge family for bridge ports. Each has
// one base chain, hooked at prerouting before conntrack and everything
// else, whose rules never change per pod: a pod is guarded by the
// elements of a few sets keyed by its host interface's name. ADD and
// DEL therefore add and delete set elements, which costs the kernel far
// less than making a chain and its rules per interface (about 0.13 ms
// against 2.4 ms, BenchmarkGuard), and a packet's cost does not grow
// with the number of pods.
//
// Routed pods are checked in the inet family, which sees IPv4 and IPv6
// but not ARP. A routed pod's forged ARP or neighbour entry can only
// land on its own host veth, and every pod address is routed to the
// pod's own veth, so such an entry is never used. Bridge ports are
// checked in the bridge family, which sees every frame, ARP included,
// before the bridge forwards it to the other ports.
const GuardTableName = "podnet-guard"

// GuardLayout is the version of the guard tables' layout this podnet
// writes (their nftlayout marker, in each family's table).
const GuardLayout = 1

// guardPriority runs the guard before defragmentation, conntrack and any
// NAT or filter hook.
const guardPriority = -500

// guardChainName is the base chain of each guard table.
const guardChainName = "prerouting"

// guardDropChainName is the chain the base chain's MAC drop and final
// drop go to: it logs the packet to NFLOG group FlowLogGroup with the
// prefix GuardLogPrefix (at most guardLogRate a second, the table's
// limit object guardLimitName), then drops it. A goto, not a log rule
// before each drop: the base chain keeps its number of rules, which is
// what an older podnet's CHECK compares (Current), and a packet the
// guard accepts meets nothing new.
const (
	guardDropChainName = "drop-log"
	guardLimitName     = "guard-log"
	guardLogRate       = 100
	guardLogBurst      = 100
)

// Guard is what one pod interface may send: frames from its own MAC,
// IPv4 and IPv6 from its own addresses (and Allowed), neighbour
// advertisements for its own IPv6 addresses only, no router
// advertisement or redirect; on a bridge port also ARP that speaks for
// its own IPv4 addresses only, and no other EtherType (VLAN tags
// included).
type Guard struct {
	Owner  tag.Owner
	HostIf string // the host end of the pod's veth, which keys the elements
	PodMAC net.HardwareAddr
	Addrs  []netip.Addr
	// Allowed are further source prefixes the pod may send from (a pod
	// that routes for others); their family needs no address of the pod.
	Allowed []netip.Prefix
	// Bridged says HostIf is a bridge port (bridge mode): it is checked
	// in the bridge family.
	Bridged bool
}

// Names of the guard tables' sets. Every key starts with the host
// interface's name.
const (
	guardSetPods  = "pods"  // ifname: the guarded interfaces, commented with their owners
	guardSetMACs  = "macs"  // ifname . ether_addr
	guardSetSrc4  = "src4"  // ifname . ipv4_addr: the pod's own addresses
	guardSetSrc6  = "src6"  // ifname . ipv6_addr: the pod's own, and its link-local one
	guardSetWide4 = "wide4" // ifname . ipv4_addr, intervals: Allowed
	guardSetWide6 = "wide6" // ifname . ipv6_addr, intervals: Allowed
)

var (
	guardKeyMAC  = nftables.MustConcatSetType(nftables.TypeIFName, nftables.TypeEtherAddr)
	guardKeySrc4 = nftables.MustConcatSetType(nftables.TypeIFName, nftables.TypeIPAddr)
	guardKeySrc6 = nftables.MustConcatSetType(nftables.TypeIFName, nftables.TypeIP6Addr)
)

// guardObjects are the nftables objects of one family's guard table.
type guardObjects struct {
	table *nftables.Table
	chain *nftables.Chain
	// drop is the regular chain that logs and drops.
	drop  *nftables.Chain
	limit *nftables.NamedObj
	sets  map[string]*nftables.Set
	// found is the table's layout version as Install read it.
	found uint32
}

// guardSetOrder is the order in which the sets are declared, listed and
// filled.
var guardSetOrder = []string{guardSetPods, guardSetMACs, guardSetSrc4, guardSetSrc6, guardSetWide4, guardSetWide6}

func newGuardObjects(bridged bool) *guardObjects {
	fam := nftables.TableFamilyINet
	if bridged {
		fam = nftables.TableFamilyBridge
	}
	t := &nftables.Table{Name: GuardTableName, Family: fam}
	policy := nftables.ChainPolicyAccept
	o := &guardObjects{
		table: t,
		chain: &nftables.Chain{
			Name:     guardChainName,
			Table:    t,
			Type:     nftables.ChainTypeFilter,
			Hooknum:  nftables.ChainHookPrerouting,
			Priority: nftables.ChainPriorityRef(guardPriority),
			Policy:   &policy,
		},
		drop: &nftables.Chain{Name: guardDropChainName, Table: t},
		limit: &nftables.NamedObj{Table: t, Name: guardLimitName, Type: nftables.ObjTypeLimit,
			Obj: &expr.Limit{Type: expr.LimitTypePkts, Rate: guardLogRate, Unit: expr.LimitTimeSecond, Burst: guardLogBurst}},
		sets: map[string]*nftables.Set{},
	}
	set := func(name string, key nftables.SetDatatype, interval bool) {
		o.sets[name] = &nftables.Set{Table: t, Name: name, KeyType: key,
			Concatenation: key != nftables.TypeIFName, Interval: interval}
	}
	set(guardSetPods, nftables.TypeIFName, false)
	set(guardSetMACs, guardKeyMAC, false)
	set(guardSetSrc4, guardKeySrc4, false)
	set(guardSetSrc6, guardKeySrc6, false)
	set(guardSetWide4, guardKeySrc4, true)
	set(guardSetWide6, guardKeySrc6, true)
	return o
}

// guardRuleTag marks the chain's first rule, so that CHECK can tell the
// chain this podnet writes from an older or foreign one.
const guardRuleTag = "podnet guard v2"

// ifnameKey is an interface name as the kernel loads it into a register:
// padded with NULs to IFNAMSIZ.
func ifnameKey(name string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return b
}

// concatKey is a concatenation's key: each field padded to a multiple
// of the 4-byte register.
func concatKey(fields ...[]byte) []byte {
	var out []byte
	for _, f := range fields {
		out = append(out, f...)
		if pad := len(f) % 4; pad != 0 {
			out = append(out, make([]byte, 4-pad)...)
		}
	}
	return out
}

// guardSources are the addresses and prefixes of each family the pod
// may send from.
type guardSources struct {
	own4, own6   []netip.Addr // own6 includes the link-local address
	wide4, wide6 []netip.Prefix
}

func (g Guard) sources() guardSources {
	var s guardSources
	for _, a := range g.Addrs {
		a = a.Unmap()
		if a.Is4() {
			s.own4 = append(s.own4, a)
		} else {
			s.own6 = append(s.own6, a)
		}
	}
	for _, p := range g.Allowed {
		if p.Addr().Is4() {
			s.wide4 = append(s.wide4, p.Masked())
		} else {
			s.wide6 = append(s.wide6, p.Masked())
		}
	}
	if len(s.own6) > 0 || len(s.wide6) > 0 {
		s.own6 = append(s.own6, LinkLocalOf(g.PodMAC))
	}
	slices.SortFunc(s.own4, netip.Addr.Compare)
	slices.SortFunc(s.own6, netip.Addr.Compare)
	s.own4, s.own6 = slices.Compact(s.own4), slices.Compact(s.own6)
	s.wide4, s.wide6 = mergePrefixes(s.wide4), mergePrefixes(s.wide6)
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

// lastOf is the last address of p.
func lastOf(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// elements are g's set elements, by set name. The pods element carries
// the owner, for GC.
func (g Guard) elements() map[string][]nftables.SetElement {
	s := g.sources()
	ifn := ifnameKey(g.HostIf)
	out := map[string][]nftables.SetElement{
		guardSetPods: {{Key: ifn, Comment: g.Owner.String()}},
		guardSetMACs: {{Key: concatKey(ifn, g.PodMAC)}},
	}
	for _, a := range s.own4 {
		out[guardSetSrc4] = append(out[guardSetSrc4], nftables.SetElement{Key: concatKey(ifn, a.AsSlice())})
	}
	for _, a := range s.own6 {
		out[guardSetSrc6] = append(out[guardSetSrc6], nftables.SetElement{Key: concatKey(ifn, a.AsSlice())})
	}
	for _, p := range s.wide4 {
		out[guardSetWide4] = append(out[guardSetWide4], nftables.SetElement{Key: concatKey(ifn, p.Addr().AsSlice()), KeyEnd: concatKey(ifn, lastOf(p).AsSlice())})
	}
	for _, p := range s.wide6 {
		out[guardSetWide6] = append(out[guardSetWide6], nftables.SetElement{Key: concatKey(ifn, p.Addr().AsSlice()), KeyEnd: concatKey(ifn, lastOf(p).AsSlice())})
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

// Registers: the interface name fills the first four 32-bit registers,
// the field looked up with it follows.
const (
	regIfname = 8  // NFT_REG32_00
	regField  = 12 // NFT_REG32_04
)

// rules are the base chain's rules, in order:
//
//	iifname != @pods accept
//	iifname . ether saddr != @macs goto drop-log
//	meta protocol ip iifname . ip saddr @src4 accept
//	meta protocol ip iifname . ip saddr @wide4 accept
//	meta protocol ip6 meta l4proto != ipv6-icmp iifname . ip6 saddr @src6 accept
//	meta protocol ip6 meta l4proto != ipv6-icmp iifname . ip6 saddr @wide6 accept
//	meta protocol ip6 meta l4proto ipv6-icmp icmpv6 type nd-router-advert drop
//	meta protocol ip6 meta l4proto ipv6-icmp icmpv6 type nd-redirect drop
//	meta protocol ip6 meta l4proto ipv6-icmp icmpv6 type nd-neighbor-advert iifname . nd target != @src6 drop
//	meta protocol ip6 iifname . ip6 saddr @src6 accept
//	meta protocol ip6 iifname . ip6 saddr @wide6 accept
//	(bridge) meta protocol arp iifname . arp saddr ether @macs iifname . arp saddr ip @src4 accept
//	(bridge) meta protocol arp iifname . arp saddr ether @macs iifname . arp saddr ip @wide4 accept
//	(bridge) meta protocol arp iifname . arp saddr ether @macs arp saddr ip 0.0.0.0 accept
//	goto drop-log
//
// and drop-log's (dropRules):
//
//	limit name guard-log log prefix "podnet-guard" group 7371
//	drop
//
// Another interface's traffic takes the first rule; a pod's IPv4 or
// IPv6 data the first three or five. A family the pod has no source of
// has no element to accept it.
func (o *guardObjects) rules() []*nftables.Rule {
	var rules []*nftables.Rule
	rule := func(exprs ...[]expr.Any) {
		r := &nftables.Rule{Table: o.table, Chain: o.chain, Exprs: slices.Concat(exprs...)}
		if len(rules) == 0 {
			r.UserData = []byte(guardRuleTag)
		}
		rules = append(rules, r)
	}
	drop := []expr.Any{&expr.Verdict{Kind: expr.VerdictDrop}}
	logDrop := []expr.Any{&expr.Verdict{Kind: expr.VerdictGoto, Chain: guardDropChainName}}
	accept := []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}}
	proto := func(ethertype uint16) []expr.Any {
		return []expr.Any{
			&expr.Meta{Key: expr.MetaKeyPROTOCOL, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(ethertype)},
		}
	}
	// keyed looks set up with the interface's name and a field.
	keyed := func(set string, base expr.PayloadBase, off, n uint32, invert bool) []expr.Any {
		return []expr.Any{
			&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: regIfname},
			&expr.Payload{DestRegister: regField, Base: base, Offset: off, Len: n},
			&expr.Lookup{SourceRegister: regIfname, SetName: set, Invert: invert},
		}
	}
	net := expr.PayloadBaseNetworkHeader

	rule([]expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: regIfname},
		&expr.Lookup{SourceRegister: regIfname, SetName: guardSetPods, Invert: true},
	}, accept)
	rule(keyed(guardSetMACs, expr.PayloadBaseLLHeader, offEtherSrc, 6, true), logDrop)
	for _, set := range []string{guardSetSrc4, guardSetWide4} {
		rule(proto(unix.ETH_P_IP), keyed(set, net, offIPv4Src, 4, false), accept)
	}
	for _, set := range []string{guardSetSrc6, guardSetWide6} {
		rule(proto(unix.ETH_P_IPV6), l4(expr.CmpOpNeq, unix.IPPROTO_ICMPV6), keyed(set, net, offIPv6Src, 16, false), accept)
	}
	for _, t := range []byte{icmp6RouterAdvert, icmp6Redirect} {
		rule(proto(unix.ETH_P_IPV6), l4(expr.CmpOpEq, unix.IPPROTO_ICMPV6), icmp6Type(t), drop)
	}
	rule(proto(unix.ETH_P_IPV6), l4(expr.CmpOpEq, unix.IPPROTO_ICMPV6), icmp6Type(icmp6NeighborAdvert),
		keyed(guardSetSrc6, expr.PayloadBaseTransportHeader, offNATarget, 16, true), drop)
	for _, set := range []string{guardSetSrc6, guardSetWide6} {
		rule(proto(unix.ETH_P_IPV6), keyed(set, net, offIPv6Src, 16, false), accept)
	}
	if o.table.Family == nftables.TableFamilyBridge {
		arpSender := keyed(guardSetMACs, net, offARPSender, 6, false)
		for _, set := range []string{guardSetSrc4, guardSetWide4} {
			rule(proto(unix.ETH_P_ARP), arpSender, keyed(set, net, offARPSendIP, 4, false), accept)
		}
		// An ARP probe (sender 0.0.0.0) updates no one's cache.
		rule(proto(unix.ETH_P_ARP), arpSender, []expr.Any{
			&expr.Payload{DestRegister: 1, Base: net, Offset: offARPSendIP, Len: 4},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{0, 0, 0, 0}},
		}, accept)
	}
	rule(logDrop)
	return rules
}

// l4 matches the transport protocol: meta l4proto op p.
func l4(op expr.CmpOp, p byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: op, Register: 1, Data: []byte{p}},
	}
}

// icmp6Type matches an ICMPv6 type.
func icmp6Type(t byte) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{t}},
	}
}

// dropRules are drop-log's rules: log (within the limit), then drop.
func (o *guardObjects) dropRules() []*nftables.Rule {
	return []*nftables.Rule{
		{Table: o.table, Chain: o.drop, Exprs: []expr.Any{
			&expr.Objref{Type: unix.NFT_OBJECT_LIMIT, Name: guardLimitName},
			&expr.Log{Key: 1<<unix.NFTA_LOG_GROUP | 1<<unix.NFTA_LOG_PREFIX, Group: FlowLogGroup, Data: []byte(GuardLogPrefix)},
		}},
		{Table: o.table, Chain: o.drop, Exprs: []expr.Any{&expr.Verdict{Kind: expr.VerdictDrop}}},
	}
}
