package ipam

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"time"
)

// NodeIndex is the value under ipam/nodes/<node>: every block where the
// node's addresses can be (invariant I1 of docs/design/kubernetes-ipam.md),
// and what of them agents route to the node. It changes when the node
// claims or lets go of a block and when it borrows, never on an ordinary
// allocation, so agents watch indexes, not blocks.
type NodeIndex struct {
	Node string `json:"node"`
	// Blocks are the node's claims, sorted by CIDR.
	Blocks []NodeBlock `json:"blocks,omitempty"`
	// Borrowed are blocks not affine to the node where it may hold
	// addresses, sorted by CIDR.
	Borrowed []BorrowedBlock `json:"borrowed,omitempty"`
}

// NodeBlock is a claim: pending (the node's intent; the block may not
// exist yet), confirmed (the block exists affine to the node; agents
// route it), or pendingDeletion (being let go; no longer routed).
type NodeBlock struct {
	CIDR  netip.Prefix  `json:"cidr"`
	State AffinityState `json:"state"`
	// Since is when the claim entered State; a pending or
	// pendingDeletion claim older than ClaimTimeout is finished by
	// whoever meets it.
	Since time.Time `json:"since"`
}

// BorrowedBlock is a block not affine to the node where the node may hold
// addresses. IPs are the addresses published for routes: added after the
// allocation, removed before the release (invariant I3).
type BorrowedBlock struct {
	CIDR netip.Prefix `json:"cidr"`
	IPs  []netip.Addr `json:"ips,omitempty"`
}

func decodeIndex(kv KV) (*NodeIndex, error) {
	if x, ok := parseIndexJSON(kv.Value); ok {
		return x, nil
	}
	x := new(NodeIndex)
	if err := json.Unmarshal(kv.Value, x); err != nil {
		return nil, fmt.Errorf("node index %s: %w", kv.Key, err)
	}
	return x, nil
}

// clone returns a deep copy: indexes are changed only on copies, as
// blocks are.
func (x *NodeIndex) clone() *NodeIndex {
	c := &NodeIndex{Node: x.Node, Blocks: slices.Clone(x.Blocks), Borrowed: slices.Clone(x.Borrowed)}
	for i := range c.Borrowed {
		c.Borrowed[i].IPs = slices.Clone(c.Borrowed[i].IPs)
	}
	return c
}

// entry returns the claim on cidr, or nil.
func (x *NodeIndex) entry(cidr netip.Prefix) *NodeBlock {
	for i := range x.Blocks {
		if x.Blocks[i].CIDR == cidr {
			return &x.Blocks[i]
		}
	}
	return nil
}

// borrowed returns the borrowed entry of cidr, or nil.
func (x *NodeIndex) borrowed(cidr netip.Prefix) *BorrowedBlock {
	for i := range x.Borrowed {
		if x.Borrowed[i].CIDR == cidr {
			return &x.Borrowed[i]
		}
	}
	return nil
}

// lists reports whether the index names cidr at all (I1).
func (x *NodeIndex) lists(cidr netip.Prefix) bool {
	return x != nil && (x.entry(cidr) != nil || x.borrowed(cidr) != nil)
}

// active counts the claims that are not being let go: what
// MaxBlocksPerHost bounds (invariant I4).
func (x *NodeIndex) active() int {
	n := 0
	for _, e := range x.Blocks {
		if e.State != AffinityPendingDeletion {
			n++
		}
	}
	return n
}

// setEntry adds or replaces the claim on cidr, keeping Blocks sorted.
func (x *NodeIndex) setEntry(e NodeBlock) {
	if cur := x.entry(e.CIDR); cur != nil {
		*cur = e
		return
	}
	x.Blocks = append(x.Blocks, e)
	slices.SortFunc(x.Blocks, func(a, b NodeBlock) int { return comparePrefix(a.CIDR, b.CIDR) })
}

// removeEntry drops the claim on cidr; it reports whether there was one.
func (x *NodeIndex) removeEntry(cidr netip.Prefix) bool {
	n := len(x.Blocks)
	x.Blocks = slices.DeleteFunc(x.Blocks, func(e NodeBlock) bool { return e.CIDR == cidr })
	return len(x.Blocks) != n
}

// addBorrowed makes sure cidr has a borrowed entry; it reports whether it
// added one.
func (x *NodeIndex) addBorrowed(cidr netip.Prefix) bool {
	if x.borrowed(cidr) != nil {
		return false
	}
	x.Borrowed = append(x.Borrowed, BorrowedBlock{CIDR: cidr})
	slices.SortFunc(x.Borrowed, func(a, b BorrowedBlock) int { return comparePrefix(a.CIDR, b.CIDR) })
	return true
}

// publish adds addrs to cidr's borrowed entry (creating it); it reports
// whether anything changed.
func (x *NodeIndex) publish(cidr netip.Prefix, addrs []netip.Addr) bool {
	changed := x.addBorrowed(cidr)
	e := x.borrowed(cidr)
	for _, a := range addrs {
		if !slices.Contains(e.IPs, a) {
			e.IPs = append(e.IPs, a)
			changed = true
		}
	}
	slices.SortFunc(e.IPs, netip.Addr.Compare)
	return changed
}

// unpublish removes addrs from cidr's borrowed entry, which stays (the
// block may still hold the node's addresses until the release lands); it
// reports whether anything changed.
func (x *NodeIndex) unpublish(cidr netip.Prefix, addrs []netip.Addr) bool {
	e := x.borrowed(cidr)
	if e == nil {
		return false
	}
	n := len(e.IPs)
	e.IPs = slices.DeleteFunc(e.IPs, func(a netip.Addr) bool { return slices.Contains(addrs, a) })
	return len(e.IPs) != n
}

// removeBorrowed drops cidr's borrowed entry; it reports whether there was
// one.
func (x *NodeIndex) removeBorrowed(cidr netip.Prefix) bool {
	n := len(x.Borrowed)
	x.Borrowed = slices.DeleteFunc(x.Borrowed, func(b BorrowedBlock) bool { return b.CIDR == cidr })
	return len(x.Borrowed) != n
}

// cidrs returns every block the index names where the node's addresses
// may be (claims not being let go, and borrowed blocks), each once, in
// CIDR order: where a handle of the node is looked for.
func (x *NodeIndex) cidrs() []netip.Prefix {
	if x == nil {
		return nil
	}
	var out []netip.Prefix
	for _, e := range x.Blocks {
		if e.State != AffinityPendingDeletion {
			out = append(out, e.CIDR)
		}
	}
	for _, b := range x.Borrowed {
		if !slices.Contains(out, b.CIDR) {
			out = append(out, b.CIDR)
		}
	}
	slices.SortFunc(out, comparePrefix)
	return out
}

// Routes returns what agents route to the node: its confirmed blocks and
// its published borrowed addresses (invariant I3).
func (x *NodeIndex) Routes() (blocks []netip.Prefix, addrs []netip.Addr) {
	for _, e := range x.Blocks {
		if e.State == AffinityConfirmed {
			blocks = append(blocks, e.CIDR)
		}
	}
	for _, b := range x.Borrowed {
		addrs = append(addrs, b.IPs...)
	}
	return blocks, addrs
}
