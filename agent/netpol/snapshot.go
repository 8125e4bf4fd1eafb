package netpol

import (
	"net/netip"
	"slices"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/podnet/podnet/policy"
)

// contents are the informers' caches at one moment, as their List
// returns them.
type contents struct {
	policies, namespaces, pods, nodes []any
	// clusterPolicies is empty while ClusterNetworkPolicies are not
	// followed (their CRD is not installed).
	clusterPolicies []any
}

// snapshotInput is what a snapshot is made of besides the caches.
type snapshotInput struct {
	// node is this node's name.
	node string
	// localIPs are the addresses the node has in its network namespace,
	// added to its Node's: traffic from any of them is "from the pod's
	// own node" (the node picks a source address among all of its own,
	// for a kubelet probe as for anything else).
	localIPs []netip.Addr
	// admitted are the addresses CNI ADD reported (Admit) for pods whose
	// status has none yet.
	admitted map[policy.PodKey][]netip.Addr
}

// buildSnapshot makes the Snapshot Compile reads. It also returns the
// admitted pods whose addresses are no longer needed: the pod is gone
// from the cache, or its status has addresses of its own (the API is the
// truth once it has them).
func buildSnapshot(c contents, in snapshotInput) (*policy.Snapshot, []policy.PodKey) {
	s := &policy.Snapshot{
		Policies:   make([]*networkingv1.NetworkPolicy, 0, len(c.policies)),
		Namespaces: make([]policy.Namespace, 0, len(c.namespaces)),
		Pods:       make([]policy.Pod, 0, len(c.pods)),
		Nodes:      make([]policy.Node, 0, len(c.nodes)+1),
	}
	for _, o := range c.policies {
		if np, ok := o.(*networkingv1.NetworkPolicy); ok {
			s.Policies = append(s.Policies, np)
		}
	}
	for _, o := range c.clusterPolicies {
		if p, ok := o.(*clusterPolicyObj); ok {
			s.ClusterPolicies = append(s.ClusterPolicies, p.ClusterPolicy)
		}
	}
	for _, o := range c.namespaces {
		if n, ok := o.(*namespaceObj); ok {
			s.Namespaces = append(s.Namespaces, n.Namespace)
		}
	}
	var stale []policy.PodKey
	s.Pods, stale = snapshotPods(s.Pods, c.pods, in.admitted)
	s.Nodes = snapshotNodes(s.Nodes, c.nodes, in)
	return s, stale
}

// snapshotPods appends the cached pods to pods, each pod Admit was told
// of and that has no addresses of its own with Admit's; stale are the
// admitted pods whose addresses are no longer needed (the status has
// them, or the pod is gone).
func snapshotPods(pods []policy.Pod, objs []any, admitted map[policy.PodKey][]netip.Addr) (_ []policy.Pod, stale []policy.PodKey) {
	var seen map[policy.PodKey]bool
	if len(admitted) > 0 {
		seen = map[policy.PodKey]bool{}
	}
	for _, o := range objs {
		p, ok := o.(*podObj)
		if !ok {
			continue
		}
		pod := p.Pod // a shallow copy: Compile modifies nothing
		if ips, ok := admitted[pod.Key()]; ok {
			seen[pod.Key()] = true
			if len(pod.IPs) == 0 && !pod.HostNetwork {
				pod.IPs = ips
			} else {
				stale = append(stale, pod.Key())
			}
		}
		pods = append(pods, pod)
	}
	for k := range admitted {
		if !seen[k] {
			stale = append(stale, k)
		}
	}
	return pods, stale
}

// snapshotNodes appends the cached nodes to nodes. Every node is there
// for ClusterNetworkPolicy's nodes peers; this node's is there even
// before its Node is cached, with the addresses it has in its namespace
// added (the renderer's node sets read it).
func snapshotNodes(nodes []policy.Node, objs []any, in snapshotInput) []policy.Node {
	self := -1
	for _, o := range objs {
		if n, ok := o.(*nodeObj); ok {
			if n.Name == in.node {
				self = len(nodes)
			}
			nodes = append(nodes, n.Node) // shared: only self's IPs are copied before a change
		}
	}
	if self < 0 {
		self = len(nodes)
		nodes = append(nodes, policy.Node{Name: in.node})
	}
	n := &nodes[self]
	n.IPs = slices.Clone(n.IPs)
	for _, ip := range in.localIPs {
		if ip = ip.Unmap().WithZone(""); !slices.Contains(n.IPs, ip) {
			n.IPs = append(n.IPs, ip)
		}
	}
	return nodes
}
