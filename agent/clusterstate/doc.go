// Package clusterstate is what the agent knows of the cluster: every
// node's record (underlay address, VTEP MAC and IP, underlay link-local
// IPv6), the prefixes routed to each node as a whole (the confirmed
// blocks of its IPAM index, or in the node-CIDR model its podCIDRs), and
// the addresses nodes borrowed from other nodes' blocks.
//
// The source of the datastore model fills it; the route service reads
// snapshots of it and does not know which datastore filled it.
//
//   - record.go: NodeRecord (the value under nodes/<name>), the VTEP MAC
//     scheme, the node keys, Snapshot (what route.Compute reads).
//   - state.go: State, the decoded contents: Apply for store keys,
//     SetNode for what the Kubernetes API says of one node.
//   - view.go: View, the current State shared between the source (which
//     writes it) and the services (which read it), with a Changed signal.
//
// VTEP scheme: a node's VTEP IP is its underlay address and its VTEP MAC
// is derived from a hash of its name (locally administered, unicast), so
// both are known to every node from the record alone and survive
// restarts unchanged.
//
// It does no I/O.
package clusterstate
