package policy

import (
	"fmt"
	"net/netip"
	"strings"
)

// IR is the compiled policy of a cluster (or of one node's pods): what a
// renderer writes as nftables. It is read-only; Rules are shared between
// pods, sets between rules.
//
// A pod missing from Pods is isolated in neither direction and no
// ClusterNetworkPolicy rule applies to it: its traffic is policy's
// business only as a peer. For a pod in Pods, each direction is read in
// tiers (Evaluate documents the exceptions that come first): the first
// Admin rule that matches accepts or denies, or passes; then, if the
// direction is Isolated, what one of its Rules allows is allowed and the
// rest denied; otherwise the first Baseline rule that matches accepts or
// denies (or passes), and what none matches is allowed.
type IR struct {
	Pods          []PodRules     // by Pod
	PeerSets      []PeerSet      // by Key
	CIDRSets      []CIDRSet      // by Key
	PortSets      []PortSet      // by Key
	NamedPortSets []NamedPortSet // by Key
	// Nodes are the nodes of the snapshot, by Name, for the rule that
	// traffic from a pod's own node is always allowed in.
	Nodes    []Node
	Problems []Problem

	// inc is what WithPodAddrs needs of the compile; nil in an IR that
	// Compile did not make.
	inc *incState
}

// PodRules is the policy of one isolated pod.
type PodRules struct {
	Pod     PodKey
	Node    string
	IPs     []netip.Addr
	Ingress Direction
	Egress  Direction
}

// Direction is a pod's policy for one direction.
type Direction struct {
	Isolated bool
	// IsolatedBy names the policies (namespace/name, sorted) that select
	// the pod for this direction.
	IsolatedBy []string
	// Rules are in policy order (namespace/name), then rule order. A rule
	// that can match nothing is left out.
	Rules []*Rule
	// Admin and Baseline are the ClusterNetworkPolicy rules of each tier
	// for this pod and direction, in the order they are read: by
	// priority, then policy name, then rule index. Every rule of every
	// policy that selects the pod is here, even one that can match
	// nothing: a direction with any is subject to the tiers (and so to
	// the exceptions for the pod itself and its node).
	Admin, Baseline []*TierRule
}

// TierRule is one ClusterNetworkPolicy rule as it applies to a pod: what
// it matches (Rule, whose Policy and Index are Ref's) and what it does.
// A rule podnet cannot read (ClusterRule.Broken) is here as it fails
// closed: an Accept that matches nothing, or a Deny of everything.
type TierRule struct {
	Rule
	Ref ClusterRuleRef
}

// Rule is one allow rule of one policy, as it applies to a pod. The
// remote end is the source for ingress and the destination for egress.
// The rule matches a connection when
//
//	(remote in Peers) and (protocol . port in Ports)
//	or destination . protocol . port in one of NamedPortSets.
type Rule struct {
	Policy string // namespace/name
	Index  int    // in spec.ingress or spec.egress

	// AllPeers: the rule names no peers, so every address matches.
	// Otherwise the remote address must be in one of PeerSets or CIDRSets.
	AllPeers bool
	PeerSets []string
	CIDRSets []string

	// AllPorts: the rule names no ports, so every protocol and port
	// matches. Otherwise protocol . port must be in PortSet (empty: no
	// numeric port; an ingress rule's named ports are already resolved
	// on the pod into it).
	AllPorts bool
	PortSet  string

	// NamedPortSets carry an egress rule's named ports: the peers' own
	// addresses with the port the name has on each of them, the peer
	// condition already applied.
	NamedPortSets []string
}

// PeerSet holds the addresses of the pods a selector pair selects, or
// of the nodes a node selector selects. Key spells the selectors:
// "ns=<namespace>;pods=<selector>" for a podSelector alone (the policy's
// namespace), "nss=<selector>;pods=<selector>" with a namespaceSelector
// (and for ClusterNetworkPolicy's namespaces and pods peers),
// "nodes=<selector>" for a nodes peer; "*" selects all.
type PeerSet struct {
	Key    string
	V4, V6 []netip.Addr
}

// CIDRSet is an ipBlock: Key is "<cidr>[ except <cidr>...]", V4 or V6
// the exact prefixes of the CIDR minus its excepts.
type CIDRSet struct {
	Key    string
	V4, V6 []netip.Prefix
}

// PortSet is the numeric ports of a rule: Key is the canonical list
// ("tcp/80,tcp/8000-8080,udp/53"), Ranges sorted and merged.
type PortSet struct {
	Key    string
	Ranges []PortRange
}

// PortRange is the ports First..Last of one protocol.
type PortRange struct {
	Protocol    Protocol
	First, Last uint16
}

// NamedPortSet is a named port of an egress rule resolved on each of the
// rule's peers of one kind: Key is "<peer key> port <proto>/<name>" (the
// peer key "*" for all destinations), the elements destination .
// protocol . port.
type NamedPortSet struct {
	Key    string
	V4, V6 []PortElem
}

// PortElem is one element of a NamedPortSet.
type PortElem struct {
	Addr     netip.Addr
	Protocol Protocol
	Port     uint16
}

// Problem is a part of a policy that the API server should have refused;
// it matches nothing.
type Problem struct {
	Policy string // namespace/name
	Field  string // e.g. spec.ingress[0].from[1].ipBlock
	Detail string
}

func (p Problem) String() string { return fmt.Sprintf("%s: %s: %s", p.Policy, p.Field, p.Detail) }

func portSetKey(ranges []PortRange) string {
	var b strings.Builder
	for i, r := range ranges {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strings.ToLower(r.Protocol.String()))
		fmt.Fprintf(&b, "/%d", r.First)
		if r.Last != r.First {
			fmt.Fprintf(&b, "-%d", r.Last)
		}
	}
	return b.String()
}
