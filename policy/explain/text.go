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
	switch s.Reason {
	case reasonNames[policy.NotIsolated]:
		fmt.Fprintf(b, "allowed: not isolated, no NetworkPolicy selects it for %s\n", dir)
	case reasonNames[policy.Self]:
		fmt.Fprintf(b, "allowed: a pod may always reach itself (isolated by %s)\n", strings.Join(s.IsolatedBy, ", "))
	case reasonNames[policy.LocalNode]:
		fmt.Fprintf(b, "allowed: traffic from a pod's own node is always allowed in (isolated by %s)\n", strings.Join(s.IsolatedBy, ", "))
	case reasonNames[policy.AllowedByRule]:
		var by []string
		for _, r := range s.Rules {
			if r.Allows {
				by = append(by, fmt.Sprintf("%s %s rule %d", r.Policy, r.Direction, r.Index))
			}
		}
		fmt.Fprintf(b, "allowed by %s\n", strings.Join(by, ", "))
	default:
		fmt.Fprintf(b, "DENIED: isolated by %s, and no rule allows\n", strings.Join(s.IsolatedBy, ", "))
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
