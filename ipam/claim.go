package ipam

import (
	"context"
	"errors"
	"hash/fnv"
	"iter"
	"net/netip"
)

// Claiming a block for a node is three single-key writes:
//
//  1. the node's index gains the claim as pending (the intent; the CAS on
//     the index also enforces MaxBlocksPerHost, I4);
//  2. the block is created affine to the node, carrying the allocation
//     that needed it (so the claim's block write is also the pod's);
//  3. the index entry becomes confirmed, and agents route the block (I3).
//
// Steps 2 and 3 are the writeSet's commit. Every state in between is valid:
// the allocation made in step 2 is findable from the index (I1). If the
// claimer dies, the node's next allocation (or GC after ClaimTimeout)
// finishes the claim (finishClaim): creates the block if it is missing,
// confirms it, or withdraws the entry when the block went to another node.
//
// Which block to claim: every node walks its pool in its own pseudo-random
// but fixed order (a start and an odd stride derived from a hash of node
// and pool), reading candidate block keys one at a time. Nodes spread over
// the pool instead of racing for the first free block, a node's concurrent
// claims pick the same candidate and so serialize on the index and the
// block's create instead of taking two blocks, and a claim reads O(1) keys while the pool
// is mostly free, however many blocks exist. After ClaimProbes taken
// candidates it lists the blocks once, so a nearly full pool costs one
// list, not thousands of reads.

// candidates yields the blocks node should try, in node's order, or those
// covering ranges in address order when the runtime restricted addresses.
// It is one function literal, whose helpers take yield as an argument, so
// that the compiler inlines it and claim's loop body stays on the stack
// (claim is on every ADD's path).
func candidates(p Pool, node string, ranges []Range) iter.Seq[netip.Prefix] {
	return func(yield func(netip.Prefix) bool) {
		if len(ranges) == 0 {
			nodeOrder(p, node, yield)
			return
		}
		for _, r := range ranges {
			if r.Subnet.Overlaps(p.CIDR) && !blocksInRange(p, r, yield) {
				return
			}
		}
	}
}

// nodeOrder yields every block of p in node's own order.
func nodeOrder(p Pool, node string, yield func(netip.Prefix) bool) {
	n := p.NumBlocks()
	h := fnv.New64a()
	h.Write([]byte(p.Name + "\x00" + node))
	sum := h.Sum64()
	start := sum % n
	// Any odd stride visits every block of a power-of-two pool once.
	stride := ((sum >> 32) | 1) % n
	if n == 1 {
		stride = 0
	}
	for i := range n {
		if !yield(p.BlockAt((start + i*stride) % n)) {
			return
		}
	}
}

// blocksInRange yields the blocks of p that r covers; it returns false
// when yield asked to stop.
func blocksInRange(p Pool, r Range, yield func(netip.Prefix) bool) bool {
	start, end := r.Start, r.End
	if !start.IsValid() || !p.CIDR.Contains(start) {
		start = maxAddr(r.Subnet.Masked().Addr(), p.CIDR.Addr())
	}
	for b := p.BlockFor(start); p.CIDR.Contains(b.Addr()) && r.Subnet.Overlaps(b); {
		if end.IsValid() && end.Less(b.Addr()) {
			return true
		}
		if !yield(b) {
			return false
		}
		next := addUint(b.Addr(), 1, b.Addr().BitLen()-b.Bits())
		if !next.IsValid() || next.Less(b.Addr()) || next == b.Addr() {
			return true // the last block of the address space
		}
		b = netip.PrefixFrom(next, b.Bits())
	}
	return true
}

func maxAddr(a, b netip.Addr) netip.Addr {
	if a.Less(b) {
		return b
	}
	return a
}

// mayClaim reports whether the node may claim another block (I4).
func (a *Allocator) mayClaim(ix *indexRef) bool {
	return a.cfg.MaxBlocksPerHost == 0 || ix.x == nil || ix.x.active() < a.cfg.MaxBlocksPerHost
}

// claim finds a free block in pools and claims it for the node of ix: it
// writes the intent (step 1) and returns the new block in w, to be created
// by the commit with the allocation in it.
func (a *Allocator) claim(ctx context.Context, w *writeSet, ix *indexRef, pools []Pool, ranges []Range) (*blockRef, error) {
	for _, p := range pools {
		probe := blockProbe{a: a, pool: p, ix: ix, ranged: len(ranges) > 0}
		for cidr := range candidates(p, ix.node, ranges) {
			if ix.x.lists(cidr) {
				continue // the node's already, or being let go
			}
			free, err := probe.free(ctx, cidr)
			if err == errNoFreeBlock {
				break // on to the next pool
			}
			if err != nil {
				return nil, err
			}
			if free {
				return a.claimBlock(ctx, w, ix, cidr)
			}
		}
	}
	return nil, errNoFreeBlock
}

