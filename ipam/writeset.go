package ipam

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"
)

// writeSet is one attempt of an allocator operation: the objects it read,
// at the revisions it read them, and what it changed. Objects in it are
// private decoded copies, so an attempt that loses a conflict is simply
// dropped and the retry starts from fresh reads.
//
// commit writes the changes one single-key conditional Write at a time,
// in an order that keeps invariants I1-I4 at every step: index removals
// first (an address is withdrawn from routes before it is released),
// then blocks in CIDR order (a claimed block's create is one), then index
// additions (claims confirmed, borrowed addresses published, after the
// blocks that back them). Writes that must precede a block change for
// I1 (a claim's or a borrow's intent) are made at once, by writeIndex.
type writeSet struct {
	a      *Allocator
	blocks map[netip.Prefix]*blockRef
	// unread are blocks read but not decoded: held skips a block whose
	// stored value cannot name the handle (mayHoldHandle), and block
	// decodes it only if the operation turns out to use it, from the
	// same read.
	unread  map[netip.Prefix]KV
	indexes map[string]*indexRef
	wrote   bool // a write was made
}

type blockRef struct {
	b     *Block // nil: the block does not exist
	rev   int64
	dirty bool
	del   bool // delete the block (empty and affine to nobody)
}

// indexRef is a node's index in a writeSet and the changes commit makes
// to it.
type indexRef struct {
	node      string
	x         *NodeIndex // nil: the node has no index
	rev       int64
	unpublish map[netip.Prefix][]netip.Addr // before the blocks
	publish   map[netip.Prefix][]netip.Addr // after the blocks
	confirm   []netip.Prefix                // after the blocks
}

func (a *Allocator) newWriteSet() *writeSet {
	return &writeSet{a: a, blocks: map[netip.Prefix]*blockRef{}, unread: map[netip.Prefix]KV{}, indexes: map[string]*indexRef{}}
}

// idle reports whether w wrote nothing and has nothing to commit. An
// operation about to return on an idle writeSet whose reads may have come
// from a cache reads again, fresh (FreshRead): a decision that writes
// nothing is made on fresh reads, since no compare will catch a stale one
// ("the handle holds this address already", "the handle holds nothing").
func (w *writeSet) idle() bool {
	if w.wrote {
		return false
	}
	for _, r := range w.blocks {
		if r.dirty {
			return false
		}
	}
	for _, r := range w.indexes {
		if len(r.publish)+len(r.unpublish)+len(r.confirm) > 0 {
			return false
		}
	}
	return true
}

// write is every store write the allocator makes, counted for Writes.
func (a *Allocator) write(ctx context.Context, w Write) (int64, error) {
	a.writes.Add(1)
	return a.store.Write(ctx, w)
}

// block returns the block at cidr, reading it on first use; ref.b is nil
// if it does not exist.
func (w *writeSet) block(ctx context.Context, cidr netip.Prefix) (*blockRef, error) {
	if r, ok := w.blocks[cidr]; ok {
		return r, nil
	}
	kv, ok := w.unread[cidr]
	if !ok {
		var err error
		if kv, err = w.readBlock(ctx, cidr); err != nil {
			return nil, err
		}
	}
	return w.decodeBlockKV(cidr, kv)
}

// blockHolding is block for a caller that only wants the block if it may
// hold addresses of handle (needle is quotedHandle(handle)): it returns
// nil, leaving the block undecoded, when the block does not exist or its
// stored value cannot name handle.
func (w *writeSet) blockHolding(ctx context.Context, cidr netip.Prefix, handle string, needle []byte) (*blockRef, error) {
	if r, ok := w.blocks[cidr]; ok {
		return r, nil
	}
	if _, ok := w.unread[cidr]; ok {
		return nil, nil
	}
	kv, err := w.readBlock(ctx, cidr)
	if err != nil {
		return nil, err
	}
	if kv.Value != nil && !mayHoldHandle(kv.Value, handle, needle) {
		w.unread[cidr] = kv
		return nil, nil
	}
	return w.decodeBlockKV(cidr, kv)
}

// readBlock reads the block at cidr; a missing block is a KV with a nil
// Value.
func (w *writeSet) readBlock(ctx context.Context, cidr netip.Prefix) (KV, error) {
	kv, err := w.a.store.Get(ctx, w.a.keys.Block(cidr))
	switch {
	case errors.Is(err, ErrNotFound):
		return KV{}, nil
	case err != nil:
		return KV{}, err
	case kv.Value == nil:
		kv.Value = []byte{} // present, if empty: decoding says it is invalid
	}
	return kv, nil
}

// decodeBlockKV puts the block read at cidr into w, decoded.
func (w *writeSet) decodeBlockKV(cidr netip.Prefix, kv KV) (*blockRef, error) {
	r := &blockRef{}
	if kv.Value != nil {
		b, err := decodeBlock(kv)
		if err != nil {
			return nil, err
		}
		r.b, r.rev = b, kv.ModRevision
	}
	delete(w.unread, cidr)
	w.blocks[cidr] = r
	return r, nil
}

// addBlockKV puts a block read by a List into w, unless w has it; one it
// read before, undecoded, is taken from that read.
func (w *writeSet) addBlockKV(kv KV) (*blockRef, error) {
	b, err := decodeBlock(kv)
	if err != nil {
		return nil, err
	}
	if r, ok := w.blocks[b.CIDR]; ok {
		return r, nil
	}
	if old, ok := w.unread[b.CIDR]; ok {
		return w.decodeBlockKV(b.CIDR, old)
	}
	r := &blockRef{b: b, rev: kv.ModRevision}
	w.blocks[b.CIDR] = r
	return r, nil
}

