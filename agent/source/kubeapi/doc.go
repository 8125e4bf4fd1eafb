// Package kubeapi is the agent's source of cluster state when the
// datastore is the Kubernetes API. Every Node (and IPAMNode) event enters
// the agent here.
//
// The node registers by annotating its own Node (podnet.io/ annotations:
// underlay address, VTEP MAC, underlay link-local IPv6), patched only
// when they differ. A Node informer gives every node's record (its
// annotations, else its InternalIP) and, in the node-CIDR model, its
// spec.podCIDRs, which are routed as confirmed blocks are. With block
// IPAM on the API an IPAMNode informer gives each node's IPAM index
// instead, applied as an etcd store's would be.
//
//   - source.go: Source: the clients (core/v1 for Nodes alone, dynamic
//     for IPAMNodes), every API request counted by verb and code
//     (CountRequests), the informers and their events.
//   - ipamnodes.go: the IPAMNode informer (block IPAM).
//   - node.go: pure: a Node to its record and podCIDRs, the annotations
//     and their patch, the informer's slimming transform.
//   - registry.go: keeps the annotations on this node's Node.
//
// It writes only this node's Node annotations.
package kubeapi
