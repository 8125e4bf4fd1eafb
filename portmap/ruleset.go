package portmap

import (
	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// TableName is the nftables table podnet-portmap owns (family inet).
const TableName = "podnet-portmap"

// Layout is the version of the table's layout this package writes (its
// nftlayout marker): setup and GC leave a table of a newer one.
const Layout = 1

// Names of the table's chains.
const (
	ChainPrerouting  = "prerouting"
	ChainOutput      = "output"
	ChainHostports   = "hostports"
	ChainPostrouting = "postrouting"
	ChainInput       = "input"
)

// Registers as nftables numbers them: NFT_REG_1 is 16 bytes wide and
// overlaps the 4-byte registers NFT_REG32_00 (8) to NFT_REG32_03 (11); a
// concatenation puts each field in the next 4-byte register.
const (
	reg1   = unix.NFT_REG_1
	reg2   = unix.NFT_REG_2
	reg32n = 8 // NFT_REG32_00
)

// Packet fields.
var (
	ip4Saddr = &expr.Payload{Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4}
	ip4Daddr = &expr.Payload{Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4}
	ip6Saddr = &expr.Payload{Base: expr.PayloadBaseNetworkHeader, Offset: 8, Len: 16}
	ip6Daddr = &expr.Payload{Base: expr.PayloadBaseNetworkHeader, Offset: 24, Len: 16}
	thDport  = &expr.Payload{Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2}
)

func load(p *expr.Payload, reg uint32) *expr.Payload {
	c := *p
	c.OperationType, c.DestRegister = expr.PayloadLoad, reg
	return &c
}

func l4proto(reg uint32) expr.Any { return &expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg} }

func nfproto(p byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: reg1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{p}},
	}
}

// ctDNAT matches connections whose destination was translated.
func ctDNAT() []expr.Any {
	return []expr.Any{
		&expr.Ct{Key: expr.CtKeySTATUS, Register: reg1},
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(0x20 /* IPS_DST_NAT */), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: make([]byte, 4)},
	}
}

// Ruleset is the table with its chains, maps and rules, as data. Sets
// are keyed by name.
type Ruleset struct {
	Table  *nftables.Table
	Chains []*nftables.Chain
	Sets   map[string]*nftables.Set
	Rules  map[string][]*nftables.Rule // by chain name
}

var (
	keyPort   = nftables.MustConcatSetType(nftables.TypeInetProto, nftables.TypeInetService)
	keyHost4  = nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetProto, nftables.TypeInetService)
	keyHost6  = nftables.MustConcatSetType(nftables.TypeIP6Addr, nftables.TypeInetProto, nftables.TypeInetService)
	keyPair4  = nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeIPAddr)
	keyPair6  = nftables.MustConcatSetType(nftables.TypeIP6Addr, nftables.TypeIP6Addr)
	dataDest4 = nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetService)
	dataDest6 = nftables.MustConcatSetType(nftables.TypeIP6Addr, nftables.TypeInetService)
)

// NewRuleset describes the table. Nothing here talks to the kernel.
func NewRuleset() *Ruleset {
	t := &nftables.Table{Name: TableName, Family: nftables.TableFamilyINet}
	rs := &Ruleset{Table: t, Sets: newSets(t), Rules: map[string][]*nftables.Rule{}}

	accept := nftables.ChainPolicyAccept
	prerouting := &nftables.Chain{Name: ChainPrerouting, Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest, Policy: &accept}
	output := &nftables.Chain{Name: ChainOutput, Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityNATDest, Policy: &accept}
	hostports := &nftables.Chain{Name: ChainHostports, Table: t}
	postrouting := &nftables.Chain{Name: ChainPostrouting, Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource, Policy: &accept}
	input := &nftables.Chain{Name: ChainInput, Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &accept}
	// hostports first: the base chains jump to it.
	rs.Chains = []*nftables.Chain{hostports, prerouting, output, postrouting, input}

	// Only traffic to an address of this host is a host port.
	toLocal := ex(
		&expr.Fib{Register: reg1, FlagDADDR: true, ResultADDRTYPE: true},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: binaryutil.NativeEndian.PutUint32(unix.RTN_LOCAL)},
		&expr.Verdict{Kind: expr.VerdictGoto, Chain: ChainHostports},
	)
	rs.rule(prerouting, toLocal)
	rs.rule(output, toLocal)
	rs.hostportsRules(hostports)
	rs.postroutingRules(postrouting)
	rs.rule(input, nfproto(unix.NFPROTO_IPV4), localnetGuard())
	return rs
}