// claimBlock writes the intent to claim cidr for ix's node and returns
// the block, new in w; the commit creates it (step 2) and confirms the
// claim (step 3). A conflict on either means someone else moved first:
// the retry reads again and finishes or withdraws the claim.
func (a *Allocator) claimBlock(ctx context.Context, w *writeSet, ix *indexRef, cidr netip.Prefix) (*blockRef, error) {
	if !a.mayClaim(ix) {
		return nil, errorf(KindExhausted, "node %q: already holds %d blocks (MaxBlocksPerHost)", ix.node, a.cfg.MaxBlocksPerHost)
	}
	now := a.cfg.Now()
	err := w.writeIndex(ctx, ix, func(x *NodeIndex) bool {
		x.setEntry(NodeBlock{CIDR: cidr, State: AffinityPending, Since: now})
		return true
	})
	if err != nil {
		return nil, err
	}
	return w.newBlock(ix, cidr), nil
}

// newBlock puts a new empty block affine to ix's node into w, to be
// created by the commit, and queues the claim's confirmation.
func (w *writeSet) newBlock(ix *indexRef, cidr netip.Prefix) *blockRef {
	now := w.a.cfg.Now()
	b := NewBlock(cidr, HostAffinity(ix.node))
	b.AffinitySince = now
	b.EmptySince = now // a claimed block nobody uses is reclaimable too
	r := &blockRef{b: b, dirty: true}
	w.blocks[cidr] = r
	ix.addConfirm(cidr)
	return r
}

// finishClaim finishes the pending claim on cidr that ix lists, whoever
// started it: the block is created if missing, and the claim confirmed
// (both by the commit); a block affine to another node, or to none, makes
// the claim withdraw at once. It returns the block, or nil when the claim
// was withdrawn.
func (a *Allocator) finishClaim(ctx context.Context, w *writeSet, ix *indexRef, cidr netip.Prefix) (*blockRef, error) {
	r, err := w.block(ctx, cidr)
	if err != nil {
		return nil, err
	}
	switch {
	case r.b == nil:
		return w.newBlock(ix, cidr), nil
	case r.b.Affinity == HostAffinity(ix.node):
		ix.addConfirm(cidr)
		return r, nil
	}
	err = w.writeIndex(ctx, ix, func(x *NodeIndex) bool {
		e := x.entry(cidr)
		return e != nil && e.State == AffinityPending && x.removeEntry(cidr)
	})
	return nil, err
}

// blockProbe tells which candidate blocks of one pool are free: by
// reading each candidate's key for the first ClaimProbes candidates, then
// from one list of the pool's blocks. With ranges, the candidates are few
// and it always reads.
type blockProbe struct {
	a      *Allocator
	pool   Pool
	ix     *indexRef
	ranged bool
	probes int
	taken  map[netip.Prefix]bool // set once probing gave way to a list
}

// free reports whether no block exists at cidr. It returns errNoFreeBlock
// when the list shows the pool full, and ErrConflict when the block is
// the node's own but its index did not say so (see adopt).
func (p *blockProbe) free(ctx context.Context, cidr netip.Prefix) (bool, error) {
	if p.taken == nil {
		if p.probes++; p.probes <= p.a.cfg.ClaimProbes || p.ranged {
			return p.read(ctx, cidr)
		}
		taken, err := p.a.blocksIn(ctx, p.pool)
		if err != nil {
			return false, err
		}
		if uint64(len(taken)) >= p.pool.NumBlocks() {
			return false, errNoFreeBlock
		}
		p.taken = taken
	}
	return !p.taken[cidr], nil
}

func (p *blockProbe) read(ctx context.Context, cidr netip.Prefix) (bool, error) {
	kv, err := p.a.store.Get(ctx, p.a.keys.Block(cidr))
	switch {
	case errors.Is(err, ErrNotFound):
		return true, nil
	case err != nil:
		return false, err
	}
	if b, derr := decodeBlock(kv); derr == nil && b.Affinity == HostAffinity(p.ix.node) {
		return false, p.a.adopt(ctx, p.ix.node, cidr)
	}
	return false, nil
}

// adopt handles a block affine to node that node's index, as read, did
// not list: a sibling process claimed it since (the fresh index lists it),
// or the index lost it (then it is added back as confirmed, within I4).
// Either way it returns ErrConflict, so the operation starts over and uses
// the block as the node's own rather than claim a second one.
func (a *Allocator) adopt(ctx context.Context, node string, cidr netip.Prefix) error {
	w := a.newWriteSet()
	ix, err := w.index(FreshRead(ctx), node)
	if err != nil {
		return err
	}
	if ix.x.lists(cidr) {
		return ErrConflict
	}
	if !a.mayClaim(ix) {
		return nil // over budget: leave it to Check and the admin
	}
	now := a.cfg.Now()
	err = w.writeIndex(ctx, ix, func(x *NodeIndex) bool {
		x.setEntry(NodeBlock{CIDR: cidr, State: AffinityConfirmed, Since: now})
		return true
	})
	if err != nil {
		return err
	}
	return ErrConflict
}

// blocksIn lists the blocks that exist in pool p.
func (a *Allocator) blocksIn(ctx context.Context, p Pool) (map[netip.Prefix]bool, error) {
	kvs, err := a.store.List(ctx, a.keys.Blocks())
	if err != nil {
		return nil, err
	}
	out := map[netip.Prefix]bool{}
	for _, kv := range kvs {
		if cidr, err := a.keys.ParseBlockKey(kv.Key); err == nil && p.CIDR.Contains(cidr.Addr()) {
			out[cidr] = true
		}
	}
	return out, nil
}
