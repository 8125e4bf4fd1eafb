package ipam

import (
	"context"
	"encoding/json"
	"errors"
	"hash/fnv"
	"iter"
	"net/netip"
	"time"
)

// Claiming a block for a node has two phases:
//
//  1. create the affinity ipam/affinities/<node>/<cidr> as pending, if it
//     does not exist;
//  2. in one transaction, create the block with the node's affinity (if it
//     does not exist) and move the affinity to confirmed (if still at the
//     revision phase 1 wrote).
//
// The pending affinity is the node's durable intent: if the claimer dies
// between the phases, the node's next allocation finds it and finishes
// phase 2 (finishClaim), and Check reports it if nobody does. Because the
// stores have multi-key transactions, a block never exists with a pending
// affinity, which Calico's two-step datastore writes cannot promise.
//
// Which block to claim: every node walks its pool in its own pseudo-random
// but fixed order (a start and an odd stride derived from a hash of node
// and pool), reading candidate block keys one at a time. Nodes spread over
// the pool instead of racing for the first free block, a node's concurrent
// claims pick the same candidate and so serialize on its affinity key
// instead of taking two blocks, and a claim reads O(1) keys while the pool
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

// claim finds a free block in pools and claims it for node. known holds
// the node's blocks the caller already looked at.
func (a *Allocator) claim(ctx context.Context, node string, pools []Pool, ranges []Range, known map[netip.Prefix]bool) (netip.Prefix, error) {
	for _, p := range pools {
		probe := blockProbe{a: a, pool: p, node: node, known: known, ranged: len(ranges) > 0}
		for cidr := range candidates(p, node, ranges) {
			free, err := probe.free(ctx, cidr)
			if err == errNoFreeBlock {
				break // on to the next pool
			}
			if err != nil {
				return netip.Prefix{}, err
			}
			if !free {
				continue
			}
			ok, err := a.claimBlock(ctx, node, cidr)
			if err != nil {
				return netip.Prefix{}, err
			}
			if ok {
				return cidr, nil
			}
		}
	}
	return netip.Prefix{}, errNoFreeBlock
}

// blockProbe tells which candidate blocks of one pool are free: by
// reading each candidate's key for the first ClaimProbes candidates, then
// from one list of the pool's blocks. With ranges, the candidates are few
// and it always reads.
type blockProbe struct {
	a      *Allocator
	pool   Pool
	node   string
	known  map[netip.Prefix]bool
	ranged bool
	probes int
	taken  map[netip.Prefix]bool // set once probing gave way to a list
}

// free reports whether no block exists at cidr. It returns errNoFreeBlock
// when the list shows the pool full, and ErrConflict when the block is
// the node's own but the caller did not know it.
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
	// A block of our own node that our affinity list did not show: a
	// sibling process claimed it since. Start over and use it rather than
	// claim a second one.
	if b, derr := decodeBlock(kv); derr == nil && b.Affinity == HostAffinity(p.node) && !p.known[cidr] {
		return false, ErrConflict
	}
	return false, nil
}