// newSets describes the maps and sets of table t, by name.
func newSets(t *nftables.Table) map[string]*nftables.Set {
	sets := map[string]*nftables.Set{}
	mapOf := func(name string, key, data nftables.SetDatatype) {
		sets[name] = &nftables.Set{Table: t, Name: name, IsMap: true, Concatenation: true, KeyType: key, DataType: data}
	}
	mapOf(SetDNAT4, keyPort, dataDest4)
	mapOf(SetHostIP4, keyHost4, dataDest4)
	mapOf(SetDNAT6, keyPort, dataDest6)
	mapOf(SetHostIP6, keyHost6, dataDest6)
	sets[SetSNAT4] = &nftables.Set{Table: t, Name: SetSNAT4, Concatenation: true, KeyType: keyPair4}
	sets[SetSNAT6] = &nftables.Set{Table: t, Name: SetSNAT6, Concatenation: true, KeyType: keyPair6}
	return sets
}

// rule appends to chain c a rule made of the expressions of exprs, in
// order.
func (rs *Ruleset) rule(c *nftables.Chain, exprs ...[]expr.Any) {
	var all []expr.Any
	for _, e := range exprs {
		all = append(all, e...)
	}
	rs.Rules[c.Name] = append(rs.Rules[c.Name], &nftables.Rule{Table: rs.Table, Chain: c, Exprs: all})
}

func ex(e ...expr.Any) []expr.Any { return e }

// hostportsRules DNATs through the maps, a specific host address before
// any address.
func (rs *Ruleset) hostportsRules(hostports *nftables.Chain) {
	// dnat to <lookup result>: address in the first register, port in
	// the 4-byte register after the address.
	dnat := func(fam uint32, set string, portReg uint32) []expr.Any {
		return ex(
			&expr.Lookup{SourceRegister: reg1, DestRegister: reg1, IsDestRegSet: true, SetName: set},
			&expr.NAT{Type: expr.NATTypeDestNAT, Family: fam, RegAddrMin: reg1, RegProtoMin: portReg, Specified: true},
		)
	}
	rs.rule(hostports, nfproto(unix.NFPROTO_IPV4),
		ex(load(ip4Daddr, reg1), l4proto(reg32n+1), load(thDport, reg32n+2)),
		dnat(unix.NFPROTO_IPV4, SetHostIP4, reg32n+1))
	rs.rule(hostports, nfproto(unix.NFPROTO_IPV4),
		ex(l4proto(reg1), load(thDport, reg32n+1)),
		dnat(unix.NFPROTO_IPV4, SetDNAT4, reg32n+1))
	rs.rule(hostports, nfproto(unix.NFPROTO_IPV6),
		ex(load(ip6Daddr, reg1), l4proto(reg32n+4), load(thDport, reg32n+5)),
		dnat(unix.NFPROTO_IPV6, SetHostIP6, reg32n+4))
	rs.rule(hostports, nfproto(unix.NFPROTO_IPV6),
		ex(l4proto(reg1), load(thDport, reg32n+1)),
		dnat(unix.NFPROTO_IPV6, SetDNAT6, reg32n+4))
}

// postroutingRules masquerade the DNATed traffic the SNAT sets name.
func (rs *Ruleset) postroutingRules(postrouting *nftables.Chain) {
	masq := ex(&expr.Masq{})
	lookup := func(set string) expr.Any { return &expr.Lookup{SourceRegister: reg1, SetName: set} }
	// Hairpin: the container reached its own host port; without SNAT it
	// would answer itself directly and drop the reply.
	rs.rule(postrouting, nfproto(unix.NFPROTO_IPV4), ctDNAT(),
		ex(load(ip4Saddr, reg1), load(ip4Daddr, reg32n+1), lookup(SetSNAT4)), masq)
	// 127.0.0.1:hostPort from the host: the container cannot answer
	// 127.0.0.1. The key is daddr . daddr, the container's own element.
	rs.rule(postrouting, nfproto(unix.NFPROTO_IPV4), ctDNAT(),
		ex(load(ip4Saddr, reg1),
			&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: []byte{255, 0, 0, 0}, Xor: make([]byte, 4)},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{127, 0, 0, 0}},
			load(ip4Daddr, reg1), load(ip4Daddr, reg32n+1), lookup(SetSNAT4)), masq)
	rs.rule(postrouting, nfproto(unix.NFPROTO_IPV6), ctDNAT(),
		ex(load(ip6Saddr, reg1), load(ip6Daddr, reg2), lookup(SetSNAT6)), masq)
}

// localnetGuard is the IPv4 input rule that makes route_localnet safe.
// route_localnet, which 127.0.0.1:hostPort needs on the interface
// towards the container, also lets packets for 127.0.0.0/8 in from that
// interface (CVE-2020-8558). The rule drops them, except replies of the
// connections this table translated.
func localnetGuard() []expr.Any {
	return ex(
		&expr.Meta{Key: expr.MetaKeyIIF, Register: reg1},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: binaryutil.NativeEndian.PutUint32(1)}, // lo is always ifindex 1
		load(ip4Daddr, reg1),
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: []byte{255, 0, 0, 0}, Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{127, 0, 0, 0}},
		&expr.Ct{Key: expr.CtKeySTATUS, Register: reg1},
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(0x20 /* IPS_DST_NAT */), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: make([]byte, 4)},
		&expr.Verdict{Kind: expr.VerdictDrop},
	)
}
