package ipam

import (
	"context"
	"encoding/json"
	"net/netip"
	"strings"
)

// BlockInfo is one block as an operator sees it.
type BlockInfo struct {
	CIDR      netip.Prefix
	Node      string // the affine node; empty for none
	Pool      string // the pool it belongs to; empty if none does any more
	Size      int
	Allocated int
}

// Blocks lists every block with its node and use, in key order.
func (a *Allocator) Blocks(ctx context.Context) ([]BlockInfo, error) {
	var out []BlockInfo
	err := a.retry(ctx, "list blocks", func(ctx context.Context) error {
		out = out[:0]
		pools, err := a.listPools(ctx)
		if err != nil {
			return err
		}
		kvs, err := a.store.List(ctx, a.keys.Blocks())
		if err != nil {
			return err
		}
		for _, kv := range kvs {
			b, err := decodeBlock(kv)
			if err != nil {
				return err
			}
			info := BlockInfo{CIDR: b.CIDR, Node: strings.TrimPrefix(b.Affinity, "host:"), Size: b.Size(), Allocated: b.Size() - b.NumFree()}
			for _, p := range pools.cut() {
				if p.pool.CIDR.Contains(b.CIDR.Addr()) {
					info.Pool = p.name
				}
			}
			out = append(out, info)
		}
		return nil
	})
	return out, err
}

// DeletePool removes a pool. The pool is disabled first, so that no new
// address or block comes from it; a pool that still has allocated
// addresses is then refused (it stays disabled: let its pods go, then
// delete it again). Its empty blocks are let go (a node's through the
// three steps of releaseBlockOnce), and the pool is deleted last. Run
// again after a crash, it finishes the job.
func (a *Allocator) DeletePool(ctx context.Context, name string) error {
	return a.retry(ctx, "delete pool "+quote(name), func(ctx context.Context) error {
		target, err := a.disablePool(ctx, name)
		if err != nil {
			return err
		}
		for pass := 0; pass < 2; pass++ {
			// The second pass catches a block claimed by an allocation
			// that read the pool before it was disabled.
			if err := a.dropPoolBlocks(ctx, target.pool); err != nil {
				return err
			}
			if pass == 0 {
				_, err := a.write(ctx, Write{Key: a.keys.Pool(name), ModRevision: target.rev, Delete: true})
				if err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// disablePool marks pool name disabled and returns it at its new
// revision.
func (a *Allocator) disablePool(ctx context.Context, name string) (poolRev, error) {
	pools, err := a.listPools(FreshRead(ctx))
	if err != nil {
		return poolRev{}, err
	}
	if bad := pools.invalidNamed(name); bad != nil {
		// Disabling it would mean rewriting a value that holds no pool.
		return poolRev{}, &Error{Kind: KindInvalid, Msg: "cannot delete: " + bad.Error() + "; replace it with a valid pool first", Err: bad}
	}
	for _, p := range pools.valid {
		if p.pool.Name != name {
			continue
		}
		if p.pool.Disabled {
			return p, nil
		}
		p.pool.Disabled = true
		v, err := json.Marshal(p.pool)
		if err != nil {
			return poolRev{}, err
		}
		p.rev, err = a.write(ctx, Write{Key: a.keys.Pool(name), ModRevision: p.rev, Value: v})
		return p, err
	}
	return poolRev{}, errorf(KindInvalid, "no pool %q", name)
}

// dropPoolBlocks lets every block of pool p go, or refuses when one holds
// addresses.
func (a *Allocator) dropPoolBlocks(ctx context.Context, p Pool) error {
	kvs, err := a.store.List(ctx, a.keys.Blocks())
	if err != nil {
		return err
	}
	for _, kv := range kvs {
		b, err := decodeBlock(kv)
		if err != nil {
			return err
		}
		if !p.CIDR.Contains(b.CIDR.Addr()) {
			continue
		}
		if !b.Empty() {
			return errorf(KindInvalid, "pool %q: block %s still has %d allocated address(es); the pool is disabled: release them, then delete it again",
				p.Name, b.CIDR, b.Size()-b.NumFree())
		}
		if node, ok := strings.CutPrefix(b.Affinity, "host:"); ok {
			released, err := a.releaseBlockOnce(ctx, node, b.CIDR, nil)
			if err != nil {
				return err
			}
			if released {
				continue
			}
			// Not in its node's index: delete it directly.
		}
		if _, err := a.write(ctx, Write{Key: kv.Key, ModRevision: kv.ModRevision, Delete: true}); err != nil {
			return err
		}
	}
	return nil
}
