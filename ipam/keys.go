package ipam

import (
	"fmt"
	"net/netip"
	"strings"
)

// DefaultPrefix is where podnet keeps its keys unless told otherwise. The
// version names the layout: layout v2 (this one) has pools, blocks and
// one index per node; v1, under V1Prefix, also had affinity, handle and
// workload keys, and is only read by MigrateV1.
const DefaultPrefix = "/podnet/v2/"

// V1Prefix is where layout v1 lived by default.
const V1Prefix = "/podnet/v1/"

// Keys builds store keys under Prefix. Layout v2:
//
//	ipam/pools/<name>              Pool
//	ipam/blocks/<cidr with / as -> Block
//	ipam/nodes/<node>              NodeIndex
//	ipam/layout                    written by MigrateV1, last
type Keys struct{ Prefix string }

func (k Keys) prefix() string {
	if k.Prefix == "" {
		return DefaultPrefix
	}
	return k.Prefix
}

// Pools is the prefix of every pool.
func (k Keys) Pools() string { return k.prefix() + "ipam/pools/" }

// Pool is the key of pool name.
func (k Keys) Pool(name string) string { return k.Pools() + name }

// Blocks is the prefix of every block.
func (k Keys) Blocks() string { return k.prefix() + "ipam/blocks/" }

// Block is the key of the block cidr.
func (k Keys) Block(cidr netip.Prefix) string { return k.Blocks() + cidrKey(cidr) }

// Nodes is the prefix of every node index.
func (k Keys) Nodes() string { return k.prefix() + "ipam/nodes/" }

// Node is the key of node's index.
func (k Keys) Node(node string) string { return k.Nodes() + node }

// Layout is the key MigrateV1 writes last: its presence says the v1 data
// beside this layout has been carried over.
func (k Keys) Layout() string { return k.prefix() + "ipam/layout" }

// ParseBlockKey returns the CIDR of a key under Blocks (or of any key
// whose last segment is a CIDR spelled as in Block).
func (k Keys) ParseBlockKey(key string) (netip.Prefix, error) {
	s := key[strings.LastIndexByte(key, '/')+1:]
	i := strings.LastIndexByte(s, '-')
	if i < 0 {
		return netip.Prefix{}, fmt.Errorf("key %q: no block cidr", key)
	}
	p, err := netip.ParsePrefix(s[:i] + "/" + s[i+1:])
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("key %q: %w", key, err)
	}
	return p, nil
}

// cidrKey spells a CIDR without '/', so that it is one key segment. IPv6
// addresses contain no '-', so the spelling is reversible.
func cidrKey(p netip.Prefix) string {
	return p.Addr().String() + "-" + fmt.Sprint(p.Bits())
}