func decodeBlock(kv KV) (*Block, error) {
	b, ok := parseBlockJSON(kv.Value)
	if !ok {
		b = new(Block)
		if err := json.Unmarshal(kv.Value, b); err != nil {
			return nil, fmt.Errorf("block %s: %w", kv.Key, err)
		}
	}
	if err := b.Validate(); err != nil {
		return nil, fmt.Errorf("key %s: %w", kv.Key, err)
	}
	return b, nil
}

// encodeBlock is json.Marshal(b), by hand (blockjson.go).
func encodeBlock(b *Block) ([]byte, error) {
	return appendBlockJSON(make([]byte, 0, 256+64*len(b.Owners)), b)
}

// index returns node's index, reading it on first use; ref.x is nil if
// the node has none.
func (w *writeSet) index(ctx context.Context, node string) (*indexRef, error) {
	if r, ok := w.indexes[node]; ok {
		return r, nil
	}
	r := &indexRef{node: node}
	kv, err := w.a.store.Get(ctx, w.a.keys.Node(node))
	switch {
	case errors.Is(err, ErrNotFound):
	case err != nil:
		return nil, err
	default:
		x, err := decodeIndex(kv)
		if err != nil {
			return nil, errorf(KindInternal, "%v", err)
		}
		r.x, r.rev = x, kv.ModRevision
	}
	w.indexes[node] = r
	return r, nil
}

// writeIndex writes change applied to a copy of r's index at once, under
// a compare on the revision w read; it writes nothing when change reports
// no change.
func (w *writeSet) writeIndex(ctx context.Context, r *indexRef, change func(x *NodeIndex) bool) error {
	x := &NodeIndex{Node: r.node}
	if r.x != nil {
		x = r.x.clone()
	}
	if !change(x) {
		return nil
	}
	v, err := json.Marshal(x)
	if err != nil {
		return err
	}
	w.wrote = true
	rev, err := w.a.write(ctx, Write{Key: w.a.keys.Node(r.node), ModRevision: r.rev, Value: v})
	if err != nil {
		return err
	}
	r.x, r.rev = x, rev
	return nil
}

func (r *indexRef) addPublish(cidr netip.Prefix, addrs ...netip.Addr) {
	if r.publish == nil {
		r.publish = map[netip.Prefix][]netip.Addr{}
	}
	r.publish[cidr] = append(r.publish[cidr], addrs...)
}

func (r *indexRef) addUnpublish(cidr netip.Prefix, addrs ...netip.Addr) {
	if r.unpublish == nil {
		r.unpublish = map[netip.Prefix][]netip.Addr{}
	}
	r.unpublish[cidr] = append(r.unpublish[cidr], addrs...)
}

func (r *indexRef) addConfirm(cidr netip.Prefix) {
	if !slices.Contains(r.confirm, cidr) {
		r.confirm = append(r.confirm, cidr)
	}
}

// commit writes every change, in the order the type's comment gives.
func (w *writeSet) commit(ctx context.Context) error {
	nodes := sortedKeys(w.indexes)
	for _, n := range nodes {
		r := w.indexes[n]
		if len(r.unpublish) == 0 {
			continue
		}
		if err := w.writeIndex(ctx, r, func(x *NodeIndex) bool {
			changed := false
			for _, cidr := range slices.SortedFunc(maps.Keys(r.unpublish), comparePrefix) {
				changed = x.unpublish(cidr, r.unpublish[cidr]) || changed
			}
			return changed
		}); err != nil {
			return err
		}
	}
	for _, cidr := range slices.SortedFunc(maps.Keys(w.blocks), comparePrefix) {
		if err := w.writeBlock(ctx, cidr, w.blocks[cidr]); err != nil {
			return err
		}
	}
	for _, n := range nodes {
		r := w.indexes[n]
		if len(r.publish)+len(r.confirm) == 0 {
			continue
		}
		now := w.a.cfg.Now()
		if err := w.writeIndex(ctx, r, func(x *NodeIndex) bool { return r.applyAdditions(x, now) }); err != nil {
			return err
		}
	}
	return nil
}

// applyAdditions confirms r's claims and publishes its borrowed
// addresses in x.
func (r *indexRef) applyAdditions(x *NodeIndex, now time.Time) bool {
	changed := false
	for _, cidr := range r.confirm {
		if e := x.entry(cidr); e != nil && e.State == AffinityPending {
			e.State, e.Since = AffinityConfirmed, now
			changed = true
		}
	}
	for _, cidr := range slices.SortedFunc(maps.Keys(r.publish), comparePrefix) {
		changed = x.publish(cidr, r.publish[cidr]) || changed
	}
	return changed
}

func (w *writeSet) writeBlock(ctx context.Context, cidr netip.Prefix, r *blockRef) error {
	if !r.dirty {
		return nil
	}
	w.wrote = true
	key := w.a.keys.Block(cidr)
	if r.del || r.b == nil {
		if r.rev == 0 {
			return nil
		}
		_, err := w.a.write(ctx, Write{Key: key, ModRevision: r.rev, Delete: true})
		if err == nil {
			r.b, r.rev, r.dirty = nil, 0, false
		}
		return err
	}
	v, err := encodeBlock(r.b)
	if err != nil {
		return err
	}
	rev, err := w.a.write(ctx, Write{Key: key, ModRevision: r.rev, Value: v})
	if err == nil {
		r.rev, r.dirty = rev, false
	}
	return err
}
