package policy

import (
	"fmt"
	"net/netip"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cnpv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"
)

// Tier is where a ClusterPolicy is evaluated: Admin before NetworkPolicy,
// Baseline after it.
type Tier uint8

// The tiers of ClusterNetworkPolicy.spec.tier.
const (
	AdminTier Tier = iota + 1
	BaselineTier
)

func (t Tier) String() string {
	switch t {
	case AdminTier:
		return "Admin"
	case BaselineTier:
		return "Baseline"
	}
	return fmt.Sprintf("Tier(%d)", uint8(t))
}

// Action is what a ClusterPolicy rule does with the traffic it matches.
type Action uint8

// The actions of a ClusterNetworkPolicy rule.
const (
	Accept Action = iota + 1
	Deny
	Pass
)

func (a Action) String() string {
	switch a {
	case Accept:
		return "Accept"
	case Deny:
		return "Deny"
	case Pass:
		return "Pass"
	}
	return fmt.Sprintf("Action(%d)", uint8(a))
}

// ClusterPolicy is what policy needs of a ClusterNetworkPolicy
// (policy.networking.k8s.io/v1beta1): the API object read once into a
// form with no optional pointers to interpret and nothing the API server
// would refuse left unmarked. Selectors stay label selectors: Decide
// matches them with apimachinery, Compile with its own code.
type ClusterPolicy struct {
	Name     string
	Tier     Tier
	Priority int32
	Subject  PodsSelector
	Ingress  []ClusterRule
	Egress   []ClusterRule
	// Invalid, when not empty, says why the policy applies to no pod: a
	// tier podnet does not know, a subject without exactly one field or
	// with a selector that does not parse.
	Invalid string
}

// PodsSelector picks pods: every pod of the namespaces Namespaces selects
// (Pods nil), or the pods Pods selects in them.
type PodsSelector struct {
	Namespaces metav1.LabelSelector
	Pods       *metav1.LabelSelector
}

// ClusterRule is one ingress or egress rule of a ClusterPolicy.
type ClusterRule struct {
	Name   string
	Action Action
	// Peers are the rule's from (ingress) or to (egress).
	Peers []ClusterPeer
	// Protocols: empty matches every protocol and port.
	Protocols []ClusterProtocol
	// Broken, when not empty, says why podnet cannot read the rule: a
	// peer or protocol without exactly one field (a newer API's, maybe),
	// an unknown action, a selector, CIDR or port the API server would
	// refuse. Such a rule fails closed, as the API asks of peers it
	// cannot read: an Accept rule matches nothing, any other rule denies
	// everything.
	Broken string
}

// ClusterPeer is one peer of a rule: exactly one field is set.
type ClusterPeer struct {
	// Pods is a namespaces peer (Pods.Pods nil) or a pods peer.
	Pods *PodsSelector
	// Nodes selects nodes by label; their addresses are the peer
	// (egress only).
	Nodes *metav1.LabelSelector
	// Networks are CIDRs (egress only); pods' addresses in them match too.
	Networks []netip.Prefix
	// DomainNames are kept to be reported: podnet does not resolve
	// names, so such a peer matches nothing (they are allowed in Accept
	// rules only, so this allows less, never more).
	DomainNames []string
}

// ClusterProtocol is one entry of a rule's protocols: a protocol and its
// destination ports First..Last (every port: 0..65535), or a named port
// (Protocol 0), the destination pod's container port of that name, with
// its protocol.
type ClusterProtocol struct {
	Protocol    Protocol
	First, Last uint16
	NamedPort   string
}

func (p ClusterProtocol) String() string {
	switch {
	case p.NamedPort != "":
		return fmt.Sprintf("%q", p.NamedPort)
	case p.First == 0 && p.Last == 65535:
		return p.Protocol.String()
	case p.First == p.Last:
		return fmt.Sprintf("%s/%d", p.Protocol, p.First)
	}
	return fmt.Sprintf("%s/%d-%d", p.Protocol, p.First, p.Last)
}

