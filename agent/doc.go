// Package agent is podnet's node agent: it makes pods on different nodes
// reach each other and keeps its node's part of the cluster in order.
//
// This package is only the orchestration. Config chooses one datastore
// model; New builds that model's source of cluster state and the
// services; Run runs them together (an errgroup): any one's failure ends
// Run with its error, named, and the others stop, so that the pod is
// restarted. Each service has a readiness; /readyz (server.go) names
// every service with its own ("routes: ok", "ipam-socket: not ready:
// ..."), and fails while one is not ready.
//
// The parts, each a package (one room per question):
//
//   - clusterstate: what the agent knows of the cluster (node records,
//     routed prefixes, borrowed addresses), filled by the source and
//     read by the route service. Where a Node's record is defined.
//   - source/kvstore: the etcd (or single-node bbolt) datastore: the node
//     record under a lease, List then Watch of node records and IPAM
//     indexes. Where a store event enters.
//   - source/kubeapi: the Kubernetes API datastore: the node's
//     registration as annotations of its own Node, the Node informer (and
//     the IPAMNode informer with block IPAM). Where a Node event enters.
//   - route: where a route is decided (Compute, pure) and where it is
//     programmed (Programmer, netlink: routes, the VXLAN device, its
//     neighbours and FDB entries), and the service that reconciles.
//   - cniinstall: install of the plugins and the network config, and in
//     the node-CIDR model its rewrite for the node's podCIDRs.
//   - kubeblocks: block IPAM on the API (model B): its store, the pools'
//     seeding and the IPAM socket the node's plugins allocate through.
//   - ipamgc: IPAM GC of this node's leaked addresses, and the release
//     records DELs left when the store was unreachable.
//   - noderemoval: removal of the IPAM of deleted Nodes (model B).
//   - netpol: NetworkPolicy for the node's pods in nftables (with
//     NetworkPolicy set, the Kubernetes datastore only): its own
//     informers of NetworkPolicies, Namespaces, Pods and the node's Node,
//     and CNI ADD's first-packet handshake (Admit, served on a unix
//     socket by Admission, the policy-socket service).
//
// The models, and what runs in each:
//
//	datastore        source          services
//	etcd / bbolt     kvstore         routes, install, ipam-gc
//	API, node CIDR   kubeapi         routes, install (node-CIDR), ipam-gc (node-local bbolt)
//	API, blocks      kubeapi+index   routes, ipam-socket, install, ipam-gc, node-removal
//
// With the Kubernetes datastore, Config.NetworkPolicy adds network-policy
// (off by default until CNI ADD waits for a selected pod's rules); the
// install then waits for its first apply.
//
// With block IPAM the agent's own IPAM writers (GC, release records,
// node removal, pool seeding) write through the store the socket serves
// (kubeblocks.Service.Store), so that the node has one write path and
// the socket's cache sees every write.
//
// On exit the agent leaves routes, neighbours, FDB entries and the VXLAN
// device in place, so pods keep working while it restarts; the next start
// reconciles from scratch. It never switches the calling thread's
// namespace except through netns.Do, and never execs a process.
//
// Files: agent.go (Config, New, Run, the services' list), server.go
// (/metrics, /healthz, /readyz), metrics.go (the registry).
package agent
