package explain

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/podnet/podnet/policy"
)

// WriteText writes the report for a person: the verdict on the first
// line, then each side, then the rules each side read.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	verdict := "DENIED"
	if r.Allowed {
		verdict = "ALLOWED"
	}
	port := strconv.Itoa(int(r.Port))
	if r.PortName != "" {
		port += " (" + r.PortName + ")"
	}
	fmt.Fprintf(&b, "%s -> %s %s/%s: %s\n", r.Source, r.Destination, r.Protocol, port, verdict)
	r.Egress.writeText(&b, "egress", r.Source)
	r.Ingress.writeText(&b, "ingress", r.Destination)
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func (s *Side) writeText(b *strings.Builder, dir string, e Endpoint) {
	if s.Pod == "" {
		fmt.Fprintf(b, "  %s: allowed: %s is no pod, nothing isolates it\n", dir, e.IP)
		return
	}
	fmt.Fprintf(b, "  %s of %s: ", dir, s.Pod)
	passed := "" // an Admin Pass before NetworkPolicy's answer
	if s.Admin != nil && s.Admin.Action == policy.Pass.String() {
		passed = s.Admin.String() + " passes to NetworkPolicy; "
	}
	switch s.Reason {
	case reasonNames[policy.NotIsolated]:
		switch {
		case s.Baseline != nil:
			fmt.Fprintf(b, "allowed: %s%s passes to the default, allow\n", passed, s.Baseline)
		case passed != "":
			fmt.Fprintf(b, "allowed: %sno NetworkPolicy selects it for %s\n", passed, dir)
		case len(s.ClusterRules) > 0:
			fmt.Fprintf(b, "allowed: no NetworkPolicy isolates it for %s, and no rule of the ClusterNetworkPolicies that select it matches\n", dir)
		default:
			fmt.Fprintf(b, "allowed: not isolated, no NetworkPolicy or ClusterNetworkPolicy selects it for %s\n", dir)
		}
	case reasonNames[policy.Self]:
		fmt.Fprintf(b, "allowed: a pod may always reach itself%s\n", isolatedBy(s.IsolatedBy))
	case reasonNames[policy.LocalNode]:
		fmt.Fprintf(b, "allowed: traffic from a pod's own node is always allowed in%s\n", isolatedBy(s.IsolatedBy))
	case reasonNames[policy.AllowedByRule]:
		var by []string
		for _, r := range s.Rules {
			if r.Allows {
				by = append(by, fmt.Sprintf("%s %s rule %d", r.Policy, r.Direction, r.Index))
			}
		}
		fmt.Fprintf(b, "%sallowed by %s\n", passed, strings.Join(by, ", "))
	case reasonNames[policy.AcceptedByAdmin]:
		fmt.Fprintf(b, "allowed: accepted by %s, whatever NetworkPolicy says\n", s.Admin)
	case reasonNames[policy.DeniedByAdmin]:
		fmt.Fprintf(b, "DENIED by %s, whatever NetworkPolicy says\n", s.Admin)
	case reasonNames[policy.AcceptedByBaseline]:
		fmt.Fprintf(b, "allowed: %saccepted by %s (no NetworkPolicy isolates it)\n", passed, s.Baseline)
	case reasonNames[policy.DeniedByBaseline]:
		fmt.Fprintf(b, "%sDENIED by %s (no NetworkPolicy isolates it)\n", passed, s.Baseline)
	default:
		fmt.Fprintf(b, "%sDENIED: isolated by %s, and no rule allows\n", passed, strings.Join(s.IsolatedBy, ", "))
	}
	for _, r := range s.ClusterRules {
		verdict := "does not match"
		if r.Matches {
			verdict = "matches"
		}
		fmt.Fprintf(b, "    %s %s %s: %s; %s\n", r.ClusterRuleRef, dir, verdict, r.PeerText, r.PortText)
	}
	for _, r := range s.Rules {
		verdict := "does not allow"
		if r.Allows {
			verdict = "allows"
		}
		fmt.Fprintf(b, "    %s %s rule %d %s: %s; %s\n", r.Policy, r.Direction, r.Index, verdict, r.PeerText, r.PortText)
	}
	for _, p := range s.IsolatedBy {
		if !slices.ContainsFunc(s.Rules, func(r Rule) bool { return r.Policy == p }) {
			fmt.Fprintf(b, "    %s has no %s rules: it only isolates\n", p, dir)
		}
	}
}

func isolatedBy(ps []string) string {
	if len(ps) == 0 {
		return ""
	}
	return " (isolated by " + strings.Join(ps, ", ") + ")"
}

// clusterPeerText says in words what matched of a ClusterNetworkPolicy
// rule's peers.
func clusterPeerText(m int, peers []policy.ClusterPeer, ingress bool) string {
	field := "to"
	if ingress {
		field = "from"
	}
	switch {
	case m == policy.NoMatch:
		var all []string
		for i := range peers {
			all = append(all, describeClusterPeer(&peers[i]))
		}
		return "no peer matches (" + field + ": " + strings.Join(all, "; ") + ")"
	case m >= 0 && m < len(peers):
		return fmt.Sprintf("%s[%d] matches: %s", field, m, describeClusterPeer(&peers[m]))
	}
	return fmt.Sprintf("%s[%d]", field, m)
}

