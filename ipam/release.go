package ipam

import (
	"context"
	"errors"
	"net/netip"
	"time"
)

// AssignIPArgs is a request for one given address.
type AssignIPArgs struct {
	Addr   netip.Addr
	Handle string
	Node   string
	Attrs  map[string]string
	// Endpoint, as in AutoAssignArgs.
	Endpoint *EndpointID
}

// AssignIP gives Addr to Handle. Asking again for an address the handle
// already holds succeeds; an address held by another handle is a KindInUse
// error naming its owner. If the address's block does not exist yet, it is
// claimed for Node; a block of another node is borrowed from.
func (a *Allocator) AssignIP(ctx context.Context, args AssignIPArgs) (netip.Prefix, error) {
	if err := validName("handle", args.Handle); err != nil {
		return netip.Prefix{}, err
	}
	if err := validName("node", args.Node); err != nil {
		return netip.Prefix{}, err
	}
	if args.Endpoint != nil {
		if err := validEndpoint(*args.Endpoint, args.Node); err != nil {
			return netip.Prefix{}, err
		}
	}
	var out netip.Prefix
	err := a.retry(ctx, "assign "+args.Addr.String()+" to handle "+quote(args.Handle), func(ctx context.Context) error {
		var err error
		out, err = a.assignIPOnce(ctx, args)
		return err
	})
	return out, err
}

func (a *Allocator) assignIPOnce(ctx context.Context, args AssignIPArgs) (netip.Prefix, error) {
	p, err := a.poolFor(ctx, args.Addr)
	if err != nil {
		return netip.Prefix{}, err
	}
	cidr := p.BlockFor(args.Addr)
	w := a.newWriteSet()
	ix, err := w.index(ctx, args.Node)
	if err != nil {
		return netip.Prefix{}, err
	}
	if ix.x == nil {
		if err := a.checkLayout(ctx, args.Node); err != nil {
			return netip.Prefix{}, err
		}
	}
	r, err := a.blockForAssign(ctx, w, ix, cidr)
	if err != nil {
		return netip.Prefix{}, err
	}
	attrs := Attributes{Handle: args.Handle, Node: args.Node, Extra: args.Attrs}
	if args.Endpoint != nil {
		attrs.Extra = endpointAttrs(args.Attrs, *args.Endpoint, a.cfg.Now())
	}
	seq := r.b.Sequence
	err = r.b.AllocateAddr(args.Addr, attrs)
	var ae *AllocatedError
	if errors.As(err, &ae) {
		return netip.Prefix{}, errorf(KindInUse, "address %s: already allocated to handle %q", args.Addr, ae.Owner.Handle)
	}
	if err != nil {
		return netip.Prefix{}, err
	}
	if r.b.Sequence != seq {
		r.b.EmptySince = time.Time{}
		r.dirty = true
	}
	if r.b.Affinity != HostAffinity(args.Node) {
		ix.addPublish(cidr, args.Addr)
	}
	return netip.PrefixFrom(args.Addr, cidr.Bits()), w.commit(ctx)
}

// blockForAssign returns the block cidr for an allocation of ix's node:
// claimed for the node if it does not exist (or the node's pending claim
// finished), else borrowed from, with the borrow's intent written, when
// it is not the node's.
func (a *Allocator) blockForAssign(ctx context.Context, w *writeSet, ix *indexRef, cidr netip.Prefix) (*blockRef, error) {
	if e := ix.x.entryOf(cidr); e != nil && e.State == AffinityPending {
		r, err := a.finishClaim(ctx, w, ix, cidr)
		if err != nil || r == nil {
			if err == nil {
				err = ErrConflict // withdrawn: start over and borrow
			}
			return nil, err
		}
		return r, nil
	}
	r, err := w.block(ctx, cidr)
	if err != nil {
		return nil, err
	}
	switch {
	case r.b == nil:
		if ix.x.entryOf(cidr) != nil {
			return nil, ErrConflict // being let go: wait for it
		}
		return a.claimBlock(ctx, w, ix, cidr)
	case r.b.releasing():
		return nil, ErrConflict // being let go: wait for it
	case r.b.Affinity == HostAffinity(ix.node):
		return r, nil
	}
	err = w.writeIndex(ctx, ix, func(x *NodeIndex) bool { return x.addBorrowed(cidr) })
	return r, err
}

// entryOf is entry for an index that may be nil.
func (x *NodeIndex) entryOf(cidr netip.Prefix) *NodeBlock {
	if x == nil {
		return nil
	}
	return x.entry(cidr)
}

// ReleaseByHandle frees every address handle holds on node. It reads the
// node's index and the blocks it names, and in steady state writes once:
// the block (twice for a borrowed address: the index's publication goes
// first). Finding nothing to release, it reads them again through any
// store cache (FreshRead) before it says so. An empty node ("") scans every block instead, for an admin who
// does not know the node. Releasing an unknown handle succeeds: DEL must
// be idempotent.
func (a *Allocator) ReleaseByHandle(ctx context.Context, node, handle string) error {
	if err := validName("handle", handle); err != nil {
		return err
	}
	if node != "" {
		if err := validName("node", node); err != nil {
			return err
		}
	}
	return a.retry(ctx, "release handle "+quote(handle), func(ctx context.Context) error {
		return a.releaseHandleOnce(ctx, node, handle)
	})
}

