package policyrules

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"golang.org/x/sys/unix"

	"github.com/podnet/podnet/policy"
)

// The translation of the ruleset to nftables objects and expressions.
// Nothing here does I/O: batch queues messages on a connection that the
// caller commits.

// Registers. Concatenations are read into consecutive 32-bit registers
// (NFT_REG32_00 on), each field padded to four bytes, as nft does.
const (
	reg1    = 1 // NFT_REG_1, 16 bytes
	reg32x0 = 8 // NFT_REG32_00
)

var (
	typePorts  = nftables.MustConcatSetType(nftables.TypeInetProto, nftables.TypeInetService)
	typeNamed4 = nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetProto, nftables.TypeInetService)
	typeNamed6 = nftables.MustConcatSetType(nftables.TypeIP6Addr, nftables.TypeInetProto, nftables.TypeInetService)
)

// batch queues changes on one connection. IDs name the sets created in
// the batch (lookups may refer to them by ID before the commit); set
// here, they keep the library from drawing them from its unsynchronised
// global counter.
type batch struct {
	conn   *nftables.Conn
	table  *nftables.Table
	nextID uint32
	ids    map[string]uint32
	// denyLog is the log ruleLog writes to.
	denyLog *DenyLog
	// flowLog is the log ruleFlowLog writes to.
	flowLog *FlowLog
}

func newBatch(conn *nftables.Conn) *batch {
	return &batch{conn: conn, table: table(), ids: map[string]uint32{}}
}

func table() *nftables.Table {
	return &nftables.Table{Name: TableName, Family: nftables.TableFamilyINet}
}

func (b *batch) id(name string) uint32 {
	id, ok := b.ids[name]
	if !ok {
		b.nextID++
		id = b.nextID
		b.ids[name] = id
	}
	return id
}

// nftSet is s's object, for creation and for element changes.
func (b *batch) nftSet(s *set) *nftables.Set {
	ns := &nftables.Set{Table: b.table, Name: s.name, ID: b.id(s.name), Comment: comment(s.key)}
	switch s.kind {
	case kindAddr4:
		ns.KeyType = nftables.TypeIPAddr
	case kindAddr6:
		ns.KeyType = nftables.TypeIP6Addr
	case kindCIDR4:
		ns.KeyType, ns.Interval = nftables.TypeIPAddr, true
	case kindCIDR6:
		ns.KeyType, ns.Interval = nftables.TypeIP6Addr, true
	case kindPorts:
		ns.KeyType, ns.Interval, ns.Concatenation = typePorts, true, true
	case kindNamed4:
		ns.KeyType, ns.Concatenation = typeNamed4, true
	case kindNamed6:
		ns.KeyType, ns.Concatenation = typeNamed6, true
	}
	return ns
}

// nftMap is the verdict map name: a dispatch map, or a fold map (its
// comment then f's, for its creation).
func (b *batch) nftMap(name string, f *fold) *nftables.Set {
	key := nftables.TypeIPAddr
	if name == mapIn6 || name == mapOut6 || strings.HasPrefix(name, "fold6-") {
		key = nftables.TypeIP6Addr
	}
	note := "podnet policy dispatch: pod address -> its chain"
	if f != nil {
		note = comment(f.key)
	}
	return &nftables.Set{Table: b.table, Name: name, ID: b.id(name), IsMap: true, KeyType: key, DataType: nftables.TypeVerdict,
		Comment: note}
}

// jumps are the elements of a verdict map: address -> jump to chain.
func jumps(entries map[netip.Addr]string) []nftables.SetElement {
	out := make([]nftables.SetElement, 0, len(entries))
	for _, a := range sortedAddrs(entries) {
		out = append(out, nftables.SetElement{Key: a.AsSlice(), VerdictData: &expr.Verdict{Kind: expr.VerdictJump, Chain: entries[a]}})
	}
	return out
}

// nftElements encodes elements of a set of kind k.
func nftElements(k setKind, elems []element) []nftables.SetElement {
	out := make([]nftables.SetElement, 0, len(elems))
	for _, e := range elems {
		switch k {
		case kindAddr4, kindAddr6:
			out = append(out, nftables.SetElement{Key: e.addr.AsSlice()})
		case kindCIDR4, kindCIDR6:
			out = append(out, nftables.SetElement{Key: e.addr.AsSlice()})
			if e.end.IsValid() {
				out = append(out, nftables.SetElement{Key: e.end.AsSlice(), IntervalEnd: true})
			}
		case kindPorts:
			out = append(out, nftables.SetElement{Key: protoPort(e.proto, e.first), KeyEnd: protoPort(e.proto, e.last)})
		case kindNamed4, kindNamed6:
			out = append(out, nftables.SetElement{Key: append(e.addr.AsSlice(), protoPort(e.proto, e.first)...)})
		}
	}
	return out
}