func describeClusterPeer(p *policy.ClusterPeer) string {
	switch {
	case p.Pods != nil && p.Pods.Pods == nil:
		return "every pod of namespaces " + selectorText(&p.Pods.Namespaces)
	case p.Pods != nil:
		return "pods " + selectorText(p.Pods.Pods) + " of namespaces " + selectorText(&p.Pods.Namespaces)
	case p.Nodes != nil:
		return "the addresses of nodes " + selectorText(p.Nodes)
	case len(p.Networks) > 0:
		var ns []string
		for _, n := range p.Networks {
			ns = append(ns, n.String())
		}
		return "networks " + strings.Join(ns, ", ")
	case len(p.DomainNames) > 0:
		return "domain names " + strings.Join(p.DomainNames, ", ") + " (not supported: match nothing)"
	}
	return "an empty peer"
}

// clusterPortText says in words what matched of a ClusterNetworkPolicy
// rule's protocols.
func clusterPortText(m int, ps []policy.ClusterProtocol, proto policy.Protocol, port uint16, dstPod *policy.Pod) string {
	describe := func(p policy.ClusterProtocol) string {
		if p.NamedPort == "" || dstPod == nil {
			return p.String()
		}
		for _, np := range dstPod.Ports {
			if np.Name == p.NamedPort {
				return fmt.Sprintf("%s (%s/%d on %s)", p, np.Protocol, np.Port, dstPod.Key())
			}
		}
		return fmt.Sprintf("%s (no such port on %s)", p, dstPod.Key())
	}
	switch {
	case m == policy.Every:
		return "every protocol and port (no protocols)"
	case m == policy.NoMatch:
		var all []string
		for _, p := range ps {
			all = append(all, describe(p))
		}
		return fmt.Sprintf("no protocol matches %s/%d (protocols: %s)", proto, port, strings.Join(all, "; "))
	case m >= 0 && m < len(ps):
		return fmt.Sprintf("protocols[%d] matches: %s", m, describe(ps[m]))
	}
	return fmt.Sprintf("protocols[%d]", m)
}

// peerText says in words what matched of peers, the from (ingress) or to
// (egress) of a rule of a policy in namespace ns.
func peerText(m int, peers []networkingv1.NetworkPolicyPeer, ns string, dir networkingv1.PolicyType) string {
	field := "from"
	if dir == networkingv1.PolicyTypeEgress {
		field = "to"
	}
	switch {
	case m == policy.Every:
		return "every peer (no " + field + ")"
	case m == policy.NoMatch:
		var all []string
		for _, p := range peers {
			all = append(all, describePeer(&p, ns))
		}
		return "no peer matches (" + field + ": " + strings.Join(all, "; ") + ")"
	case m >= 0 && m < len(peers):
		return fmt.Sprintf("%s[%d] matches: %s", field, m, describePeer(&peers[m], ns))
	}
	return fmt.Sprintf("%s[%d]", field, m)
}

func describePeer(p *networkingv1.NetworkPolicyPeer, ns string) string {
	switch {
	case p.IPBlock != nil:
		s := "ipBlock " + p.IPBlock.CIDR
		if len(p.IPBlock.Except) > 0 {
			s += " except " + strings.Join(p.IPBlock.Except, ", ")
		}
		return s
	case p.NamespaceSelector == nil:
		return "pods " + selectorText(p.PodSelector) + " of namespace " + ns
	case p.PodSelector == nil:
		return "every pod of namespaces " + selectorText(p.NamespaceSelector)
	}
	return "pods " + selectorText(p.PodSelector) + " of namespaces " + selectorText(p.NamespaceSelector)
}

func selectorText(ls *metav1.LabelSelector) string {
	if ls == nil || (len(ls.MatchLabels) == 0 && len(ls.MatchExpressions) == 0) {
		return "(all)"
	}
	return metav1.FormatLabelSelector(ls)
}

// portText says in words what matched of a rule's ports.
func portText(m int, ports []networkingv1.NetworkPolicyPort, proto policy.Protocol, port uint16, dstPod *policy.Pod) string {
	switch {
	case m == policy.Every:
		return "every port (no ports)"
	case m == policy.NoMatch:
		var all []string
		for _, p := range ports {
			all = append(all, describePort(&p, dstPod))
		}
		return fmt.Sprintf("no port matches %s/%d (ports: %s)", proto, port, strings.Join(all, "; "))
	case m >= 0 && m < len(ports):
		return fmt.Sprintf("ports[%d] matches: %s", m, describePort(&ports[m], dstPod))
	}
	return fmt.Sprintf("ports[%d]", m)
}

func describePort(p *networkingv1.NetworkPolicyPort, dstPod *policy.Pod) string {
	proto := corev1.ProtocolTCP
	if p.Protocol != nil {
		proto = *p.Protocol
	}
	switch {
	case p.Port == nil:
		return string(proto) + " (every port)"
	case p.Port.Type == intstr.Int && p.EndPort != nil:
		return fmt.Sprintf("%s %d-%d", proto, p.Port.IntVal, *p.EndPort)
	case p.Port.Type == intstr.Int:
		return fmt.Sprintf("%s %d", proto, p.Port.IntVal)
	}
	s := fmt.Sprintf("%s %q", proto, p.Port.StrVal)
	if dstPod != nil {
		for _, np := range dstPod.Ports {
			if np.Name == p.Port.StrVal && np.Protocol.String() == string(proto) {
				return fmt.Sprintf("%s (%d on %s)", s, np.Port, dstPod.Key())
			}
		}
		return s + " (no such port on " + dstPod.Key().String() + ")"
	}
	return s
}
