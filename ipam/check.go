package ipam

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// Report is what Check found. An empty report (Clean) means every address
// has exactly one owner and can be found and routed from its node's index,
// every index entry matches its block, and, if liveness was given, nothing
// leaked.
type Report struct {
	// Leaked: allocations whose handle has no live attachment.
	Leaked []Allocation
	// MultipleOwners: addresses allocated in more than one block (blocks
	// of overlapping pools).
	MultipleOwners []Allocation
	// Unindexed: allocations in a block their node's index does not name
	// (invariant I1: the handle's addresses are not found from its node).
	Unindexed []Allocation
	// Unpublished: addresses a node holds in a block not affine to it
	// that its index does not publish (invariant I3: not routed).
	Unpublished []Allocation
	// AffinityMismatches: an index entry and its block disagree, or a
	// claim or a block's release has been in flight for longer than
	// ClaimTimeout.
	AffinityMismatches []AffinityMismatch
	// Corrupt: values that do not decode or fail validation, among them
	// the pools skipped as invalid (InvalidPoolError; Check only, not
	// CheckNode).
	Corrupt []string
}

// Allocation is one allocated address and its owner.
type Allocation struct {
	Addr   netip.Addr
	Block  netip.Prefix
	Handle string
	Node   string
	// Endpoint is the workload endpoint (EndpointID.String) the address
	// was allocated for; empty when it was not for one.
	Endpoint string `json:",omitempty"`
}

// AffinityMismatch is an index entry without its block, or the reverse.
type AffinityMismatch struct {
	Node    string
	Block   netip.Prefix
	Problem string
}

// Clean reports whether nothing was found.
func (r Report) Clean() bool {
	return len(r.Leaked)+len(r.MultipleOwners)+len(r.Unindexed)+len(r.Unpublished)+
		len(r.AffinityMismatches)+len(r.Corrupt) == 0
}

// CheckOptions tune Check.
type CheckOptions struct {
	// Live reports whether node has a live attachment for handle. Nil
	// skips leak detection.
	Live func(node, handle string) bool
	// Endpoints judges allocations made for a workload endpoint (those
	// with the attribute AttrEndpoint): such an allocation has leaked
	// when its endpoint's newest handle is another (a newer sandbox of the
	// pod took it over, and the old one's DEL has not come yet).
	// Allocations made for no endpoint are left to Live.
	Endpoints bool
}

// Check reads every IPAM object (pools, indexes, then blocks) and reports
// inconsistencies, and the pools that do not serve because their value
// is invalid. There is no single revision across the
// two lists, so a finding between an index and a block is reported only
// if a second read shows it too, and claims or releases younger than
// ClaimTimeout are not findings. It changes nothing; GC acts on leaks.
func (a *Allocator) Check(ctx context.Context, opts CheckOptions) (Report, error) {
	return a.checkRetry(ctx, "check", opts, "")
}

// CheckNode is Check limited to one node: its index and the blocks the
// index names, and the node's own allocations in them. It is what a
// node's GC runs: its reads do not grow with the cluster. Addresses of the
// node that its index does not name are invisible to it (Check finds them
// as Unindexed).
func (a *Allocator) CheckNode(ctx context.Context, node string, opts CheckOptions) (Report, error) {
	if err := validName("node", node); err != nil {
		return Report{}, err
	}
	return a.checkRetry(ctx, "check node "+quote(node), opts, node)
}

func (a *Allocator) checkRetry(ctx context.Context, op string, opts CheckOptions, node string) (Report, error) {
	var rep Report
	err := a.retry(ctx, op, func(ctx context.Context) error {
		var err error
		rep, err = a.checkTwice(FreshRead(ctx), opts, node)
		return err
	})
	return rep, err
}

// checkTwice reads and judges, and when an index/block finding shows,
// reads and judges again and keeps only the findings both saw.
func (a *Allocator) checkTwice(ctx context.Context, opts CheckOptions, node string) (Report, error) {
	first, err := a.checkOnce(ctx, opts, node)
	if err != nil || len(first.Unindexed)+len(first.Unpublished)+len(first.AffinityMismatches) == 0 {
		return first, err
	}
	rep, err := a.checkOnce(ctx, opts, node)
	if err != nil {
		return Report{}, err
	}
	rep.Unindexed = both(first.Unindexed, rep.Unindexed)
	rep.Unpublished = both(first.Unpublished, rep.Unpublished)
	rep.AffinityMismatches = both(first.AffinityMismatches, rep.AffinityMismatches)
	return rep, nil
}

