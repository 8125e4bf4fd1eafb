package policy

import (
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Decide is the reference answer for the connection src -> dst, protocol
// proto, destination port port (0 for protocols without ports), read
// straight from the API objects of s. It shares no matching code with
// Compile.
//
// An endpoint is a pod when its Pod names a pod of s that policy applies
// to (not hostNetwork); otherwise it is its bare address. The connection
// is allowed when both sides allow it ("Network Policies": "both the
// egress policy on the source pod and the ingress policy on the
// destination pod need to allow the connection"):
//
//   - a side that is no pod, or a pod no policy isolates in that
//     direction, allows everything;
//   - an isolated pod allows traffic to itself, and (ingress) from its
//     own node's addresses (API reference, NetworkPolicySpec.ingress);
//   - otherwise at least one rule of the policies that isolate it must
//     allow the connection: the union of their rules applies.
func Decide(s *Snapshot, src, dst Endpoint, proto Protocol, port uint16) Decision {
	return s.decide(src, dst, proto, port, nil)
}

// decide is Decide; with ex not nil, it also gives every rule of each
// side's policies (ClusterNetworkPolicies selecting the pod, and the
// NetworkPolicies isolating it) with what matched.
func (s *Snapshot) decide(src, dst Endpoint, proto Protocol, port uint16, ex *Explanation) Decision {
	src.IP, dst.IP = src.IP.Unmap(), dst.IP.Unmap()
	sp, dp := s.findPod(src.Pod), s.findPod(dst.Pod)
	self := sp != nil && sp == dp
	var egress, ingress *sideDetail
	if ex != nil {
		egress = &sideDetail{&ex.EgressRules, &ex.EgressClusterRules}
		ingress = &sideDetail{&ex.IngressRules, &ex.IngressClusterRules}
	}
	eg := s.side(sp, networkingv1.PolicyTypeEgress, self, false, dst, dp, proto, port, egress)
	fromNode := dp != nil && s.nodeHas(dp.Node, src.IP) && sp == nil
	in := s.side(dp, networkingv1.PolicyTypeIngress, self, fromNode, src, dp, proto, port, ingress)
	return decision(eg, in)
}

// sideDetail is where decide writes the rules it read for one side.
type sideDetail struct {
	rules        *[]RuleMatch
	clusterRules *[]ClusterRuleMatch
}

func (s *Snapshot) findPod(k PodKey) *Pod {
	if k == (PodKey{}) {
		return nil
	}
	for i := range s.Pods {
		if p := &s.Pods[i]; p.Namespace == k.Namespace && p.Name == k.Name && !p.HostNetwork {
			return p
		}
	}
	return nil
}

func (s *Snapshot) nodeHas(node string, ip netip.Addr) bool {
	for _, n := range s.Nodes {
		if n.Name == node && slices.Contains(n.IPs, ip) {
			return true
		}
	}
	return false
}

// side is one pod's verdict in direction dir: remote is the other end,
// dstPod the destination pod (where named ports resolve), if any. With
// detail not nil, every rule read is appended to it with what matched.
//
// The tiers, in the order ClusterNetworkPolicySpec.tier gives them:
// "Admin tier, NetworkPolicy tier, Baseline tier". A side no policy of
// any tier is about (no NetworkPolicy isolates the pod, no
// ClusterNetworkPolicy with rules in this direction selects it) is
// NotIsolated; otherwise a pod's traffic to itself and, for ingress,
// from its node are allowed first (Self, LocalNode), then
//
//   - the first Admin rule that matches decides if it is Accept or Deny,
//     and goes on to NetworkPolicy if it is Pass;
//   - NetworkPolicy decides if it isolates the pod ("v1.NetworkPolicy
//     always makes a final decision for selected pods");
//   - the first Baseline rule that matches decides if it is Accept or
//     Deny, and goes on to the default if it is Pass;
//   - the default allows ("all pods can communicate with each other").
func (s *Snapshot) side(pod *Pod, dir networkingv1.PolicyType, self, fromNode bool, remote Endpoint, dstPod *Pod, proto Protocol, port uint16, detail *sideDetail) Verdict {
	if pod == nil {
		return Verdict{}
	}
	remotePod := s.findPod(remote.Pod)
	var rules *[]RuleMatch
	var clusterRules *[]ClusterRuleMatch
	if detail != nil {
		rules, clusterRules = detail.rules, detail.clusterRules
	}
	v := s.networkPolicySide(pod, dir, remote, remotePod, dstPod, proto, port, rules)
	ingress := dir == networkingv1.PolicyTypeIngress
	admin, adminScope := s.clusterTier(AdminTier, pod, ingress, remote, remotePod, dstPod, proto, port, clusterRules)
	baseline, baselineScope := s.clusterTier(BaselineTier, pod, ingress, remote, remotePod, dstPod, proto, port, clusterRules)
	isolated := len(v.IsolatedBy) > 0
	switch {
	case !isolated && !adminScope && !baselineScope:
		return Verdict{}
	case self:
		v.Reason, v.AllowedBy = Self, nil
		return v
	case fromNode:
		v.Reason, v.AllowedBy = LocalNode, nil
		return v
	}
	if admin != nil {
		v.Admin = admin
		switch admin.Action {
		case Accept:
			v.Reason, v.AllowedBy = AcceptedByAdmin, nil
			return v
		case Deny:
			v.Reason, v.AllowedBy = DeniedByAdmin, nil
			return v
		}
	}
	if isolated {
		v.Reason = Denied
		if len(v.AllowedBy) > 0 {
			v.Reason = AllowedByRule
		}
		return v
	}
	v.Reason = NotIsolated
	if baseline != nil {
		v.Baseline = baseline
		switch baseline.Action {
		case Accept:
			v.Reason = AcceptedByBaseline
		case Deny:
			v.Reason = DeniedByBaseline
		}
	}
	return v
}

// networkPolicySide is the NetworkPolicy tier of side: the policies that
// isolate the pod and the rules that allow the connection, both sorted.
func (s *Snapshot) networkPolicySide(pod *Pod, dir networkingv1.PolicyType, remote Endpoint, remotePod, dstPod *Pod, proto Protocol, port uint16, detail *[]RuleMatch) Verdict {
	var v Verdict
	rule := func(ref RuleRef, peers []networkingv1.NetworkPolicyPeer, ports []networkingv1.NetworkPolicyPort) {
		m := RuleMatch{Rule: ref, Peer: s.matchPeer(peers, ref.namespace(), remote, remotePod), Port: NoMatch}
		if m.Peer != NoMatch || detail != nil {
			m.Port = matchPort(ports, proto, port, dstPod)
		}
		if m.Allows() {
			v.AllowedBy = append(v.AllowedBy, ref)
		}
		if detail != nil {
			*detail = append(*detail, m)
		}
	}
	for _, np := range s.Policies {
		if np.Namespace != pod.Namespace || !hasType(&np.Spec, dir) || !selects(&np.Spec.PodSelector, pod.Labels) {
			continue
		}
		name := np.Namespace + "/" + np.Name
		v.IsolatedBy = append(v.IsolatedBy, name)
		if dir == networkingv1.PolicyTypeIngress {
			for i, r := range np.Spec.Ingress {
				rule(RuleRef{name, i}, r.From, r.Ports)
			}
		} else {
			for i, r := range np.Spec.Egress {
				rule(RuleRef{name, i}, r.To, r.Ports)
			}
		}
	}
	if detail != nil {
		slices.SortStableFunc(*detail, func(a, b RuleMatch) int { return compareRuleRefs(a.Rule, b.Rule) })
	}
	slices.Sort(v.IsolatedBy)
	v.IsolatedBy = slices.Compact(v.IsolatedBy)
	slices.SortFunc(v.AllowedBy, compareRuleRefs)
	return v
}

// hasType applies policyTypes with the API's default: Ingress always,
// Egress when the policy has egress rules.
func hasType(spec *networkingv1.NetworkPolicySpec, t networkingv1.PolicyType) bool {
	if len(spec.PolicyTypes) == 0 {
		return t == networkingv1.PolicyTypeIngress || len(spec.Egress) > 0
	}
	return slices.Contains(spec.PolicyTypes, t)
}

// selects matches with apimachinery's selector; one that does not parse
// selects nothing.
func selects(ls *metav1.LabelSelector, l map[string]string) bool {
	sel, err := metav1.LabelSelectorAsSelector(ls)
	return err == nil && sel.Matches(labels.Set(l))
}

// matchPeer: no peers allows every remote end (Every); otherwise the
// index of the first peer that does, or NoMatch.
func (s *Snapshot) matchPeer(peers []networkingv1.NetworkPolicyPeer, policyNs string, remote Endpoint, remotePod *Pod) int {
	if len(peers) == 0 {
		return Every
	}
	for i := range peers {
		if s.peerAllows(&peers[i], policyNs, remote, remotePod) {
			return i
		}
	}
	return NoMatch
}

func (s *Snapshot) peerAllows(p *networkingv1.NetworkPolicyPeer, policyNs string, remote Endpoint, remotePod *Pod) bool {
	if p.IPBlock != nil {
		// ipBlock matches any address, pods' too: the upstream e2e Netpol
		// specs allow a pod by an ipBlock of its address and deny it by an
		// except.
		return p.PodSelector == nil && p.NamespaceSelector == nil && inBlock(p.IPBlock, remote.IP)
	}
	if remotePod == nil || (p.PodSelector == nil && p.NamespaceSelector == nil) {
		return false
	}
	if p.NamespaceSelector == nil {
		if remotePod.Namespace != policyNs {
			return false
		}
	} else {
		ns := s.findNamespace(remotePod.Namespace)
		if ns == nil || !selects(p.NamespaceSelector, ns.Labels) {
			return false
		}
	}
	return p.PodSelector == nil || selects(p.PodSelector, remotePod.Labels)
}

func (s *Snapshot) findNamespace(name string) *Namespace {
	for i := range s.Namespaces {
		if s.Namespaces[i].Name == name {
			return &s.Namespaces[i]
		}
	}
	return nil
}

func inBlock(b *networkingv1.IPBlock, ip netip.Addr) bool {
	cidr, err := netip.ParsePrefix(b.CIDR)
	if err != nil {
		return false
	}
	in := cidr.Masked().Contains(ip)
	for _, e := range b.Except {
		ex, err := netip.ParsePrefix(e)
		if err != nil {
			return false
		}
		if ex.Masked().Contains(ip) {
			in = false
		}
	}
	return in
}

// matchPort: no ports allows every protocol and port (Every); otherwise
// the index of the first entry that matches, or NoMatch. A named port
// matches the destination pod's container port of that name and
// protocol.
func matchPort(ports []networkingv1.NetworkPolicyPort, proto Protocol, port uint16, dstPod *Pod) int {
	if len(ports) == 0 {
		return Every
	}
	for i, p := range ports {
		if portAllows(&p, proto, port, dstPod) {
			return i
		}
	}
	return NoMatch
}

func portAllows(p *networkingv1.NetworkPolicyPort, proto Protocol, port uint16, dstPod *Pod) bool {
	want := corev1.ProtocolTCP
	if p.Protocol != nil {
		want = *p.Protocol
	}
	if !protocolIs(want, proto) {
		return false
	}
	switch {
	case p.Port == nil:
		return p.EndPort == nil
	case p.Port.Type == intstr.Int:
		first := p.Port.IntVal
		last := first
		if p.EndPort != nil {
			last = *p.EndPort
		}
		return first >= 1 && last <= 65535 && first <= last && int32(port) >= first && int32(port) <= last
	}
	if p.EndPort != nil || dstPod == nil {
		return false
	}
	for _, cp := range dstPod.Ports {
		if cp.Name == p.Port.StrVal && cp.Protocol == proto && cp.Port == port {
			return true
		}
	}
	return false
}

func protocolIs(p corev1.Protocol, proto Protocol) bool {
	switch p {
	case corev1.ProtocolTCP:
		return proto == TCP
	case corev1.ProtocolUDP:
		return proto == UDP
	case corev1.ProtocolSCTP:
		return proto == SCTP
	}
	return false
}