// protoPort is inet_proto . inet_service, each padded to a register.
func protoPort(p policy.Protocol, port uint16) []byte {
	return []byte{byte(p), 0, 0, 0, byte(port >> 8), byte(port), 0, 0}
}

// elementChunk bounds the elements of one message: the kernel takes a
// batch in one socket write, and smaller messages keep each one well
// inside the buffers. elementBytes bounds them too: the elements of a
// message are one netlink attribute, whose length is 16 bits (a verdict
// map's IPv6 elements, with their chains' names, pass 64 KiB well before
// 1,024 of them, and the kernel then misreads the message).
const (
	elementChunk = 1024
	elementBytes = 48 << 10
)

// chunkLen is how many of elems the next message takes.
func chunkLen(elems []nftables.SetElement) int {
	size := 0
	for i, e := range elems {
		// The attributes' headers and padding, generously.
		size += 64 + len(e.Key) + len(e.KeyEnd)
		if e.VerdictData != nil {
			size += len(e.VerdictData.Chain)
		}
		if i == elementChunk || size > elementBytes {
			return max(i, 1)
		}
	}
	return len(elems)
}

func (b *batch) addElements(s *nftables.Set, elems []nftables.SetElement) error {
	for len(elems) > 0 {
		n := chunkLen(elems)
		if s.Interval && !s.Concatenation && n < len(elems) && elems[n].IntervalEnd {
			n++ // an interval's start and end go in one message
		}
		if err := b.conn.SetAddElements(s, elems[:n]); err != nil {
			return fmt.Errorf("nftables: add elements to %s: %w", s.Name, err)
		}
		elems = elems[n:]
	}
	return nil
}

func (b *batch) delElements(s *nftables.Set, elems []nftables.SetElement) error {
	for len(elems) > 0 {
		n := chunkLen(elems)
		if err := b.conn.SetDeleteElements(s, elems[:n]); err != nil {
			return fmt.Errorf("nftables: remove elements from %s: %w", s.Name, err)
		}
		elems = elems[n:]
	}
	return nil
}

func (b *batch) addSet(s *set) error {
	ns := b.nftSet(s)
	if err := b.conn.AddSet(ns, nil); err != nil {
		return fmt.Errorf("nftables: add set %s: %w", s.name, err)
	}
	return b.addElements(ns, nftElements(s.kind, s.elems))
}

// queue adds p to the batch, in an order that keeps references valid.
func (b *batch) queue(p *plan) error {
	for _, s := range p.newSets {
		if err := b.addSet(s); err != nil {
			return err
		}
	}
	for _, c := range p.setChanges {
		ns := b.nftSet(c.set)
		if c.replace {
			b.conn.FlushSet(ns)
		} else if err := b.delElements(ns, nftElements(c.set.kind, c.del)); err != nil {
			return err
		}
		if err := b.addElements(ns, nftElements(c.set.kind, c.add)); err != nil {
			return err
		}
	}
	for _, e := range p.mapDels {
		if err := b.delElements(b.nftMap(e.m, nil), []nftables.SetElement{{Key: e.addr.AsSlice()}}); err != nil {
			return err
		}
	}
	// Chains refer to each other (an Admin Pass goes to the pod's tail
	// chain, a fold map's elements jump to class chains): every rule and
	// element that may refer to a chain is gone before the chain goes,
	// and every chain exists before a rule or an element refers to it.
	for _, c := range p.modChains {
		b.conn.FlushChain(&nftables.Chain{Name: c.name, Table: b.table})
	}
	for _, name := range p.delChains {
		b.conn.FlushChain(&nftables.Chain{Name: name, Table: b.table})
	}
	b.delFolds(p.delFolds)
	for _, name := range p.delChains {
		b.conn.DelChain(&nftables.Chain{Name: name, Table: b.table})
	}
	newChains := make([]*nftables.Chain, len(p.newChains))
	for i, c := range p.newChains {
		newChains[i] = b.conn.AddChain(&nftables.Chain{Name: c.name, Table: b.table})
	}
	if err := b.addFolds(p.newFolds); err != nil {
		return err
	}
	for _, c := range p.modChains {
		b.addRules(&nftables.Chain{Name: c.name, Table: b.table}, c)
	}
	for i, c := range p.newChains {
		b.addRules(newChains[i], c)
	}
	for _, e := range p.mapAdds {
		el := nftables.SetElement{Key: e.addr.AsSlice(), VerdictData: &expr.Verdict{Kind: expr.VerdictJump, Chain: e.chain}}
		if err := b.addElements(b.nftMap(e.m, nil), []nftables.SetElement{el}); err != nil {
			return err
		}
	}
	for _, name := range p.delSets {
		b.conn.DelSet(&nftables.Set{Table: b.table, Name: name})
	}
	return nil
}