func both[T comparable](a, b []T) []T {
	var out []T
	for _, x := range b {
		if slices.Contains(a, x) {
			out = append(out, x)
		}
	}
	return out
}

// snapshot is what one check read, decoded.
type snapshot struct {
	node    string // "" for the whole store
	blocks  map[netip.Prefix]*Block
	indexes map[string]*NodeIndex
	corrupt []string
}

func (a *Allocator) checkOnce(ctx context.Context, opts CheckOptions, node string) (Report, error) {
	s := &snapshot{node: node, blocks: map[netip.Prefix]*Block{}, indexes: map[string]*NodeIndex{}}
	if err := a.readSnapshot(ctx, s); err != nil {
		return Report{}, err
	}
	rep := Report{Corrupt: s.corrupt}
	var eps map[string]*Endpoint
	if opts.Endpoints {
		eps = deriveEndpoints(slices.Collect(maps.Values(s.blocks)), node)
	}
	s.checkAllocations(&rep, opts, eps)
	s.checkIndexes(&rep, a.cfg.Now(), a.cfg.ClaimTimeout)
	return rep, nil
}

// readSnapshot reads every index and block, or node's index and the
// blocks it names.
func (a *Allocator) readSnapshot(ctx context.Context, s *snapshot) error {
	if s.node != "" {
		ix, blocks, err := a.nodeBlocks(ctx, s.node)
		if err != nil {
			return err
		}
		if ix.x != nil {
			s.indexes[s.node] = ix.x
		}
		for _, b := range blocks {
			s.blocks[b.CIDR] = b
		}
		return nil
	}
	pools, err := a.listPools(ctx)
	if err != nil {
		return err
	}
	for _, bad := range pools.invalid {
		s.corrupt = append(s.corrupt, bad.Error())
	}
	kvs, err := a.store.List(ctx, a.keys.Nodes())
	if err != nil {
		return err
	}
	for _, kv := range kvs {
		if x, err := decodeIndex(kv); err != nil {
			s.corrupt = append(s.corrupt, err.Error())
		} else {
			s.indexes[strings.TrimPrefix(kv.Key, a.keys.Nodes())] = x
		}
	}
	if kvs, err = a.store.List(ctx, a.keys.Blocks()); err != nil {
		return err
	}
	for _, kv := range kvs {
		if b, err := decodeBlock(kv); err != nil {
			s.corrupt = append(s.corrupt, err.Error())
		} else {
			s.blocks[b.CIDR] = b
		}
	}
	return nil
}

// checkAllocations walks every allocated address, in block order: leaks,
// addresses with two owners, and addresses their node cannot find or
// does not route.
func (s *snapshot) checkAllocations(rep *Report, opts CheckOptions, eps map[string]*Endpoint) {
	owners := map[netip.Addr][]Allocation{}
	for _, cidr := range slices.SortedFunc(maps.Keys(s.blocks), comparePrefix) {
		b := s.blocks[cidr]
		for ord, ref := range b.Owners {
			if ref == 0 {
				continue
			}
			at := b.Attributes[ref-1]
			al := Allocation{Addr: b.Addr(ord), Block: cidr, Handle: at.Handle, Node: at.Node, Endpoint: at.Extra[AttrEndpoint]}
			owners[al.Addr] = append(owners[al.Addr], al)
			if s.node == "" || at.Node == s.node {
				s.judge(rep, al, b, opts, eps)
			}
		}
	}
	for _, addr := range slices.SortedFunc(maps.Keys(owners), netip.Addr.Compare) {
		if als := owners[addr]; len(als) > 1 {
			rep.MultipleOwners = append(rep.MultipleOwners, als...)
		}
	}
}

