package ipam

import (
	"context"
	"encoding/json"
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
	var rep Report
	// With endpoints, one List of the whole prefix: an allocation and
	// its endpoint are written in one transaction, so one revision sees
	// both or neither.
	listPrefix := a.keys.prefix() + "ipam/"
	if opts.Endpoints {
		listPrefix = a.keys.prefix()
	}
	kvs, _, err := a.store.List(ctx, listPrefix)
	if err != nil {
		return rep, err
	}
	endpoints := map[string]string{} // endpoint ID -> handle

	blocks := map[netip.Prefix]*Block{}
	handles := map[string]*Handle{}
	type affKey struct {
		node string
		cidr netip.Prefix
	}
	affs := map[affKey]Affinity{}
	for _, kv := range kvs {
		switch {
		case strings.HasPrefix(kv.Key, a.keys.Blocks()):
			b, err := decodeBlock(kv)
			if err != nil {
				rep.Corrupt = append(rep.Corrupt, err.Error())
				continue
			}
			blocks[b.CIDR] = b
		case strings.HasPrefix(kv.Key, a.keys.Handles()):
			h := new(Handle)
			if err := json.Unmarshal(kv.Value, h); err != nil {
				rep.Corrupt = append(rep.Corrupt, kv.Key+": "+err.Error())
				continue
			}
			handles[strings.TrimPrefix(kv.Key, a.keys.Handles())] = h
		case strings.HasPrefix(kv.Key, a.keys.Affinities()):
			node, cidr, err := a.keys.ParseAffinityKey(kv.Key)
			var af Affinity
			if err == nil {
				err = json.Unmarshal(kv.Value, &af)
			}
			if err != nil {
				rep.Corrupt = append(rep.Corrupt, kv.Key+": "+err.Error())
				continue
			}
			affs[affKey{node, cidr}] = af
		case opts.Endpoints && strings.HasPrefix(kv.Key, a.keys.Workloads()):
			ep, err := decodeEndpoint(kv)
			if err != nil {
				rep.Corrupt = append(rep.Corrupt, err.Error())
				continue
			}
			endpoints[strings.TrimPrefix(kv.Key, a.keys.Workloads())] = ep.Handle
		}
	}

	owners := map[netip.Addr][]Allocation{}
	counts := map[string]map[string]int{} // handle -> block -> count
	for _, cidr := range slices.SortedFunc(mapKeys(blocks), comparePrefix) {
		b := blocks[cidr]
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
			if h := handles[at.Handle]; h == nil || h.Blocks[cidr.String()] == 0 {
				rep.Orphans = append(rep.Orphans, al)
			}
			switch {
			case opts.Live != nil && !opts.Live(at.Node, at.Handle):
				rep.Leaked = append(rep.Leaked, al)
			case opts.Endpoints && al.Endpoint != "" && endpoints[al.Endpoint] != al.Handle:
				rep.Leaked = append(rep.Leaked, al)
			}
		}
		if node, ok := strings.CutPrefix(b.Affinity, "host:"); ok {
			if _, ok := affs[affKey{node, cidr}]; !ok {
				rep.AffinityMismatches = append(rep.AffinityMismatches, AffinityMismatch{node, cidr, "block is affine to the node, which has no affinity for it"})
			}
		}
	}
	for _, addr := range slices.SortedFunc(mapKeys(owners), netip.Addr.Compare) {
		if als := owners[addr]; len(als) > 1 {
			rep.MultipleOwners = append(rep.MultipleOwners, als...)
		}
	}
	for _, id := range sortedKeys(handles) {
		for _, blk := range sortedKeys(handles[id].Blocks) {
			want, have := handles[id].Blocks[blk], counts[id][blk]
			if want != have {
				rep.DanglingHandles = append(rep.DanglingHandles, DanglingHandle{id, blk, want, have})
			}
		}
	}
	for k, af := range affs {
		b := blocks[k.cidr]
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
	return rep, nil
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

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func comparePrefix(x, y netip.Prefix) int {
	if c := x.Addr().Compare(y.Addr()); c != 0 {
		return c
	}
	return x.Bits() - y.Bits()
}
