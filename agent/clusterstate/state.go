package clusterstate

import (
	"encoding/json"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/podnet/podnet/ipam"
)

// State is the decoded datastore contents the agent routes from: what a
// source read, whichever datastore it reads. It is not safe for
// concurrent use: the source changes it through a View, and Snapshot
// copies it for the route service.
type State struct {
	keys        ipam.Keys
	nodesPrefix string
	nodes       map[string]NodeRecord
	// routed: every prefix routed to a node as a whole -> that node: the
	// confirmed blocks of the nodes' IPAM indexes, or in the node-CIDR
	// model the Nodes' podCIDRs.
	routed map[netip.Prefix]string
	// indexed: per node, the confirmed blocks its index lists (what it
	// put in routed).
	indexed map[string][]netip.Prefix
	// borrowed: per node, the addresses its index publishes in blocks
	// not affine to it.
	borrowed map[string][]netip.Addr
	// podCIDRs: in the node-CIDR model, each Node's spec.podCIDRs, which
	// are routed as confirmed blocks are (see SetNode).
	podCIDRs map[string][]netip.Prefix
}

// NewState returns an empty state for the store prefix prefix (node
// records under NodesPrefix(prefix), IPAM indexes under
// ipam.Keys{Prefix: prefix}).
func NewState(prefix string) *State {
	keys := ipam.Keys{Prefix: prefix}
	return &State{
		keys: keys, nodesPrefix: NodesPrefix(prefix),
		nodes: map[string]NodeRecord{}, routed: map[netip.Prefix]string{},
		indexed: map[string][]netip.Prefix{}, borrowed: map[string][]netip.Addr{},
		podCIDRs: map[string][]netip.Prefix{},
	}
}

// SetNode records everything the Kubernetes datastore says of one node at
// once: its record (none when ok is false) and its podCIDRs, which are
// routed as if each were a block confirmed to the node, so that
// route.Compute routes them (or blackholes this node's own) as it does
// blocks. It returns whether anything routing depends on changed.
func (s *State) SetNode(name string, rec NodeRecord, ok bool, cidrs []netip.Prefix) bool {
	changed := false
	old, had := s.nodes[name]
	switch {
	case ok && (!had || old != rec):
		s.nodes[name] = rec
		changed = true
	case !ok && had:
		delete(s.nodes, name)
		changed = true
	}
	if slices.Equal(s.podCIDRs[name], cidrs) {
		return changed
	}
	s.routeTo(s.podCIDRs, name, slices.Clone(cidrs))
	return true
}

// routeTo makes prefixes, and no longer those owned[node] held, the ones
// routed to node, and records them in owned. A prefix already routed to
// another node (a podCIDR the controller reused, a block another node's
// index now confirms) stays that node's: only its own node takes a
// route away.
func (s *State) routeTo(owned map[string][]netip.Prefix, node string, prefixes []netip.Prefix) {
	for _, p := range owned[node] {
		if s.routed[p] == node {
			delete(s.routed, p)
		}
	}
	for _, p := range prefixes {
		s.routed[p] = node
	}
	if len(prefixes) == 0 {
		delete(owned, node)
	} else {
		owned[node] = prefixes
	}
}

// Apply records one store key's new value (or deletion): a node record or
// an IPAM index; any other key is ignored. It returns whether anything
// that routing depends on changed, and an error for a value it could not
// decode (the key is then treated as absent).
func (s *State) Apply(key string, value []byte, deleted bool) (bool, error) {
	switch {
	case strings.HasPrefix(key, s.nodesPrefix):
		return s.applyNode(strings.TrimPrefix(key, s.nodesPrefix), value, deleted)
	case strings.HasPrefix(key, s.keys.Nodes()):
		return s.applyIndex(strings.TrimPrefix(key, s.keys.Nodes()), value, deleted)
	}
	return false, nil
}

func (s *State) applyNode(name string, value []byte, deleted bool) (bool, error) {
	old, had := s.nodes[name]
	if deleted {
		delete(s.nodes, name)
		return had, nil
	}
	var rec NodeRecord
	if err := json.Unmarshal(value, &rec); err != nil {
		delete(s.nodes, name)
		return had, err
	}
	rec.Name = name
	s.nodes[name] = rec
	return !had || old != rec, nil
}

// applyIndex records what node's IPAM index routes to it: its confirmed
// blocks and its published borrowed addresses (invariant I3 of the
// design: nothing else of a node is routed). A block an allocation
// writes changes no index, so allocations cause no event here.
func (s *State) applyIndex(node string, value []byte, deleted bool) (bool, error) {
	var blocks []netip.Prefix
	var addrs []netip.Addr
	var err error
	if !deleted {
		var x ipam.NodeIndex
		if err = json.Unmarshal(value, &x); err == nil {
			blocks, addrs = x.Routes()
		}
	}
	oldBlocks, oldAddrs := s.indexed[node], s.borrowed[node]
	s.routeTo(s.indexed, node, blocks)
	if len(addrs) == 0 {
		delete(s.borrowed, node)
	} else {
		s.borrowed[node] = addrs
	}
	return !slices.Equal(oldBlocks, blocks) || !slices.Equal(oldAddrs, addrs), err
}

// Snapshot copies the state for route.Compute.
func (s *State) Snapshot() *Snapshot {
	snap := &Snapshot{
		Nodes:    maps.Clone(s.nodes),
		Blocks:   maps.Clone(s.routed),
		Borrowed: map[netip.Addr]string{},
	}
	for node, addrs := range s.borrowed {
		for _, a := range addrs {
			snap.Borrowed[a] = node
		}
	}
	return snap
}

// HasNode reports whether node has a record.
func (s *State) HasNode(node string) bool {
	_, ok := s.nodes[node]
	return ok
}

// Node is node's record in the state, if it has one.
func (s *State) Node(node string) (NodeRecord, bool) {
	r, ok := s.nodes[node]
	return r, ok
}

// PodCIDRs are node's podCIDRs, as SetNode last recorded them.
func (s *State) PodCIDRs(node string) []netip.Prefix { return slices.Clone(s.podCIDRs[node]) }
