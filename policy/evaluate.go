package policy

import (
	"net/netip"
	"slices"
)

// Evaluator answers connection questions from an IR alone, by address,
// as the kernel rules rendered from it will: the isolated pod is found by
// its address, peers by set membership. It exists to check Compile
// against Decide.
type Evaluator struct {
	ir     *IR
	pods   map[netip.Addr]*PodRules
	peers  map[string]map[netip.Addr]bool
	cidrs  map[string][]netip.Prefix
	ports  map[string][]PortRange
	named  map[string]map[PortElem]bool
	nodeIP map[string]map[netip.Addr]bool
}

// NewEvaluator indexes ir.
func NewEvaluator(ir *IR) *Evaluator {
	e := &Evaluator{
		ir:     ir,
		pods:   map[netip.Addr]*PodRules{},
		peers:  map[string]map[netip.Addr]bool{},
		cidrs:  map[string][]netip.Prefix{},
		ports:  map[string][]PortRange{},
		named:  map[string]map[PortElem]bool{},
		nodeIP: map[string]map[netip.Addr]bool{},
	}
	for i := range ir.Pods {
		for _, ip := range ir.Pods[i].IPs {
			e.pods[ip] = &ir.Pods[i]
		}
	}
	for _, s := range ir.PeerSets {
		m := map[netip.Addr]bool{}
		for _, ip := range slices.Concat(s.V4, s.V6) {
			m[ip] = true
		}
		e.peers[s.Key] = m
	}
	for _, s := range ir.CIDRSets {
		e.cidrs[s.Key] = slices.Concat(s.V4, s.V6)
	}
	for _, s := range ir.PortSets {
		e.ports[s.Key] = s.Ranges
	}
	for _, s := range ir.NamedPortSets {
		m := map[PortElem]bool{}
		for _, el := range slices.Concat(s.V4, s.V6) {
			m[el] = true
		}
		e.named[s.Key] = m
	}
	for _, n := range ir.Nodes {
		m := map[netip.Addr]bool{}
		for _, ip := range n.IPs {
			m[ip] = true
		}
		e.nodeIP[n.Name] = m
	}
	return e
}

// Evaluate is NewEvaluator(ir).Evaluate(src, dst, proto, port).
func Evaluate(ir *IR, src, dst netip.Addr, proto Protocol, port uint16) Decision {
	return NewEvaluator(ir).Evaluate(src, dst, proto, port)
}

// Evaluate decides the connection src -> dst, protocol proto, destination
// port port (0 for protocols without ports). In each direction that is
// isolated or has ClusterNetworkPolicy rules it checks, in order: the pod
// talking to itself; for ingress, a source address of the pod's own
// node; the Admin rules; the NetworkPolicy rules if isolated, else the
// Baseline rules.
func (e *Evaluator) Evaluate(src, dst netip.Addr, proto Protocol, port uint16) Decision {
	src, dst = src.Unmap(), dst.Unmap()
	sp, dp := e.pods[src], e.pods[dst]
	var eg, in Verdict
	if sp != nil && sp.Egress.InScope() {
		eg = e.direction(&sp.Egress, sp == dp, false, dst, dst, proto, port)
	}
	if dp != nil && dp.Ingress.InScope() {
		fromNode := e.nodeIP[dp.Node][src]
		in = e.direction(&dp.Ingress, sp == dp, fromNode, src, dst, proto, port)
	}
	return decision(eg, in)
}

// InScope reports whether any tier has something to say about the
// direction.
func (d *Direction) InScope() bool {
	return d.Isolated || len(d.Admin) > 0 || len(d.Baseline) > 0
}

func (e *Evaluator) direction(d *Direction, self, fromNode bool, remote, dst netip.Addr, proto Protocol, port uint16) Verdict {
	v := Verdict{IsolatedBy: d.IsolatedBy}
	switch {
	case self:
		v.Reason = Self
		return v
	case fromNode:
		v.Reason = LocalNode
		return v
	}
	if r := e.firstMatch(d.Admin, remote, dst, proto, port); r != nil {
		v.Admin = r
		switch r.Action {
		case Accept:
			v.Reason = AcceptedByAdmin
			return v
		case Deny:
			v.Reason = DeniedByAdmin
			return v
		}
	}
	if !d.Isolated {
		v.Reason = NotIsolated
		if r := e.firstMatch(d.Baseline, remote, dst, proto, port); r != nil {
			v.Baseline = r
			switch r.Action {
			case Accept:
				v.Reason = AcceptedByBaseline
			case Deny:
				v.Reason = DeniedByBaseline
			}
		}
		return v
	}
	for _, r := range d.Rules {
		if e.ruleMatches(r, remote, dst, proto, port) {
			v.AllowedBy = append(v.AllowedBy, RuleRef{r.Policy, r.Index})
		}
	}
	v.Reason = Denied
	if len(v.AllowedBy) > 0 {
		v.Reason = AllowedByRule
		slices.SortFunc(v.AllowedBy, compareRuleRefs)
		v.AllowedBy = slices.Compact(v.AllowedBy)
	}
	return v
}

// firstMatch returns the first of a tier's rules that matches, or nil.
func (e *Evaluator) firstMatch(rules []*TierRule, remote, dst netip.Addr, proto Protocol, port uint16) *ClusterRuleRef {
	for _, r := range rules {
		if e.ruleMatches(&r.Rule, remote, dst, proto, port) {
			ref := r.Ref
			return &ref
		}
	}
	return nil
}

func (e *Evaluator) ruleMatches(r *Rule, remote, dst netip.Addr, proto Protocol, port uint16) bool {
	el := PortElem{dst, proto, port}
	for _, k := range r.NamedPortSets {
		if e.named[k][el] {
			return true
		}
	}
	peer := r.AllPeers
	for _, k := range r.PeerSets {
		peer = peer || e.peers[k][remote]
	}
	for _, k := range r.CIDRSets {
		peer = peer || inPrefixes(e.cidrs[k], remote)
	}
	if !peer {
		return false
	}
	if r.AllPorts {
		return true
	}
	for _, pr := range e.ports[r.PortSet] {
		if pr.Protocol == proto && pr.First <= port && port <= pr.Last {
			return true
		}
	}
	return false
}
