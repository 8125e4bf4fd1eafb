package ipam

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"
)

// Block is the value under ipam/blocks/<cidr>: every address of one block,
// who owns it, and the order in which free addresses come back.
//
// Methods on Block are pure: no I/O, no clock, no randomness. The allocator
// calls them only on a private copy decoded from the store, so a method may
// leave the block half-changed when it returns an error.
type Block struct {
	CIDR netip.Prefix `json:"cidr"`
	// Affinity is HostAffinity(node) for a node's block, empty for a
	// block no node routes as its own.
	Affinity string `json:"affinity,omitempty"`
	// AffinitySince is when Affinity was set. The node's index lists the
	// block before the block takes the affinity, so an affine block its
	// node's index does not list is an anomaly, unless a reader saw the
	// index before the claim (Check tolerates it for ClaimTimeout).
	AffinitySince time.Time `json:"affinitySince,omitzero"`
	// Owners[ord] is 0 when the ordinal is free and k when Attributes[k-1]
	// owns it. Zero meaning free keeps a zero-filled slice valid.
	Owners []int `json:"owners"`
	// Free holds every free ordinal once. Allocation takes from the front
	// and release appends at the back, so a released address is the last
	// to be handed out again: a stale ARP entry or conntrack flow for it
	// has the longest time to age out.
	Free []int `json:"free"`
	// Attributes are deduplicated: allocations with equal owners share one
	// entry, and an entry no allocation uses is removed.
	Attributes []Attributes `json:"attributes,omitempty"`
	// Sequence counts the allocations ever made in the block.
	Sequence uint64 `json:"sequence"`
	// EmptySince is when the last allocation was released; zero while
	// the block holds addresses or has never held one. The allocator sets
	// it, as block logic has no clock.
	EmptySince time.Time `json:"emptySince,omitzero"`
	// Releasing is when the block's node began to let it go (affinity.go);
	// while it is set, nothing is allocated from the block, and the
	// release is finished by whoever meets it. Set under a compare on
	// the revision at which the release saw the block, it is what makes a
	// release and an allocation into the block exclude each other.
	Releasing time.Time `json:"releasing,omitzero"`
}

// ErrNotInBlock is returned for an address outside the block.
var ErrNotInBlock = errors.New("address not in block")

// AllocatedError reports an address that already has an owner.
type AllocatedError struct {
	Addr  netip.Addr
	Owner Attributes
}

func (e *AllocatedError) Error() string {
	return fmt.Sprintf("address %s is already allocated to handle %q", e.Addr, e.Owner.Handle)
}

// NewBlock returns an empty block for cidr with every ordinal free in
// ascending order.
func NewBlock(cidr netip.Prefix, affinity string) *Block {
	cidr = cidr.Masked()
	n := 1 << (cidr.Addr().BitLen() - cidr.Bits())
	b := &Block{CIDR: cidr, Affinity: affinity, Owners: make([]int, n), Free: make([]int, n)}
	for i := range b.Free {
		b.Free[i] = i
	}
	return b
}

// Size is the number of addresses in the block.
func (b *Block) Size() int { return len(b.Owners) }

// NumFree is the number of free addresses.
func (b *Block) NumFree() int { return len(b.Free) }

// releasing reports whether the block is being let go (Releasing): no
// allocation may be made in it.
func (b *Block) releasing() bool { return !b.Releasing.IsZero() }

// Empty reports whether no address is allocated.
func (b *Block) Empty() bool { return len(b.Free) == len(b.Owners) }

// Ordinal returns addr's position in the block.
func (b *Block) Ordinal(addr netip.Addr) (int, bool) {
	if !b.CIDR.Contains(addr) {
		return 0, false
	}
	return low16(addr) & (b.Size() - 1), true
}

// Addr returns the address at ordinal ord.
func (b *Block) Addr(ord int) netip.Addr {
	return withLow16(b.CIDR.Addr(), ord)
}

// Owner returns who holds addr, if anyone.
func (b *Block) Owner(addr netip.Addr) (Attributes, bool) {
	ord, ok := b.Ordinal(addr)
	if !ok || b.Owners[ord] == 0 {
		return Attributes{}, false
	}
	return b.Attributes[b.Owners[ord]-1], true
}

// Clone returns a deep copy, the first step of every change: copy,
// modify, compare-and-swap.
func (b *Block) Clone() *Block {
	c := *b
	c.Owners = slices.Clone(b.Owners)
	c.Free = slices.Clone(b.Free)
	c.Attributes = make([]Attributes, len(b.Attributes))
	for i, a := range b.Attributes {
		c.Attributes[i] = a.clone()
	}
	return &c
}

// attrRef returns the Owners value for a, adding an entry if needed.
func (b *Block) attrRef(a Attributes) int {
	for i, x := range b.Attributes {
		if x.Equal(a) {
			return i + 1
		}
	}
	b.Attributes = append(b.Attributes, a.clone())
	return len(b.Attributes)
}

