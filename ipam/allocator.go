package ipam

import (
	"context"
	"log/slog"
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
	// means no node has labels. It is called only when an eligible pool
	// has a selector.
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
	// ClaimTimeout is how long a claim or a block's release may stay in
	// flight (a pending or pendingDeletion index entry) before Check
	// reports it and GC finishes it (default 1m). The node's own next
	// allocation finishes a pending claim at once.
	ClaimTimeout time.Duration
	// MigrateV1 makes the allocator carry a layout v1 it finds (V1Prefix,
	// or v1 keys under its own prefix) over to its layout (MigrateV1)
	// instead of refusing to run: for a store only one node uses (bbolt),
	// whose plugins all run this version.
	MigrateV1 bool
	// Now is the clock for index and block timestamps.
	Now func() time.Time
	// Logger, when set, is told what the allocator skips that an
	// operator must mend: a pool whose stored value is invalid, each
	// time the pools are read. Nil logs nothing (the plugins: their
	// errors say it).
	Logger *slog.Logger
}

// Allocator hands out addresses from pools kept in a Store. It holds no
// state of its own between calls, so any number of Allocators, in any
// number of processes, may share one store; all coordination is in the
// store's single-key conditional writes.
type Allocator struct {
	store    Store
	keys     Keys
	cfg      Config
	writes   atomic.Int64 // Write calls made, for the writes-per-allocation tests
	layoutOK atomic.Bool  // no v1 data to fear (see layout.go)
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
	if cfg.ClaimTimeout <= 0 {
		cfg.ClaimTimeout = time.Minute
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Allocator{store: store, keys: cfg.Keys, cfg: cfg}
}

// Writes returns how many store writes the allocator has made.
func (a *Allocator) Writes() int64 { return a.writes.Load() }

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
	// Pools4 and Pools6 name the pools to use, in order of preference
	// (one the store holds an invalid value for fails the request with
	// an InvalidPoolError); empty means every enabled pool of the family
	// whose node selector matches, by name (invalid ones left out).
	Pools4, Pools6 []string
	// Ranges, when it has entries of a family, restricts that family's
	// addresses to them.
	Ranges []Range
	// Endpoint, when set, is the workload endpoint the addresses are for
	// (see endpoint.go): each address gets the attributes AttrEndpoint
	// and AttrCreated, from which the endpoint is derived.
	Endpoint *EndpointID
}

// Assignment is what a handle holds: each address with its block's
// prefix length.
type Assignment struct {
	IPv4, IPv6 []netip.Prefix
}

