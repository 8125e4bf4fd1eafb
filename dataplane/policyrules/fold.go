package policyrules

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strconv"

	"github.com/podnet/podnet/policy"
)

// Folding (see the package doc): a NetworkPolicy section's rules whose
// remote end is a peer set (the addresses a pod selector picks) are, when
// there are enough of them, one verdict map lookup instead of a walk:
// the map sends each address of the union of their peer sets to the
// class chain of exactly the rules whose sets hold it. A first packet
// then costs one lookup and its class's rules, whatever the number of
// policies.

// The default limits of folding.
const (
	// defaultFoldMin: a section with fewer peer-set rules of a family
	// walks them; a few rules cost less than a map and its chains.
	defaultFoldMin = 8
	// defaultFoldCap bounds one fold map's elements, the union of its
	// rules' peer sets: each is a copy of a peer set element, in the
	// kernel and in the Renderer's memory of what it programmed (about
	// 60 bytes there, and some 300 for each class chain).
	defaultFoldCap = 16384
	// defaultFoldBudget bounds the elements of all of a node's fold
	// maps together; the sections past it walk their rules.
	defaultFoldBudget = 65536
)

// foldLimits says when a section folds: at least min peer-set rules of
// the family, at most cap addresses in their union, and the node's fold
// maps under budget elements.
type foldLimits struct{ min, cap, budget int }

func (l foldLimits) orDefaults() foldLimits {
	if l.min <= 0 {
		l.min = defaultFoldMin
	}
	if l.cap <= 0 {
		l.cap = defaultFoldCap
	}
	if l.budget <= 0 {
		l.budget = defaultFoldBudget
	}
	return l
}

// maxFoldBlock: an ipBlock's rule folds, its addresses taken as a peer
// set's, when the block holds at most this many addresses of the family
// (single hosts, small ranges); a wider one is walked.
const maxFoldBlock = 256

// foldable returns what folding knows of rule x's remote set, and whether
// it can take it: an allow rule whose remote end is a peer set, or an
// ipBlock of at most maxFoldBlock addresses. The key names it in a fold
// map's key; an ipBlock's is apart from any peer set's.
func (b *builder) foldable(x rule) (peerRef, bool) {
	if x.kind != ruleAllow || x.peer == "" {
		return peerRef{}, false
	}
	if ref, ok := b.peerRefs[x.peer]; ok {
		return ref, true
	}
	if ref, ok := b.blocks[x.peer]; ok && len(b.blockAddrs(x.peer, ref)) > 0 {
		return peerRef{key: "ipBlock " + ref.key, fam: ref.fam}, true
	}
	return peerRef{}, false
}

// foldAddrs are the addresses of a foldable remote set (foldable).
func (b *builder) foldAddrs(name string, fam uint8) []netip.Addr {
	if ref, ok := b.peerRefs[name]; ok {
		return b.peerAddrs(ref.key, fam)
	}
	return b.blockAddrs(name, b.blocks[name])
}

// blockAddrs are the addresses of the ipBlock set name (of ref), nil when
// they are more than maxFoldBlock; remembered for the build.
func (b *builder) blockAddrs(name string, ref peerRef) []netip.Addr {
	if a, ok := b.blockPoints[name]; ok {
		return a
	}
	var out []netip.Addr
	if cs := b.cidrs[ref.key]; cs != nil {
		ps := cs.V4
		if ref.fam == 6 {
			ps = cs.V6
		}
		for _, p := range ps {
			p = unmapPrefix(p)
			if host := p.Addr().BitLen() - p.Bits(); host > 8 || len(out)+1<<host > maxFoldBlock {
				out = nil
				break
			}
			for a := p.Addr(); p.Contains(a); a = a.Next() {
				out = append(out, a)
			}
		}
	}
	b.blockPoints[name] = out
	return out
}

// fold is a fold map: remote address -> the class chain of the rules
// whose peer sets hold it. Its name is a hash of the rules it folds, so
// that the pods the same policies select share it, and a pod joining or
// leaving a peer set changes one element.
type fold struct {
	name  string
	fam   uint8
	key   string // the map's comment
	elems map[netip.Addr]string
}

