package ipam

import (
	"context"
	"net/netip"
	"slices"
	"time"
)

// Letting a node's block go is four single-key writes (releaseBlockOnce):
//
//  1. the block is marked Releasing, compared on the revision at which
//     the release read it: from then on nothing is allocated from it. An
//     allocation written after that read makes this write conflict, and
//     the release starts over from the block as it now is (a reclaim of
//     idle blocks then finds it in use and leaves it); one that read the
//     block before the mark fails its own compare and, starting over,
//     finds the mark and goes to another block. The index cannot fence
//     allocations, as an allocation in a confirmed block writes only the
//     block: without the mark, one could land after step 2, in a block
//     the index no longer names as the node's (invariant I1).
//  2. the index entry becomes pendingDeletion (agents withdraw the route;
//     claims skip the block); if the block still holds addresses of the
//     node, the same write lists it as borrowed with those addresses
//     published, so I1 and I3 outlive the affinity;
//  3. the block is deleted if empty, else loses its affinity and its mark
//     (any node may then borrow from it; its owners keep their addresses);
//  4. the entry is removed.
//
// Addresses are still released from a marked block (a DEL must work);
// that only makes step 3 conflict, and the release reads again and
// publishes what is left. A crash leaves a marked block or a
// pendingDeletion entry: the node's next ReclaimIdleBlocks finishes
// either, Repair (GC) a pendingDeletion entry older than ClaimTimeout,
// and Check reports a mark older than that. A release begun is never
// turned back into a claim.

// ReleaseAffinity lets node's block cidr go; see above.
func (a *Allocator) ReleaseAffinity(ctx context.Context, node string, cidr netip.Prefix) error {
	return a.retry(ctx, "release block "+cidr.String()+" of node "+quote(node), func(ctx context.Context) error {
		_, err := a.releaseBlockOnce(ctx, node, cidr, nil)
		return err
	})
}

// releaseBlockOnce makes one attempt at letting node's claim on cidr go,
// and reports whether it removed the claim. With may set, it begins only
// on a confirmed claim whose block, affine to node, may accepts as read;
// a release already begun (a marked block, a pendingDeletion entry) is
// finished whatever may says.
func (a *Allocator) releaseBlockOnce(ctx context.Context, node string, cidr netip.Prefix, may func(*Block) bool) (bool, error) {
	w := a.newWriteSet()
	ix, err := w.index(ctx, node)
	if err != nil || ix.x == nil || ix.x.entry(cidr) == nil {
		return false, err
	}
	e := *ix.x.entry(cidr)
	r, err := w.block(ctx, cidr)
	if err != nil {
		return false, err
	}
	affine := r.b != nil && r.b.Affinity == HostAffinity(node)
	begun := e.State == AffinityPendingDeletion || affine && !r.b.Releasing.IsZero()
	if may != nil && !begun && (e.State != AffinityConfirmed || !affine || !may(r.b)) {
		return false, nil
	}
	now := a.cfg.Now()
	if affine && r.b.Releasing.IsZero() {
		r.b.Releasing, r.dirty = now, true
		if err := w.writeBlock(ctx, cidr, r); err != nil {
			return false, err
		}
	}
	var mine []netip.Addr
	if affine {
		mine = r.b.addrsOfNode(node)
	}
	err = w.writeIndex(ctx, ix, func(x *NodeIndex) bool {
		changed := false
		if cur := x.entry(cidr); cur.State != AffinityPendingDeletion {
			cur.State, cur.Since = AffinityPendingDeletion, now
			changed = true
		}
		if affine {
			changed = x.setPublished(cidr, mine) || changed
		}
		return changed
	})
	if err != nil {
		return false, err
	}
	if affine {
		r.dirty = true
		if r.b.Empty() {
			r.del = true
		} else {
			r.b.Affinity, r.b.AffinitySince, r.b.Releasing = "", time.Time{}, time.Time{}
		}
		if err := w.writeBlock(ctx, cidr, r); err != nil {
			return false, err
		}
	}
	err = w.writeIndex(ctx, ix, func(x *NodeIndex) bool { return x.removeEntry(cidr) })
	return err == nil, err
}

