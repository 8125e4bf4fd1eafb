// Package kubeblocks is the agent's side of block IPAM on the Kubernetes
// API (model B): pools, blocks and one index per node are podnet.io
// objects. The node's plugins allocate through a unix socket the agent
// serves (ipam/store/agentsock), behind a cache, so that a steady-state
// allocation costs the API one block write.
//
//   - store.go: OpenStore, the store on the API with the agent's
//     credentials, and the seam where its HTTP transport will be counted.
//   - socket.go: Service ("ipam-socket"): seeds the pools, then serves
//     the socket, made again when it stops serving; a listen failure is
//     retried with backoff and one that lasts ends the agent. Store is the
//     same store through the socket's caches: the agent's own writers use
//     it, one write path per node. Its counts are exported as
//     podnet_agent_ipam_socket_*.
//   - poolevents.go: every DefaultPoolCheck the pools are read for
//     invalid ones (ipam.Allocator.InvalidPools), each said once per
//     revision with an InvalidIPPool Event on the IPPool (Config.Events).
//
// It does not route: the indexes reach the routes through
// source/kubeapi.
package kubeblocks