// delFolds removes fold maps, once the rules that looked them up are
// flushed: their elements first, which releases the class chains they
// jump to.
func (b *batch) delFolds(names []string) {
	for _, name := range names {
		m := &nftables.Set{Table: b.table, Name: name}
		b.conn.FlushSet(m)
		b.conn.DelSet(m)
	}
}

// addFolds creates fold maps with their elements: after the chains
// their elements jump to, before the rules that look them up.
func (b *batch) addFolds(folds []*fold) error {
	for _, f := range folds {
		m := b.nftMap(f.name, f)
		if err := b.conn.AddSet(m, nil); err != nil {
			return fmt.Errorf("nftables: add map %s: %w", f.name, err)
		}
		if err := b.addElements(m, jumps(f.elems)); err != nil {
			return err
		}
	}
	return nil
}

func (b *batch) addRules(nc *nftables.Chain, c *chain) {
	for _, r := range c.rules {
		b.conn.AddRule(&nftables.Rule{Table: b.table, Chain: nc, Exprs: b.exprs(r, c), UserData: ruleComment(r.comment(c))})
	}
}

func ruleComment(s string) []byte {
	return userdata.AppendString(nil, userdata.TypeComment, comment(s))
}

// Offsets of the addresses in the network header.
const (
	offSrc4, offDst4 = 12, 16
	offSrc6, offDst6 = 8, 24
)

func nfproto(fam uint8) []expr.Any {
	p := byte(unix.NFPROTO_IPV4)
	if fam == 6 {
		p = unix.NFPROTO_IPV6
	}
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: reg1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{p}},
	}
}

// loadAddr loads the source (src) or destination address of family fam.
func loadAddr(fam uint8, src bool, reg uint32) expr.Any {
	off, n := uint32(offDst4), uint32(4)
	switch {
	case fam == 4 && src:
		off = offSrc4
	case fam == 6 && src:
		off, n = offSrc6, 16
	case fam == 6:
		off, n = offDst6, 16
	}
	return &expr.Payload{DestRegister: reg, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n}
}

func (b *batch) lookup(set string, reg uint32) expr.Any {
	return &expr.Lookup{SourceRegister: reg, SetName: set, SetID: b.ids[set]}
}

// exprs renders a rule of pod chain c.
func (b *batch) exprs(r rule, c *chain) []expr.Any {
	remoteIsSrc := c.dir == Ingress
	var e []expr.Any
	switch r.kind {
	case ruleSelf:
		e = append(nfproto(r.family), loadAddr(r.family, remoteIsSrc, reg1),
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: r.addr.AsSlice()},
			&expr.Verdict{Kind: expr.VerdictReturn})
		return e
	case ruleDeny:
		return []expr.Any{&expr.Counter{}, &expr.Verdict{Kind: expr.VerdictDrop}}
	case ruleLog:
		return b.denyLog.exprs(c.pod, c.dir)
	case ruleFlowLog:
		return b.flowLog.logExprs(r.flowID)
	case ruleGoto:
		return []expr.Any{&expr.Verdict{Kind: expr.VerdictGoto, Chain: r.target}}
	case ruleFold:
		return append(nfproto(r.family), loadAddr(r.family, remoteIsSrc, reg1),
			&expr.Lookup{SourceRegister: reg1, DestRegister: 0, IsDestRegSet: true, SetName: r.peer, SetID: b.ids[r.peer]})
	case ruleNamed:
		// ip daddr . meta l4proto . th dport @named: the destination is
		// the remote end of an egress rule.
		next := uint32(reg32x0 + 1)
		if r.family == 6 {
			next = reg32x0 + 4
		}
		e = append(nfproto(r.family), loadAddr(r.family, false, reg32x0),
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: next},
			&expr.Payload{DestRegister: next + 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			b.lookup(r.named, reg32x0))
	case ruleAllow:
		if r.peer != "" {
			e = append(nfproto(r.family), loadAddr(r.family, remoteIsSrc, reg1), b.lookup(r.peer, reg1))
		}
		if r.ports != "" {
			e = append(e,
				&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg32x0},
				&expr.Payload{DestRegister: reg32x0 + 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
				b.lookup(r.ports, reg32x0))
		}
	}
	switch r.verdict {
	case verdictDrop:
		return append(e, &expr.Counter{}, &expr.Verdict{Kind: expr.VerdictDrop})
	case verdictGoto:
		return append(e, &expr.Counter{}, &expr.Verdict{Kind: expr.VerdictGoto, Chain: r.target})
	case verdictLog:
		return append(e, b.denyLog.exprs(c.pod, c.dir)...)
	case verdictFlowLog:
		return append(e, b.flowLog.logExprs(r.flowID)...)
	}
	if r.flowID != 0 {
		e = append(e, labelExprs(r.flowID, c.dir)...)
	}
	if r.verdict == verdictAccept {
		return append(e, &expr.Counter{}, &expr.Verdict{Kind: expr.VerdictAccept})
	}
	return append(e, &expr.Counter{}, &expr.Verdict{Kind: expr.VerdictReturn})
}

