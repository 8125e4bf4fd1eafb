package policy

import "strings"

// Explanation is Decide's answer with the detail a person asking "why"
// needs: every rule of the policies that isolate each side, and which of
// its peers and ports matched the connection.
type Explanation struct {
	Decision
	// EgressRules are the rules of the policies in Egress.IsolatedBy,
	// IngressRules those of Ingress.IsolatedBy, sorted by policy and
	// index. A policy without rules in that direction has none here.
	EgressRules, IngressRules []RuleMatch
	// EgressClusterRules and IngressClusterRules are the rules of the
	// ClusterNetworkPolicies that select the source (destination) pod,
	// in the order they are read: the Admin tier, then the Baseline
	// tier, each by priority, then name, then rule index. The first that
	// matches in a tier is the one the Verdict names.
	EgressClusterRules, IngressClusterRules []ClusterRuleMatch
}

// RuleMatch is one rule and what of it matched the connection.
type RuleMatch struct {
	Rule RuleRef
	// Peer is the index in the rule's from (ingress) or to (egress) of
	// the first peer that matches the remote end: Every when the rule
	// lists no peers, NoMatch when none matches.
	Peer int
	// Port is the index in the rule's ports of the first entry that
	// matches the protocol and port: Every when the rule lists none,
	// NoMatch when none matches.
	Port int
}

// Values of RuleMatch.Peer and Port that are no index.
const (
	// Every: the rule lists no peers (ports), so it matches every one.
	Every = -1
	// NoMatch: the rule lists peers (ports), and none matches.
	NoMatch = -2
)

// Allows reports whether the rule allows the connection: a peer and a
// port both match.
func (m RuleMatch) Allows() bool { return m.Peer != NoMatch && m.Port != NoMatch }

// namespace is the namespace of the rule's policy.
func (r RuleRef) namespace() string {
	ns, _, _ := strings.Cut(r.Policy, "/")
	return ns
}

// Explain is Decide with the detail of every rule it read (Explanation).
// Its Decision is Decide's, from the same code.
func Explain(s *Snapshot, src, dst Endpoint, proto Protocol, port uint16) Explanation {
	var e Explanation
	e.Decision = s.decide(src, dst, proto, port, &e)
	return e
}
