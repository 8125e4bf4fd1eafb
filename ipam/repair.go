package ipam

import (
	"context"
	"net/netip"
	"slices"
)

// Repair finishes what killed operations of node left in flight for
// longer than ClaimTimeout: a pending claim is finished (its block
// created if missing, then confirmed) or withdrawn (the block went to
// another node), a pendingDeletion release is completed, and the node's
// borrowed addresses not yet published are published. Every step is a
// conditional write, so Repair may race the node's own operations. GC
// runs it first.
func (a *Allocator) Repair(ctx context.Context, node string) error {
	if err := validName("node", node); err != nil {
		return err
	}
	return a.retry(ctx, "repair node "+quote(node), func(ctx context.Context) error {
		w := a.newWriteSet()
		ix, err := w.index(ctx, node)
		if err != nil || ix.x == nil {
			return err
		}
		now := a.cfg.Now()
		var releases []netip.Prefix
		for _, e := range slices.Clone(ix.x.Blocks) {
			if e.State == AffinityConfirmed || now.Sub(e.Since) < a.cfg.ClaimTimeout {
				continue
			}
			if e.State == AffinityPendingDeletion {
				releases = append(releases, e.CIDR)
				continue
			}
			if _, err := a.finishClaim(ctx, w, ix, e.CIDR); err != nil {
				return err
			}
		}
		if err := a.queuePublications(ctx, w, ix); err != nil {
			return err
		}
		if err := w.commit(ctx); err != nil {
			return err
		}
		for _, cidr := range releases {
			if _, err := a.releaseBlockOnce(ctx, node, cidr, nil); err != nil {
				return err
			}
		}
		return nil
	})
}

// queuePublications queues, in w, the publication of every address ix's
// node holds in its borrowed blocks that the index does not publish yet.
func (a *Allocator) queuePublications(ctx context.Context, w *writeSet, ix *indexRef) error {
	for _, bb := range slices.Clone(ix.x.Borrowed) {
		r, err := w.block(ctx, bb.CIDR)
		if err != nil {
			return err
		}
		if r.b == nil || r.b.Affinity == HostAffinity(ix.node) {
			continue
		}
		for _, addr := range r.b.addrsOfNode(ix.node) {
			if !slices.Contains(bb.IPs, addr) {
				ix.addPublish(bb.CIDR, addr)
			}
		}
	}
	return nil
}
