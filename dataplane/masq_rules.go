package dataplane

import (
	"crypto/sha256"
	"encoding/hex"
	"net/netip"
	"slices"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// MasqTableName is podnet's nftables table (family inet), shared by
// every network: each network has its own chain and sets in it, so
// networks never touch each other's objects.
const MasqTableName = "podnet"

// MasqLayout is the version of the table's layout this podnet writes
// (its nftlayout marker): a chain and four sets per network.
const MasqLayout = 1

// MasqNetwork describes the masquerade of one network.
type MasqNetwork struct {
	Network string
	// Exclude lists the destinations that keep the pod's source address:
	// the cluster's pod CIDRs (masqExclude, or the pools of podnet-ipam),
	// so that traffic between pods is never NATed. The exclusion sets
	// hold exactly these, plus multicast, which is always excluded.
	Exclude []netip.Prefix
	// ExcludeAdded says that Exclude is not the whole list but the
	// subnets of one pod's IPAM result (an IPAM whose pools podnet does
	// not know): they are added to the sets as pods come, never
	// replacing what other pods' ADDs added.
	ExcludeAdded bool
}

// alwaysExcluded are destinations never masqueraded: multicast is not
// routed to the uplink as unicast is, and rewriting it breaks it.
var alwaysExcluded = []netip.Prefix{
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("ff00::/8"),
}

// masqObjects are the nftables objects of one network, all derived from
// its name so that ADD, DEL, CHECK and GC agree without state.
type masqObjects struct {
	table              *nftables.Table
	chain              *nftables.Chain
	pods4, pods6       *nftables.Set
	exclude4, exclude6 *nftables.Set
	// found is the table's layout version as adopt read it.
	found uint32
}

// objName keeps names within the kernel's limit; network names are
// short in practice, and a long one is replaced by its hash.
func objName(kind, network string) string {
	if len(network) > 200 {
		h := sha256.Sum256([]byte(network))
		network = hex.EncodeToString(h[:8])
	}
	return kind + "-" + network
}

func newMasqObjects(network string) *masqObjects {
	t := &nftables.Table{Name: MasqTableName, Family: nftables.TableFamilyINet}
	policy := nftables.ChainPolicyAccept
	return &masqObjects{
		table: t,
		chain: &nftables.Chain{
			Name:     objName("masq", network),
			Table:    t,
			Type:     nftables.ChainTypeNAT,
			Hooknum:  nftables.ChainHookPostrouting,
			Priority: nftables.ChainPriorityNATSource,
			Policy:   &policy,
		},
		// IDs name sets within one batch. Set here, they keep the
		// library from drawing them from its unsynchronised global
		// counter.
		pods4:    &nftables.Set{Table: t, ID: 1, Name: objName("pods4", network), KeyType: nftables.TypeIPAddr},
		pods6:    &nftables.Set{Table: t, ID: 2, Name: objName("pods6", network), KeyType: nftables.TypeIP6Addr},
		exclude4: &nftables.Set{Table: t, ID: 3, Name: objName("nomasq4", network), KeyType: nftables.TypeIPAddr, Interval: true},
		exclude6: &nftables.Set{Table: t, ID: 4, Name: objName("nomasq6", network), KeyType: nftables.TypeIP6Addr, Interval: true},
	}
}

func (o *masqObjects) podSet(a netip.Addr) *nftables.Set {
	if a.Is4() {
		return o.pods4
	}
	return o.pods6
}

func (o *masqObjects) excludeSet(a netip.Addr) *nftables.Set {
	if a.Is4() {
		return o.exclude4
	}
	return o.exclude6
}

// ruleTag is the rule's user data: it names the rule's version and the
// exclusions, so a changed configuration or an older podnet's rule is
// recognised and replaced, and the exclusion sets with it. v2: the sets
// hold network-level prefixes only (v1 added every routed pod's /32).
func ruleTag(family string, n MasqNetwork) []byte {
	if n.ExcludeAdded {
		return []byte("podnet masq v2 " + family + " added")
	}
	s := make([]string, len(n.Exclude))
	for i, p := range n.Exclude {
		s[i] = p.Masked().String()
	}
	slices.Sort(s)
	h := sha256.Sum256([]byte(strings.Join(s, ",")))
	return []byte("podnet masq v2 " + family + " " + hex.EncodeToString(h[:6]))
}

// masqRules are the network's two rules:
//
//	meta nfproto ipv4 ip saddr @pods4-N ip daddr != @pods4-N ip daddr != @nomasq4-N masquerade
//	meta nfproto ipv6 ip6 saddr @pods6-N ip6 daddr != @pods6-N ip6 daddr != @nomasq6-N masquerade
//
// Traffic between two pods of the network on this node passes
// postrouting too (it is forwarded): the pod set excludes it even when
// the IPAM hands out /32s and the subnets say nothing.
func (o *masqObjects) rules(n MasqNetwork) []*nftables.Rule {
	mk := func(proto byte, saddrOff, daddrOff, alen uint32, pods, excl *nftables.Set, family string) *nftables.Rule {
		return &nftables.Rule{
			Table:    o.table,
			Chain:    o.chain,
			UserData: ruleTag(family, n),
			Exprs: []expr.Any{
				&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: saddrOff, Len: alen},
				&expr.Lookup{SourceRegister: 1, SetName: pods.Name, SetID: pods.ID},
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: daddrOff, Len: alen},
				&expr.Lookup{SourceRegister: 1, SetName: pods.Name, SetID: pods.ID, Invert: true},
				&expr.Lookup{SourceRegister: 1, SetName: excl.Name, SetID: excl.ID, Invert: true},
				&expr.Masq{},
			},
		}
	}
	return []*nftables.Rule{
		mk(unix.NFPROTO_IPV4, 12, 16, 4, o.pods4, o.exclude4, "ipv4"),
		mk(unix.NFPROTO_IPV6, 8, 24, 16, o.pods6, o.exclude6, "ipv6"),
	}
}

