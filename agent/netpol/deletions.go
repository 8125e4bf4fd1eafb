package netpol

import (
	"net/netip"
	"slices"
	"time"

	"k8s.io/client-go/tools/cache"
)

// DefaultDeleteDebounce is how long a pod's deletion waits for more
// before the rebuild that takes its addresses out. An nftables commit
// that deletes anything waits far longer than one that only adds (a
// grace period: 15-20 ms on the kernels measured), holding the
// namespace's commit mutex, and the plugins' own DEL commits wait behind
// it: a node's pod deletions are taken out a batch at a time. Until then
// the addresses stay where the deleted pods' rules put them, which no
// pod can use: a new pod given one is admitted by a compile (Admit's
// fast way refuses it), which takes every pending deletion out first.
const DefaultDeleteDebounce = 100 * time.Millisecond

// changed is an informer's word that its cache changed in a way policy
// may see, other than a pod's deletion: the rebuild comes after the
// short debounce, and the handshake's fast way waits for it.
func (s *Service) changed() {
	g := s.cacheGen.Add(1)
	for {
		e := s.eagerGen.Load()
		if e >= g || s.eagerGen.CompareAndSwap(e, g) {
			break
		}
	}
	s.askSoon()
}

// deleted is the DeleteFunc of every informer but the Pods': changed.
func (s *Service) deleted(any) { s.changed() }

// askSoon asks for a rebuild after the short debounce.
func (s *Service) askSoon() {
	s.eager.Store(true)
	s.askRebuild()
}

// podDeleted is the Pod informer's DeleteFunc: the pod's addresses (its
// status's and Admit's) are remembered as deleted until a compile that
// read the caches after the deletion is applied, and the rebuild waits
// DeleteDebounce.
//
// A deleted pod one of whose addresses another pod already has (Admit
// told it, or its status) is a change like any other: that pod must not
// keep the deleted one's place in the rules a moment longer than a
// change takes.
func (s *Service) podDeleted(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	p, _ := obj.(*podObj)
	if p == nil {
		s.changed()
		return
	}
	// Remembered first: an Admit that gives one of them to a new pod
	// from now on is compiled, and one that gave it before shows in
	// heldByOther below.
	s.mu.Lock()
	addrs := append(slices.Clone(p.IPs), s.admitted[p.Key()]...)
	g := s.cacheGen.Add(1)
	for _, ip := range addrs {
		s.gone[ip] = g
	}
	s.mu.Unlock()
	for _, ip := range addrs {
		if s.heldByOther(p.Key(), ip) {
			s.changed()
			return
		}
	}
	s.askRebuild()
}

// deletedPending reports whether one of addrs was a deleted pod's whose
// deletion no applied compile has taken out. Called with s.mu held.
func (s *Service) deletedPending(addrs []netip.Addr) bool {
	for _, a := range addrs {
		if _, ok := s.gone[a]; ok {
			return true
		}
	}
	return false
}

// forgetDeleted drops the deletions a compile that read the caches at
// cacheGen gen took out. Called with s.mu held.
func (s *Service) forgetDeleted(gen uint64) {
	for a, g := range s.gone {
		if g <= gen {
			delete(s.gone, a)
		}
	}
}

// debounceFor is how long the loop waits after a kick: Debounce when a
// change other than pod deletions came since the last kick, else
// DeleteDebounce.
func (s *Service) debounceFor() time.Duration {
	if s.eager.Swap(false) {
		return s.cfg.Debounce
	}
	return s.cfg.DeleteDebounce
}

// deletionsPending reports whether the caches changed since the last
// applied compile read them (pod deletions the fast way left, or events
// that came during the rebuild).
func (s *Service) deletionsPending() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ir != nil && s.cacheGen.Load() != s.irGen
}