// The base chains, at the filter priority (0), after the DNAT of
// prerouting and output (-100) and before the source NAT of postrouting
// (100). A verdict of accept ends only the base chain it is given in, so
// each side of a packet is judged in a base chain of its own, and a
// class chain's accept (fold.go) lets the other side be judged: forward
// judges the source pod's egress, forward-ingress (one later) the
// destination's ingress; input holds only egress, output only ingress.
func baseChains(t *nftables.Table) []*nftables.Chain {
	accept := nftables.ChainPolicyAccept
	mk := func(name string, hook *nftables.ChainHook, prio int32) *nftables.Chain {
		return &nftables.Chain{Name: name, Table: t, Type: nftables.ChainTypeFilter, Hooknum: hook,
			Priority: nftables.ChainPriorityRef(*nftables.ChainPriorityFilter + nftables.ChainPriority(prio)), Policy: &accept}
	}
	return []*nftables.Chain{
		mk(chainForward, nftables.ChainHookForward, 0),
		mk(chainForwardIngress, nftables.ChainHookForward, 1),
		mk(chainInput, nftables.ChainHookInput, 0),
		mk(chainOutput, nftables.ChainHookOutput, 0),
	}
}

// baseRules are the rules of base chain c (see the package doc).
func (b *batch) baseRules(c *nftables.Chain) []*nftables.Rule {
	var rules []*nftables.Rule
	add := func(note string, e ...expr.Any) {
		rules = append(rules, &nftables.Rule{Table: b.table, Chain: c, Exprs: e, UserData: ruleComment(note)})
	}
	accept := &expr.Verdict{Kind: expr.VerdictAccept}
	add("replies and allowed flows",
		&expr.Ct{Register: reg1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED),
			Xor:  binaryutil.NativeEndian.PutUint32(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: binaryutil.NativeEndian.PutUint32(0)},
		accept)
	if c.Name == chainInput || c.Name == chainOutput {
		add("neighbour discovery",
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{unix.IPPROTO_ICMPV6}},
			&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 1},
			&expr.Range{Op: expr.CmpOpEq, Register: reg1, FromData: []byte{133}, ToData: []byte{137}},
			accept)
	}
	dispatch := func(m string, fam uint8, src bool) {
		add("dispatch "+m, append(nfproto(fam), loadAddr(fam, src, reg1),
			&expr.Lookup{SourceRegister: reg1, DestRegister: 0, IsDestRegSet: true, SetName: m, SetID: b.ids[m]})...)
	}
	if c.Name == chainForward || c.Name == chainInput {
		dispatch(mapOut4, 4, true)
		dispatch(mapOut6, 6, true)
	}
	if c.Name == chainForwardIngress || c.Name == chainOutput {
		add("from this node", append(nfproto(4), loadAddr(4, true, reg1), b.lookup(setNode4, reg1), accept)...)
		add("from this node", append(nfproto(6), loadAddr(6, true, reg1), b.lookup(setNode6, reg1), accept)...)
		dispatch(mapIn4, 4, false)
		dispatch(mapIn6, 6, false)
	}
	return rules
}

// queueBase queues the table's fixed objects, the maps empty: for a
// table created in the same batch.
func (b *batch) queueBase() error {
	b.conn.AddTable(b.table)
	if b.denyLog != nil {
		b.conn.AddObj(b.denyLog.limit(b.table))
	}
	if b.flowLog != nil {
		b.conn.AddObj(b.flowLog.limit(b.table))
	}
	for _, m := range []string{mapIn4, mapIn6, mapOut4, mapOut6} {
		if err := b.conn.AddSet(b.nftMap(m, nil), nil); err != nil {
			return fmt.Errorf("nftables: add map %s: %w", m, err)
		}
	}
	return nil
}

// queueBaseChains queues the base chains and their rules; the node sets
// must be queued before.
func (b *batch) queueBaseChains() {
	for _, c := range baseChains(b.table) {
		nc := b.conn.AddChain(c)
		for _, r := range b.baseRules(nc) {
			b.conn.AddRule(r)
		}
	}
}
