// Package kvstore is the agent's source of cluster state when the
// datastore is the IPAM store itself: etcd for a cluster, bbolt for one
// node.
//
//   - open.go, dial.go: Open, a store from a --store value (etcd://,
//     etcds://, bolt:).
//   - registry.go: this node's record under nodes/<name>, with etcd under
//     a lease the agent keeps alive (not revoked on exit, so a restart
//     within the TTL changes nothing for other nodes).
//   - watch.go: List then Watch from the list's revision, node records
//     and IPAM indexes (never blocks: an allocation causes no event); on
//     a compacted or broken watch, list again and resync.
//   - source.go: Source, the two together, filling a clusterstate.View.
//
// It does not program anything and does not allocate.
package kvstore
