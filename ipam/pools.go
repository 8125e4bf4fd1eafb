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
// cut by them. It also replaces a pool whose stored value is invalid
// (InvalidPoolError): that is how one is mended.
func (a *Allocator) PutPool(ctx context.Context, p Pool) error {
	p, err := p.Normalize()
	if err != nil {
		return err
	}
	if err := a.selectorApplies(p); err != nil {
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
		for _, x := range pools.cut() {
			if x.name == p.Name {
				rev = x.rev
				if x.pool.CIDR != p.CIDR || x.pool.BlockSize != p.BlockSize {
					return errorf(KindInvalid, "pool %q: cidr %s/blockSize %d cannot change to %s/%d",
						p.Name, x.pool.CIDR, x.pool.BlockSize, p.CIDR, p.BlockSize)
				}
				continue
			}
			if x.pool.CIDR.Overlaps(p.CIDR) {
				return errorf(KindInvalid, "pool %q: cidr %s overlaps pool %q (%s)", p.Name, p.CIDR, x.name, x.pool.CIDR)
			}
		}
		for _, x := range pools.invalid {
			if x.Name == p.Name {
				rev = x.rev // cut() checked its geometry, if it has one
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

// Pools returns every pool that serves, by name, and the pools skipped
// because their stored value is invalid, by key, as the store holds them
// now (not from a cache), since admins and the agent decide on the
// answer.
func (a *Allocator) Pools(ctx context.Context) ([]Pool, []*InvalidPoolError, error) {
	ctx = FreshRead(ctx)
	var out []Pool
	var invalid []*InvalidPoolError
	err := a.retry(ctx, "list pools", func(ctx context.Context) error {
		ps, err := a.listPools(ctx)
		out = out[:0]
		for _, p := range ps.valid {
			out = append(out, p.pool)
		}
		invalid = ps.invalid
		return err
	})
	return out, invalid, err
}

// InvalidPoolError is a pool whose stored value does not decode or does
// not normalize (Pool.Normalize): a nodeSelector written past the CRD's
// validation, a value edited by hand in etcd. One such pool must not stop
// the others, so it is skipped: it hands out no address, while an
// allocation that names it, or asks for an address in its CIDR, gets
// this error (KindInvalid). Check reports it, and the allocator logs it
// (Config.Logger). PutPool replaces it.
type InvalidPoolError struct {
	// Name is the pool's name, from its key: the value may not say.
	Name string
	Key  string
	// Err is what is wrong with the value.
	Err error

	rev int64
	// geom is the pool's CIDR and block size when those are valid and
	// only the rest is not: its blocks are still found (to release an
	// address, to list them), and cannot be cut another way.
	geom *Pool
}

func (e *InvalidPoolError) Error() string {
	return fmt.Sprintf("pool %q (key %s) is invalid and skipped: %v", e.Name, e.Key, e.Err)
}

// Unwrap gives the error its kind, for KindOf and errors.As, and its
// cause.
func (e *InvalidPoolError) Unwrap() error {
	return &Error{Kind: KindInvalid, Msg: e.Error(), Err: e.Err}
}

// Revision is the store revision of the pool's value (0 when not
// known): a pool mended and broken again is another revision.
func (e *InvalidPoolError) Revision() int64 { return e.rev }

// InvalidPools returns every pool that hands out no address although it
// is enabled: those whose stored value is invalid (as Pools skips them),
// and those whose node selector this allocator cannot honour (no
// Config.NodeLabels), as the store holds them now. The agent says them
// on the pools' objects.
func (a *Allocator) InvalidPools(ctx context.Context) ([]*InvalidPoolError, error) {
	var out []*InvalidPoolError
	err := a.retry(FreshRead(ctx), "list pools", func(ctx context.Context) error {
		ps, err := a.listPools(ctx)
		out = append(out[:0], ps.invalid...)
		for _, p := range ps.valid {
			if err := a.selectorApplies(p.pool); err != nil && !p.pool.Disabled {
				out = append(out, &InvalidPoolError{Name: p.pool.Name, Key: a.keys.Pools() + p.pool.Name, Err: err, rev: p.rev})
			}
		}
		return err
	})
	return out, err
}

type poolRev struct {
	pool Pool
	rev  int64
}

// poolList is the pools the store holds: those that serve, and those
// skipped as invalid.
type poolList struct {
	valid   []poolRev
	invalid []*InvalidPoolError
}

// cutPool is a pool by the name its blocks go by, with the geometry they
// were cut by.
type cutPool struct {
	name string
	pool Pool
	rev  int64
}

// cut returns every pool whose geometry is known: the valid ones, and
// the invalid ones whose CIDR and block size are valid. It is for
// finding the blocks that exist, never for choosing where to allocate.
func (l poolList) cut() []cutPool {
	out := make([]cutPool, 0, len(l.valid)+len(l.invalid))
	for _, x := range l.valid {
		out = append(out, cutPool{x.pool.Name, x.pool, x.rev})
	}
	for _, x := range l.invalid {
		if x.geom != nil {
			out = append(out, cutPool{x.Name, *x.geom, x.rev})
		}
	}
	return out
}

// invalidNamed returns the invalid pool called name, if there is one.
func (l poolList) invalidNamed(name string) *InvalidPoolError {
	for _, x := range l.invalid {
		if x.Name == name {
			return x
		}
	}
	return nil
}

func (a *Allocator) listPools(ctx context.Context) (poolList, error) {
	kvs, err := a.store.List(ctx, a.keys.Pools())
	if err != nil {
		return poolList{}, err
	}
	out := poolList{valid: make([]poolRev, 0, len(kvs))}
	for _, kv := range kvs {
		p, bad := decodePool(kv, strings.TrimPrefix(kv.Key, a.keys.Pools()))
		if bad != nil {
			out.invalid = append(out.invalid, bad)
			if l := a.cfg.Logger; l != nil {
				l.Warn("IPAM pool skipped: its stored value is invalid; no address comes from it until it is mended",
					"pool", bad.Name, "key", bad.Key, "err", bad.Err)
			}
			continue
		}
		out.valid = append(out.valid, poolRev{p, kv.ModRevision})
	}
	return out, nil
}

// decodePool decodes and normalizes the pool kv holds, or says what is
// wrong with it.
func decodePool(kv KV, name string) (Pool, *InvalidPoolError) {
	bad := &InvalidPoolError{Name: name, Key: kv.Key, rev: kv.ModRevision}
	p, ok := parsePoolJSON(kv.Value)
	if !ok {
		p = Pool{}
		if err := json.Unmarshal(kv.Value, &p); err != nil {
			bad.Err = fmt.Errorf("value does not decode: %w", err)
			return Pool{}, bad
		}
	}
	n, err := p.normalize()
	if err == nil {
		return n, nil
	}
	bad.Err = err
	if g, err := p.geometry(); err == nil {
		bad.geom = &g
	}
	return Pool{}, bad
}

// eligiblePools returns the enabled pools of one family that node may use:
// the named ones in the order given, or all that select the node, by name.
func (a *Allocator) eligiblePools(ctx context.Context, node string, bits int, names []string, ranges []Range) ([]Pool, error) {
	out, err := a.eligiblePoolsIn(ctx, node, bits, names, ranges)
	var missing *NoSuchPoolError
	var invalid *InvalidPoolError
	if (len(out) == 0 || errors.As(err, &missing) || errors.As(err, &invalid)) && !IsFreshRead(ctx) {
		// The pool list may come from a cache a moment old; a pool
		// created (or mended) just before this allocation must not be
		// missed, so an answer of none is checked against the store's
		// present state.
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
	for _, x := range all.valid {
		byName[x.pool.Name] = x.pool
	}
	explicit := len(names) > 0
	if len(names) == 0 {
		// Invalid pools are left out (listPools logged them).
		names = slices.Sorted(maps.Keys(byName))
	}
	var out []Pool
	for _, n := range names {
		p, ok := byName[n]
		if bad := all.invalidNamed(n); !ok && bad != nil {
			// Named, so wanted: say why it cannot serve rather than
			// take addresses from a pool the request did not ask for.
			return nil, bad
		}
		if !ok {
			return nil, &NoSuchPoolError{Name: n}
		}
		if p.CIDR.Addr().BitLen() != bits || p.Disabled {
			continue
		}
		sel, _ := ParseSelector(p.NodeSelector)
		if err := a.selectorApplies(p); err != nil {
			if explicit {
				return nil, &InvalidPoolError{Name: n, Key: a.keys.Pools() + n, Err: err}
			}
			continue // no node takes it: its selector could not be honoured
		}
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

// poolFor returns the valid pool holding addr: an address in an invalid
// pool is not handed out.
func (a *Allocator) poolFor(ctx context.Context, addr netip.Addr) (Pool, error) {
	pools, err := a.listPools(ctx)
	if err != nil {
		return Pool{}, err
	}
	for _, x := range pools.valid {
		if x.pool.CIDR.Contains(addr) {
			return x.pool, nil
		}
	}
	if !IsFreshRead(ctx) {
		// A cached list may predate the pool; ask the store itself.
		return a.poolFor(FreshRead(ctx), addr)
	}
	for _, x := range pools.invalid {
		if x.geom != nil && x.geom.CIDR.Contains(addr) {
			return Pool{}, x
		}
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

// errSelectorNotApplied is a pool with a node selector where the
// allocator cannot read node labels, which is everywhere podnet runs one
// (the plugins, the agent and the CLI pass no Config.NodeLabels): such a
// pool is refused when written and never allocated from, rather than
// used on nodes its selector was meant to exclude.
var errSelectorNotApplied = errors.New("podnet does not apply pool node selectors (no node labels reach its allocator): leave nodeSelector empty, and name the pools a node uses in its network config (ipam.pools) instead")

// selectorApplies says whether p's node selector, if it has one, can be
// honoured by this allocator.
func (a *Allocator) selectorApplies(p Pool) error {
	if strings.TrimSpace(p.NodeSelector) == "" || a.cfg.NodeLabels != nil {
		return nil
	}
	return errorf(KindInvalid, "pool %q: nodeSelector %q: %v", p.Name, p.NodeSelector, errSelectorNotApplied)
}