// npSection renders NetworkPolicy's rules of direction d: each IR rule's
// nftables rules in order, except that, for each family with enough of
// them, the peer-set rules are folded into one lookup, which comes first.
// The rules all allow, so their order changes no verdict; it only picks
// which of several allowing rules counts the packet and labels the flow.
func (b *builder) npSection(rules []*policy.Rule, d Direction) []rule {
	var all []rule
	var cands [2][]int // indexes in all of the peer-set rules, by family
	for _, r := range rules {
		rs := b.rules(r)
		var id uint64
		if b.flow {
			id = ruleID(npRule(r.Policy, d, r.Index, "Allow"))
		}
		for _, x := range rs {
			x.flowID = id
			if ref, ok := b.foldable(x); ok {
				cands[ref.fam/6] = append(cands[ref.fam/6], len(all))
			}
			all = append(all, x)
		}
	}
	var out []rule
	folded := make([]bool, len(all))
	for i, fam := range []uint8{4, 6} {
		if len(cands[i]) < b.fold.min {
			continue
		}
		b.foldTried = true
		name, ok := b.foldOf(all, cands[i], fam, d)
		if !ok {
			continue
		}
		out = append(out, rule{kind: ruleFold, family: fam, peer: name})
		for _, j := range cands[i] {
			folded[j] = true
		}
	}
	for i, x := range all {
		if !folded[i] {
			out = append(out, x)
		}
	}
	return out
}

// foldOf returns the name of the fold map of the rules cands (indexes in
// all, of family fam and direction d), making it and its class chains
// the first time; false if the union of their peer sets is over the cap
// or the node's budget.
func (b *builder) foldOf(all []rule, cands []int, fam uint8, d Direction) (string, bool) {
	key := []byte(d.String())
	for _, i := range cands {
		ref, _ := b.foldable(all[i])
		key = appendRuleKey(key, ref.key, all[i])
	}
	prefix := "fold4"
	if fam == 6 {
		prefix = "fold6"
	}
	name := hashName(prefix, string(key))
	if _, ok := b.rs.folds[name]; ok {
		return name, true
	}
	// Each address of the union, with the positions in cands of the
	// rules that take it in, in order.
	byAddr := map[netip.Addr][]int32{}
	for j, i := range cands {
		for _, a := range b.foldAddrs(all[i].peer, fam) {
			a = a.Unmap()
			if js := byAddr[a]; len(js) == 0 || js[len(js)-1] != int32(j) {
				byAddr[a] = append(js, int32(j))
			}
		}
		if len(byAddr) > b.fold.cap {
			return "", false
		}
	}
	if b.folded+len(byAddr) > b.fold.budget {
		return "", false
	}
	b.folded += len(byAddr)
	f := &fold{name: name, fam: fam, elems: make(map[netip.Addr]string, len(byAddr)),
		key: fmt.Sprintf("fold: %s peers of %d NetworkPolicy rules", d, len(cands))}
	classes := map[string]string{} // positions -> class chain
	var pos []byte
	for a, js := range byAddr {
		pos = pos[:0]
		for _, j := range js {
			pos = binary.LittleEndian.AppendUint32(pos, uint32(j))
		}
		c, ok := classes[string(pos)]
		if !ok {
			c = b.classChain(all, cands, js, d)
			classes[string(pos)] = c
		}
		f.elems[a] = c
	}
	b.rs.folds[name] = f
	return name, true
}

// classChain returns the name of the class chain of the rules at
// positions js of cands: each rule's port match, label, counter and
// accept, in order. Reached by a jump from the pod chain, a rule's
// accept ends the base chain's judgement (this side allows: the other
// side is judged in a base chain of its own), and a packet no rule
// matches returns to the pod chain's next rule. Its name is a hash of
// its rules, so that every fold with the same class shares it.
func (b *builder) classChain(all []rule, cands []int, js []int32, d Direction) string {
	c := &chain{dir: d}
	for _, j := range js {
		r := all[cands[j]]
		x := rule{kind: ruleAllow, ports: r.ports, policy: r.policy, index: r.index, flowID: r.flowID, verdict: verdictAccept}
		// Two peer sets of one IR rule holding the address: its rules
		// are next to each other in cands.
		if n := len(c.rules); n > 0 && c.rules[n-1] == x {
			continue
		}
		c.rules = append(c.rules, x)
		if x.ports == "" {
			break // it matches every packet: the rest would never run
		}
	}
	key := []byte(d.String())
	for _, x := range c.rules {
		key = appendRuleKey(key, "", x)
	}
	c.name = hashName("class", string(key))
	if _, ok := b.rs.chains[c.name]; !ok {
		b.rs.chains[c.name] = c
	}
	return c.name
}

// appendRuleKey appends what names a folded rule in a fold's or a class
// chain's key: its peer set's IR key (a class's rules have none), ports,
// policy, index and flow id.
func appendRuleKey(key []byte, peer string, r rule) []byte {
	key = append(append(key, 0), peer...)
	key = append(append(key, 0), r.ports...)
	key = append(append(key, 0), r.policy...)
	key = strconv.AppendInt(append(key, 0), int64(r.index), 10)
	return strconv.AppendUint(append(key, 0), r.flowID, 16)
}
