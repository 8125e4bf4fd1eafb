// Package route is where the agent decides and programs this node's
// routes to other nodes' pods: host-gw routes (<block> via <node's
// underlay address>) or VXLAN routes (<block> via <remote VTEP> dev
// podnet.vxlan onlink, with one permanent neighbour and one FDB entry per
// remote node); a /32 (/128) to the node holding an address borrowed from
// another node's block; blackholes for this node's own blocks, so that
// traffic to their unallocated addresses is dropped.
//
//   - desired.go: where a route is decided. Compute is pure: from a
//     clusterstate.Snapshot it computes the routes, neighbours and FDB
//     entries this node should have. No I/O; unit-tested without root.
//   - program.go, vxlan.go: where a route is programmed. Programmer diffs
//     the desired set against what the kernel holds and changes only the
//     difference. Every route it makes carries route protocol 97
//     (RouteProtocol), so a reconcile from scratch finds and removes the
//     stale ones and never touches a route it did not make; neighbours and
//     FDB entries live on podnet.vxlan, which only the agent owns.
//   - underlay.go, mtu.go: the underlay interface, and the pods' MTU on it.
//   - mode.go: Mode (host-gw, vxlan, auto), VTEPLinkLocal6.
//   - service.go: the route service: Setup (underlay, forwarding, this
//     node's record), then a reconcile after every change of the view, at
//     least every resync interval, and with backoff after a failure.
//
// The VTEP IP is only the next hop of the onlink routes on podnet.vxlan
// and the key of its neighbour entries; the device itself has no address,
// so host-originated traffic to remote pods leaves with the underlay
// address as source and the replies come back over the underlay.
//
// IPv6 pods ride the same IPv4 underlay. In host-gw their blocks go via
// the remote node's underlay link-local address (its record's
// LinkLocal6) on the underlay interface; over VXLAN via the remote VTEP's
// link-local address, the modified EUI-64 of its VTEP MAC, with a
// permanent IPv6 neighbour entry for it on podnet.vxlan. A node with no
// IPv6 on its underlay has no LinkLocal6: in auto mode its IPv6 blocks go
// over VXLAN even when it is on-link, in host-gw mode they are not routed.
//
// It never reads a datastore: the view is its only input.
package route