// AutoAssign gives the handle Num4 IPv4 and Num6 IPv6 addresses. It is
// idempotent: a handle that already holds addresses gets them back, topped
// up to the counts asked for, so a repeated ADD never takes a second
// address (it writes nothing, and reads the index and blocks a second
// time through any store cache: FreshRead). In steady state it reads the
// pools, the node's index and the node's blocks, and makes one store
// write: the block's.
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
		if err := validEndpoint(*args.Endpoint, args.Node); err != nil {
			return Assignment{}, err
		}
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
	held, err := a.held(ctx, w, args.Node, args.Handle, true)
	if err != nil {
		return Assignment{}, err
	}
	attrs := Attributes{Handle: args.Handle, Node: args.Node, Extra: args.Attrs}
	if args.Endpoint != nil {
		attrs.Extra = endpointAttrs(args.Attrs, *args.Endpoint, a.cfg.Now())
	}
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
	if w.idle() && !IsFreshRead(ctx) {
		// The handle holds what it asks for, or so a cache may say of
		// an address released since: decide on fresh reads.
		return a.autoAssignOnce(FreshRead(ctx), args)
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

// held returns the addresses handle holds on node, reading the node's
// index and the blocks it names into w (invariant I1: that is everywhere
// they can be), so that a top-up allocation sees the same revisions. With
// repair, it also queues what a killed operation left unfinished: a
// borrowed address of the handle not yet published, and the node's
// pending claims (finished by fromOwnBlocks).
func (a *Allocator) held(ctx context.Context, w *writeSet, node, handle string, repair bool) ([]netip.Prefix, error) {
	ix, err := w.index(ctx, node)
	if err != nil {
		return nil, err
	}
	if ix.x == nil {
		return nil, a.checkLayout(ctx, node)
	}
	var out []netip.Prefix
	needle := quotedHandle(handle)
	for _, cidr := range ix.x.cidrs() {
		// Only blocks that may hold the handle are decoded; a node
		// with many blocks has the handle's addresses in one or two.
		r, err := w.blockHolding(ctx, cidr, handle, needle)
		if err != nil {
			return nil, err
		}
		if r == nil || r.b == nil {
			continue // not the handle's; a claim in flight; or Check reports it
		}
		addrs := r.b.AddrsOf(handle)
		for _, addr := range addrs {
			out = append(out, netip.PrefixFrom(addr, cidr.Bits()))
		}
		if repair && len(addrs) > 0 && r.b.Affinity != HostAffinity(node) {
			ix.addPublish(cidr, addrs...)
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
	ix, err := w.index(ctx, req.node)
	if err != nil {
		return nil, err
	}
	f := &famAssign{a: a, w: w, ix: ix, req: req, filter: req.filter()}
	if err := f.fromOwnBlocks(ctx); err != nil {
		return nil, err
	}
	if err := f.fromNewBlocks(ctx); err != nil {
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
	ix     *indexRef
	req    famRequest
	filter func(netip.Addr) bool
	got    []netip.Prefix
}

func (f *famAssign) done() bool { return len(f.got) >= f.req.need }

// take allocates what is still needed from r's block; an address from a
// block not affine to the node is published in the node's index once the
// block is written.
func (f *famAssign) take(r *blockRef) {
	addrs := r.b.AutoAllocate(f.req.need-len(f.got), f.req.attrs, f.filter)
	if len(addrs) == 0 {
		return
	}
	r.b.EmptySince = time.Time{}
	r.dirty = true
	for _, addr := range addrs {
		f.got = append(f.got, netip.PrefixFrom(addr, r.b.CIDR.Bits()))
	}
	if r.b.Affinity != HostAffinity(f.req.node) {
		f.ix.addPublish(r.b.CIDR, addrs...)
	}
}

// fromOwnBlocks takes addresses from the blocks the node's index claims,
// finishing a pending claim it meets: it is finished even when this
// allocation needs no block, so the node's next allocation repairs what a
// killed one left.
func (f *famAssign) fromOwnBlocks(ctx context.Context) error {
	if f.ix.x == nil {
		return nil
	}
	for _, e := range slices.Clone(f.ix.x.Blocks) {
		if e.State == AffinityPendingDeletion || !f.req.inPools(e.CIDR) {
			continue
		}
		if f.done() && e.State != AffinityPending {
			continue // only a pending claim is worth reading now
		}
		var r *blockRef
		var err error
		if e.State == AffinityPending {
			r, err = f.a.finishClaim(ctx, f.w, f.ix, e.CIDR)
		} else {
			r, err = f.w.block(ctx, e.CIDR)
		}
		if err != nil {
			return err
		}
		if f.done() || r == nil || r.b == nil || r.b.Affinity != HostAffinity(f.req.node) || r.b.releasing() {
			continue // Check reports a confirmed claim without its block
		}
		f.take(r)
	}
	return nil
}

// fromNewBlocks claims blocks for the node while it needs addresses and
// may hold more blocks (I4).
func (f *famAssign) fromNewBlocks(ctx context.Context) error {
	for !f.done() && f.a.mayClaim(f.ix) {
		r, err := f.a.claim(ctx, f.w, f.ix, f.req.pools, f.req.ranges)
		if err == errNoFreeBlock {
			return nil
		}
		if err != nil {
			return err
		}
		f.take(r)
	}
	return nil
}

// borrow allocates from blocks of other nodes, and of none. It lists every
// block, but only runs when the node's own blocks are full and no block is
// left to claim, which is when a pool is nearly exhausted. The node's
// index names the block (the borrow's intent) before the block is written,
// so the address is findable from the node at every step (I1).
func (f *famAssign) borrow(ctx context.Context) error {
	kvs, err := f.a.store.List(ctx, f.a.keys.Blocks())
	if err != nil {
		return err
	}
	for _, kv := range kvs {
		cidr, err := f.a.keys.ParseBlockKey(kv.Key)
		if err != nil || !f.req.inPools(cidr) {
			continue
		}
		r, err := f.w.addBlockKV(kv)
		if err != nil {
			return err
		}
		if r.b == nil || r.b.NumFree() == 0 || r.b.Affinity == HostAffinity(f.req.node) || r.b.releasing() {
			continue
		}
		if err := f.w.writeIndex(ctx, f.ix, func(x *NodeIndex) bool { return x.addBorrowed(cidr) }); err != nil {
			return err
		}
		f.take(r)
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
