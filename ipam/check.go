package ipam

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
)

// Report is what Check found. An empty report (Clean) means every address
// has exactly one owner, every handle and affinity matches its blocks, and,
// if liveness was given, nothing leaked.
type Report struct {
	// Leaked: allocations whose handle has no live attachment.
	Leaked []Allocation
	// MultipleOwners: addresses allocated in more than one block (blocks
	// of overlapping pools).
	MultipleOwners []Allocation
	// Orphans: allocations whose handle record does not count them.
	Orphans []Allocation
	// DanglingHandles: handle records counting addresses a block does not
	// hold, or pointing at a block that does not exist.
	DanglingHandles []DanglingHandle
	// AffinityMismatches: an affinity and its block disagree.
	AffinityMismatches []AffinityMismatch
	// Corrupt: values that do not decode or fail validation.
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

// DanglingHandle is a handle whose count for a block is wrong.
type DanglingHandle struct {
	Handle     string
	Block      string
	Want, Have int // Want: the handle's count; Have: the block's
}

// AffinityMismatch is an affinity without its block or the reverse.
type AffinityMismatch struct {
	Node    string
	Block   netip.Prefix
	Problem string
}

// Clean reports whether nothing was found.
func (r Report) Clean() bool {
	return len(r.Leaked)+len(r.MultipleOwners)+len(r.Orphans)+len(r.DanglingHandles)+
		len(r.AffinityMismatches)+len(r.Corrupt) == 0
}

// CheckOptions tune Check.
type CheckOptions struct {
	// Live reports whether node has a live attachment for handle. Nil
	// skips leak detection.
	Live func(node, handle string) bool
	// Endpoints judges allocations made for a workload endpoint (those
	// with the attribute AttrEndpoint) by the endpoints, read in the same
	// List as the rest: such an allocation has leaked when its endpoint
	// is gone or names another handle (a newer sandbox of the pod took
	// it over, and the old one's DEL has not come yet). Allocations made
	// for no endpoint are left to Live.
	Endpoints bool
}

// Check reads every IPAM object in one List, so it sees one consistent
// revision even while allocations go on, and reports inconsistencies.
// It changes nothing; GC acts on its leaks.
func (a *Allocator) Check(ctx context.Context, opts CheckOptions) (Report, error) {
	var rep Report
	err := a.retry(ctx, "check", func(ctx context.Context) error {
		var err error
		rep, err = a.checkOnce(ctx, opts)
		return err
	})
	return rep, err
}

func (a *Allocator) checkOnce(ctx context.Context, opts CheckOptions) (Report, error) {
	// With endpoints, one List of the whole prefix: an allocation and
	// its endpoint are written in one transaction, so one revision sees
	// both or neither.
	listPrefix := a.keys.prefix() + "ipam/"
	if opts.Endpoints {
		listPrefix = a.keys.prefix()
	}
	kvs, _, err := a.store.List(ctx, listPrefix)
	if err != nil {
		return Report{}, err
	}
	var rep Report
	s := a.decodeSnapshot(kvs, opts.Endpoints, &rep)
	counts := s.checkAllocations(&rep, opts)
	s.checkHandles(&rep, counts)
	s.checkAffinities(&rep)
	return rep, nil
}

// snapshot is every IPAM object of one List, decoded.
type snapshot struct {
	blocks    map[netip.Prefix]*Block
	handles   map[string]*Handle
	affs      map[affinityKey]Affinity
	endpoints map[string]string // endpoint ID -> handle
}

type affinityKey struct {
	node string
	cidr netip.Prefix
}

// decodeSnapshot decodes kvs, reporting what does not decode as Corrupt.
func (a *Allocator) decodeSnapshot(kvs []KV, withEndpoints bool, rep *Report) *snapshot {
	s := &snapshot{blocks: map[netip.Prefix]*Block{}, handles: map[string]*Handle{},
		affs: map[affinityKey]Affinity{}, endpoints: map[string]string{}}
	for _, kv := range kvs {
		var err error
		switch {
		case strings.HasPrefix(kv.Key, a.keys.Blocks()):
			var b *Block
			if b, err = decodeBlock(kv); err == nil {
				s.blocks[b.CIDR] = b
			}
		case strings.HasPrefix(kv.Key, a.keys.Handles()):
			h := new(Handle)
			if err = json.Unmarshal(kv.Value, h); err == nil {
				s.handles[strings.TrimPrefix(kv.Key, a.keys.Handles())] = h
			} else {
				err = fmt.Errorf("%s: %w", kv.Key, err)
			}
		case strings.HasPrefix(kv.Key, a.keys.Affinities()):
			err = s.addAffinity(a.keys, kv)
		case withEndpoints && strings.HasPrefix(kv.Key, a.keys.Workloads()):
			var ep *Endpoint
			if ep, err = decodeEndpoint(kv); err == nil {
				s.endpoints[strings.TrimPrefix(kv.Key, a.keys.Workloads())] = ep.Handle
			}
		}
		if err != nil {
			rep.Corrupt = append(rep.Corrupt, err.Error())
		}
	}
	return s
}

func (s *snapshot) addAffinity(keys Keys, kv KV) error {
	node, cidr, err := keys.ParseAffinityKey(kv.Key)
	var af Affinity
	if err == nil {
		err = json.Unmarshal(kv.Value, &af)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", kv.Key, err)
	}
	s.affs[affinityKey{node, cidr}] = af
	return nil
}

// checkAllocations walks every allocated address, in block order:
// orphans, leaks, addresses with two owners, and blocks affine to a node
// that has no affinity for them. It returns how many addresses each
// handle holds in each block, for checkHandles.
func (s *snapshot) checkAllocations(rep *Report, opts CheckOptions) map[string]map[string]int {
	owners := map[netip.Addr][]Allocation{}
	counts := map[string]map[string]int{} // handle -> block -> count
	for _, cidr := range slices.SortedFunc(maps.Keys(s.blocks), comparePrefix) {
		b := s.blocks[cidr]
		for ord, ref := range b.Owners {
			if ref == 0 {
				continue
			}
			at := b.Attributes[ref-1]
			al := Allocation{Addr: b.Addr(ord), Block: cidr, Handle: at.Handle, Node: at.Node, Endpoint: at.Extra[AttrEndpoint]}
			owners[al.Addr] = append(owners[al.Addr], al)
			if counts[at.Handle] == nil {
				counts[at.Handle] = map[string]int{}
			}
			counts[at.Handle][cidr.String()]++
			s.judge(rep, al, opts)
		}
		if node, ok := strings.CutPrefix(b.Affinity, "host:"); ok {
			if _, ok := s.affs[affinityKey{node, cidr}]; !ok {
				rep.AffinityMismatches = append(rep.AffinityMismatches, AffinityMismatch{node, cidr, "block is affine to the node, which has no affinity for it"})
			}
		}
	}
	for _, addr := range slices.SortedFunc(maps.Keys(owners), netip.Addr.Compare) {
		if als := owners[addr]; len(als) > 1 {
			rep.MultipleOwners = append(rep.MultipleOwners, als...)
		}
	}
	return counts
}

// judge reports al as an orphan when its handle does not count it, and as
// leaked when nothing live holds it.
func (s *snapshot) judge(rep *Report, al Allocation, opts CheckOptions) {
	if h := s.handles[al.Handle]; h == nil || h.Blocks[al.Block.String()] == 0 {
		rep.Orphans = append(rep.Orphans, al)
	}
	switch {
	case opts.Live != nil && !opts.Live(al.Node, al.Handle):
		rep.Leaked = append(rep.Leaked, al)
	case opts.Endpoints && al.Endpoint != "" && s.endpoints[al.Endpoint] != al.Handle:
		rep.Leaked = append(rep.Leaked, al)
	}
}

// checkHandles reports handle counts that the blocks do not bear out.
func (s *snapshot) checkHandles(rep *Report, counts map[string]map[string]int) {
	for _, id := range sortedKeys(s.handles) {
		for _, blk := range sortedKeys(s.handles[id].Blocks) {
			want, have := s.handles[id].Blocks[blk], counts[id][blk]
			if want != have {
				rep.DanglingHandles = append(rep.DanglingHandles, DanglingHandle{id, blk, want, have})
			}
		}
	}
}

// checkAffinities reports affinities without their block, or whose block
// is affine to someone else.
func (s *snapshot) checkAffinities(rep *Report) {
	for k, af := range s.affs {
		b := s.blocks[k.cidr]
		switch {
		case b == nil:
			rep.AffinityMismatches = append(rep.AffinityMismatches, AffinityMismatch{k.node, k.cidr, "affinity (" + string(af.State) + ") without a block"})
		case b.Affinity != HostAffinity(k.node):
			rep.AffinityMismatches = append(rep.AffinityMismatches, AffinityMismatch{k.node, k.cidr, "block is affine to " + quote(b.Affinity)})
		}
	}
	slices.SortFunc(rep.AffinityMismatches, func(x, y AffinityMismatch) int {
		return strings.Compare(x.Node+x.Block.String(), y.Node+y.Block.String())
	})
}

// GC releases what Check calls leaked on node: allocations made for node
// whose handle is not in validHandles. The caller must not run it while an
// ADD for a handle missing from validHandles may be in flight (the CNI GC
// contract). It returns the addresses released.
func (a *Allocator) GC(ctx context.Context, node string, validHandles []string) ([]netip.Addr, error) {
	valid := map[string]bool{}
	for _, h := range validHandles {
		valid[h] = true
	}
	rep, err := a.Check(ctx, CheckOptions{Live: func(n, h string) bool { return n != node || valid[h] }})
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
