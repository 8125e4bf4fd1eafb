package clusterstate

import "sync"

// Self is this node's own record as the agent wants it registered: what
// the route service found at start, changed while the agent runs (a
// rotated WireGuard key). The source's registrar registers Record and
// registers again when Changed is signalled.
type Self struct {
	mu      sync.Mutex
	rec     NodeRecord
	changed chan struct{}
}

// NewSelf holds rec.
func NewSelf(rec NodeRecord) *Self {
	return &Self{rec: rec, changed: make(chan struct{}, 1)}
}

// Record is the record to register now.
func (s *Self) Record() NodeRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rec
}

// Update runs f on the record and signals Changed when f changed it.
func (s *Self) Update(f func(r *NodeRecord)) {
	s.mu.Lock()
	old := s.rec
	f(&s.rec)
	changed := s.rec != old
	s.mu.Unlock()
	if changed {
		select {
		case s.changed <- struct{}{}:
		default:
		}
	}
}

// Changed is signalled (capacity one: changes coalesce) after Update
// changed the record; the one registrar receives it.
func (s *Self) Changed() <-chan struct{} { return s.changed }
