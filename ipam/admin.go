package ipam

import (
	"context"
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
		kvs, _, err := a.store.List(ctx, a.keys.Blocks())
		if err != nil {
			return err
		}
		for _, kv := range kvs {
			b, err := decodeBlock(kv)
			if err != nil {
				return err
			}
			info := BlockInfo{CIDR: b.CIDR, Node: strings.TrimPrefix(b.Affinity, "host:"), Size: b.Size(), Allocated: b.Size() - b.NumFree()}
			for _, p := range pools {
				if p.pool.CIDR.Contains(b.CIDR.Addr()) {
					info.Pool = p.pool.Name
				}
			}
			out = append(out, info)
		}
		return nil
	})
	return out, err
}

// DeletePool removes a pool. A pool that still has allocated addresses is
// refused (disable it, let its pods go, then delete it); its empty blocks
// are deleted with it, with their affinities, in one transaction.
func (a *Allocator) DeletePool(ctx context.Context, name string) error {
	return a.retry(ctx, "delete pool "+quote(name), func(ctx context.Context) error {
		pools, err := a.listPools(ctx)
		if err != nil {
			return err
		}
		var target *poolRev
		for i := range pools {
			if pools[i].pool.Name == name {
				target = &pools[i]
			}
		}
		if target == nil {
			return errorf(KindInvalid, "no pool %q", name)
		}
		cmps := []Compare{{Key: a.keys.Pool(name), ModRevision: target.rev}}
		ops := []Op{Del(a.keys.Pool(name))}
		kvs, _, err := a.store.List(ctx, a.keys.Blocks())
		if err != nil {
			return err
		}
		for _, kv := range kvs {
			b, err := decodeBlock(kv)
			if err != nil {
				return err
			}
			if !target.pool.CIDR.Contains(b.CIDR.Addr()) {
				continue
			}
			if !b.Empty() {
				return errorf(KindInvalid, "pool %q: block %s still has %d allocated address(es); release them first", name, b.CIDR, b.Size()-b.NumFree())
			}
			cmps = append(cmps, Compare{Key: kv.Key, ModRevision: kv.ModRevision})
			ops = append(ops, Del(kv.Key))
			if node, ok := strings.CutPrefix(b.Affinity, "host:"); ok {
				ops = append(ops, Del(a.keys.Affinity(node, b.CIDR)))
			}
		}
		a.txns.Add(1)
		_, err = a.store.Txn(ctx, cmps, ops)
		return err
	})
}
