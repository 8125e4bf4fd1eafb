package policy

import (
	"fmt"
	"slices"

	networkingv1 "k8s.io/api/networking/v1"
)

// compiledCluster is one ClusterPolicy with its selectors, peers and
// ports compiled once for all the pods it selects.
type compiledCluster struct {
	p               *ClusterPolicy
	nsSel, podSel   selector
	in, eg          []compiledRule
	inBroken, egBkn []bool
	egRules         []*TierRule // the same for every selected pod
	inRules         map[clusterRuleKey]*TierRule
	ingress, egress bool
}

// clusterRuleKey shares an ingress rule between the pods on which its
// named ports resolve alike.
type clusterRuleKey struct {
	rule  int
	ports string
}

// compileClusterPolicies adds the tiers of the snapshot's
// ClusterPolicies to the pods' builders: each tier's policies in the
// order Decide reads them, each selecting pods as Decide does (a
// namespace the snapshot knows, no hostNetwork pod).
func (c *compiler) compileClusterPolicies(opts Options, pods map[int]*podBuilder) {
	for i := range c.s.ClusterPolicies {
		p := &c.s.ClusterPolicies[i]
		if p.Invalid != "" {
			c.clusterProblem(p, "spec", p.Invalid)
		}
	}
	var selected []int
	for _, t := range []Tier{AdminTier, BaselineTier} {
		for _, i := range c.s.clusterOrder(t) {
			cc := c.compileClusterHead(&c.s.ClusterPolicies[i])
			if cc == nil || (!cc.ingress && !cc.egress) {
				continue
			}
			// The pods its subject picks first: one that picks none of
			// the node's pods needs no peers compiled.
			selected = selected[:0]
			for _, ns := range c.nsNames {
				if !cc.nsSel.matches(c.nsLabels[ns]) {
					continue
				}
				for _, pi := range c.podsByNs[ns] {
					pod := &c.s.Pods[pi]
					if (opts.Node == "" || pod.Node == opts.Node) && cc.podSel.matches(pod.Labels) {
						selected = append(selected, pi)
					}
				}
			}
			if len(selected) == 0 {
				continue
			}
			c.compileClusterRules(cc)
			for _, pi := range selected {
				pod := &c.s.Pods[pi]
				pb := pods[pi]
				if pb == nil {
					pb = &podBuilder{}
					pods[pi] = pb
				}
				for j := range cc.in {
					pb.ingress.addTier(t, c.clusterIngressRule(cc, j, pod))
				}
				for j := range cc.eg {
					pb.egress.addTier(t, c.clusterEgressRule(cc, j))
				}
			}
		}
	}
}

func (d *Direction) addTier(t Tier, r *TierRule) {
	if t == AdminTier {
		d.Admin = append(d.Admin, r)
	} else {
		d.Baseline = append(d.Baseline, r)
	}
}

func (c *compiler) clusterProblem(p *ClusterPolicy, field, detail string) {
	c.problems = append(c.problems, Problem{Policy: p.Name, Field: field, Detail: detail})
}

// compileClusterHead compiles a ClusterPolicy's subject: which pods it
// applies to; nil when the subject does not compile (a problem).
func (c *compiler) compileClusterHead(p *ClusterPolicy) *compiledCluster {
	cc := &compiledCluster{p: p, inRules: map[clusterRuleKey]*TierRule{}, ingress: len(p.Ingress) > 0, egress: len(p.Egress) > 0}
	var err error
	if cc.nsSel, err = compileSelector(&p.Subject.Namespaces); err != nil {
		c.clusterProblem(p, "spec.subject", err.Error())
		return nil
	}
	cc.podSel = selector{} // every pod
	if p.Subject.Pods != nil {
		if cc.podSel, err = compileSelector(p.Subject.Pods); err != nil {
			c.clusterProblem(p, "spec.subject", err.Error())
			return nil
		}
	}
	return cc
}

// compileClusterRules compiles cc's rules: only for a policy whose
// subject picks pods of the compile's node, so a rule's problem is
// reported by the nodes it applies to.
func (c *compiler) compileClusterRules(cc *compiledCluster) {
	p := cc.p
	for j := range p.Ingress {
		r, broken := c.compileClusterRule(p, fmt.Sprintf("spec.ingress[%d]", j), j, &p.Ingress[j])
		cc.in, cc.inBroken = append(cc.in, r), append(cc.inBroken, broken)
	}
	for j := range p.Egress {
		r, broken := c.compileClusterRule(p, fmt.Sprintf("spec.egress[%d]", j), j, &p.Egress[j])
		cc.eg, cc.egBkn = append(cc.eg, r), append(cc.egBkn, broken)
	}
	cc.egRules = make([]*TierRule, len(cc.eg))
}

