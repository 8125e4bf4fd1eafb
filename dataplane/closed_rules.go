package dataplane

import (
	"crypto/sha256"
	"encoding/hex"
	"net/netip"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/podnet/podnet/dataplane/tag"
)

// ClosedTableName is the nftables table (family inet) of the pods that
// are closed until the node's policy agent admits them: a table of its
// own, beside dataplane/policyrules' podnet-policy, so that the agent's
// rewrite of its policy table (a delete and a create in one batch) never
// touches what a plugin wrote while the agent was away.
const ClosedTableName = "podnet-closed"

// ClosedLayout is the version of the table's layout this podnet writes
// (its nftlayout marker).
const ClosedLayout = 1

// closedPriority runs the table's chains before podnet-policy's (at the
// filter priority): a drop in any base chain is final, and a closed
// pod's packets then reach none of policy's counters.
const closedPriority = -10

// ClosedPod is a pod kept closed: no packet to or from its addresses
// passes the node (forward, input, output), but IPv6 neighbour discovery
// with the node.
type ClosedPod struct {
	// Pod names the pod for the agent: ClosedPodRef of its namespace
	// and name.
	Pod string
	// Owner is the attachment, for DEL and GC.
	Owner tag.Owner
	// Addrs are the pod's addresses on the attachment.
	Addrs []netip.Addr
}

// closedCommentMax keeps an element's comment well inside the kernel's
// 256 bytes of element user data.
const closedCommentMax = 240

// ClosedPodRef is how a closed element names its pod: "namespace/name",
// or, when that would not fit in the element's comment beside the
// owner, "sha256:" and the first 32 hex digits of the hash of
// "namespace/name" (the agent then finds the pod by hashing its pods'
// keys).
func ClosedPodRef(owner tag.Owner, namespace, name string) string {
	ref := namespace + "/" + name
	if len(ref)+1+len(owner.String()) <= closedCommentMax {
		return ref
	}
	return HashedPodRef(ref)
}

// HashedPodRef is the long form of ClosedPodRef for key
// ("namespace/name").
func HashedPodRef(key string) string {
	h := sha256.Sum256([]byte(key))
	return "sha256:" + hex.EncodeToString(h[:16])
}

func (p ClosedPod) comment() string { return p.Pod + " " + p.Owner.String() }

// parseClosedComment reads what comment wrote.
func parseClosedComment(s string) (pod string, owner tag.Owner, ok bool) {
	pod, rest, ok := strings.Cut(s, " ")
	if !ok || pod == "" {
		return "", tag.Owner{}, false
	}
	owner, ok = tag.ParseOwner(rest)
	return pod, owner, ok
}

// closedObjects are the table's objects; the names are fixed.
type closedObjects struct {
	table      *nftables.Table
	set4, set6 *nftables.Set
	forward    *nftables.Chain
	input      *nftables.Chain
	output     *nftables.Chain
	chains     []*nftables.Chain
}

func newClosedObjects() *closedObjects {
	t := &nftables.Table{Name: ClosedTableName, Family: nftables.TableFamilyINet}
	accept := nftables.ChainPolicyAccept
	mk := func(name string, hook *nftables.ChainHook) *nftables.Chain {
		return &nftables.Chain{Name: name, Table: t, Type: nftables.ChainTypeFilter, Hooknum: hook,
			Priority: nftables.ChainPriorityRef(closedPriority), Policy: &accept}
	}
	o := &closedObjects{
		table: t,
		// IDs name the sets within one batch; set here, they keep the
		// library from drawing them from its unsynchronised counter.
		set4:    &nftables.Set{Table: t, ID: 1, Name: "closed4", KeyType: nftables.TypeIPAddr, Comment: "pods closed until the policy agent admits them"},
		set6:    &nftables.Set{Table: t, ID: 2, Name: "closed6", KeyType: nftables.TypeIP6Addr, Comment: "pods closed until the policy agent admits them"},
		forward: mk("forward", nftables.ChainHookForward),
		input:   mk("input", nftables.ChainHookInput),
		output:  mk("output", nftables.ChainHookOutput),
	}
	o.chains = []*nftables.Chain{o.forward, o.input, o.output}
	return o
}

func (o *closedObjects) set(a netip.Addr) *nftables.Set {
	if a.Is4() {
		return o.set4
	}
	return o.set6
}

// rules are the chains' rules: in forward, drop from or to a closed
// address; in input, from one; in output, to one. Input and output first
// let IPv6 neighbour discovery (ICMPv6 types 133-137) through, as the
// policy table does: without it the node could not resolve the pod once
// it is open.
func (o *closedObjects) rules() []*nftables.Rule {
	var out []*nftables.Rule
	add := func(c *nftables.Chain, e ...expr.Any) {
		out = append(out, &nftables.Rule{Table: o.table, Chain: c, Exprs: e})
	}
	drop := func(c *nftables.Chain, fam uint8, src bool) {
		s := o.set4
		off, n := uint32(16), uint32(4)
		proto := byte(unix.NFPROTO_IPV4)
		switch {
		case fam == 4 && src:
			off = 12
		case fam == 6:
			s, off, n, proto = o.set6, 24, 16, unix.NFPROTO_IPV6
			if src {
				off = 8
			}
		}
		add(c,
			&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n},
			&expr.Lookup{SourceRegister: 1, SetName: s.Name, SetID: s.ID},
			&expr.Counter{},
			&expr.Verdict{Kind: expr.VerdictDrop})
	}
	nd := func(c *nftables.Chain) {
		add(c,
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_ICMPV6}},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 1},
			&expr.Range{Op: expr.CmpOpEq, Register: 1, FromData: []byte{133}, ToData: []byte{137}},
			&expr.Verdict{Kind: expr.VerdictAccept})
	}
	for _, fam := range []uint8{4, 6} {
		drop(o.forward, fam, true)
		drop(o.forward, fam, false)
	}
	nd(o.input)
	nd(o.output)
	for _, fam := range []uint8{4, 6} {
		drop(o.input, fam, true)
		drop(o.output, fam, false)
	}
	return out
}
