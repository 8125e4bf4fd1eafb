package ipam

import (
	"context"
	"net/netip"
	"slices"
	"sync/atomic"
	"time"
)

// Config tunes an Allocator. The zero value is usable.
type Config struct {
	// Keys places the allocator's keys; zero means DefaultPrefix.
	Keys Keys
	// StrictAffinity forbids borrowing: a node only ever allocates from
	// blocks affine to it, and fails when it can claim no more.
	StrictAffinity bool
	// MaxBlocksPerHost caps the blocks one node may claim; 0 is no cap.
	MaxBlocksPerHost int
	// NodeLabels returns a node's labels for pool node selectors; nil
	// means no node has labels.
	NodeLabels func(ctx context.Context, node string) (map[string]string, error)
	// Timeout bounds an operation whose context has no deadline
	// (default 30s).
	Timeout time.Duration
	// UnavailableTimeout is how long an operation retries a store it
	// cannot reach before it fails with KindUnavailable (default 10s; the
	// context's deadline may end it sooner).
	UnavailableTimeout time.Duration
	// ClaimProbes is how many candidate blocks a claim reads one by one
	// before it lists the pool's blocks instead (default 32). Probing is
	// O(1) reads while a pool is mostly free; the list bounds the cost
	// when it is nearly full.
	ClaimProbes int
	// Now is the clock for affinity and block timestamps.
	Now func() time.Time
}

// Allocator hands out addresses from pools kept in a Store. It holds no
// state of its own between calls, so any number of Allocators, in any
// number of processes, may share one store; all coordination is in the
// store's compare-on-revision transactions.
type Allocator struct {
	store Store
	keys  Keys
	cfg   Config
	txns  atomic.Int64 // Txn calls made, for the transactions-per-allocation benchmark
}

