package policy

import (
	"cmp"
	"slices"
)

// ClusterRuleMatch is one ClusterNetworkPolicy rule and what of it
// matched the connection.
type ClusterRuleMatch struct {
	Rule ClusterRuleRef
	// Peer is the index in the rule's from (ingress) or to (egress) of
	// the first peer that matches the remote end, or NoMatch; Every for
	// a broken rule that fails closed by denying everything.
	Peer int
	// Port is the index in the rule's protocols of the first entry that
	// matches: Every when it lists none, NoMatch when none matches.
	Port int
	// Broken is the rule's ClusterRule.Broken: why it fails closed.
	Broken string
}

// Matches reports whether the rule matches the connection: a peer and a
// protocol entry both match, and its Action applies.
func (m ClusterRuleMatch) Matches() bool { return m.Peer != NoMatch && m.Port != NoMatch }

// clusterOrder returns the indexes of s's valid ClusterPolicies of tier
// t in the order they are read: by priority, lower first, then by name.
// The API lets an implementation pick any order among policies of one
// priority (ClusterNetworkPolicySpec.priority: "the implementation can
// apply any of the matching policies"); podnet picks the name, so that
// the kernel and Decide agree and an answer never changes by chance.
func (s *Snapshot) clusterOrder(t Tier) []int {
	var idx []int
	for i := range s.ClusterPolicies {
		if p := &s.ClusterPolicies[i]; p.Tier == t && p.Invalid == "" {
			idx = append(idx, i)
		}
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		pa, pb := &s.ClusterPolicies[a], &s.ClusterPolicies[b]
		return cmp.Or(cmp.Compare(pa.Priority, pb.Priority), cmp.Compare(pa.Name, pb.Name))
	})
	return idx
}

// clusterTier reads tier t for pod in one direction: the first rule, in
// precedence order, that matches the connection (nil: none), and
// whether any policy of the tier selects the pod and has rules in that
// direction. Within a policy the rules' order is their precedence
// ("a rule that appears at the top of the ingress rules would take the
// highest precedence"). With detail not nil every rule read is appended
// to it.
func (s *Snapshot) clusterTier(t Tier, pod *Pod, ingress bool, remote Endpoint, remotePod, dstPod *Pod, proto Protocol, port uint16, detail *[]ClusterRuleMatch) (first *ClusterRuleRef, inScope bool) {
	for _, i := range s.clusterOrder(t) {
		p := &s.ClusterPolicies[i]
		rules := p.rules(ingress)
		if len(rules) == 0 || !s.podsSelect(&p.Subject, pod) {
			continue
		}
		inScope = true
		for j := range rules {
			m := s.clusterRuleMatch(p, j, &rules[j], remote, remotePod, dstPod, proto, port)
			if detail != nil {
				*detail = append(*detail, m)
			}
			if first == nil && m.Matches() {
				ref := m.Rule
				first = &ref
				if detail == nil {
					return first, true
				}
			}
		}
	}
	return first, inScope
}

func (s *Snapshot) clusterRuleMatch(p *ClusterPolicy, index int, r *ClusterRule, remote Endpoint, remotePod, dstPod *Pod, proto Protocol, port uint16) ClusterRuleMatch {
	m := ClusterRuleMatch{
		Rule: ClusterRuleRef{Policy: p.Name, Tier: p.Tier, Priority: p.Priority, Index: index, Name: r.Name, Action: r.Action},
		Peer: NoMatch, Port: NoMatch, Broken: r.Broken,
	}
	if r.Broken != "" {
		all, action := r.failClosed()
		m.Rule.Action = action
		if all {
			m.Peer, m.Port = Every, Every
		}
		return m
	}
	for i := range r.Peers {
		if s.clusterPeerMatches(&r.Peers[i], remote, remotePod) {
			m.Peer = i
			break
		}
	}
	m.Port = clusterPortMatch(r.Protocols, proto, port, dstPod)
	return m
}

// podsSelect reports whether ps selects pod: its namespace, which the
// snapshot must know (its labels are unknown otherwise), and its labels.
// Host-networked pods are never selected ("host-networked pods are not
// included"): findPod never returns one.
func (s *Snapshot) podsSelect(ps *PodsSelector, pod *Pod) bool {
	ns := s.findNamespace(pod.Namespace)
	return ns != nil && selects(&ps.Namespaces, ns.Labels) && (ps.Pods == nil || selects(ps.Pods, pod.Labels))
}

// clusterPeerMatches: a namespaces or pods peer matches pods only, by
// selector; a nodes peer the addresses of the nodes it selects; a
// networks peer any address in its CIDRs, pods' too ("cluster-internal
// traffic will be checked against the rule as well"); a domainNames peer
// nothing (podnet does not resolve names).
func (s *Snapshot) clusterPeerMatches(p *ClusterPeer, remote Endpoint, remotePod *Pod) bool {
	switch {
	case p.Pods != nil:
		return remotePod != nil && s.podsSelect(p.Pods, remotePod)
	case p.Nodes != nil:
		for i := range s.Nodes {
			n := &s.Nodes[i]
			if slices.Contains(n.IPs, remote.IP) && selects(p.Nodes, n.Labels) {
				return true
			}
		}
	case len(p.Networks) > 0:
		for _, pfx := range p.Networks {
			if pfx.Contains(remote.IP) {
				return true
			}
		}
	}
	return false
}

// clusterPortMatch: no protocols matches everything (Every: "If
// unspecified, protocol-specific attributes will not be used to match
// traffic"); otherwise the index of the first entry whose protocol and
// destination port match, or NoMatch. A named port matches the
// destination pod's container port of that name, on its protocol.
func clusterPortMatch(ps []ClusterProtocol, proto Protocol, port uint16, dstPod *Pod) int {
	if len(ps) == 0 {
		return Every
	}
	for i, p := range ps {
		if p.NamedPort == "" {
			if p.Protocol == proto && p.First <= port && port <= p.Last {
				return i
			}
			continue
		}
		if dstPod == nil {
			continue
		}
		for _, cp := range dstPod.Ports {
			if cp.Name == p.NamedPort && cp.Protocol == proto && cp.Port == port {
				return i
			}
		}
	}
	return NoMatch
}