// ClusterPolicyFromAPI reads a ClusterNetworkPolicy. It keeps everything
// a decision needs and marks (Invalid, ClusterRule.Broken) what the API
// server's validation should have refused, so that Decide and Compile
// treat it alike.
func ClusterPolicyFromAPI(p *cnpv1beta1.ClusterNetworkPolicy) ClusterPolicy {
	out := ClusterPolicy{Name: p.Name, Priority: p.Spec.Priority}
	switch p.Spec.Tier {
	case cnpv1beta1.AdminTier:
		out.Tier = AdminTier
	case cnpv1beta1.BaselineTier:
		out.Tier = BaselineTier
	default:
		out.Invalid = fmt.Sprintf("spec.tier: %q", p.Spec.Tier)
	}
	sub := &p.Spec.Subject
	switch {
	case (sub.Namespaces == nil) == (sub.Pods == nil):
		out.Invalid = "spec.subject: not exactly one of namespaces, pods"
	case sub.Namespaces != nil:
		out.Subject = PodsSelector{Namespaces: *sub.Namespaces.DeepCopy()}
	default:
		out.Subject = namespacedPods(sub.Pods)
	}
	if out.Invalid == "" {
		if err := out.Subject.check(); err != nil {
			out.Invalid = "spec.subject: " + err.Error()
		}
	}
	for i := range p.Spec.Ingress {
		r := &p.Spec.Ingress[i]
		peers := make([]cnpv1beta1.ClusterNetworkPolicyEgressPeer, len(r.From))
		for j, f := range r.From {
			peers[j] = cnpv1beta1.ClusterNetworkPolicyEgressPeer{Namespaces: f.Namespaces, Pods: f.Pods}
		}
		out.Ingress = append(out.Ingress, clusterRule(r.Name, r.Action, "from", peers, r.Protocols))
	}
	for i := range p.Spec.Egress {
		r := &p.Spec.Egress[i]
		out.Egress = append(out.Egress, clusterRule(r.Name, r.Action, "to", r.To, r.Protocols))
	}
	return out
}

func namespacedPods(p *cnpv1beta1.NamespacedPod) PodsSelector {
	return PodsSelector{Namespaces: *p.NamespaceSelector.DeepCopy(), Pods: p.PodSelector.DeepCopy()}
}

func (ps *PodsSelector) check() error {
	if _, err := metav1.LabelSelectorAsSelector(&ps.Namespaces); err != nil {
		return fmt.Errorf("namespace selector: %w", err)
	}
	if ps.Pods != nil {
		if _, err := metav1.LabelSelectorAsSelector(ps.Pods); err != nil {
			return fmt.Errorf("pod selector: %w", err)
		}
	}
	return nil
}

// clusterRule reads one rule; ingress peers come as egress peers with
// only the fields ingress has.
func clusterRule(name string, action cnpv1beta1.ClusterNetworkPolicyRuleAction, peersField string,
	peers []cnpv1beta1.ClusterNetworkPolicyEgressPeer, protocols []cnpv1beta1.ClusterNetworkPolicyProtocol) ClusterRule {
	r := ClusterRule{Name: name}
	var broken []string
	bad := func(format string, args ...any) { broken = append(broken, fmt.Sprintf(format, args...)) }
	switch action {
	case cnpv1beta1.ClusterNetworkPolicyRuleActionAccept:
		r.Action = Accept
	case cnpv1beta1.ClusterNetworkPolicyRuleActionDeny:
		r.Action = Deny
	case cnpv1beta1.ClusterNetworkPolicyRuleActionPass:
		r.Action = Pass
	default:
		bad("action %q", action)
	}
	if len(peers) == 0 {
		bad("%s: no peers", peersField)
	}
	onlyPods := true // every peer is a pods or namespaces peer: named ports resolve on them
	for i := range peers {
		f := fmt.Sprintf("%s[%d]", peersField, i)
		cp := clusterPeer(&peers[i], f, r.Action, bad)
		if cp.Pods == nil {
			onlyPods = false
		}
		r.Peers = append(r.Peers, cp)
	}
	for i := range protocols {
		f := fmt.Sprintf("protocols[%d]", i)
		r.Protocols = append(r.Protocols, clusterProtocols(&protocols[i], f, onlyPods, bad)...)
	}
	r.Broken = strings.Join(broken, "; ")
	return r
}

