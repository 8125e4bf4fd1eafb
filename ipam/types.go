package ipam

import (
	"maps"
	"net/netip"
	"strings"
)

// Default block sizes: 64 addresses per block in both families, as Calico.
const (
	DefaultBlockSize4 = 26
	DefaultBlockSize6 = 122
)

// maxBlockHostBits bounds a block to 1024 addresses: a block is one JSON
// value rewritten on every allocation, and one Kubernetes object, which
// must stay well under etcd's 1.5 MiB request limit (at ~700 bytes per
// attributes entry, 1024 entries are ~0.7 MB).
const maxBlockHostBits = 10

// Pool is a range of addresses cut into blocks of BlockSize prefix length.
type Pool struct {
	Name string       `json:"name"`
	CIDR netip.Prefix `json:"cidr"`
	// BlockSize is the prefix length of the pool's blocks; 0 means the
	// family default (26 or 122).
	BlockSize int `json:"blockSize,omitempty"`
	// NodeSelector limits the nodes that may take blocks from the pool;
	// see MatchSelector. Empty selects every node.
	NodeSelector string `json:"nodeSelector,omitempty"`
	// Disabled pools hand out no new addresses; existing ones stay.
	Disabled bool `json:"disabled,omitempty"`
}

// Normalize returns p with defaults applied and the CIDR masked, or a
// KindInvalid error naming the value at fault.
func (p Pool) Normalize() (Pool, error) {
	n, err := p.normalize()
	if err != nil {
		return p, errorf(KindInvalid, "pool %q: %w", p.Name, err)
	}
	return n, nil
}

// normalize is Normalize with errors that do not name the pool, for
// callers that name it their own way (an invalid pool in the store is
// named by its key).
func (p Pool) normalize() (Pool, error) {
	if p.Name == "" || strings.Contains(p.Name, "/") {
		return p, errorf(KindInvalid, "invalid name")
	}
	g, err := p.geometry()
	if err != nil {
		return p, err
	}
	p.CIDR, p.BlockSize = g.CIDR, g.BlockSize
	if _, err := ParseSelector(p.NodeSelector); err != nil {
		return p, errorf(KindInvalid, "nodeSelector %q: %v", p.NodeSelector, err)
	}
	return p, nil
}

// geometry returns p's CIDR masked and its block size with the family
// default applied: how the pool cuts its blocks, the part of a pool that
// can never change.
func (p Pool) geometry() (Pool, error) {
	if !p.CIDR.IsValid() {
		return p, errorf(KindInvalid, "cidr %q: invalid prefix", p.CIDR)
	}
	if p.CIDR.Addr().Is4In6() {
		return p, errorf(KindInvalid, "cidr %q: IPv4-mapped IPv6 is not allowed", p.CIDR)
	}
	p.CIDR = p.CIDR.Masked()
	bits := p.CIDR.Addr().BitLen()
	if p.BlockSize == 0 {
		p.BlockSize = DefaultBlockSize4
		if bits == 128 {
			p.BlockSize = DefaultBlockSize6
		}
	}
	if p.BlockSize < p.CIDR.Bits() || p.BlockSize > bits || bits-p.BlockSize > maxBlockHostBits {
		return p, errorf(KindInvalid, "blockSize %d: must be between /%d and /%d for cidr %q",
			p.BlockSize, max(p.CIDR.Bits(), bits-maxBlockHostBits), bits, p.CIDR)
	}
	return p, nil
}

// NumBlocks is how many blocks the pool holds, capped at 1<<62 so that
// huge IPv6 pools still fit in an int64.
func (p Pool) NumBlocks() uint64 {
	n := p.BlockSize - p.CIDR.Bits()
	if n > 62 {
		n = 62
	}
	return 1 << n
}

// BlockAt returns the i-th block of the pool (i < NumBlocks).
func (p Pool) BlockAt(i uint64) netip.Prefix {
	a := addUint(p.CIDR.Addr(), i, p.CIDR.Addr().BitLen()-p.BlockSize)
	return netip.PrefixFrom(a, p.BlockSize)
}

// BlockFor returns the block of the pool that holds addr.
func (p Pool) BlockFor(addr netip.Addr) netip.Prefix {
	pf, _ := addr.Prefix(p.BlockSize)
	return pf
}

// AffinityState is where a node's claim on a block stands.
type AffinityState string

// The states of a node's claim on a block (NodeBlock.State): a claim
// starts pending, becomes confirmed once the block exists with the node's
// affinity, and passes through pendingDeletion when the node lets the
// block go.
const (
	AffinityPending         AffinityState = "pending"
	AffinityConfirmed       AffinityState = "confirmed"
	AffinityPendingDeletion AffinityState = "pendingDeletion"
)

// Attributes describe who owns an allocation. Allocations with equal
// Attributes share one entry in a block.
type Attributes struct {
	Handle string `json:"handle"`
	Node   string `json:"node,omitempty"`
	// Extra holds pod, namespace, container and the like; for an
	// allocation made for a workload endpoint, AttrEndpoint and
	// AttrCreated (endpoint.go).
	Extra map[string]string `json:"extra,omitempty"`
}

// Equal reports whether a and b are the same owner.
func (a Attributes) Equal(b Attributes) bool {
	return a.Handle == b.Handle && a.Node == b.Node && maps.Equal(a.Extra, b.Extra)
}

func (a Attributes) clone() Attributes {
	a.Extra = maps.Clone(a.Extra)
	return a
}

// HostAffinity is a block's affinity string for node.
func HostAffinity(node string) string { return "host:" + node }

// validName rejects names that would break the key layout.
func validName(kind, s string) error {
	if s == "" || strings.ContainsAny(s, "/\x00") {
		return errorf(KindInvalid, "%s %q: must be non-empty and contain no '/'", kind, s)
	}
	return nil
}
