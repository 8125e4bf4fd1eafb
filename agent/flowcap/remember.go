package flowcap

// labelMemory remembers the labels of the connections whose new event
// carried some, by conntrack id, until their destroy event: ctnetlink's
// destroy event has the counters but not the labels, and the End record
// names the same rules as the Start.
//
// It is bounded: a destroy event the kernel dropped (ENOBUFS) would
// otherwise leave its entry for ever. Entries are kept in a ring in the
// order they came; when the ring is full, the oldest slot's entry goes
// (a connection that old, if it still lives, ends without its rules).
// An entry costs about 40 bytes; DefaultLabelMemory of them ~2.5 MiB.
//
// Not safe for concurrent use: the conntrack reader owns it.
type labelMemory struct {
	m    map[uint32]remembered
	ring []ringSlot
	next int // the ring's slot to write next
	gen  uint64
}

type remembered struct {
	l   Labels
	gen uint64
}

// ringSlot is the entry a slot was written for; the entry is the slot's
// only while its generation is the same (a destroy and a new of the same
// id leave a stale slot behind).
type ringSlot struct {
	id  uint32
	gen uint64
}

// DefaultLabelMemory is how many labelled connections the capture
// remembers until their end.
const DefaultLabelMemory = 65536

func newLabelMemory(size int) *labelMemory {
	return &labelMemory{m: make(map[uint32]remembered), ring: make([]ringSlot, max(size, 1))}
}

// put remembers l for connection id (nothing for a connection without
// labels).
func (lm *labelMemory) put(id uint32, l Labels) {
	if l == (Labels{}) {
		return
	}
	old := lm.ring[lm.next]
	if e, ok := lm.m[old.id]; ok && e.gen == old.gen {
		delete(lm.m, old.id)
	}
	lm.gen++
	lm.m[id] = remembered{l: l, gen: lm.gen}
	lm.ring[lm.next] = ringSlot{id: id, gen: lm.gen}
	lm.next = (lm.next + 1) % len(lm.ring)
}

// take returns and forgets connection id's labels.
func (lm *labelMemory) take(id uint32) Labels {
	e, ok := lm.m[id]
	if !ok {
		return Labels{}
	}
	delete(lm.m, id)
	return e.l
}

func (lm *labelMemory) len() int { return len(lm.m) }