// blocksIn lists the blocks that exist in pool p.
func (a *Allocator) blocksIn(ctx context.Context, p Pool) (map[netip.Prefix]bool, error) {
	kvs, _, err := a.store.List(ctx, a.keys.Blocks())
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

// claimBlock runs both phases for cidr. It returns false when another node
// owns the block, and ErrConflict when the node's affinity already exists:
// another process of the same node is claiming it, and the caller should
// start over and find that block among the node's own.
func (a *Allocator) claimBlock(ctx context.Context, node string, cidr netip.Prefix) (bool, error) {
	key := a.keys.Affinity(node, cidr)
	v, _ := json.Marshal(Affinity{State: AffinityPending, Since: a.cfg.Now()})
	a.txns.Add(1)
	rev, err := a.store.Txn(ctx, []Compare{{Key: key}}, []Op{Put(key, v)})
	if err != nil {
		return false, err
	}
	return a.finishClaim(ctx, node, cidr, rev)
}

// finishClaim is phase 2 for the pending affinity at revision rev. If the
// block belongs to another node, it withdraws the affinity.
func (a *Allocator) finishClaim(ctx context.Context, node string, cidr netip.Prefix, rev int64) (bool, error) {
	affKey, blockKey := a.keys.Affinity(node, cidr), a.keys.Block(cidr)
	b := NewBlock(cidr, HostAffinity(node))
	now := a.cfg.Now()
	b.EmptySince = now // a claimed block nobody uses is reclaimable too
	bv, _ := json.Marshal(b)
	av, _ := json.Marshal(Affinity{State: AffinityConfirmed, Since: now})
	a.txns.Add(1)
	_, err := a.store.Txn(ctx, []Compare{{Key: blockKey}, {Key: affKey, ModRevision: rev}},
		[]Op{Put(blockKey, bv), Put(affKey, av)})
	if !errors.Is(err, ErrConflict) {
		return err == nil, err
	}
	// Either the block exists or the affinity moved on. Look at both.
	kv, err := a.store.Get(ctx, blockKey)
	switch {
	case errors.Is(err, ErrNotFound):
		return false, ErrConflict // the affinity changed under us; start over
	case err != nil:
		return false, err
	}
	cur, err := decodeBlock(kv)
	if err != nil {
		return false, err
	}
	if cur.Affinity == HostAffinity(node) {
		return true, nil // a sibling process of this node finished it
	}
	a.txns.Add(1)
	_, err = a.store.Txn(ctx, []Compare{{Key: affKey, ModRevision: rev}}, []Op{Del(affKey)})
	if err != nil && !errors.Is(err, ErrConflict) {
		return false, err
	}
	return false, nil
}

// ReleaseAffinity lets node's block cidr go: the affinity passes through
// pendingDeletion, then an empty block is deleted, and a block still
// holding addresses loses its affinity and stays for its owners (any node
// may then borrow from it). Both end with the affinity deleted in the same
// transaction.
func (a *Allocator) ReleaseAffinity(ctx context.Context, node string, cidr netip.Prefix) error {
	return a.retry(ctx, "release block "+cidr.String()+" of node "+quote(node), func(ctx context.Context) error {
		_, err := a.releaseAffinityOnce(ctx, node, cidr, 0)
		return err
	})
}

// releaseAffinityOnce does the work and reports whether it released the
// affinity; with grace > 0 it only releases a block that has been empty at
// least that long.
func (a *Allocator) releaseAffinityOnce(ctx context.Context, node string, cidr netip.Prefix, grace time.Duration) (bool, error) {
	affKey, blockKey := a.keys.Affinity(node, cidr), a.keys.Block(cidr)
	akv, err := a.store.Get(ctx, affKey)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	rev := akv.ModRevision
	var af Affinity
	if err := json.Unmarshal(akv.Value, &af); err != nil {
		return false, err
	}
	w := a.newWriteSet()
	r, err := w.block(ctx, cidr)
	if err != nil {
		return false, err
	}
	if grace > 0 && (r.b == nil || !r.b.Empty() || r.b.EmptySince.IsZero() || a.cfg.Now().Sub(r.b.EmptySince) < grace) {
		return false, nil
	}
	if af.State != AffinityPendingDeletion {
		v, _ := json.Marshal(Affinity{State: AffinityPendingDeletion, Since: a.cfg.Now()})
		a.txns.Add(1)
		if rev, err = a.store.Txn(ctx, []Compare{{Key: affKey, ModRevision: rev}}, []Op{Put(affKey, v)}); err != nil {
			return false, err
		}
	}
	var cmps = []Compare{{Key: affKey, ModRevision: rev}}
	var ops = []Op{Del(affKey)}
	switch {
	case r.b == nil:
	case r.b.Affinity != HostAffinity(node):
		// Not this node's block after all; only the affinity goes.
	case r.b.Empty():
		cmps = append(cmps, Compare{Key: blockKey, ModRevision: r.rev})
		ops = append(ops, Del(blockKey))
	default:
		b := r.b.Clone()
		b.Affinity = ""
		v, err := json.Marshal(b)
		if err != nil {
			return false, err
		}
		cmps = append(cmps, Compare{Key: blockKey, ModRevision: r.rev})
		ops = append(ops, Put(blockKey, v))
	}
	a.txns.Add(1)
	_, err = a.store.Txn(ctx, cmps, ops)
	return err == nil, err
}

// RemoveNode releases every block affinity of a node that left the
// cluster. Addresses still allocated stay until their handles are released
// or GC finds them leaked.
func (a *Allocator) RemoveNode(ctx context.Context, node string) error {
	if err := validName("node", node); err != nil {
		return err
	}
	return a.retry(ctx, "remove node "+quote(node), func(ctx context.Context) error {
		affs, err := a.nodeAffinities(ctx, node)
		if err != nil {
			return err
		}
		for _, af := range affs {
			if _, err := a.releaseAffinityOnce(ctx, node, af.cidr, 0); err != nil {
				return err
			}
		}
		return nil
	})
}

// ReclaimEmptyBlocks releases the affinity of every block of node that has
// been empty for at least grace, so a node that once ran many pods does not
// keep their blocks forever. It returns how many it released.
func (a *Allocator) ReclaimEmptyBlocks(ctx context.Context, node string, grace time.Duration) (int, error) {
	n := 0
	err := a.retry(ctx, "reclaim empty blocks of node "+quote(node), func(ctx context.Context) error {
		n = 0
		affs, err := a.nodeAffinities(ctx, node)
		if err != nil {
			return err
		}
		for _, af := range affs {
			released, err := a.releaseAffinityOnce(ctx, node, af.cidr, max(grace, time.Nanosecond))
			if err != nil {
				return err
			}
			if released {
				n++
			}
		}
		return nil
	})
	return n, err
}
