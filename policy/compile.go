package policy

import (
	"cmp"
	"fmt"
	"slices"

	networkingv1 "k8s.io/api/networking/v1"
)

// Options narrow what Compile computes.
type Options struct {
	// Node, when set, limits Pods to the pods on that node (the ones an
	// agent enforces for) and the sets to those their rules refer to.
	// Peers are still taken from the whole cluster.
	Node string
}

// Compile computes the IR of the snapshot's policies. It does not modify
// the snapshot and keeps no reference to its policies.
func Compile(s *Snapshot, opts Options) *IR {
	c := newCompiler(s)
	rules := c.compilePolicies(opts)
	c.compileClusterPolicies(opts, rules)
	ir := &IR{Problems: c.problems, Pods: c.podRules(rules)}
	c.fillSets(ir)
	for _, n := range s.Nodes {
		ir.Nodes = append(ir.Nodes, Node{Name: n.Name, IPs: sortedAddrs(slices.Clone(n.IPs))})
	}
	slices.SortFunc(ir.Nodes, func(a, b Node) int { return cmp.Compare(a.Name, b.Name) })
	ir.inc = c.incremental(opts)
	return ir
}

// compilePolicies compiles the NetworkPolicies, in namespace/name order,
// for the pods they select (of opts.Node, when set): by pod index.
func (c *compiler) compilePolicies(opts Options) map[int]*podBuilder {
	s := c.s
	policies := slices.Clone(s.Policies)
	slices.SortStableFunc(policies, func(a, b *networkingv1.NetworkPolicy) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	rules := map[int]*podBuilder{} // by pod index
	var selected []int
	for _, np := range policies {
		cp, ok := c.compileHead(np)
		if !ok || (!cp.ingress && !cp.egress) {
			continue
		}
		// The pods it selects first: a policy that selects none of the
		// node's pods needs no peers or ports compiled (on a node of a
		// large cluster, that is nearly every policy).
		selected = selected[:0]
		for _, i := range c.candidates(np.Namespace, &cp.podSel) {
			pod := &s.Pods[i]
			if (opts.Node == "" || pod.Node == opts.Node) && cp.podSel.matches(pod.Labels) {
				selected = append(selected, i)
			}
		}
		if len(selected) == 0 {
			continue
		}
		c.compileRules(np, &cp)
		for _, i := range selected {
			pb := rules[i]
			if pb == nil {
				pb = &podBuilder{}
				rules[i] = pb
			}
			c.addPolicy(pb, &cp, &s.Pods[i])
		}
	}
	return rules
}

// addPolicy adds what policy cp says of pod to its builder.
func (c *compiler) addPolicy(pb *podBuilder, cp *compiledPolicy, pod *Pod) {
	if cp.ingress {
		pb.ingress.Isolated = true
		pb.ingress.IsolatedBy = append(pb.ingress.IsolatedBy, cp.key)
		for j := range cp.in {
			if r := c.ingressRule(cp, j, pod); r != nil {
				pb.ingress.Rules = append(pb.ingress.Rules, r)
			}
		}
	}
	if cp.egress {
		pb.egress.Isolated = true
		pb.egress.IsolatedBy = append(pb.egress.IsolatedBy, cp.key)
		for j := range cp.eg {
			if r := c.egressRule(cp, j); r != nil {
				pb.egress.Rules = append(pb.egress.Rules, r)
			}
		}
	}
}

// podRules are the IR's pods, by namespace and name.
func (c *compiler) podRules(rules map[int]*podBuilder) []PodRules {
	s := c.s
	// Sort pod indices, not the PodRules: they are large to move.
	order := make([]int, 0, len(rules))
	for i := range rules {
		order = append(order, i)
	}
	slices.SortFunc(order, func(a, b int) int {
		pa, pb := &s.Pods[a], &s.Pods[b]
		return cmp.Or(cmp.Compare(pa.Namespace, pb.Namespace), cmp.Compare(pa.Name, pb.Name))
	})
	var out []PodRules
	if len(order) > 0 {
		out = make([]PodRules, 0, len(order))
	}
	for _, i := range order {
		p, pb := &s.Pods[i], rules[i]
		// "ns/name" strings sort apart from (ns, name) pairs; IsolatedBy
		// is sorted as strings, like Decision's.
		for _, d := range []*Direction{&pb.ingress, &pb.egress} {
			slices.Sort(d.IsolatedBy)
			d.IsolatedBy = slices.Compact(d.IsolatedBy)
		}
		out = append(out, PodRules{
			Pod: p.Key(), Node: p.Node, IPs: sortedAddrs(slices.Clone(p.IPs)),
			Ingress: pb.ingress, Egress: pb.egress,
		})
	}
	return out
}

// fillSets puts the sets the rules named into ir, by key.
func (c *compiler) fillSets(ir *IR) {
	for _, ps := range c.peerSets {
		ir.PeerSets = append(ir.PeerSets, ps.set)
	}
	slices.SortFunc(ir.PeerSets, func(a, b PeerSet) int { return cmp.Compare(a.Key, b.Key) })
	for _, cs := range c.cidrSets {
		ir.CIDRSets = append(ir.CIDRSets, *cs)
	}
	slices.SortFunc(ir.CIDRSets, func(a, b CIDRSet) int { return cmp.Compare(a.Key, b.Key) })
	for _, ps := range c.portSets {
		ir.PortSets = append(ir.PortSets, *ps)
	}
	slices.SortFunc(ir.PortSets, func(a, b PortSet) int { return cmp.Compare(a.Key, b.Key) })
	for _, ns := range c.namedSets {
		ir.NamedPortSets = append(ir.NamedPortSets, *ns)
	}
	slices.SortFunc(ir.NamedPortSets, func(a, b NamedPortSet) int { return cmp.Compare(a.Key, b.Key) })
}

type podBuilder struct{ ingress, egress Direction }

type compiler struct {
	s          *Snapshot
	nsLabels   map[string]map[string]string // known namespaces
	nsNames    []string                     // sorted
	podsByNs   map[string][]int             // pods policy applies to
	namedPorts map[portName][]int           // pods policy applies to, by port name
	labels     map[string]labelIndex        // by namespace, made on first use (podindex.go)

	peerSets  map[string]*peerSet
	cidrSets  map[string]*CIDRSet
	portSets  map[string]*PortSet
	namedSets map[string]*NamedPortSet
	namedRefs map[string]namedRef // by key, for WithPodAddrs
	// ingressRules shares an ingress rule between the pods on which its
	// named ports resolve alike: by policy, rule and port set key.
	ingressRules map[ingressRuleKey]*Rule
	problems     []Problem
}

type ingressRuleKey struct {
	policy *compiledPolicy
	rule   int
	ports  string
}

type peerSet struct {
	set  PeerSet
	pods []int
	ref  peerRef // what selects its members, for WithPodAddrs
}

func newCompiler(s *Snapshot) *compiler {
	c := &compiler{
		s:            s,
		nsLabels:     make(map[string]map[string]string, len(s.Namespaces)),
		podsByNs:     map[string][]int{},
		namedPorts:   map[portName][]int{},
		peerSets:     map[string]*peerSet{},
		cidrSets:     map[string]*CIDRSet{},
		portSets:     map[string]*PortSet{},
		namedSets:    map[string]*NamedPortSet{},
		namedRefs:    map[string]namedRef{},
		ingressRules: map[ingressRuleKey]*Rule{},
	}
	for _, ns := range s.Namespaces {
		if _, dup := c.nsLabels[ns.Name]; !dup {
			c.nsNames = append(c.nsNames, ns.Name)
		}
		c.nsLabels[ns.Name] = ns.Labels
	}
	slices.Sort(c.nsNames)
	for i := range s.Pods {
		p := &s.Pods[i]
		if !p.policyPod() {
			continue
		}
		c.podsByNs[p.Namespace] = append(c.podsByNs[p.Namespace], i)
		for _, np := range p.Ports {
			pn := portName{np.Protocol, np.Name}
			if l := c.namedPorts[pn]; len(l) == 0 || l[len(l)-1] != i {
				c.namedPorts[pn] = append(l, i)
			}
		}
	}
	return c
}

// compiledPolicy is one NetworkPolicy with its selectors, peers and ports
// compiled once for all the pods it selects.
type compiledPolicy struct {
	key             string
	podSel          selector
	ingress, egress bool
	in, eg          []compiledRule
	// egRules caches the egress rules, the same for every selected pod.
	egRules []*Rule
	egDone  []bool
}

type compiledRule struct {
	index    int
	allPeers bool
	peers    []peerRef
	ports    portSpec
}

// peerRef is one valid peer of a rule: a selector pair, an ipBlock (or
// a ClusterNetworkPolicy's network), or a node selector.
type peerRef struct {
	key     string
	fixed   string // the policy's namespace, when there is no namespaceSelector
	nsSel   *selector
	podSel  selector
	block   *cidrBlock
	nodeSel *selector
}

// policyTypes applies the API's defaulting: without policyTypes a policy
// is about ingress, and about egress too if it has egress rules.
func policyTypes(spec *networkingv1.NetworkPolicySpec) (ingress, egress bool) {
	if len(spec.PolicyTypes) == 0 {
		return true, len(spec.Egress) > 0
	}
	for _, t := range spec.PolicyTypes {
		switch t {
		case networkingv1.PolicyTypeIngress:
			ingress = true
		case networkingv1.PolicyTypeEgress:
			egress = true
		}
	}
	return ingress, egress
}

func (c *compiler) problem(np *networkingv1.NetworkPolicy, field string, detail string) {
	c.problems = append(c.problems, Problem{Policy: np.Namespace + "/" + np.Name, Field: field, Detail: detail})
}

// compileHead compiles what says which pods a policy isolates, and how:
// its podSelector and policy types. It is false when the podSelector
// does not compile (a problem): the policy then selects nothing.
func (c *compiler) compileHead(np *networkingv1.NetworkPolicy) (compiledPolicy, bool) {
	cp := compiledPolicy{key: np.Namespace + "/" + np.Name}
	var err error
	if cp.podSel, err = compileSelector(&np.Spec.PodSelector); err != nil {
		c.problem(np, "spec.podSelector", err.Error())
		return cp, false
	}
	cp.ingress, cp.egress = policyTypes(&np.Spec)
	return cp, true
}

// compileRules compiles the peers and ports of the rules of cp's policy
// np. A problem in a rule is reported only for a policy that selects
// pods of the compile's node: one that selects none is not compiled.
func (c *compiler) compileRules(np *networkingv1.NetworkPolicy, cp *compiledPolicy) {
	if cp.ingress {
		for i, r := range np.Spec.Ingress {
			cp.in = append(cp.in, c.compileRule(np, fmt.Sprintf("spec.ingress[%d]", i), "from", i, r.From, r.Ports))
		}
	}
	if cp.egress {
		for i, r := range np.Spec.Egress {
			cp.eg = append(cp.eg, c.compileRule(np, fmt.Sprintf("spec.egress[%d]", i), "to", i, r.To, r.Ports))
		}
		cp.egRules = make([]*Rule, len(cp.eg))
		cp.egDone = make([]bool, len(cp.eg))
	}
}

// compileRule compiles one rule's peers and ports (API reference,
// NetworkPolicyPeer): an empty list of peers matches every address; a
// peer is an ipBlock alone, or selectors: podSelector alone picks pods in
// the policy's namespace, namespaceSelector alone all pods of the
// namespaces it picks, both together the pods podSelector picks in those
// namespaces (one peer: AND; two peers: OR).
func (c *compiler) compileRule(np *networkingv1.NetworkPolicy, field, peersField string, index int,
	peers []networkingv1.NetworkPolicyPeer, ports []networkingv1.NetworkPolicyPort) compiledRule {
	r := compiledRule{index: index, allPeers: len(peers) == 0}
	for i := range peers {
		p := &peers[i]
		pf := fmt.Sprintf("%s.%s[%d]", field, peersField, i)
		ref, err := c.compilePeer(np.Namespace, p)
		if err != nil {
			c.problem(np, pf, err.Error())
			continue
		}
		r.peers = append(r.peers, ref)
	}
	r.ports = compilePorts(ports, func(i int, why string) {
		c.problem(np, fmt.Sprintf("%s.ports[%d]", field, i), why)
	})
	return r
}

func (c *compiler) compilePeer(ns string, p *networkingv1.NetworkPolicyPeer) (peerRef, error) {
	if p.IPBlock != nil {
		if p.PodSelector != nil || p.NamespaceSelector != nil {
			return peerRef{}, fmt.Errorf("ipBlock with a selector")
		}
		b, err := compileIPBlock(p.IPBlock)
		if err != nil {
			return peerRef{}, err
		}
		return peerRef{key: b.key, block: &b}, nil
	}
	if p.PodSelector == nil && p.NamespaceSelector == nil {
		return peerRef{}, fmt.Errorf("empty peer")
	}
	ref := peerRef{}
	podSel := selector{} // absent podSelector: every pod
	if p.PodSelector != nil {
		var err error
		if podSel, err = compileSelector(p.PodSelector); err != nil {
			return peerRef{}, fmt.Errorf("podSelector: %w", err)
		}
	}
	ref.podSel = podSel
	if p.NamespaceSelector == nil {
		ref.fixed = ns
		ref.key = "ns=" + ns + ";pods=" + keyOrStar(podSel.key)
		return ref, nil
	}
	nsSel, err := compileSelector(p.NamespaceSelector)
	if err != nil {
		return peerRef{}, fmt.Errorf("namespaceSelector: %w", err)
	}
	ref.nsSel = &nsSel
	ref.key = "nss=" + keyOrStar(nsSel.key) + ";pods=" + keyOrStar(podSel.key)
	return ref, nil
}

func keyOrStar(k string) string {
	if k == keyAll {
		return "*"
	}
	return k
}

// ingressRule returns rule j of cp as it protects pod, or nil if it can
// match nothing. Named ports resolve on pod itself, the destination.
func (c *compiler) ingressRule(cp *compiledPolicy, j int, pod *Pod) *Rule {
	cr := &cp.in[j]
	ranges := cr.ports.resolveOn(pod)
	if (!cr.allPeers && len(cr.peers) == 0) || (!cr.ports.all && len(ranges) == 0) {
		return nil
	}
	key := ingressRuleKey{cp, j, portSetKey(ranges)}
	if r, ok := c.ingressRules[key]; ok {
		return r
	}
	r := &Rule{Policy: cp.key, Index: cr.index, AllPorts: cr.ports.all}
	c.fillPeers(r, cr)
	r.PortSet = c.portSet(ranges, key.ports)
	c.ingressRules[key] = r
	return r
}

// egressRule returns rule j of cp, the same for every pod cp selects, or
// nil if it can match nothing. A named port resolves on each destination,
// so it becomes a set of destination . protocol . port per peer.
func (c *compiler) egressRule(cp *compiledPolicy, j int) *Rule {
	if cp.egDone[j] {
		return cp.egRules[j]
	}
	cp.egDone[j] = true
	cr := &cp.eg[j]
	if (!cr.allPeers && len(cr.peers) == 0) || (!cr.ports.all && len(cr.ports.ranges) == 0 && len(cr.ports.named) == 0) {
		return nil
	}
	r := &Rule{Policy: cp.key, Index: cr.index, AllPorts: cr.ports.all}
	c.fillPeers(r, cr)
	r.PortSet = c.portSet(cr.ports.ranges, portSetKey(cr.ports.ranges))
	for _, n := range cr.ports.named {
		if cr.allPeers {
			r.NamedPortSets = append(r.NamedPortSets, c.namedSet(nil, n))
		}
		for i := range cr.peers {
			r.NamedPortSets = append(r.NamedPortSets, c.namedSet(&cr.peers[i], n))
		}
	}
	slices.Sort(r.NamedPortSets)
	r.NamedPortSets = slices.Compact(r.NamedPortSets)
	cp.egRules[j] = r
	return r
}

func (c *compiler) fillPeers(r *Rule, cr *compiledRule) {
	r.AllPeers = cr.allPeers
	for i := range cr.peers {
		p := &cr.peers[i]
		if p.block != nil {
			r.CIDRSets = append(r.CIDRSets, c.cidrSet(p.block))
		} else {
			r.PeerSets = append(r.PeerSets, c.peerSet(p).set.Key)
		}
	}
	slices.Sort(r.CIDRSets)
	r.CIDRSets = slices.Compact(r.CIDRSets)
	slices.Sort(r.PeerSets)
	r.PeerSets = slices.Compact(r.PeerSets)
}

func (c *compiler) portSet(ranges []PortRange, key string) string {
	if len(ranges) == 0 {
		return ""
	}
	if _, ok := c.portSets[key]; !ok {
		c.portSets[key] = &PortSet{Key: key, Ranges: slices.Clone(ranges)}
	}
	return key
}

func (c *compiler) cidrSet(b *cidrBlock) string {
	if _, ok := c.cidrSets[b.key]; !ok {
		cs := &CIDRSet{Key: b.key}
		for _, p := range b.prefixes {
			if p.Addr().Is4() {
				cs.V4 = append(cs.V4, p)
			} else {
				cs.V6 = append(cs.V6, p)
			}
		}
		c.cidrSets[b.key] = cs
	}
	return b.key
}