// judge reports al as unindexed or unpublished by its node's index, and
// as leaked when nothing live holds it.
func (s *snapshot) judge(rep *Report, al Allocation, b *Block, opts CheckOptions, eps map[string]*Endpoint) {
	if al.Node != "" {
		ix := s.indexes[al.Node]
		switch bb := ix.borrowedOf(al.Block); {
		case !ix.lists(al.Block):
			rep.Unindexed = append(rep.Unindexed, al)
		case b.Affinity != HostAffinity(al.Node) && (bb == nil || !slices.Contains(bb.IPs, al.Addr)):
			rep.Unpublished = append(rep.Unpublished, al)
		}
	}
	switch {
	case opts.Live != nil && !opts.Live(al.Node, al.Handle):
		rep.Leaked = append(rep.Leaked, al)
	case opts.Endpoints && al.Endpoint != "" && (eps[al.Endpoint] == nil || eps[al.Endpoint].Handle != al.Handle):
		rep.Leaked = append(rep.Leaked, al)
	}
}

// borrowedOf is borrowed for an index that may be nil.
func (x *NodeIndex) borrowedOf(cidr netip.Prefix) *BorrowedBlock {
	if x == nil {
		return nil
	}
	return x.borrowed(cidr)
}

// checkIndexes compares every index entry with its block, and every
// affine block with its node's index.
func (s *snapshot) checkIndexes(rep *Report, now time.Time, timeout time.Duration) {
	add := func(node string, cidr netip.Prefix, format string, args ...any) {
		rep.AffinityMismatches = append(rep.AffinityMismatches, AffinityMismatch{node, cidr, fmt.Sprintf(format, args...)})
	}
	for node, x := range s.indexes {
		for _, e := range x.Blocks {
			b := s.blocks[e.CIDR]
			switch {
			case e.State != AffinityConfirmed && now.Sub(e.Since) >= timeout:
				add(node, e.CIDR, "%s since %s (claim timeout %v)", e.State, e.Since.UTC().Format(time.RFC3339), timeout)
			case e.State != AffinityConfirmed:
			case b == nil:
				add(node, e.CIDR, "confirmed claim without a block")
			case b.Affinity != HostAffinity(node):
				add(node, e.CIDR, "confirmed claim, but the block is affine to %q", b.Affinity)
			case b.releasing() && now.Sub(b.Releasing) >= timeout:
				add(node, e.CIDR, "block being let go since %s (claim timeout %v)", b.Releasing.UTC().Format(time.RFC3339), timeout)
			}
		}
	}
	for cidr, b := range s.blocks {
		node, ok := strings.CutPrefix(b.Affinity, "host:")
		if !ok || s.node != "" && node != s.node || s.indexes[node].entryOf(cidr) != nil {
			continue
		}
		if b.AffinitySince.IsZero() || now.Sub(b.AffinitySince) >= timeout {
			add(node, cidr, "block is affine to the node, whose index does not name it")
		}
	}
	slices.SortFunc(rep.AffinityMismatches, func(x, y AffinityMismatch) int {
		return strings.Compare(x.Node+x.Block.String()+x.Problem, y.Node+y.Block.String()+y.Problem)
	})
}

// GC releases what CheckNode calls leaked on node: allocations made for
// node whose handle is not in validHandles. The caller must not run it
// while an ADD for a handle missing from validHandles may be in flight (the
// CNI GC contract). It first finishes what killed operations of the node
// left (Repair). It returns the addresses released.
func (a *Allocator) GC(ctx context.Context, node string, validHandles []string) ([]netip.Addr, error) {
	if err := a.Repair(ctx, node); err != nil {
		return nil, err
	}
	valid := map[string]bool{}
	for _, h := range validHandles {
		valid[h] = true
	}
	rep, err := a.CheckNode(ctx, node, CheckOptions{Live: func(n, h string) bool { return n != node || valid[h] }})
	if err != nil {
		return nil, err
	}
	var addrs []netip.Addr
	owners := map[netip.Addr]string{}
	for _, l := range rep.Leaked {
		addrs = append(addrs, l.Addr)
		owners[l.Addr] = l.Handle
	}
	return a.release(ctx, addrs, owners)
}

func comparePrefix(x, y netip.Prefix) int {
	if c := x.Addr().Compare(y.Addr()); c != 0 {
		return c
	}
	return x.Bits() - y.Bits()
}