// AutoAllocate takes up to n free addresses in free-list order, skipping
// those ok rejects (ok may be nil), and gives them to a. It returns the
// addresses taken, fewer than n when the block runs out.
func (b *Block) AutoAllocate(n int, a Attributes, ok func(netip.Addr) bool) []netip.Addr {
	if n <= 0 || len(b.Free) == 0 {
		return nil
	}
	var got []netip.Addr
	ref := 0
	keep := b.Free[:0]
	for _, ord := range b.Free {
		addr := b.Addr(ord)
		if len(got) == n || (ok != nil && !ok(addr)) {
			keep = append(keep, ord)
			continue
		}
		if ref == 0 {
			ref = b.attrRef(a)
		}
		b.Owners[ord] = ref
		b.Sequence++
		got = append(got, addr)
	}
	b.Free = keep
	return got
}

// AllocateAddr gives addr to a. Allocating an address a already owns is
// not an error, so a retried request stays idempotent.
func (b *Block) AllocateAddr(addr netip.Addr, a Attributes) error {
	ord, ok := b.Ordinal(addr)
	if !ok {
		return fmt.Errorf("%s: %w %s", addr, ErrNotInBlock, b.CIDR)
	}
	if r := b.Owners[ord]; r != 0 {
		if b.Attributes[r-1].Handle == a.Handle {
			return nil
		}
		return &AllocatedError{Addr: addr, Owner: b.Attributes[r-1]}
	}
	i := slices.Index(b.Free, ord)
	b.Free = slices.Delete(b.Free, i, i+1)
	b.Owners[ord] = b.attrRef(a)
	b.Sequence++
	return nil
}

// Release frees the given addresses and returns how many each handle lost.
// Addresses outside the block or already free are ignored.
func (b *Block) Release(addrs []netip.Addr) map[string]int {
	lost := map[string]int{}
	for _, addr := range addrs {
		ord, ok := b.Ordinal(addr)
		if !ok || b.Owners[ord] == 0 {
			continue
		}
		lost[b.Attributes[b.Owners[ord]-1].Handle]++
		b.Owners[ord] = 0
		b.Free = append(b.Free, ord)
	}
	b.compact()
	return lost
}

// ReleaseHandle frees every address of handle and returns them.
func (b *Block) ReleaseHandle(handle string) []netip.Addr {
	addrs := b.AddrsOf(handle)
	b.Release(addrs)
	return addrs
}

// AddrsOf returns handle's addresses in ordinal order.
func (b *Block) AddrsOf(handle string) []netip.Addr {
	var out []netip.Addr
	for ord, r := range b.Owners {
		if r != 0 && b.Attributes[r-1].Handle == handle {
			out = append(out, b.Addr(ord))
		}
	}
	return out
}

// HandleCounts returns how many addresses each handle holds.
func (b *Block) HandleCounts() map[string]int {
	m := map[string]int{}
	for _, r := range b.Owners {
		if r != 0 {
			m[b.Attributes[r-1].Handle]++
		}
	}
	return m
}

// compact drops attribute entries no ordinal refers to and renumbers the
// rest, so attributes of released addresses do not pile up forever.
func (b *Block) compact() {
	used := make([]bool, len(b.Attributes))
	for _, r := range b.Owners {
		if r != 0 {
			used[r-1] = true
		}
	}
	if !slices.Contains(used, false) {
		return
	}
	renum := make([]int, len(b.Attributes))
	kept := b.Attributes[:0]
	for i, a := range b.Attributes {
		if used[i] {
			kept = append(kept, a)
			renum[i] = len(kept)
		}
	}
	clear(b.Attributes[len(kept):])
	b.Attributes = kept
	for ord, r := range b.Owners {
		if r != 0 {
			b.Owners[ord] = renum[r-1]
		}
	}
}

// Validate checks the block's invariants: sizes agree with the CIDR, each
// free ordinal is listed exactly once, owners point at existing entries and
// every entry is used. A block read from the store that fails is corrupt.
func (b *Block) Validate() error {
	if !b.CIDR.IsValid() || b.CIDR != b.CIDR.Masked() {
		return fmt.Errorf("block %q: invalid cidr", b.CIDR)
	}
	host := b.CIDR.Addr().BitLen() - b.CIDR.Bits()
	if host > maxBlockHostBits || len(b.Owners) != 1<<host {
		return fmt.Errorf("block %s: %d owners for a /%d", b.CIDR, len(b.Owners), b.CIDR.Bits())
	}
	seen := make([]bool, len(b.Owners))
	for _, ord := range b.Free {
		if ord < 0 || ord >= len(b.Owners) || seen[ord] || b.Owners[ord] != 0 {
			return fmt.Errorf("block %s: free list entry %d is out of range, repeated or allocated", b.CIDR, ord)
		}
		seen[ord] = true
	}
	used := make([]bool, len(b.Attributes))
	for ord, r := range b.Owners {
		switch {
		case r < 0 || r > len(b.Attributes):
			return fmt.Errorf("block %s: ordinal %d refers to attribute %d of %d", b.CIDR, ord, r, len(b.Attributes))
		case r == 0 && !seen[ord]:
			return fmt.Errorf("block %s: free ordinal %d missing from the free list", b.CIDR, ord)
		case r != 0:
			used[r-1] = true
		}
	}
	if i := slices.Index(used, false); i >= 0 {
		return fmt.Errorf("block %s: attribute %d (handle %q) is unused", b.CIDR, i, b.Attributes[i].Handle)
	}
	return nil
}