// setPublished makes addrs exactly what the index publishes of cidr, a
// block of the node being let go (step 2 above): published as borrowed
// when it holds addresses of the node, not listed as borrowed when it
// holds none (an earlier attempt may have published addresses released
// since). It reports whether anything changed.
func (x *NodeIndex) setPublished(cidr netip.Prefix, addrs []netip.Addr) bool {
	if len(addrs) == 0 {
		return x.removeBorrowed(cidr)
	}
	changed := x.addBorrowed(cidr)
	e := x.borrowed(cidr)
	want := slices.Clone(addrs)
	slices.SortFunc(want, netip.Addr.Compare)
	if !slices.Equal(e.IPs, want) {
		e.IPs, changed = want, true
	}
	return changed
}

// addrsOfNode returns the addresses allocated to node (by the attribute
// Node) in ordinal order.
func (b *Block) addrsOfNode(node string) []netip.Addr {
	var out []netip.Addr
	for ord, r := range b.Owners {
		if r != 0 && b.Attributes[r-1].Node == node {
			out = append(out, b.Addr(ord))
		}
	}
	return out
}

// RemoveNodeOptions tune RemoveNode.
type RemoveNodeOptions struct {
	// ReleaseAddresses frees every address still allocated to the node
	// (its pods are gone: a deleted Kubernetes Node's are); without it
	// they stay until their handles are released or GC finds them.
	ReleaseAddresses bool
}

// RemoveNode lets every block of a node that left the cluster go, with
// ReleaseAddresses frees its addresses, drops borrowed entries that no
// longer hold any of them, and deletes the node's index once it lists
// nothing.
func (a *Allocator) RemoveNode(ctx context.Context, node string, opts RemoveNodeOptions) error {
	if err := validName("node", node); err != nil {
		return err
	}
	return a.retry(ctx, "remove node "+quote(node), func(ctx context.Context) error {
		w := a.newWriteSet()
		ix, err := w.index(ctx, node)
		if err != nil || ix.x == nil {
			return err
		}
		for _, e := range ix.x.Blocks {
			if _, err := a.releaseBlockOnce(ctx, node, e.CIDR, nil); err != nil {
				return err
			}
		}
		if opts.ReleaseAddresses {
			if err := a.releaseNodeAddrs(ctx, node); err != nil {
				return err
			}
		}
		return a.dropIndex(ctx, node)
	})
}

// releaseNodeAddrs frees every address allocated to node in the blocks
// its index names.
func (a *Allocator) releaseNodeAddrs(ctx context.Context, node string) error {
	w := a.newWriteSet()
	ix, err := w.index(ctx, node)
	if err != nil || ix.x == nil {
		return err
	}
	for _, cidr := range ix.x.cidrs() {
		r, err := w.block(ctx, cidr)
		if err != nil {
			return err
		}
		if r.b != nil {
			if err := a.releaseAddrs(ctx, w, r, r.b.addrsOfNode(node)); err != nil {
				return err
			}
		}
	}
	return w.commit(ctx)
}

// dropIndex removes node's borrowed entries whose blocks hold none of
// its addresses, and deletes the index when nothing is left in it. Only
// for a node that is gone: a live node may be between a borrow's intent
// and its block write.
func (a *Allocator) dropIndex(ctx context.Context, node string) error {
	w := a.newWriteSet()
	ix, err := w.index(ctx, node)
	if err != nil || ix.x == nil {
		return err
	}
	var empty []netip.Prefix
	for _, bb := range ix.x.Borrowed {
		r, err := w.block(ctx, bb.CIDR)
		if err != nil {
			return err
		}
		if r.b == nil || len(r.b.addrsOfNode(node)) == 0 {
			empty = append(empty, bb.CIDR)
		}
	}
	if len(ix.x.Blocks) == 0 && len(empty) == len(ix.x.Borrowed) {
		_, err := a.write(ctx, Write{Key: a.keys.Node(node), ModRevision: ix.rev, Delete: true})
		return err
	}
	return w.writeIndex(ctx, ix, func(x *NodeIndex) bool {
		changed := false
		for _, cidr := range empty {
			changed = x.removeBorrowed(cidr) || changed
		}
		return changed
	})
}