func (a *Allocator) releaseHandleOnce(ctx context.Context, node, handle string) error {
	w := a.newWriteSet()
	refs, err := a.handleBlocks(ctx, w, node, handle)
	if err != nil {
		return err
	}
	for _, r := range refs {
		if err := a.releaseAddrs(ctx, w, r, r.b.AddrsOf(handle)); err != nil {
			return err
		}
	}
	if w.idle() && !IsFreshRead(ctx) {
		// Nothing to release, or so a cache may say of an address
		// allocated behind its back: decide on fresh reads.
		return a.releaseHandleOnce(FreshRead(ctx), node, handle)
	}
	return w.commit(ctx)
}

// handleBlocks returns the blocks where handle holds addresses: of those
// node's index names, or of every block when node is empty.
func (a *Allocator) handleBlocks(ctx context.Context, w *writeSet, node, handle string) ([]*blockRef, error) {
	var refs []*blockRef
	if node == "" {
		kvs, err := a.store.List(ctx, a.keys.Blocks())
		if err != nil {
			return nil, err
		}
		needle := quotedHandle(handle)
		for _, kv := range kvs {
			if !mayHoldHandle(kv.Value, handle, needle) {
				continue
			}
			r, err := w.addBlockKV(kv)
			if err != nil {
				return nil, err
			}
			refs = append(refs, r)
		}
	} else {
		if _, err := a.held(ctx, w, node, handle, false); err != nil {
			return nil, err
		}
		ix, _ := w.index(ctx, node)
		for _, cidr := range ix.x.cidrs() {
			// nil for a block held left undecoded: it cannot
			// hold the handle.
			refs = append(refs, w.blocks[cidr])
		}
	}
	out := refs[:0]
	for _, r := range refs {
		if r != nil && r.b != nil && len(r.b.AddrsOf(handle)) > 0 {
			out = append(out, r)
		}
	}
	return out, nil
}

// releaseAddrs frees addrs of r's block in w. An address its owner
// borrowed is withdrawn from the owner's index first (the commit writes
// index removals before blocks, I3). An unaffine block left empty is
// deleted.
func (a *Allocator) releaseAddrs(ctx context.Context, w *writeSet, r *blockRef, addrs []netip.Addr) error {
	for _, addr := range addrs {
		at, ok := r.b.Owner(addr)
		if !ok {
			continue
		}
		if at.Node != "" && r.b.Affinity != HostAffinity(at.Node) {
			ix, err := w.index(ctx, at.Node)
			if err != nil {
				return err
			}
			ix.addUnpublish(r.b.CIDR, addr)
		}
		r.b.Release([]netip.Addr{addr})
		r.dirty = true
	}
	if r.dirty && r.b.Empty() {
		r.b.EmptySince = a.cfg.Now()
		r.del = r.b.Affinity == ""
	}
	return nil
}

// ReleaseIPs frees the given addresses, whoever holds them. It returns the
// addresses that were allocated; free ones are ignored.
func (a *Allocator) ReleaseIPs(ctx context.Context, addrs []netip.Addr) ([]netip.Addr, error) {
	return a.release(ctx, addrs, nil)
}

// release frees addrs; with owners set, an address is freed only while
// owners[addr] still holds it, so a GC working from an older read cannot
// free an address that meanwhile went to someone else.
func (a *Allocator) release(ctx context.Context, addrs []netip.Addr, owners map[netip.Addr]string) ([]netip.Addr, error) {
	var released []netip.Addr
	err := a.retry(ctx, "release addresses", func(ctx context.Context) error {
		var err error
		released, err = a.releaseOnce(ctx, addrs, owners)
		return err
	})
	return released, err
}

func (a *Allocator) releaseOnce(ctx context.Context, addrs []netip.Addr, owners map[netip.Addr]string) ([]netip.Addr, error) {
	var released []netip.Addr
	pools, err := a.listPools(ctx)
	if err != nil {
		return nil, err
	}
	w := a.newWriteSet()
	for _, addr := range addrs {
		var cidr netip.Prefix
		for _, p := range pools.cut() {
			// An invalid pool's blocks, too: releasing is safe.
			if p.pool.CIDR.Contains(addr) {
				cidr = p.pool.BlockFor(addr)
			}
		}
		if !cidr.IsValid() {
			continue // in no pool, so never allocated
		}
		r, err := w.block(ctx, cidr)
		if err != nil {
			return nil, err
		}
		if r.b == nil {
			continue
		}
		cur, held := r.b.Owner(addr)
		if want, ok := owners[addr]; !held || ok && cur.Handle != want {
			continue
		}
		if err := a.releaseAddrs(ctx, w, r, []netip.Addr{addr}); err != nil {
			return nil, err
		}
		released = append(released, addr)
	}
	if len(released) < len(addrs) && !IsFreshRead(ctx) {
		// An address left alone is a decision that writes nothing: a
		// cache may not have seen its allocation. Decide on fresh reads.
		return a.releaseOnce(FreshRead(ctx), addrs, owners)
	}
	return released, w.commit(ctx)
}

// IPsByHandle returns the addresses handle holds on node (every block is
// scanned when node is empty). It reads through any store cache
// (FreshRead): callers decide on it without writing.
func (a *Allocator) IPsByHandle(ctx context.Context, node, handle string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	err := a.retry(ctx, "addresses of handle "+quote(handle), func(ctx context.Context) error {
		out = out[:0]
		ctx = FreshRead(ctx)
		if node != "" {
			var err error
			out, err = a.held(ctx, a.newWriteSet(), node, handle, false)
			return err
		}
		refs, err := a.handleBlocks(ctx, a.newWriteSet(), "", handle)
		for _, r := range refs {
			for _, addr := range r.b.AddrsOf(handle) {
				out = append(out, netip.PrefixFrom(addr, r.b.CIDR.Bits()))
			}
		}
		return err
	})
	return out, err
}
