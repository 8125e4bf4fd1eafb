package policyrules

import (
	"net/netip"
	"slices"

	"github.com/podnet/podnet/policy"
)

// chainMemo remembers the pod chains of a Renderer's last build whose
// rules follow from their pod's PodRules alone (no folding was tried:
// that reads the sets' contents), with the sets they named. A build of
// an IR whose pod has the rules the last one had (the same slices, as
// policy.IR's WithPodAddrs copies them, or equal ones, as Compile makes
// them again) takes the chain as it is: an admission's apply, or a
// rebuild after a pod elsewhere changed, builds the chains of the pods
// whose rules changed, not of the node's. The memo holds what the last
// ruleset holds, and the slices of the last IR's PodRules, nothing more.
type chainMemo map[chainKey]*memoChain

type chainKey struct {
	pod policy.PodKey
	dir Direction
}

type memoChain struct {
	ips     []netip.Addr
	dir     policy.Direction
	c, tail *chain
	refs    []setRef
}

// setRef is a set a chain's rules name, to name again when the chain is
// taken from the memo.
type setRef struct {
	kind setRefKind
	key  string
	fam  uint8
}

type setRefKind uint8

const (
	refPeer setRefKind = iota
	refCIDR
	refPorts
	refNamed
)

// podChain is chain, from the memo when the pod's rules are the ones it
// was built from.
func (b *builder) podChain(p *policy.PodRules, d Direction, dir *policy.Direction) (c, tail *chain) {
	k := chainKey{p.Pod, d}
	if m := b.memo[k]; m != nil && slices.Equal(m.ips, p.IPs) && m.dir.EqualRules(dir) {
		for _, r := range m.refs {
			b.nameSet(r)
		}
		if b.nextMemo != nil {
			b.nextMemo[k] = m
		}
		return m.c, m.tail
	}
	var refs []setRef
	b.refs, b.foldTried = &refs, false
	c, tail = b.chain(p, d, dir)
	b.refs = nil
	if b.nextMemo != nil && !b.foldTried {
		b.nextMemo[k] = &memoChain{ips: p.IPs, dir: *dir, c: c, tail: tail, refs: refs}
	}
	return c, tail
}

// record notes a set the chain being built names.
func (b *builder) record(kind setRefKind, key string, fam uint8) {
	if b.refs != nil {
		*b.refs = append(*b.refs, setRef{kind, key, fam})
	}
}

// nameSet names a set again, as the chain that named it did.
func (b *builder) nameSet(r setRef) {
	switch r.kind {
	case refPeer:
		b.peerSet(r.key, r.fam)
	case refCIDR:
		b.cidrSet(r.key, r.fam)
	case refPorts:
		b.portSet(r.key)
	case refNamed:
		b.namedSet(r.key, r.fam)
	}
}