// compileClusterRule compiles a rule's peers and protocols into the form
// NetworkPolicy's rules have: pods and namespaces peers are selector
// pairs, networks CIDR blocks, nodes a node selector; a named port,
// which names no protocol, is that name on each protocol (a pod's port
// names are unique). broken reports a rule that fails closed.
func (c *compiler) compileClusterRule(p *ClusterPolicy, field string, index int, r *ClusterRule) (cr compiledRule, broken bool) {
	cr.index = index
	if r.Broken != "" {
		c.clusterProblem(p, field, r.Broken)
		return cr, true
	}
	for i := range r.Peers {
		peer := &r.Peers[i]
		pf := fmt.Sprintf("%s.peers[%d]", field, i)
		switch {
		case peer.Pods != nil:
			nsSel, err := compileSelector(&peer.Pods.Namespaces)
			if err != nil {
				c.clusterProblem(p, pf, err.Error())
				return cr, true
			}
			podSel := selector{}
			if peer.Pods.Pods != nil {
				if podSel, err = compileSelector(peer.Pods.Pods); err != nil {
					c.clusterProblem(p, pf, err.Error())
					return cr, true
				}
			}
			cr.peers = append(cr.peers, peerRef{key: "nss=" + keyOrStar(nsSel.key) + ";pods=" + keyOrStar(podSel.key), nsSel: &nsSel, podSel: podSel})
		case peer.Nodes != nil:
			sel, err := compileSelector(peer.Nodes)
			if err != nil {
				c.clusterProblem(p, pf, err.Error())
				return cr, true
			}
			cr.peers = append(cr.peers, peerRef{key: "nodes=" + keyOrStar(sel.key), nodeSel: &sel})
		case len(peer.Networks) > 0:
			for _, n := range peer.Networks {
				b, err := compileIPBlock(&networkingv1.IPBlock{CIDR: n.String()})
				if err != nil {
					c.clusterProblem(p, pf, err.Error())
					return cr, true
				}
				cr.peers = append(cr.peers, peerRef{key: b.key, block: &b})
			}
		case len(peer.DomainNames) > 0:
			c.clusterProblem(p, pf, "domainNames are not supported: the peer matches nothing")
		}
	}
	cr.ports = clusterPorts(r.Protocols)
	return cr, false
}

func clusterPorts(ps []ClusterProtocol) portSpec {
	if len(ps) == 0 {
		return portSpec{all: true}
	}
	var out portSpec
	for _, p := range ps {
		if p.NamedPort == "" {
			out.ranges = append(out.ranges, PortRange{p.Protocol, p.First, p.Last})
			continue
		}
		for _, proto := range []Protocol{TCP, UDP, SCTP} {
			out.named = append(out.named, portName{proto, p.NamedPort})
		}
	}
	out.ranges = normalizeRanges(out.ranges)
	slices.SortFunc(out.named, comparePortNames)
	out.named = slices.Compact(out.named)
	return out
}

func (cc *compiledCluster) ref(ingress bool, j int) ClusterRuleRef {
	rules := cc.p.rules(ingress)
	r := &rules[j]
	ref := ClusterRuleRef{Policy: cc.p.Name, Tier: cc.p.Tier, Priority: cc.p.Priority, Index: j, Name: r.Name, Action: r.Action}
	if r.Broken != "" {
		_, ref.Action = r.failClosed()
	}
	return ref
}

// brokenRule is a broken rule as it fails closed.
func brokenRule(ref ClusterRuleRef) *TierRule {
	t := &TierRule{Rule: Rule{Policy: ref.Policy, Index: ref.Index}, Ref: ref}
	if ref.Action == Deny {
		t.AllPeers, t.AllPorts = true, true
	}
	return t
}

// clusterIngressRule returns ingress rule j of cc as it applies to pod:
// named ports resolve on pod, the destination.
func (c *compiler) clusterIngressRule(cc *compiledCluster, j int, pod *Pod) *TierRule {
	ref := cc.ref(true, j)
	if cc.inBroken[j] {
		key := clusterRuleKey{j, "broken"}
		if cc.inRules[key] == nil {
			cc.inRules[key] = brokenRule(ref)
		}
		return cc.inRules[key]
	}
	cr := &cc.in[j]
	ranges := cr.ports.resolveOn(pod)
	key := clusterRuleKey{j, portSetKey(ranges)}
	if r, ok := cc.inRules[key]; ok {
		return r
	}
	r := &TierRule{Rule: Rule{Policy: ref.Policy, Index: j, AllPorts: cr.ports.all}, Ref: ref}
	c.fillPeers(&r.Rule, cr)
	r.PortSet = c.portSet(ranges, key.ports)
	cc.inRules[key] = r
	return r
}

// clusterEgressRule returns egress rule j of cc, the same for every pod:
// a named port resolves on each destination pod of the rule's peers.
func (c *compiler) clusterEgressRule(cc *compiledCluster, j int) *TierRule {
	if r := cc.egRules[j]; r != nil {
		return r
	}
	ref := cc.ref(false, j)
	if cc.egBkn[j] {
		cc.egRules[j] = brokenRule(ref)
		return cc.egRules[j]
	}
	cr := &cc.eg[j]
	r := &TierRule{Rule: Rule{Policy: ref.Policy, Index: j, AllPorts: cr.ports.all}, Ref: ref}
	c.fillPeers(&r.Rule, cr)
	r.PortSet = c.portSet(cr.ports.ranges, portSetKey(cr.ports.ranges))
	for _, n := range cr.ports.named {
		for i := range cr.peers {
			r.NamedPortSets = append(r.NamedPortSets, c.namedSet(&cr.peers[i], n))
		}
	}
	slices.Sort(r.NamedPortSets)
	r.NamedPortSets = slices.Compact(r.NamedPortSets)
	cc.egRules[j] = r
	return r
}
