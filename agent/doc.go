// Package agent is podnet's node agent: it makes pods on different nodes
// reach each other and keeps its node's part of the cluster in order.
//
// One Agent runs per node. It registers the node (nodes/<name>: underlay
// address, VTEP MAC and IP) under an etcd lease that it keeps alive, lists
// and then watches node records, block affinities and blocks, and programs
// for every remote node's confirmed blocks either a host-gw route (<block>
// via <node's underlay address>) or a VXLAN route (<block> via <remote
// VTEP> dev podnet.vxlan onlink, with one permanent neighbour and one FDB
// entry per remote node). Addresses a node borrowed from another node's
// block get a /32 route to the node that holds them; the node's own blocks
// get blackhole routes so that traffic to their unallocated addresses is
// dropped instead of following the default route.
//
// The datastore is where the node registers and the agent reads the
// cluster from: the store above (etcd; bbolt for one node), or with
// Config.Kube the Kubernetes API, for the node-CIDR model. There the
// node's registration is its own Node's podnet.io/ annotations (underlay
// address, VTEP MAC, underlay link-local IPv6), patched only when they
// differ; a Node informer gives every node's record (its annotations,
// else its InternalIP) and its spec.podCIDRs, which take the place of
// confirmed blocks: routed to like them, blackholed on their own node.
// No object per pod exists in the API: each node hands out its pods'
// addresses from its podCIDRs in a bbolt file of its own, and the agent
// installs the config naming them once they are known (NodeCIDRInstall).
// Both datastores fill the same clusterState, and desired.go does not
// know which one did.
//
// The responsibilities are split by file:
//
//   - desired.go: pure. From node records, confirmed affinities and
//     borrowed addresses it computes the routes, neighbours and FDB
//     entries this node should have. No I/O; unit-tested without root.
//   - program.go, vxlan.go: netlink. Diff the desired set against what
//     the kernel holds and change only the difference. Every route the
//     agent makes carries route protocol 97 (RouteProtocol), so a
//     reconcile from scratch finds and removes the stale ones and never
//     touches a route it did not make; neighbours and FDB entries live on
//     podnet.vxlan, which only the agent owns.
//   - registry.go: the node record and its lease.
//   - watch.go, storesource.go: List then Watch from the list's
//     revision; on a compacted or broken watch, list again and resync.
//   - kube.go, kuberegistry.go, kubenode.go: the Kubernetes datastore:
//     a core/v1 client for nodes alone, the Node informer, the
//     annotations; kubenode.go's Node-to-record conversion is pure.
//   - nodecidr.go: the node-CIDR install, rewritten when podCIDRs change.
//   - install.go, gc.go, metrics.go, server.go: plugin and config install
//     once ready, IPAM GC of this node's leaked addresses, Prometheus
//     metrics, /metrics /healthz /readyz.
//
// VTEP scheme: a node's VTEP IP is its underlay address and its VTEP MAC
// is derived from a hash of its name (locally administered, unicast), so
// both are known to every node from the record alone and survive restarts
// unchanged. The VTEP IP is only the next hop of the onlink routes on
// podnet.vxlan and the key of its neighbour entries; the device itself has
// no address, so host-originated traffic to remote pods leaves with the
// underlay address as source and the replies come back over the underlay.
//
// IPv6 pods ride the same IPv4 underlay. In host-gw their blocks go via
// the remote node's underlay link-local address (published in its record
// as linkLocal6) on the underlay interface; over VXLAN via the remote
// VTEP's link-local address, the modified EUI-64 of its VTEP MAC, with a
// permanent IPv6 neighbour entry for it on podnet.vxlan. A node with no
// IPv6 on its underlay has no linkLocal6: in auto mode its IPv6 blocks go
// over VXLAN even when it is on-link, in host-gw mode they are not routed.
//
// On exit the agent leaves routes, neighbours, FDB entries and the VXLAN
// device in place, so pods keep working while it restarts; the next start
// reconciles from scratch.
//
// The agent never switches the calling thread's namespace except through
// netns.Do, and never execs a process.
package agent
