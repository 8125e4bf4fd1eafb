package noderemoval

import (
	"context"
	"log/slog"
	"slices"
	"sort"
	"time"

	"github.com/podnet/podnet/ipam"
)

// DeletedNodeGrace is how long a node's IPAM outlives its Node in block
// IPAM on the API: a Node deleted and registered again (a kubelet
// re-registering, an operator's mistake) within it keeps its blocks and
// its pods' addresses. Kubernetes' pod GC removes a missing Node's pods
// well within it.
const DeletedNodeGrace = 5 * time.Minute

// sweepInterval is how often the agent looks for the IPAM of deleted
// Nodes.
const sweepInterval = time.Minute

// removalSweep decides which departed nodes' IPAM this agent removes: a
// node is departed while it has an IPAMNode and no Node, and any live
// agent removes it once it has seen it departed for the grace. Every
// agent's sweep does, so a deleted node's IPAM is freed as long as one
// agent runs, without coordination: when several remove the same node at
// once (they see it depart within a sweep interval of each other), every
// step of the removal (ipam.Allocator.RemoveNode: each block released,
// each address freed, the index dropped) is a compare-and-swap, so a
// loser retries on what the winner left and finds the work done.
type removalSweep struct {
	self  string
	grace time.Duration
	// departed: node -> when a sweep first saw it without a Node.
	departed map[string]time.Time
}

// due returns the departed nodes to remove now, given the nodes with an
// IPAMNode and the live Nodes.
func (r *removalSweep) due(now time.Time, indexed, live []string) []string {
	if !slices.Contains(live, r.self) {
		return nil // not registered (yet, or any more): no view to act on
	}
	sort.Strings(live)
	var out []string
	seen := map[string]bool{}
	for _, n := range indexed {
		seen[n] = true
		if _, ok := slices.BinarySearch(live, n); ok {
			delete(r.departed, n)
			continue
		}
		since, ok := r.departed[n]
		if !ok {
			r.departed[n] = now
			continue
		}
		if now.Sub(since) >= r.grace {
			out = append(out, n)
		}
	}
	for n := range r.departed {
		if !seen[n] {
			delete(r.departed, n) // removed, by this agent or another
		}
	}
	return out
}

// Config configures the node removal service.
type Config struct {
	// Node is this node's name.
	Node string
	// Store is the IPAM store the removals write to: the one the node's
	// IPAM socket serves, so that its cache sees them.
	Store  ipam.Store
	Prefix string
	// Synced is closed once Live and Indexed read a synced cache.
	Synced <-chan struct{}
	// Live are the names of the Nodes; Indexed, the nodes with an
	// IPAMNode.
	Live, Indexed func() []string
	Logger        *slog.Logger
}

// Service removes the IPAM of deleted Nodes: their blocks let go and
// their addresses released.
type Service struct {
	cfg      Config
	grace    time.Duration
	interval time.Duration
}

// New returns the service.
func New(cfg Config) *Service {
	return &Service{cfg: cfg, grace: DeletedNodeGrace, interval: sweepInterval}
}

// Ready is always nil: a sweep that fails is retried at the next, and
// holds nothing back.
func (s *Service) Ready() error { return nil }

// Run runs the removal sweep every interval, once the caches have synced,
// until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case <-s.cfg.Synced:
	}
	p := s.newPass()
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		p.run(ctx, time.Now())
	}
}

// pass is the state sweeps share: which nodes are departed since when.
type pass struct {
	s     *Service
	alloc *ipam.Allocator
	r     *removalSweep
}

func (s *Service) newPass() *pass {
	return &pass{s: s, alloc: ipam.New(s.cfg.Store, ipam.Config{Keys: ipam.Keys{Prefix: s.cfg.Prefix}, Logger: s.cfg.Logger}),
		r: &removalSweep{self: s.cfg.Node, grace: s.grace, departed: map[string]time.Time{}}}
}

// run is one sweep at now: it removes each departed node due, and
// returns how many it removed.
func (p *pass) run(ctx context.Context, now time.Time) int {
	removed := 0
	for _, n := range p.r.due(now, p.s.cfg.Indexed(), p.s.cfg.Live()) {
		if err := p.alloc.RemoveNode(ctx, n, ipam.RemoveNodeOptions{ReleaseAddresses: true}); err != nil {
			p.s.cfg.Logger.Warn("removing a deleted Node's IPAM", "deleted_node", n, "err", err)
			continue
		}
		removed++
		p.s.cfg.Logger.Info("removed a deleted Node's IPAM: its blocks and addresses are free", "deleted_node", n)
	}
	return removed
}
