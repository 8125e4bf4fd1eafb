package policy

import (
	"cmp"
	"net/netip"
	"strconv"

	networkingv1 "k8s.io/api/networking/v1"
)

// Protocol is an IP protocol number, as nftables' meta l4proto sees it.
type Protocol uint8

// The protocols NetworkPolicy ports can name.
const (
	TCP  Protocol = 6
	UDP  Protocol = 17
	SCTP Protocol = 132
)

func (p Protocol) String() string {
	switch p {
	case TCP:
		return "TCP"
	case UDP:
		return "UDP"
	case SCTP:
		return "SCTP"
	}
	return strconv.Itoa(int(p))
}

// NamedPort is a container port that has a name, the only kind a
// NetworkPolicy can refer to by something other than its number.
type NamedPort struct {
	Name     string
	Protocol Protocol
	Port     uint16
}

// PodKey names a pod.
type PodKey struct {
	Namespace, Name string
}

func (k PodKey) String() string { return k.Namespace + "/" + k.Name }

// Compare orders keys by namespace, then name: IR.Pods' order.
func (k PodKey) Compare(o PodKey) int {
	return cmp.Or(cmp.Compare(k.Namespace, o.Namespace), cmp.Compare(k.Name, o.Name))
}

// Pod is what policy needs of a pod.
type Pod struct {
	Namespace string
	Name      string
	Labels    map[string]string
	// IPs are the pod's addresses, unmapped (an IPv4 address is never in
	// its IPv6-mapped form). A hostNetwork pod has none: its traffic is
	// its node's.
	IPs         []netip.Addr
	Node        string
	HostNetwork bool
	// Ports are the pod's named container ports.
	Ports []NamedPort
}

// Key returns the pod's namespace/name.
func (p *Pod) Key() PodKey { return PodKey{p.Namespace, p.Name} }

// policyPod reports whether policy applies to the pod at all: whether
// selectors can pick it as a peer and policies can isolate it. The
// Kubernetes documentation leaves hostNetwork pods undefined and names
// ignoring them the most common implementation; podnet ignores them.
func (p *Pod) policyPod() bool { return !p.HostNetwork }

// Namespace is what policy needs of a namespace.
type Namespace struct {
	Name   string
	Labels map[string]string
}

// Node is what policy needs of a node: its addresses, because traffic
// from a pod's own node is always allowed in (the API reference of
// NetworkPolicySpec.ingress).
type Node struct {
	Name string
	IPs  []netip.Addr
	// Labels are for ClusterNetworkPolicy's nodes peers.
	Labels map[string]string
}

// Snapshot is the cluster as policy sees it: the inputs of Compile and
// Decide. Nothing in it is modified by this package.
type Snapshot struct {
	Policies []*networkingv1.NetworkPolicy
	// ClusterPolicies are the ClusterNetworkPolicies, read with
	// ClusterPolicyFromAPI.
	ClusterPolicies []ClusterPolicy
	Namespaces      []Namespace
	Pods            []Pod
	Nodes           []Node
}

// Endpoint is one end of a connection: a pod (Pod set, IP one of its
// addresses) or an address that is no pod's (Pod zero): an external
// address, a node, a hostNetwork pod. Build one with EndpointFor.
type Endpoint struct {
	Pod PodKey
	IP  netip.Addr
}

func (e Endpoint) String() string {
	if e.Pod == (PodKey{}) {
		return e.IP.String()
	}
	return e.Pod.String() + "(" + e.IP.String() + ")"
}

// EndpointFor returns the endpoint that sends or receives with ip: the
// pod policy applies to that has the address, or else the bare address.
func (s *Snapshot) EndpointFor(ip netip.Addr) Endpoint {
	ip = ip.Unmap()
	for i := range s.Pods {
		p := &s.Pods[i]
		if !p.policyPod() {
			continue
		}
		for _, a := range p.IPs {
			if a == ip {
				return Endpoint{Pod: p.Key(), IP: ip}
			}
		}
	}
	return Endpoint{IP: ip}
}
