// Package noderemoval frees the IPAM of deleted Nodes in block IPAM on
// the API: a node is departed while it has an IPAMNode and no Node, and
// once departed for DeletedNodeGrace any live agent's sweep releases its
// blocks and addresses and drops its index (ipam.Allocator.RemoveNode,
// every step a compare-and-swap, so agents sweeping at once are safe).
//
//   - sweep.go: which departed nodes are due, and the service
//     ("node-removal") that sweeps every minute.
//
// It never removes a node that has a Node.
package noderemoval