// rulesCurrent reports whether the chain holds exactly the rules that
// rules(n) would add.
func rulesCurrent(got []*nftables.Rule, n MasqNetwork) bool {
	if len(got) != 2 {
		return false
	}
	return string(got[0].UserData) == string(ruleTag("ipv4", n)) &&
		string(got[1].UserData) == string(ruleTag("ipv6", n))
}

// intervalElements are the elements of an interval set that hold p:
// its first address, and the address after its last one as the end
// (none when p reaches the top of the address space).
func intervalElements(p netip.Prefix) []nftables.SetElement {
	p = p.Masked()
	first := p.Addr()
	out := []nftables.SetElement{{Key: first.AsSlice()}}
	if end, ok := afterLast(p); ok {
		out = append(out, nftables.SetElement{Key: end.AsSlice(), IntervalEnd: true})
	}
	return out
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

// intervalsCover reports whether the elements of an interval set (as the
// kernel lists them) cover all of p.
func intervalsCover(elems []nftables.SetElement, p netip.Prefix) bool {
	type bound struct {
		a   netip.Addr
		end bool
	}
	var bs []bound
	for _, e := range elems {
		a, ok := netip.AddrFromSlice(e.Key)
		if !ok {
			continue
		}
		bs = append(bs, bound{a.Unmap(), e.IntervalEnd})
	}
	slices.SortFunc(bs, func(x, y bound) int { return x.a.Compare(y.a) })
	first := p.Masked().Addr()
	end, hasEnd := afterLast(p)
	for i, b := range bs {
		if b.end || b.a.Compare(first) > 0 {
			continue
		}
		// b starts at or before first: find where its interval ends.
		if i+1 == len(bs) {
			return true // open to the top
		}
		nb := bs[i+1]
		if !nb.end {
			continue
		}
		if hasEnd && nb.a.Compare(end) >= 0 {
			return true
		}
	}
	return false
}
