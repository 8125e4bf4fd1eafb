package ipam

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
)

// writeSet is one attempt of an allocator operation: the objects it read,
// at the revisions it read them, and which of them it changed. Objects in
// it are private decoded copies, so an attempt that loses a conflict is
// simply dropped. commit writes every changed object in one Txn that
// compares the revision of each.
type writeSet struct {
	a       *Allocator
	blocks  map[netip.Prefix]*blockRef
	order   []netip.Prefix // commit order, for deterministic txns
	handles map[string]*handleRef
	ep      *endpointRef // the workload endpoint, if the operation has one
}

type blockRef struct {
	b     *Block // nil: the block does not exist
	rev   int64
	dirty bool
}

type handleRef struct {
	h     *Handle // nil: the handle does not exist
	rev   int64
	dirty bool
}

func (a *Allocator) newWriteSet() *writeSet {
	return &writeSet{a: a, blocks: map[netip.Prefix]*blockRef{}, handles: map[string]*handleRef{}}
}

// block returns the block at cidr, reading it on first use; ref.b is nil
// if it does not exist.
func (w *writeSet) block(ctx context.Context, cidr netip.Prefix) (*blockRef, error) {
	if r, ok := w.blocks[cidr]; ok {
		return r, nil
	}
	r := &blockRef{}
	kv, err := w.a.store.Get(ctx, w.a.keys.Block(cidr))
	switch {
	case errors.Is(err, ErrNotFound):
	case err != nil:
		return nil, err
	default:
		b, err := decodeBlock(kv)
		if err != nil {
			return nil, err
		}
		r.b, r.rev = b, kv.ModRevision
	}
	w.addBlock(cidr, r)
	return r, nil
}

func (w *writeSet) addBlock(cidr netip.Prefix, r *blockRef) {
	w.blocks[cidr] = r
	w.order = append(w.order, cidr)
}

func decodeBlock(kv KV) (*Block, error) {
	b := new(Block)
	if err := json.Unmarshal(kv.Value, b); err != nil {
		return nil, fmt.Errorf("block %s: %w", kv.Key, err)
	}
	if err := b.Validate(); err != nil {
		return nil, fmt.Errorf("key %s: %w", kv.Key, err)
	}
	return b, nil
}

// handleBlocks returns handle and the blocks it holds addresses in, read
// through w; a nil handleRef means there is no such handle.
func (w *writeSet) handleBlocks(ctx context.Context, handle string) (*handleRef, []*blockRef, error) {
	h, err := w.handle(ctx, handle)
	if err != nil || h.h == nil {
		return nil, nil, err
	}
	var out []*blockRef
	for _, k := range sortedKeys(h.h.Blocks) {
		cidr, err := netip.ParsePrefix(k)
		if err != nil {
			continue
		}
		r, err := w.block(ctx, cidr)
		if err != nil {
			return nil, nil, err
		}
		if r.b != nil {
			out = append(out, r)
		}
	}
	return h, out, nil
}

// handle returns the handle id, reading it on first use.
func (w *writeSet) handle(ctx context.Context, id string) (*handleRef, error) {
	if r, ok := w.handles[id]; ok {
		return r, nil
	}
	r := &handleRef{}
	kv, err := w.a.store.Get(ctx, w.a.keys.Handle(id))
	switch {
	case errors.Is(err, ErrNotFound):
	case err != nil:
		return nil, err
	default:
		h := new(Handle)
		if err := json.Unmarshal(kv.Value, h); err != nil {
			return nil, fmt.Errorf("handle %s: %w", kv.Key, err)
		}
		r.h, r.rev = h, kv.ModRevision
	}
	w.handles[id] = r
	return r, nil
}

// addToHandle records that handle id gained (or, negative, lost) n
// addresses in block cidr.
func (w *writeSet) addToHandle(ctx context.Context, id string, cidr netip.Prefix, n int) error {
	if n == 0 {
		return nil
	}
	r, err := w.handle(ctx, id)
	if err != nil {
		return err
	}
	if r.h == nil {
		r.h = &Handle{ID: id, Blocks: map[string]int{}}
	}
	if r.h.Blocks == nil {
		r.h.Blocks = map[string]int{}
	}
	k := cidr.String()
	r.h.Blocks[k] += n
	if r.h.Blocks[k] <= 0 {
		delete(r.h.Blocks, k)
	}
	r.dirty = true
	return nil
}

// commit writes every changed object in one transaction.
func (w *writeSet) commit(ctx context.Context) error {
	var cmps []Compare
	var ops []Op
	for _, cidr := range w.order {
		r := w.blocks[cidr]
		if !r.dirty {
			continue
		}
		key := w.a.keys.Block(cidr)
		cmps = append(cmps, Compare{Key: key, ModRevision: r.rev})
		if r.b == nil {
			ops = append(ops, Del(key))
			continue
		}
		v, err := json.Marshal(r.b)
		if err != nil {
			return err
		}
		ops = append(ops, Put(key, v))
	}
	ids := make([]string, 0, len(w.handles))
	for id := range w.handles {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		r := w.handles[id]
		if !r.dirty {
			continue
		}
		key := w.a.keys.Handle(id)
		cmps = append(cmps, Compare{Key: key, ModRevision: r.rev})
		if r.h == nil || len(r.h.Blocks) == 0 {
			if r.rev != 0 {
				ops = append(ops, Del(key))
			}
			continue
		}
		v, err := json.Marshal(r.h)
		if err != nil {
			return err
		}
		ops = append(ops, Put(key, v))
	}
	ecmps, eops, err := w.endpointOps()
	if err != nil {
		return err
	}
	cmps, ops = append(cmps, ecmps...), append(ops, eops...)
	if len(ops) == 0 {
		return nil
	}
	w.a.txns.Add(1)
	_, err = w.a.store.Txn(ctx, cmps, ops)
	return err
}
