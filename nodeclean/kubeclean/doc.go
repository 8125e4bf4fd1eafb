// Package kubeclean removes what podnet keeps of one node in the
// Kubernetes API, for `podnet uninstall --datastore kubernetes`: the
// Node's podnet.io/ annotations (the agent's registration,
// agent/source/kubeapi), and with block IPAM on the API the node's
// IPAMNode, its addresses and its blocks' affinity, as `podnet ipam node
// rm --release-addresses` does (ipam.Allocator.RemoveNode).
//
// What it sends is exactly what the uninstall DaemonSet's ClusterRole
// grants (deploy/kubernetes/uninstall/rbac.yaml): get and patch of the
// Node; get, update and delete of IPAMNodes and IPAMBlocks. It deletes no
// Node, pool, CRD or another node's object.
package kubeclean
