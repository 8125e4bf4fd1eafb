package clusterstate

import (
	"net/netip"
	"sync"
	"sync/atomic"
)

// View is the agent's current picture of the cluster, shared between the
// one source that writes it and the services that read it. Every change
// that matters for routing signals Changed, so that the route service
// reconciles after it.
type View struct {
	mu    sync.Mutex // guards state
	state *State
	// listed is set once a full list of the datastore is in state:
	// routing from an empty state would delete every route to other
	// nodes.
	listed  atomic.Bool
	changed chan struct{}
}

// NewView returns a view of an empty state for the store prefix.
func NewView(prefix string) *View {
	return &View{state: NewState(prefix), changed: make(chan struct{}, 1)}
}

// Update runs f on the state; a true result (routing may have changed)
// signals Changed.
func (v *View) Update(f func(s *State) bool) {
	v.mu.Lock()
	changed := f(v.state)
	v.mu.Unlock()
	if changed {
		v.Signal()
	}
}

// Replace installs a freshly listed state, marks the view listed and
// signals Changed.
func (v *View) Replace(s *State) {
	v.mu.Lock()
	v.state = s
	v.mu.Unlock()
	v.MarkListed()
}

// MarkListed says the state holds a full list (a source that fills it
// in place, event by event, calls it once its list is applied).
func (v *View) MarkListed() {
	v.listed.Store(true)
	v.Signal()
}

// Listed reports whether a full list has been read.
func (v *View) Listed() bool { return v.listed.Load() }

// Read runs f on the state under the view's lock; f must not keep s.
func (v *View) Read(f func(s *State)) {
	v.mu.Lock()
	defer v.mu.Unlock()
	f(v.state)
}

// Snapshot copies the current state for route.Compute.
func (v *View) Snapshot() *Snapshot {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.state.Snapshot()
}

// PodCIDRs are node's podCIDRs in the current state.
func (v *View) PodCIDRs(node string) []netip.Prefix {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.state.PodCIDRs(node)
}

// Changed is signalled (capacity one: changes coalesce) after a change
// that matters for routing.
func (v *View) Changed() <-chan struct{} { return v.changed }

// Signal signals Changed without a change: a reconcile is wanted anyway.
func (v *View) Signal() {
	select {
	case v.changed <- struct{}{}:
	default:
	}
}