// ReclaimIdleBlocks gives node's idle blocks back to their pools, so that
// a node that once ran many pods does not keep their blocks: every block
// of the node that has been empty for at least grace is let go, except
// spare empty blocks per pool (its next pods' room), and blocks holding
// addresses are never touched. An empty block in no pool, or in a
// disabled or invalid one, is no spare. It also finishes the releases of
// the node's blocks that were begun and not finished. It returns how
// many blocks it let go. The node's agent calls it on every GC pass.
//
// When a block became empty is recorded in the block (EmptySince,
// written by the release that emptied it, and by the claim), so the grace
// outlives restarts of the caller and is the same for every caller; an
// empty block that has no such record (written by an older podnet) gets
// one now, and its grace starts then. The grace is measured between that
// record and the caller's clock (Config.Now): keep it well above the
// clock skew between nodes.
//
// It reads through any store cache, and a concurrent allocation in the
// node's blocks is safe: the release marks the block under a compare on
// the revision at which it found the block idle (see above), so either
// the allocation lands first and the block is kept, or the allocation
// starts over in another block.
func (a *Allocator) ReclaimIdleBlocks(ctx context.Context, node string, spare int, grace time.Duration) (int, error) {
	if err := validName("node", node); err != nil {
		return 0, err
	}
	if spare < 0 || grace < 0 {
		return 0, errorf(KindInvalid, "reclaim idle blocks of node %q: negative spare %d or grace %v", node, spare, grace)
	}
	n := 0 // a block let go by an attempt that fails later stays let go
	err := a.retry(ctx, "reclaim idle blocks of node "+quote(node), func(ctx context.Context) error {
		ctx = FreshRead(ctx)
		plan, err := a.idleBlocks(ctx, node, spare, grace)
		if err != nil {
			return err
		}
		idle := func(b *Block) bool {
			return b.Empty() && !b.EmptySince.IsZero() && a.cfg.Now().Sub(b.EmptySince) >= grace
		}
		for _, cidr := range plan {
			released, err := a.releaseBlockOnce(ctx, node, cidr, idle)
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

// idleBlocks returns the blocks of node ReclaimIdleBlocks lets go: its
// releases begun, and its empty blocks past grace beyond spare per
// pool, the longest empty first (the most recently emptied are the
// spares). It records EmptySince in an empty block that lacks it.
func (a *Allocator) idleBlocks(ctx context.Context, node string, spare int, grace time.Duration) ([]netip.Prefix, error) {
	pools, err := a.listPools(ctx)
	if err != nil {
		return nil, err
	}
	w := a.newWriteSet()
	ix, err := w.index(ctx, node)
	if err != nil || ix.x == nil {
		return nil, err
	}
	type empty struct {
		cidr  netip.Prefix
		since time.Time
	}
	byPool := map[string][]empty{}
	var out []netip.Prefix
	now := a.cfg.Now()
	for _, e := range ix.x.Blocks {
		if e.State == AffinityPending {
			continue // a claim in flight: the node's next allocation or Repair finishes it
		}
		r, err := w.block(ctx, e.CIDR)
		if err != nil {
			return nil, err
		}
		affine := r.b != nil && r.b.Affinity == HostAffinity(node)
		switch {
		case e.State == AffinityPendingDeletion || affine && !r.b.Releasing.IsZero():
			out = append(out, e.CIDR)
			continue
		case !affine || !r.b.Empty():
			continue
		case r.b.EmptySince.IsZero():
			r.b.EmptySince, r.dirty = now, true
		}
		pool := spareIn(pools, e.CIDR)
		byPool[pool] = append(byPool[pool], empty{e.CIDR, r.b.EmptySince})
	}
	if err := w.commit(ctx); err != nil {
		return nil, err
	}
	for pool, es := range byPool {
		keep := spare
		if pool == "" {
			keep = 0
		}
		slices.SortFunc(es, func(x, y empty) int {
			if c := y.since.Compare(x.since); c != 0 {
				return c
			}
			return comparePrefix(x.cidr, y.cidr)
		})
		for i, e := range es {
			if i >= keep && now.Sub(e.since) >= grace {
				out = append(out, e.cidr)
			}
		}
	}
	slices.SortFunc(out, comparePrefix)
	return out, nil
}

// spareIn names the pool whose spare block cidr can be: an enabled valid
// pool cut into blocks of its size; "" for none.
func spareIn(pools poolList, cidr netip.Prefix) string {
	for _, p := range pools.valid {
		if !p.pool.Disabled && p.pool.CIDR.Contains(cidr.Addr()) && p.pool.BlockSize == cidr.Bits() {
			return p.pool.Name
		}
	}
	return ""
}
