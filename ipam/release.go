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
}

// AssignIP gives Addr to Handle. Asking again for an address the handle
// already holds succeeds; an address held by another handle is a KindInUse
// error naming its owner. If the address's block does not exist yet, it is
// claimed for Node.
func (a *Allocator) AssignIP(ctx context.Context, args AssignIPArgs) (netip.Prefix, error) {
	if err := validName("handle", args.Handle); err != nil {
		return netip.Prefix{}, err
	}
	if err := validName("node", args.Node); err != nil {
		return netip.Prefix{}, err
	}
	var out netip.Prefix
	err := a.retry(ctx, "assign "+args.Addr.String()+" to handle "+quote(args.Handle), func(ctx context.Context) error {
		p, err := a.poolFor(ctx, args.Addr)
		if err != nil {
			return err
		}
		cidr := p.BlockFor(args.Addr)
		w := a.newWriteSet()
		r, err := w.block(ctx, cidr)
		if err != nil {
			return err
		}
		if r.b == nil {
			if _, err := a.claimBlock(ctx, args.Node, cidr); err != nil {
				return err
			}
			return ErrConflict // read the block afresh, whoever created it
		}
		seq := r.b.Sequence
		err = r.b.AllocateAddr(args.Addr, Attributes{Handle: args.Handle, Node: args.Node, Extra: args.Attrs})
		var ae *AllocatedError
		if errors.As(err, &ae) {
			return errorf(KindInUse, "address %s: already allocated to handle %q", args.Addr, ae.Owner.Handle)
		}
		if err != nil {
			return err
		}
		out = netip.PrefixFrom(args.Addr, cidr.Bits())
		if r.b.Sequence == seq {
			return nil // the handle already holds it: nothing to write
		}
		r.b.EmptySince = time.Time{}
		r.dirty = true
		if err := w.addToHandle(ctx, args.Handle, cidr, 1); err != nil {
			return err
		}
		return w.commit(ctx)
	})
	return out, err
}

// ReleaseByHandle frees every address of handle and deletes the handle, in
// one transaction. Releasing an unknown handle succeeds: DEL must be
// idempotent.
func (a *Allocator) ReleaseByHandle(ctx context.Context, handle string) error {
	if err := validName("handle", handle); err != nil {
		return err
	}
	return a.retry(ctx, "release handle "+quote(handle), func(ctx context.Context) error {
		w := a.newWriteSet()
		if err := a.releaseHandle(ctx, w, handle); err != nil {
			return err
		}
		return w.commit(ctx)
	})
}

// releaseHandle frees every address of handle and deletes the handle, in w.
func (a *Allocator) releaseHandle(ctx context.Context, w *writeSet, handle string) error {
	h, blocks, err := w.handleBlocks(ctx, handle)
	if err != nil || h == nil {
		return err
	}
	for _, r := range blocks {
		if len(r.b.ReleaseHandle(handle)) > 0 {
			a.markReleased(r)
		}
	}
	h.h.Blocks, h.dirty = nil, true
	return nil
}

func (a *Allocator) markReleased(r *blockRef) {
	r.dirty = true
	if r.b.Empty() {
		r.b.EmptySince = a.cfg.Now()
	}
}

// ReleaseIPs frees the given addresses, whoever holds them, and updates
// their handles, in one transaction. It returns the addresses that were
// allocated; free ones are ignored.
func (a *Allocator) ReleaseIPs(ctx context.Context, addrs []netip.Addr) ([]netip.Addr, error) {
	return a.release(ctx, addrs, nil)
}

// release frees addrs; with owners set, an address is freed only while
// owners[addr] still holds it, so a GC working from an older read cannot
// free an address that meanwhile went to someone else.
func (a *Allocator) release(ctx context.Context, addrs []netip.Addr, owners map[netip.Addr]string) ([]netip.Addr, error) {
	var released []netip.Addr
	err := a.retry(ctx, "release addresses", func(ctx context.Context) error {
		released = released[:0]
		pools, err := a.listPools(ctx)
		if err != nil {
			return err
		}
		w := a.newWriteSet()
		for _, addr := range addrs {
			var cidr netip.Prefix
			for _, p := range pools {
				if p.pool.CIDR.Contains(addr) {
					cidr = p.pool.BlockFor(addr)
				}
			}
			if !cidr.IsValid() {
				continue // in no pool, so never allocated
			}
			r, err := w.block(ctx, cidr)
			if err != nil {
				return err
			}
			if r.b == nil {
				continue
			}
			if want, ok := owners[addr]; ok {
				if cur, held := r.b.Owner(addr); !held || cur.Handle != want {
					continue
				}
			}
			for handle, n := range r.b.Release([]netip.Addr{addr}) {
				released = append(released, addr)
				a.markReleased(r)
				if err := w.addToHandle(ctx, handle, cidr, -n); err != nil {
					return err
				}
			}
		}
		return w.commit(ctx)
	})
	return released, err
}

// IPsByHandle returns the addresses handle holds.
func (a *Allocator) IPsByHandle(ctx context.Context, handle string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	err := a.retry(ctx, "addresses of handle "+quote(handle), func(ctx context.Context) error {
		var err error
		out, err = a.held(ctx, a.newWriteSet(), handle)
		return err
	})
	return out, err
}