// New returns an Allocator over store.
func New(store Store, cfg Config) *Allocator {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.UnavailableTimeout <= 0 {
		cfg.UnavailableTimeout = 10 * time.Second
	}
	if cfg.ClaimProbes <= 0 {
		cfg.ClaimProbes = 32
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Allocator{store: store, keys: cfg.Keys, cfg: cfg}
}

// Txns returns how many store transactions the allocator has made.
func (a *Allocator) Txns() int64 { return a.txns.Load() }

// Range limits allocation to Start..End (inclusive) within Subnet, as a
// CNI runtime's ipRanges entry does. A zero Start or End means the
// subnet's first or last address.
type Range struct {
	Subnet     netip.Prefix
	Start, End netip.Addr
}

// Contains reports whether addr is in the range.
func (r Range) Contains(addr netip.Addr) bool {
	if !r.Subnet.Contains(addr) {
		return false
	}
	if r.Start.IsValid() && addr.Less(r.Start) {
		return false
	}
	return !r.End.IsValid() || !r.End.Less(addr)
}

// AutoAssignArgs is a request for addresses.
type AutoAssignArgs struct {
	Handle     string
	Node       string
	Num4, Num6 int
	// Attrs are stored with each address (pod, namespace, container...).
	Attrs map[string]string
	// Pools4 and Pools6 name the pools to use, in order of preference;
	// empty means every enabled pool of the family whose node selector
	// matches, by name.
	Pools4, Pools6 []string
	// Ranges, when it has entries of a family, restricts that family's
	// addresses to them.
	Ranges []Range
	// Endpoint, when set, is the workload endpoint the addresses are for
	// (see endpoint.go). It is written in the allocation's transaction,
	// with IPs set to the handle's addresses, replacing an endpoint of
	// another container; its Handle is set to Handle. Each address gets
	// the attribute AttrEndpoint.
	Endpoint *Endpoint
}

// Assignment is what a handle holds: each address with its block's
// prefix length.
type Assignment struct {
	IPv4, IPv6 []netip.Prefix
}

// AutoAssign gives the handle Num4 IPv4 and Num6 IPv6 addresses. It is
// idempotent: a handle that already holds addresses gets them back, topped
// up to the counts asked for, so a repeated ADD never takes a second
// address. In steady state it costs one store transaction, which writes the
// blocks and the handle together.
func (a *Allocator) AutoAssign(ctx context.Context, args AutoAssignArgs) (Assignment, error) {
	if err := validName("handle", args.Handle); err != nil {
		return Assignment{}, err
	}
	if err := validName("node", args.Node); err != nil {
		return Assignment{}, err
	}
	if args.Num4 < 0 || args.Num6 < 0 {
		return Assignment{}, errorf(KindInvalid, "handle %q: negative address count %d/%d", args.Handle, args.Num4, args.Num6)
	}
	if args.Endpoint != nil {
		if err := validEndpoint(args.Endpoint, args.Handle, args.Node); err != nil {
			return Assignment{}, err
		}
		ep := *args.Endpoint
		ep.Handle = args.Handle
		args.Endpoint = &ep
		args.Attrs = withEndpointAttr(args.Attrs, ep.ID())
	}
	var out Assignment
	err := a.retry(ctx, "assign addresses to handle "+quote(args.Handle), func(ctx context.Context) error {
		var err error
		out, err = a.autoAssignOnce(ctx, args)
		return err
	})
	return out, err
}

func (a *Allocator) autoAssignOnce(ctx context.Context, args AutoAssignArgs) (Assignment, error) {
	w := a.newWriteSet()
	held, err := a.held(ctx, w, args.Handle)
	if err != nil {
		return Assignment{}, err
	}
	attrs := Attributes{Handle: args.Handle, Node: args.Node, Extra: args.Attrs}
	for _, fam := range []struct {
		bits  int
		want  int
		pools []string
	}{{32, args.Num4, args.Pools4}, {128, args.Num6, args.Pools6}} {
		need := fam.want - countFamily(held, fam.bits)
		if need <= 0 {
			continue
		}
		ranges := rangesOf(args.Ranges, fam.bits)
		pools, err := a.eligiblePools(ctx, args.Node, fam.bits, fam.pools, ranges)
		if err != nil {
			return Assignment{}, err
		}
		req := famRequest{bits: fam.bits, node: args.Node, attrs: attrs, need: need, pools: pools, ranges: ranges}
		got, err := a.assignFamily(ctx, w, req)
		if err != nil {
			return Assignment{}, err
		}
		held = append(held, got...)
	}
	if args.Endpoint != nil {
		if err := w.setEndpoint(ctx, *args.Endpoint, held); err != nil {
			return Assignment{}, err
		}
	}
	if err := w.commit(ctx); err != nil {
		return Assignment{}, err
	}
	var out Assignment
	for _, p := range held {
		if p.Addr().Is4() {
			out.IPv4 = append(out.IPv4, p)
		} else {
			out.IPv6 = append(out.IPv6, p)
		}
	}
	return out, nil
}

// held returns the addresses handle already holds, reading its blocks
// into w so that a top-up allocation sees the same revisions.
func (a *Allocator) held(ctx context.Context, w *writeSet, handle string) ([]netip.Prefix, error) {
	h, err := w.handle(ctx, handle)
	if err != nil || h.h == nil {
		return nil, err
	}
	var out []netip.Prefix
	for _, k := range sortedKeys(h.h.Blocks) {
		cidr, err := netip.ParsePrefix(k)
		if err != nil {
			return nil, errorf(KindInternal, "handle %q: block %q: %v", handle, k, err)
		}
		r, err := w.block(ctx, cidr)
		if err != nil {
			return nil, err
		}
		if r.b == nil {
			continue // Check reports the dangling handle
		}
		for _, addr := range r.b.AddrsOf(handle) {
			out = append(out, netip.PrefixFrom(addr, cidr.Bits()))
		}
	}
	return out, nil
}

// famRequest is what one address family of an AutoAssign still needs.
type famRequest struct {
	bits   int // 32 or 128
	node   string
	attrs  Attributes
	need   int
	pools  []Pool
	ranges []Range
}

func (r famRequest) filter() func(netip.Addr) bool {
	if len(r.ranges) == 0 {
		return nil
	}
	return func(addr netip.Addr) bool {
		return slices.ContainsFunc(r.ranges, func(x Range) bool { return x.Contains(addr) })
	}
}

func (r famRequest) inPools(cidr netip.Prefix) bool {
	return slices.ContainsFunc(r.pools, func(p Pool) bool { return p.CIDR.Contains(cidr.Addr()) && p.BlockSize == cidr.Bits() })
}

// assignFamily takes req.need addresses into w: from the node's own blocks
// first, then from newly claimed blocks, then, unless StrictAffinity, from
// other nodes' blocks.
func (a *Allocator) assignFamily(ctx context.Context, w *writeSet, req famRequest) ([]netip.Prefix, error) {
	f := &famAssign{a: a, w: w, req: req, filter: req.filter()}
	// The node's blocks already looked at, which a claim must not take
	// for new. Kept out of f, whose contents end up in blocks, so that
	// it stays on the stack.
	known := map[netip.Prefix]bool{}
	if err := f.fromOwnBlocks(ctx, known); err != nil {
		return nil, err
	}
	if err := f.fromNewBlocks(ctx, known); err != nil {
		return nil, err
	}
	if !f.done() && !a.cfg.StrictAffinity {
		if err := f.borrow(ctx); err != nil {
			return nil, err
		}
	}
	if !f.done() {
		return nil, errorf(KindExhausted, "handle %q on node %q: no free IPv%d address in pools %s (got %d of %d)",
			req.attrs.Handle, req.node, map[int]int{32: 4, 128: 6}[req.bits], poolNames(req.pools), len(f.got), req.need)
	}
	return f.got, nil
}

// famAssign is one assignFamily under way.
type famAssign struct {
	a      *Allocator
	w      *writeSet
	req    famRequest
	filter func(netip.Addr) bool
	got    []netip.Prefix
	// claimed counts the node's blocks, for MaxBlocksPerHost.
	claimed int
}

func (f *famAssign) done() bool { return len(f.got) >= f.req.need }

// take allocates what is still needed from r's block.
func (f *famAssign) take(ctx context.Context, r *blockRef) error {
	addrs := r.b.AutoAllocate(f.req.need-len(f.got), f.req.attrs, f.filter)
	if len(addrs) == 0 {
		return nil
	}
	r.b.EmptySince = time.Time{}
	r.dirty = true
	for _, addr := range addrs {
		f.got = append(f.got, netip.PrefixFrom(addr, r.b.CIDR.Bits()))
	}
	return f.w.addToHandle(ctx, f.req.attrs.Handle, r.b.CIDR, len(addrs))
}

// fromOwnBlocks takes addresses from the blocks affine to the node, and
// adds each to known.
func (f *famAssign) fromOwnBlocks(ctx context.Context, known map[netip.Prefix]bool) error {
	affs, err := f.a.nodeAffinities(ctx, f.req.node)
	if err != nil {
		return err
	}
	for _, af := range affs {
		known[af.cidr] = true
		if af.state == AffinityPendingDeletion {
			continue
		}
		f.claimed++
		if !f.req.inPools(af.cidr) {
			continue
		}
		if af.state == AffinityPending {
			// A claim in flight or one whose claimer died: finishing it
			// is safe either way, as phase two compares revisions. It is
			// finished even when this allocation needs no block, so the
			// node's next allocation repairs what a killed one left.
			if _, err := f.a.finishClaim(ctx, f.req.node, af.cidr, af.rev); err != nil {
				return err
			}
		}
		if f.done() {
			continue
		}
		r, err := f.w.block(ctx, af.cidr)
		if err != nil {
			return err
		}
		if r.b == nil || r.b.Affinity != HostAffinity(f.req.node) {
			continue // Check reports the disagreement
		}
		if err := f.take(ctx, r); err != nil {
			return err
		}
	}
	return nil
}

// fromNewBlocks claims blocks for the node while it needs addresses and
// may hold more blocks.
func (f *famAssign) fromNewBlocks(ctx context.Context, known map[netip.Prefix]bool) error {
	limit := f.a.cfg.MaxBlocksPerHost
	for !f.done() && (limit == 0 || f.claimed < limit) {
		cidr, err := f.a.claim(ctx, f.req.node, f.req.pools, f.req.ranges, known)
		if err == errNoFreeBlock {
			return nil
		}
		if err != nil {
			return err
		}
		f.claimed++
		known[cidr] = true
		r, err := f.w.block(ctx, cidr)
		if err != nil {
			return err
		}
		if r.b == nil {
			return ErrConflict // released under us; start over
		}
		if err := f.take(ctx, r); err != nil {
			return err
		}
	}
	return nil
}

// borrow allocates from blocks of other nodes. It lists every block, but
// only runs when the node's own blocks are full and no block is left to
// claim, which is when a pool is nearly exhausted.
func (f *famAssign) borrow(ctx context.Context) error {
	kvs, _, err := f.a.store.List(ctx, f.a.keys.Blocks())
	if err != nil {
		return err
	}
	for _, kv := range kvs {
		cidr, err := f.a.keys.ParseBlockKey(kv.Key)
		if err != nil || !f.req.inPools(cidr) {
			continue
		}
		r, err := f.w.block(ctx, cidr)
		if err != nil {
			return err
		}
		if r.b == nil || r.b.NumFree() == 0 {
			continue
		}
		if err := f.take(ctx, r); err != nil {
			return err
		}
		if f.done() {
			return nil
		}
	}
	return nil
}

func countFamily(ps []netip.Prefix, bits int) int {
	n := 0
	for _, p := range ps {
		if p.Addr().BitLen() == bits {
			n++
		}
	}
	return n
}

func rangesOf(rs []Range, bits int) []Range {
	var out []Range
	for _, r := range rs {
		if r.Subnet.Addr().BitLen() == bits {
			out = append(out, r)
		}
	}
	return out
}
