package ipam

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
)

// PutPool creates or replaces a pool. A pool may not overlap another, and
// an existing pool's CIDR and block size may not change, since blocks were
// cut by them.
func (a *Allocator) PutPool(ctx context.Context, p Pool) error {
	p, err := p.Normalize()
	if err != nil {
		return err
	}
	// The overlap check must see every pool written before this call: a
	// cached pool list (the allocation path's) can miss one written a
	// moment ago and let an overlapping pool in.
	ctx = FreshRead(ctx)
	return a.retry(ctx, "put pool "+quote(p.Name), func(ctx context.Context) error {
		pools, err := a.listPools(ctx)
		if err != nil {
			return err
		}
		var rev int64
		for _, x := range pools {
			if x.pool.Name == p.Name {
				rev = x.rev
				if x.pool.CIDR != p.CIDR || x.pool.BlockSize != p.BlockSize {
					return errorf(KindInvalid, "pool %q: cidr %s/blockSize %d cannot change to %s/%d",
						p.Name, x.pool.CIDR, x.pool.BlockSize, p.CIDR, p.BlockSize)
				}
				continue
			}
			if x.pool.CIDR.Overlaps(p.CIDR) {
				return errorf(KindInvalid, "pool %q: cidr %s overlaps pool %q (%s)", p.Name, p.CIDR, x.pool.Name, x.pool.CIDR)
			}
		}
		v, err := json.Marshal(p)
		if err != nil {
			return err
		}
		// The overlap check read a list that a concurrent PutPool of
		// another name may outdate; pools are rare admin writes, and
		// Check reports any blocks that end up overlapping.
		_, err = a.write(ctx, Write{Key: a.keys.Pool(p.Name), ModRevision: rev, Value: v})
		return err
	})
}

// Pools returns every pool, by name, as the store holds them now (not
// from a cache), since admins and the agent decide on the answer.
func (a *Allocator) Pools(ctx context.Context) ([]Pool, error) {
	ctx = FreshRead(ctx)
	var out []Pool
	err := a.retry(ctx, "list pools", func(ctx context.Context) error {
		ps, err := a.listPools(ctx)
		out = out[:0]
		for _, p := range ps {
			out = append(out, p.pool)
		}
		return err
	})
	return out, err
}

type poolRev struct {
	pool Pool
	rev  int64
}

func (a *Allocator) listPools(ctx context.Context) ([]poolRev, error) {
	kvs, err := a.store.List(ctx, a.keys.Pools())
	if err != nil {
		return nil, err
	}
	out := make([]poolRev, 0, len(kvs))
	for _, kv := range kvs {
		var p Pool
		if err := json.Unmarshal(kv.Value, &p); err != nil {
			return nil, errorf(KindInternal, "pool %s: %v", kv.Key, err)
		}
		if p, err = p.Normalize(); err != nil {
			return nil, err
		}
		out = append(out, poolRev{p, kv.ModRevision})
	}
	return out, nil
}

// eligiblePools returns the enabled pools of one family that node may use:
// the named ones in the order given, or all that select the node, by name.
func (a *Allocator) eligiblePools(ctx context.Context, node string, bits int, names []string, ranges []Range) ([]Pool, error) {
	out, err := a.eligiblePoolsIn(ctx, node, bits, names, ranges)
	var missing *NoSuchPoolError
	if (len(out) == 0 || errors.As(err, &missing)) && !IsFreshRead(ctx) {
		// The pool list may come from a cache a moment old; a pool
		// created just before this allocation must not be missed, so an
		// answer of none is checked against the store's present state.
		return a.eligiblePoolsIn(FreshRead(ctx), node, bits, names, ranges)
	}
	return out, err
}

func (a *Allocator) eligiblePoolsIn(ctx context.Context, node string, bits int, names []string, ranges []Range) ([]Pool, error) {
	all, err := a.listPools(ctx)
	if err != nil {
		return nil, err
	}
	var labels map[string]string
	haveLabels := false
	byName := map[string]Pool{}
	for _, x := range all {
		byName[x.pool.Name] = x.pool
	}
	if len(names) == 0 {
		names = slices.Sorted(maps.Keys(byName))
	}
	var out []Pool
	for _, n := range names {
		p, ok := byName[n]
		if !ok {
			return nil, &NoSuchPoolError{Name: n}
		}
		if p.CIDR.Addr().BitLen() != bits || p.Disabled {
			continue
		}
		sel, _ := ParseSelector(p.NodeSelector)
		if len(sel) > 0 && !haveLabels && a.cfg.NodeLabels != nil {
			// Only a pool with a selector needs the node's labels.
			if labels, err = a.cfg.NodeLabels(ctx, node); err != nil {
				return nil, fmt.Errorf("labels of node %q: %w", node, err)
			}
			haveLabels = true
		}
		if !sel.Matches(labels) {
			continue
		}
		if len(ranges) > 0 && !slices.ContainsFunc(ranges, func(r Range) bool { return r.Subnet.Overlaps(p.CIDR) }) {
			continue
		}
		out = append(out, p)
	}
	return out, nil
}

// NoSuchPoolError is a request naming a pool the store does not have. It
// unwraps to a KindInvalid *Error; callers that seed pools from their
// configuration (podnet-ipam) create the pool on it and try again, so the
// pools are read once per allocation, not twice.
type NoSuchPoolError struct{ Name string }

func (e *NoSuchPoolError) Error() string { return fmt.Sprintf("pool %q: no such pool", e.Name) }

// Unwrap gives the error its kind, for KindOf and errors.As.
func (e *NoSuchPoolError) Unwrap() error {
	return &Error{Kind: KindInvalid, Msg: e.Error()}
}

// poolFor returns the pool holding addr.
func (a *Allocator) poolFor(ctx context.Context, addr netip.Addr) (Pool, error) {
	pools, err := a.listPools(ctx)
	if err != nil {
		return Pool{}, err
	}
	for _, x := range pools {
		if x.pool.CIDR.Contains(addr) {
			return x.pool, nil
		}
	}
	if !IsFreshRead(ctx) {
		// A cached list may predate the pool; ask the store itself.
		return a.poolFor(FreshRead(ctx), addr)
	}
	return Pool{}, errorf(KindInvalid, "address %s: in no pool", addr)
}

func quote(s string) string { return fmt.Sprintf("%q", s) }

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

func poolNames(ps []Pool) string {
	if len(ps) == 0 {
		return "(none eligible)"
	}
	var n []string
	for _, p := range ps {
		n = append(n, quote(p.Name))
	}
	return strings.Join(n, ", ")
}

var errNoFreeBlock = errors.New("no free block")
