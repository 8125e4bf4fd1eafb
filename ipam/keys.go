package ipam

import (
	"fmt"
	"net/netip"
	"strings"
)

// DefaultPrefix is where podnet keeps its keys unless told otherwise; the
// version lets a future layout live beside this one during an upgrade.
const DefaultPrefix = "/podnet/v1/"

// Keys builds store keys under Prefix. The layout is DESIGN.md's data model:
//
//	ipam/pools/<name>
//	ipam/blocks/<cidr with / as ->
//	ipam/affinities/<node>/<cidr with / as ->
//	ipam/handles/<handle>
//	workloads/<node>/<namespace>/<pod>/<ifname>   (endpoint.go)
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

// Affinities is the prefix of every affinity.
func (k Keys) Affinities() string { return k.prefix() + "ipam/affinities/" }

// NodeAffinities is the prefix of node's affinities.
func (k Keys) NodeAffinities(node string) string { return k.Affinities() + node + "/" }

// Affinity is the key of node's affinity to cidr.
func (k Keys) Affinity(node string, cidr netip.Prefix) string {
	return k.NodeAffinities(node) + cidrKey(cidr)
}

// Handles is the prefix of every handle.
func (k Keys) Handles() string { return k.prefix() + "ipam/handles/" }

// Handle is the key of handle id.
func (k Keys) Handle(id string) string { return k.Handles() + id }

// ParseBlockKey returns the CIDR of a key under Blocks or the CIDR suffix
// of an affinity key.
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

// ParseAffinityKey returns the node and CIDR of an affinity key.
func (k Keys) ParseAffinityKey(key string) (string, netip.Prefix, error) {
	rest, ok := strings.CutPrefix(key, k.Affinities())
	node, _, ok2 := strings.Cut(rest, "/")
	if !ok || !ok2 {
		return "", netip.Prefix{}, fmt.Errorf("key %q: not an affinity key", key)
	}
	p, err := k.ParseBlockKey(key)
	return node, p, err
}

// cidrKey spells a CIDR without '/', so that it is one key segment. IPv6
// addresses contain no '-', so the spelling is reversible.
func cidrKey(p netip.Prefix) string {
	return p.Addr().String() + "-" + fmt.Sprint(p.Bits())
}
