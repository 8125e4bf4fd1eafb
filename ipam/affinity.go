package ipam

import (
	"context"
	"net/netip"
	"time"
)

// Letting a node's block go is three single-key writes (releaseBlockOnce):
//
//  1. the index entry becomes pendingDeletion (agents withdraw the route;
//     allocations and claims skip the block); if the block still holds
//     addresses of the node, the same write lists it as borrowed with
//     those addresses published, so I1 and I3 outlive the affinity;
//  2. the block is deleted if empty, else loses its affinity (any node
//     may then borrow from it; its owners keep their addresses);
//  3. the entry is removed.
//
// A crash leaves a pendingDeletion entry, which the next release (GC after
// ClaimTimeout, or RemoveNode) finishes; it is never turned back into a
// claim.

// ReleaseAffinity lets node's block cidr go; see above.
func (a *Allocator) ReleaseAffinity(ctx context.Context, node string, cidr netip.Prefix) error {
	return a.retry(ctx, "release block "+cidr.String()+" of node "+quote(node), func(ctx context.Context) error {
		_, err := a.releaseBlockOnce(ctx, node, cidr, 0)
		return err
	})
}

// releaseBlockOnce does the work and reports whether it released the
// claim; with grace > 0 it only releases a confirmed claim on a block
// that has been empty at least that long.
func (a *Allocator) releaseBlockOnce(ctx context.Context, node string, cidr netip.Prefix, grace time.Duration) (bool, error) {
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
	if grace > 0 && (e.State != AffinityConfirmed || r.b == nil || !r.b.Empty() ||
		r.b.EmptySince.IsZero() || a.cfg.Now().Sub(r.b.EmptySince) < grace) {
		return false, nil
	}
	affine := r.b != nil && r.b.Affinity == HostAffinity(node)
	var mine []netip.Addr
	if affine {
		mine = r.b.addrsOfNode(node)
	}
	now := a.cfg.Now()
	err = w.writeIndex(ctx, ix, func(x *NodeIndex) bool {
		changed := false
		if cur := x.entry(cidr); cur.State != AffinityPendingDeletion {
			cur.State, cur.Since = AffinityPendingDeletion, now
			changed = true
		}
		if len(mine) > 0 {
			changed = x.publish(cidr, mine) || changed
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
			r.b.Affinity, r.b.AffinitySince = "", time.Time{}
		}
		if err := w.writeBlock(ctx, cidr, r); err != nil {
			return false, err
		}
	}
	err = w.writeIndex(ctx, ix, func(x *NodeIndex) bool { return x.removeEntry(cidr) })
	return err == nil, err
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
			if _, err := a.releaseBlockOnce(ctx, node, e.CIDR, 0); err != nil {
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

// ReclaimEmptyBlocks lets go of every block of node that has been empty
// for at least grace, so a node that once ran many pods does not keep
// their blocks forever. It returns how many it released.
func (a *Allocator) ReclaimEmptyBlocks(ctx context.Context, node string, grace time.Duration) (int, error) {
	n := 0
	err := a.retry(ctx, "reclaim empty blocks of node "+quote(node), func(ctx context.Context) error {
		n = 0
		w := a.newWriteSet()
		ix, err := w.index(ctx, node)
		if err != nil || ix.x == nil {
			return err
		}
		for _, e := range ix.x.Blocks {
			released, err := a.releaseBlockOnce(ctx, node, e.CIDR, max(grace, time.Nanosecond))
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