// clusterPeer is one peer of a rule whose action is given; what is wrong
// with it goes to bad, under the field name f.
func clusterPeer(p *cnpv1beta1.ClusterNetworkPolicyEgressPeer, f string, action Action, bad func(string, ...any)) ClusterPeer {
	var cp ClusterPeer
	n := 0
	if p.Namespaces != nil {
		n++
		cp.Pods = &PodsSelector{Namespaces: *p.Namespaces.DeepCopy()}
	}
	if p.Pods != nil {
		n++
		ps := namespacedPods(p.Pods)
		cp.Pods = &ps
	}
	if p.Nodes != nil {
		n++
		cp.Nodes = p.Nodes.DeepCopy()
		if _, err := metav1.LabelSelectorAsSelector(cp.Nodes); err != nil {
			bad("%s.nodes: %v", f, err)
		}
	}
	if p.Networks != nil {
		n++
		if len(p.Networks) == 0 {
			bad("%s.networks: empty", f)
		}
		for _, c := range p.Networks {
			pfx, err := netip.ParsePrefix(string(c))
			if err != nil || pfx != pfx.Masked() {
				bad("%s.networks: %q is no masked CIDR", f, c)
				continue
			}
			cp.Networks = append(cp.Networks, pfx)
		}
	}
	if p.DomainNames != nil {
		n++
		for _, d := range p.DomainNames {
			cp.DomainNames = append(cp.DomainNames, string(d))
		}
		if action != Accept {
			bad("%s.domainNames: only in Accept rules", f)
		}
	}
	if n != 1 {
		bad("%s: %d fields set, not exactly one", f, n)
	}
	if cp.Pods != nil {
		if err := cp.Pods.check(); err != nil {
			bad("%s: %v", f, err)
		}
	}
	return cp
}

// clusterProtocols is one entry of a rule's protocols (one protocol, or
// one named port, which needs every peer to be pods: onlyPods); what is
// wrong with it goes to bad, under the field name f.
func clusterProtocols(p *cnpv1beta1.ClusterNetworkPolicyProtocol, f string, onlyPods bool, bad func(string, ...any)) []ClusterProtocol {
	var out []ClusterProtocol
	add := func(proto Protocol, dp *cnpv1beta1.Port) {
		cp := ClusterProtocol{Protocol: proto, First: 0, Last: 65535}
		switch {
		case dp == nil:
		case (dp.Number != 0) == (dp.Range != nil):
			bad("%s.destinationPort: not exactly one of number, range", f)
		case dp.Range == nil:
			if dp.Number < 1 || dp.Number > 65535 {
				bad("%s.destinationPort.number: %d", f, dp.Number)
			}
			cp.First, cp.Last = uint16(dp.Number), uint16(dp.Number)
		default:
			s, e := dp.Range.Start, dp.Range.End
			if s < 1 || e > 65535 || s >= e {
				bad("%s.destinationPort.range: %d-%d", f, s, e)
			}
			cp.First, cp.Last = uint16(s), uint16(e)
		}
		out = append(out, cp)
	}
	if p.TCP != nil {
		add(TCP, p.TCP.DestinationPort)
	}
	if p.UDP != nil {
		add(UDP, p.UDP.DestinationPort)
	}
	if p.SCTP != nil {
		add(SCTP, p.SCTP.DestinationPort)
	}
	if p.DestinationNamedPort != "" {
		out = append(out, ClusterProtocol{NamedPort: p.DestinationNamedPort})
		if !onlyPods {
			bad("%s.destinationNamedPort: with a peer that is no pod", f)
		}
	}
	if len(out) != 1 {
		bad("%s: %d fields set, not exactly one", f, len(out))
	}
	return out
}

// failClosed reports how a broken rule acts: an Accept rule matches
// nothing; any other denies everything (ClusterNetworkPolicyIngressPeer:
// "For "Accept" rules, "fail closed" means: "treat the rule as matching
// no traffic". For "Deny" and "Pass" rules, "fail closed" means: "treat
// the rule as a 'Deny all' rule"").
func (r *ClusterRule) failClosed() (matchesAll bool, action Action) {
	if r.Action == Accept {
		return false, Accept
	}
	return true, Deny
}

// rules returns the policy's rules of direction ingress or egress.
func (p *ClusterPolicy) rules(ingress bool) []ClusterRule {
	if ingress {
		return p.Ingress
	}
	return p.Egress
}
