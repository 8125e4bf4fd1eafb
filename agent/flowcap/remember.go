package flowcap

import "github.com/podnet/podnet/flows"

// ruleMemory remembers the rules of the connections whose new event
// named some (through its labels), by conntrack id, until their destroy
// event: ctnetlink's destroy event has the counters but not the labels,
// and the End record names the same rules as the Start, even when the
// policy changed since (the slices are the index's, shared, not copied).
//
// It is bounded: a destroy event the kernel dropped (ENOBUFS) would
// otherwise leave its entry for ever. Entries are kept in a ring in the
// order they came; when the ring is full, the oldest slot's entry goes
// (a connection that old, if it still lives, ends without its rules).
// An entry costs about 60 bytes; DefaultRuleMemory of them ~4 MiB.
//
// Not safe for concurrent use: the conntrack reader owns it.
type ruleMemory struct {
	m    map[uint32]remembered
	ring []ringSlot
	next int // the ring's slot to write next
	gen  uint64
}

type remembered struct {
	rules []flows.Rule
	gen   uint64
}

// ringSlot is the entry a slot was written for; the entry is the slot's
// only while its generation is the same (a destroy and a new of the same
// id leave a stale slot behind).
type ringSlot struct {
	id  uint32
	gen uint64
}

// DefaultRuleMemory is how many connections with rules the capture
// remembers until their end.
const DefaultRuleMemory = 65536

func newRuleMemory(size int) *ruleMemory {
	return &ruleMemory{m: make(map[uint32]remembered), ring: make([]ringSlot, max(size, 1))}
}

// put remembers rules for connection id (nothing for a connection
// without rules).
func (lm *ruleMemory) put(id uint32, rules []flows.Rule) {
	if len(rules) == 0 {
		return
	}
	old := lm.ring[lm.next]
	if e, ok := lm.m[old.id]; ok && e.gen == old.gen {
		delete(lm.m, old.id)
	}
	lm.gen++
	lm.m[id] = remembered{rules: rules, gen: lm.gen}
	lm.ring[lm.next] = ringSlot{id: id, gen: lm.gen}
	lm.next = (lm.next + 1) % len(lm.ring)
}

// take returns and forgets connection id's rules.
func (lm *ruleMemory) take(id uint32) []flows.Rule {
	e, ok := lm.m[id]
	if !ok {
		return nil
	}
	delete(lm.m, id)
	return e.rules
}

func (lm *ruleMemory) len() int { return len(lm.m) }
