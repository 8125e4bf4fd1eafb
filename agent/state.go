package agent

import (
	"encoding/json"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/podnet/podnet/ipam"
)

// clusterState is the decoded store contents the agent routes from. It is
// owned by the watch loop; snapshot copies it for the reconcile loop.
type clusterState struct {
	keys        ipam.Keys
	nodesPrefix string
	nodes       map[string]NodeRecord
	// affinities: confirmed block -> node.
	affinities map[netip.Prefix]string
	// borrowed: per block, the addresses held by a node other than the
	// block's affine node.
	borrowed map[netip.Prefix]map[netip.Addr]string
	// podCIDRs: in the Kubernetes datastore, each Node's spec.podCIDRs,
	// which stand in affinities for confirmed blocks (see setNode).
	podCIDRs map[string][]netip.Prefix
}

func newClusterState(keys ipam.Keys, prefix string) *clusterState {
	return &clusterState{
		keys: keys, nodesPrefix: NodesPrefix(prefix),
		nodes: map[string]NodeRecord{}, affinities: map[netip.Prefix]string{},
		borrowed: map[netip.Prefix]map[netip.Addr]string{},
		podCIDRs: map[string][]netip.Prefix{},
	}
}

// setNode records everything the Kubernetes datastore says of one node at
// once: its record (none when ok is false) and its podCIDRs, which go
// into affinities as if each were a block confirmed to the node, so that
// Compute routes them (or blackholes this node's own) as it does blocks.
// It returns whether anything routing depends on changed.
func (s *clusterState) setNode(name string, rec NodeRecord, ok bool, cidrs []netip.Prefix) bool {
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
	for _, p := range s.podCIDRs[name] {
		// A CIDR already handed to another node (the controller reuses a
		// deleted node's) stays that node's.
		if s.affinities[p] == name {
			delete(s.affinities, p)
		}
	}
	for _, p := range cidrs {
		s.affinities[p] = name
	}
	if len(cidrs) == 0 {
		delete(s.podCIDRs, name)
	} else {
		s.podCIDRs[name] = slices.Clone(cidrs)
	}
	return true
}

// apply records one key's new value (or deletion). It returns whether
// anything that routing depends on changed, and an error for a value it
// could not decode (the key is then treated as absent).
func (s *clusterState) apply(key string, value []byte, deleted bool) (bool, error) {
	switch {
	case strings.HasPrefix(key, s.nodesPrefix):
		return s.applyNode(strings.TrimPrefix(key, s.nodesPrefix), value, deleted)
	case strings.HasPrefix(key, s.keys.Affinities()):
		return s.applyAffinity(key, value, deleted)
	case strings.HasPrefix(key, s.keys.Blocks()):
		return s.applyBlock(key, value, deleted)
	}
	return false, nil
}

func (s *clusterState) applyNode(name string, value []byte, deleted bool) (bool, error) {
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

func (s *clusterState) applyAffinity(key string, value []byte, deleted bool) (bool, error) {
	node, cidr, err := s.keys.ParseAffinityKey(key)
	if err != nil {
		return false, err
	}
	old, had := s.affinities[cidr]
	confirmed := false
	if !deleted {
		var a ipam.Affinity
		if err = json.Unmarshal(value, &a); err == nil {
			confirmed = a.State == ipam.AffinityConfirmed
		}
	}
	if !confirmed {
		// Only the affinity's own node may take the route away: a stale
		// key of another node for the same block must not.
		if had && old == node {
			delete(s.affinities, cidr)
			return true, err
		}
		return false, err
	}
	s.affinities[cidr] = node
	return !had || old != node, nil
}

func (s *clusterState) applyBlock(key string, value []byte, deleted bool) (bool, error) {
	cidr, err := s.keys.ParseBlockKey(key)
	if err != nil {
		return false, err
	}
	old := s.borrowed[cidr]
	var now map[netip.Addr]string
	if !deleted {
		var b ipam.Block
		if err = json.Unmarshal(value, &b); err == nil {
			now = borrowedIn(&b)
		}
	}
	if len(now) == 0 {
		delete(s.borrowed, cidr)
	} else {
		s.borrowed[cidr] = now
	}
	return !maps.Equal(old, now), err
}

// borrowedIn returns the addresses of b held by a node other than b's
// affine node.
func borrowedIn(b *ipam.Block) map[netip.Addr]string {
	owner, _ := strings.CutPrefix(b.Affinity, "host:")
	var out map[netip.Addr]string
	for ord, k := range b.Owners {
		if k <= 0 || k > len(b.Attributes) {
			continue
		}
		node := b.Attributes[k-1].Node
		if node == "" || node == owner {
			continue
		}
		if out == nil {
			out = map[netip.Addr]string{}
		}
		out[b.Addr(ord)] = node
	}
	return out
}

// snapshot copies the state for Compute.
func (s *clusterState) snapshot() *Snapshot {
	snap := &Snapshot{
		Nodes:    maps.Clone(s.nodes),
		Blocks:   maps.Clone(s.affinities),
		Borrowed: map[netip.Addr]string{},
	}
	for _, m := range s.borrowed {
		maps.Copy(snap.Borrowed, m)
	}
	return snap
}
