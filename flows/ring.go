package flows

import (
	"sync"
	"sync/atomic"
)

// Ring is an agent's bounded store of recent records, and the hub of
// follow mode's subscriptions. Its slots are allocated once, by NewRing:
// a full ring overwrites its oldest record (counted), so that its memory
// never grows with the traffic.
//
// Memory: a slot is unsafe.Sizeof(Record), 264 bytes on amd64,
// allocated up front, and a record's strings and rules are held beside
// it. With every record's strings and rule their own allocation (the
// worst case: a producer that shares the node name, the pods' names and
// the FlowIndex's rules costs less), TestRingMemory measures 464 bytes a
// record: 3.6 MiB for a full ring of the default 8192.
//
// Add never blocks on a reader: each subscription has a bounded buffer,
// and a record it has no room for is dropped for it and counted.
// Every method is safe for concurrent use. Records are values; the Rules
// slice of a record passed to Add must not be changed afterwards.
type Ring struct {
	mu   sync.Mutex
	buf  []Record
	head int // index of the oldest record
	n    int // records held
	seq  uint64
	subs map[*Subscription]struct{}

	overwritten atomic.Uint64
	dropped     atomic.Uint64
}

// MinCapacity is the smallest ring NewRing makes.
const MinCapacity = 16

// NewRing makes a ring of capacity records (at least MinCapacity).
func NewRing(capacity int) *Ring {
	capacity = max(capacity, MinCapacity)
	return &Ring{buf: make([]Record, capacity), subs: map[*Subscription]struct{}{}}
}

// Add stores rec with the next sequence number (from 1) and hands it to
// every subscription whose filter it matches; it returns rec as stored.
func (r *Ring) Add(rec Record) Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	rec.Seq = r.seq
	if r.n == len(r.buf) {
		r.buf[r.head] = rec
		r.head = (r.head + 1) % len(r.buf)
		r.overwritten.Add(1)
	} else {
		r.buf[(r.head+r.n)%len(r.buf)] = rec
		r.n++
	}
	for s := range r.subs {
		if !s.filter.Match(rec) {
			continue
		}
		select {
		case s.ch <- rec:
		default:
			s.dropped.Add(1)
			r.dropped.Add(1)
		}
	}
	return rec
}

// Snapshot returns the newest limit records f matches, oldest first
// (limit <= 0: none).
func (r *Ring) Snapshot(f Filter, limit int) []Record {
	if limit <= 0 {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Record
	for i := r.n - 1; i >= 0 && len(out) < limit; i-- {
		rec := r.buf[(r.head+i)%len(r.buf)]
		if f.Match(rec) {
			out = append(out, rec)
		}
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// Stats are a ring's counts, for metrics.
type Stats struct {
	Capacity, Records int
	// Overwritten counts records a full ring overwrote; Dropped, the
	// records a subscription had no room for (every subscription's, closed
	// ones too).
	Overwritten, Dropped uint64
	Subscribers          int
	// LastSeq is the sequence number of the newest record (0: none yet).
	LastSeq uint64
}

// Stats returns the ring's counts.
func (r *Ring) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return Stats{Capacity: len(r.buf), Records: r.n, Overwritten: r.overwritten.Load(), Dropped: r.dropped.Load(),
		Subscribers: len(r.subs), LastSeq: r.seq}
}

// Capacity is the number of records the ring holds at most.
func (r *Ring) Capacity() int { return len(r.buf) }

// Overwritten counts the records a full ring overwrote.
func (r *Ring) Overwritten() uint64 { return r.overwritten.Load() }

// Dropped counts the records subscriptions had no room for.
func (r *Ring) Dropped() uint64 { return r.dropped.Load() }

// Len is the number of records the ring holds.
func (r *Ring) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// Subscription receives the records added to a ring after it was made
// that its filter matches, through a channel of a fixed buffer.
type Subscription struct {
	ring    *Ring
	filter  Filter
	ch      chan Record
	dropped atomic.Uint64
}

// Subscribe returns a subscription to the records f matches from now
// on, with a buffer of buffer records (at least 1). Close it when done:
// an open subscription costs Add a filter match per record.
func (r *Ring) Subscribe(f Filter, buffer int) *Subscription {
	s := &Subscription{ring: r, filter: f, ch: make(chan Record, max(buffer, 1))}
	r.mu.Lock()
	r.subs[s] = struct{}{}
	r.mu.Unlock()
	return s
}

// Records is the subscription's channel; Close closes it.
func (s *Subscription) Records() <-chan Record { return s.ch }

// Dropped counts the records the subscription had no room for: a reader
// that sees a gap in Seq lost these, or the ring's overwritten ones.
func (s *Subscription) Dropped() uint64 { return s.dropped.Load() }

// Close ends the subscription and closes its channel (the records still
// buffered are read first). Closing twice does nothing.
func (s *Subscription) Close() {
	r := s.ring
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.subs[s]; ok {
		delete(r.subs, s)
		close(s.ch)
	}
}
