package policy

import (
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The fixture is the upstream e2e Netpol topology, pods a, b, c in
// namespaces x, y, z, with a few additions: a hostNetwork pod x/h, a pod
// w/a in a namespace the snapshot has not seen, named ports that differ
// between pods, and two nodes.
//
//	x: team=blue   y: team=red   z: (no team)   every ns: kubernetes.io/metadata.name
//	pod a: http=TCP/8080            IPs 10.<ns>.0.1, fd00:<ns>::1
//	pod b: http=TCP/80, dns=UDP/53  IPs 10.<ns>.0.2, fd00:<ns>::2
//	pod c: http=TCP/8080, metrics=TCP/9090
//	x/*, z/*, w/a on node n1 (192.168.0.1); y/* on n2 (192.168.0.2)
func fixture(policies ...*networkingv1.NetworkPolicy) *Snapshot {
	s := &Snapshot{Policies: policies, Nodes: []Node{
		{Name: "n1", IPs: []netip.Addr{netip.MustParseAddr("192.168.0.1")}},
		{Name: "n2", IPs: []netip.Addr{netip.MustParseAddr("192.168.0.2")}},
	}}
	teams := map[string]string{"x": "blue", "y": "red"}
	for i, ns := range []string{"x", "y", "z", "w"} {
		if ns != "w" {
			l := map[string]string{"kubernetes.io/metadata.name": ns}
			if teams[ns] != "" {
				l["team"] = teams[ns]
			}
			s.Namespaces = append(s.Namespaces, Namespace{Name: ns, Labels: l})
		}
		for j, name := range []string{"a", "b", "c"} {
			if ns == "w" && name != "a" {
				continue
			}
			p := Pod{Namespace: ns, Name: name, Labels: map[string]string{"pod": name}, Node: "n1",
				IPs: []netip.Addr{
					netip.AddrFrom4([4]byte{10, byte(i + 1), 0, byte(j + 1)}),
					netip.MustParseAddr(fmt.Sprintf("fd00:%d::%d", i+1, j+1)),
				}}
			if ns == "y" {
				p.Node = "n2"
			}
			switch name {
			case "a":
				p.Ports = []NamedPort{{"http", TCP, 8080}}
			case "b":
				p.Ports = []NamedPort{{"http", TCP, 80}, {"dns", UDP, 53}}
			case "c":
				p.Ports = []NamedPort{{"http", TCP, 8080}, {"metrics", TCP, 9090}}
			}
			s.Pods = append(s.Pods, p)
		}
	}
	s.Pods = append(s.Pods, Pod{Namespace: "x", Name: "h", Labels: map[string]string{"pod": "h"}, Node: "n1", HostNetwork: true})
	return s
}

// ep names an endpoint: "x/a" is pod x/a by its IPv4 address, "x/a6" by
// its IPv6 one, "x/h" the hostNetwork pod (its node's address), anything
// else a bare address.
func ep(s *Snapshot, name string) Endpoint {
	if ns, pod, ok := strings.Cut(name, "/"); ok {
		v6 := strings.HasSuffix(pod, "6")
		pod = strings.TrimSuffix(pod, "6")
		for _, p := range s.Pods {
			if p.Namespace != ns || p.Name != pod {
				continue
			}
			if p.HostNetwork {
				return Endpoint{Pod: p.Key(), IP: s.Nodes[0].IPs[0]}
			}
			if v6 {
				return Endpoint{Pod: p.Key(), IP: p.IPs[1]}
			}
			return Endpoint{Pod: p.Key(), IP: p.IPs[0]}
		}
		panic("no pod " + name)
	}
	return Endpoint{IP: netip.MustParseAddr(name)}
}

// Policy builders.

func np(ns, name string, podSel *metav1.LabelSelector, types ...networkingv1.PolicyType) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: *podSel, PolicyTypes: types}}
}

func withIngress(p *networkingv1.NetworkPolicy, rules ...networkingv1.NetworkPolicyIngressRule) *networkingv1.NetworkPolicy {
	p.Spec.Ingress = append(p.Spec.Ingress, rules...)
	return p
}

func withEgress(p *networkingv1.NetworkPolicy, rules ...networkingv1.NetworkPolicyEgressRule) *networkingv1.NetworkPolicy {
	p.Spec.Egress = append(p.Spec.Egress, rules...)
	return p
}

func from(peers []networkingv1.NetworkPolicyPeer, ports ...networkingv1.NetworkPolicyPort) networkingv1.NetworkPolicyIngressRule {
	return networkingv1.NetworkPolicyIngressRule{From: peers, Ports: ports}
}

func to(peers []networkingv1.NetworkPolicyPeer, ports ...networkingv1.NetworkPolicyPort) networkingv1.NetworkPolicyEgressRule {
	return networkingv1.NetworkPolicyEgressRule{To: peers, Ports: ports}
}

func peers(p ...networkingv1.NetworkPolicyPeer) []networkingv1.NetworkPolicyPeer { return p }

func sel(kv ...string) *metav1.LabelSelector {
	ls := &metav1.LabelSelector{}
	for i := 0; i+1 < len(kv); i += 2 {
		if ls.MatchLabels == nil {
			ls.MatchLabels = map[string]string{}
		}
		ls.MatchLabels[kv[i]] = kv[i+1]
	}
	return ls
}

func expr(key string, op metav1.LabelSelectorOperator, values ...string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: key, Operator: op, Values: values}}}
}

func podPeer(s *metav1.LabelSelector) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{PodSelector: s}
}

func nsPeer(s *metav1.LabelSelector) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{NamespaceSelector: s}
}

func nsPodPeer(ns, pod *metav1.LabelSelector) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{NamespaceSelector: ns, PodSelector: pod}
}

func cidrPeer(cidr string, except ...string) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: cidr, Except: except}}
}

func port(proto corev1.Protocol, p int32) networkingv1.NetworkPolicyPort {
	pp := networkingv1.NetworkPolicyPort{Port: ptr(intstr.FromInt32(p))}
	if proto != "" {
		pp.Protocol = &proto
	}
	return pp
}

func portRange(p, end int32) networkingv1.NetworkPolicyPort {
	return networkingv1.NetworkPolicyPort{Port: ptr(intstr.FromInt32(p)), EndPort: &end}
}

func namedPort(proto corev1.Protocol, name string) networkingv1.NetworkPolicyPort {
	pp := networkingv1.NetworkPolicyPort{Port: ptr(intstr.FromString(name))}
	if proto != "" {
		pp.Protocol = &proto
	}
	return pp
}

const (
	in  = networkingv1.PolicyTypeIngress
	out = networkingv1.PolicyTypeEgress
)

type conn struct {
	src, dst string
	proto    Protocol
	port     uint16
	allowed  bool
	// egress and ingress, when not -1, are the reasons each side must give.
	egress, ingress Reason
	// by, when set, is the AllowedBy the deciding side must give.
	by []RuleRef
	// cluster, when set, is the ClusterNetworkPolicy rule ("policy#index")
	// a side names: the deciding one, or an Admin Pass.
	cluster string
}

func ok(src, dst string, proto Protocol, port uint16) conn {
	return conn{src: src, dst: dst, proto: proto, port: port, allowed: true, egress: 255, ingress: 255}
}

func no(src, dst string, proto Protocol, port uint16) conn {
	return conn{src: src, dst: dst, proto: proto, port: port, egress: 255, ingress: 255}
}

func (c conn) reasons(eg, in Reason) conn     { c.egress, c.ingress = eg, in; return c }
func (c conn) allowedBy(refs ...RuleRef) conn { c.by = refs; return c }
func (c conn) byRule(ref string) conn         { c.cluster = ref; return c }

// TestSemantics pins each rule of the NetworkPolicy semantics, as the
// Kubernetes "Network Policies" concept page and the networking.k8s.io/v1
// API reference state it (quoted or cited per case), on Decide and on
// Evaluate of the compiled IR alike.
func TestSemantics(t *testing.T) {
	tests := []struct {
		name     string
		policies []*networkingv1.NetworkPolicy
		conns    []conn
		problems int
	}{
		{
			name: `"By default, a pod is non-isolated for ingress" (and egress): no policy, everything flows`,
			conns: []conn{
				ok("x/a", "y/b", TCP, 80).reasons(NotIsolated, NotIsolated),
				ok("172.16.0.1", "x/a", UDP, 53),
				ok("x/a6", "2001:db8::1", TCP, 443),
			},
		},
		{
			name:     "default deny ingress: podSelector {} without ingress rules isolates every pod of its namespace for ingress only",
			policies: []*networkingv1.NetworkPolicy{np("x", "deny", sel())},
			conns: []conn{
				no("y/a", "x/a", TCP, 80).reasons(NotIsolated, Denied),
				no("x/b", "x/a", TCP, 80),
				no("172.16.0.1", "x/c", TCP, 80),
				ok("x/a", "y/a", TCP, 80).reasons(NotIsolated, NotIsolated),
				ok("y/a", "z/a", TCP, 80),
			},
		},
		{
			name:     "default deny all: policyTypes [Ingress, Egress] without rules",
			policies: []*networkingv1.NetworkPolicy{np("x", "deny", sel(), in, out)},
			conns: []conn{
				no("x/a", "y/a", TCP, 80).reasons(Denied, NotIsolated),
				no("x/a", "172.16.0.1", TCP, 80),
				no("y/a", "x/a", TCP, 80).reasons(NotIsolated, Denied),
			},
		},
		{
			name: "policyTypes default: a policy with egress rules and no policyTypes is about egress too",
			policies: []*networkingv1.NetworkPolicy{
				withEgress(np("x", "eg", sel("pod", "a")), to(peers(podPeer(sel("pod", "b"))))),
			},
			conns: []conn{
				ok("x/a", "x/b", TCP, 80).reasons(AllowedByRule, NotIsolated).allowedBy(RuleRef{"x/eg", 0}),
				no("x/a", "x/c", TCP, 80).reasons(Denied, NotIsolated),
				// and, as every policy, about ingress: it has no ingress rule, so nothing comes in
				no("x/b", "x/a", TCP, 80).reasons(NotIsolated, Denied),
			},
		},
		{
			name: "policyTypes default: without egress rules a policy is not about egress",
			policies: []*networkingv1.NetworkPolicy{
				withIngress(np("x", "in", sel("pod", "a")), from(nil)),
			},
			conns: []conn{ok("x/a", "172.16.0.1", TCP, 80).reasons(NotIsolated, NotIsolated)},
		},
		{
			name: "policyTypes [Egress]: its ingress rules do not apply and it does not isolate for ingress",
			policies: []*networkingv1.NetworkPolicy{
				withIngress(np("x", "eg", sel("pod", "a"), out), from(peers(podPeer(sel("pod", "b"))))),
			},
			conns: []conn{
				ok("z/c", "x/a", TCP, 80).reasons(NotIsolated, NotIsolated),
				no("x/a", "x/b", TCP, 80).reasons(Denied, NotIsolated),
			},
		},
		{
			name: `"policies are additive": a deny-all and an allow compose to the allow`,
			policies: []*networkingv1.NetworkPolicy{
				np("x", "deny", sel()),
				withIngress(np("x", "allow-b", sel("pod", "a")), from(peers(podPeer(sel("pod", "b"))))),
			},
			conns: []conn{
				ok("x/b", "x/a", TCP, 80).allowedBy(RuleRef{"x/allow-b", 0}),
				no("x/c", "x/a", TCP, 80),
				no("x/b", "x/c", TCP, 80),
			},
		},
		{
			name: "ingress rule with no from allows every source, pods and external",
			policies: []*networkingv1.NetworkPolicy{
				withIngress(np("x", "all", sel("pod", "a")), from(nil, port(corev1.ProtocolTCP, 80))),
			},
			conns: []conn{ok("172.16.0.1", "x/a", TCP, 80), ok("y/c", "x/a", TCP, 80), no("y/c", "x/a", TCP, 81)},
		},
		{
			name: "podSelector alone in a peer selects pods of the policy's own namespace",
			policies: []*networkingv1.NetworkPolicy{
				withIngress(np("x", "own", sel("pod", "a")), from(peers(podPeer(sel())))),
			},
			conns: []conn{ok("x/b", "x/a", TCP, 80), no("y/b", "x/a", TCP, 80), no("172.16.0.1", "x/a", TCP, 80)},
		},
		{
			name: "namespaceSelector {} alone: all pods in all namespaces, but not external addresses (gotcha)",
			policies: []*networkingv1.NetworkPolicy{
				withIngress(np("x", "allns", sel("pod", "a")), from(peers(nsPeer(sel())))),
			},
			conns: []conn{
				ok("y/c", "x/a", TCP, 80), ok("z/b6", "x/a6", TCP, 80), ok("x/b", "x/a", TCP, 80),
				no("172.16.0.1", "x/a", TCP, 80), no("2001:db8::1", "x/a6", TCP, 80),
				// a namespace whose labels are unknown cannot be selected, not even by {}
				no("w/a", "x/a", TCP, 80),
			},
		},
		{
			name: "namespaceSelector and podSelector in one peer is AND",
			policies: []*networkingv1.NetworkPolicy{
				withIngress(np("x", "and", sel("pod", "a")), from(peers(nsPodPeer(sel("team", "red"), sel("pod", "b"))))),
			},
			conns: []conn{ok("y/b", "x/a", TCP, 80), no("y/a", "x/a", TCP, 80), no("x/b", "x/a", TCP, 80), no("z/b", "x/a", TCP, 80)},
		},
		{
			name: "namespaceSelector and podSelector as two peers is OR",
			policies: []*networkingv1.NetworkPolicy{
				withIngress(np("x", "or", sel("pod", "a")), from(peers(nsPeer(sel("team", "red")), podPeer(sel("pod", "b"))))),
			},
			conns: []conn{ok("y/b", "x/a", TCP, 80), ok("y/a", "x/a", TCP, 80), ok("x/b", "x/a", TCP, 80), no("x/c", "x/a", TCP, 80), no("z/b", "x/a", TCP, 80)},
		},
		{
			name: "matchExpressions: NotIn and DoesNotExist match pods and namespaces without the key",
			policies: []*networkingv1.NetworkPolicy{
				withIngress(np("x", "expr", sel("pod", "a")),
					from(peers(nsPodPeer(expr("team", metav1.LabelSelectorOpNotIn, "blue"), expr("pod", metav1.LabelSelectorOpIn, "b", "c")))),
					from(peers(nsPeer(expr("team", metav1.LabelSelectorOpDoesNotExist))), port("", 9)),
				),
			},
			conns: []conn{
				ok("y/b", "x/a", TCP, 80), ok("z/c", "x/a", TCP, 80), no("x/b", "x/a", TCP, 80), no("y/a", "x/a", TCP, 80),
				ok("z/a", "x/a", TCP, 9).allowedBy(RuleRef{"x/expr", 1}), no("y/a", "x/a", TCP, 9),
			},
		},
		{
			name:     "a policy selects pods only in its own namespace",
			policies: []*networkingv1.NetworkPolicy{np("y", "deny", sel("pod", "a"))},
			conns:    []conn{ok("z/a", "x/a", TCP, 80), no("z/a", "y/a", TCP, 80)},
		},
		{
			name: "ipBlock excepts: the CIDR minus its excepts",
			policies: []*networkingv1.NetworkPolicy{
				withIngress(np("x", "cidr", sel("pod", "a")), from(peers(cidrPeer("172.16.0.0/16", "172.16.0.0/24")))),
			},
			conns: []conn{ok("172.16.1.1", "x/a", TCP, 80), no("172.16.0.1", "x/a", TCP, 80), no("172.17.0.1", "x/a", TCP, 80)},
		},
		{
			name: "ipBlock matches pod addresses too (e2e: should allow egress access to server in CIDR block)",
			policies: []*networkingv1.NetworkPolicy{
				withEgress(np("x", "cidr", sel("pod", "a"), out), to(peers(cidrPeer("10.2.0.2/32")))),
			},
			conns: []conn{ok("x/a", "y/b", TCP, 80), no("x/a", "y/a", TCP, 80), no("x/a6", "y/b6", TCP, 80)},
		},
		{
			name: "ipBlock except of a pod address denies it (e2e: should enforce except clause while egress access to server in CIDR block)",
			policies: []*networkingv1.NetworkPolicy{
				withEgress(np("x", "cidr", sel("pod", "a"), out), to(peers(cidrPeer("10.0.0.0/8", "10.1.0.2/32")))),
			},
			conns: []conn{no("x/a", "x/b", TCP, 80), ok("x/a", "x/c", TCP, 80), ok("x/a", "y/b", TCP, 80)},
		},
		{
			name: "an address in a CIDR and its except is allowed by another policy's ipBlock (e2e: IP overlapping both IPBlock.CIDR and IPBlock.Except is allowed)",
			policies: []*networkingv1.NetworkPolicy{
				withEgress(np("x", "cidr", sel("pod", "a"), out), to(peers(cidrPeer("10.0.0.0/8", "10.1.0.2/32")))),
				withEgress(np("x", "host", sel("pod", "a"), out), to(peers(cidrPeer("10.1.0.2/32")))),
			},
			conns: []conn{ok("x/a", "x/b", TCP, 80).allowedBy(RuleRef{"x/host", 0})},
		},
		{
			name: "ipBlock of one family does not match the other; IPv6 blocks work alike",
			policies: []*networkingv1.NetworkPolicy{
				withIngress(np("x", "v6", sel("pod", "a")), from(peers(cidrPeer("fd00::/16", "fd00:3::/32")))),
			},
			conns: []conn{ok("y/b6", "x/a6", TCP, 80), no("z/b6", "x/a6", TCP, 80), no("y/b", "x/a", TCP, 80)},
		},
		{
			name: "protocol defaults to TCP; other protocols are not matched by a port entry",
			policies: []*networkingv1.NetworkPolicy{
				withIngress(np("x", "tcp80", sel("pod", "a")), from(nil, port("", 80))),
			},
			conns: []conn{ok("y/a", "x/a", TCP, 80), no("y/a", "x/a", UDP, 80), no("y/a", "x/a", SCTP, 80), no("y/a", "x/a", 1, 0)},
		},
		{
			name: "SCTP is not TCP (e2e: should not mistakenly treat 'protocol: SCTP' as 'protocol: TCP')",
			policies: []*networkingv1.NetworkPolicy{
				withIngress(np("x", "sctp", sel()), from(nil, port(corev1.ProtocolSCTP, 81))),
			},
			conns: []conn{no("y/a", "x/a", TCP, 81), ok("y/a", "x/a", SCTP, 81)},
		},
		{
			name: "a protocol without a port matches every port of that protocol",
			policies: []*networkingv1.NetworkPolicy{
				withIngress(np("x", "udp", sel()), from(nil, networkingv1.NetworkPolicyPort{Protocol: ptr(corev1.ProtocolUDP)})),
			},
			conns: []conn{ok("y/a", "x/a", UDP, 1), ok("y/a", "x/a", UDP, 65535), no("y/a", "x/a", TCP, 53)},
		},
		{
			name: "empty ports allow every port and protocol, ICMP included",
			policies: []*networkingv1.NetworkPolicy{
				withIngress(np("x", "any", sel()), from(peers(podPeer(sel())))),
			},
			conns: []conn{ok("x/b", "x/a", 1, 0), ok("x/b", "x/a", UDP, 5353), ok("x/b6", "x/a6", 58, 0)},
		},
		{
			name: "endPort: port..endPort inclusive",
			policies: []*networkingv1.NetworkPolicy{
				withIngress(np("x", "range", sel()), from(nil, portRange(8000, 8010))),
			},
			conns: []conn{no("y/a", "x/a", TCP, 7999), ok("y/a", "x/a", TCP, 8000), ok("y/a", "x/a", TCP, 8010), no("y/a", "x/a", TCP, 8011)},
		},
		{
			name: "endPort requires a numeric port no greater than it: otherwise the entry matches nothing (and is a Problem)",
			policies: []*networkingv1.NetworkPolicy{
				withIngress(np("x", "bad", sel()),
					from(nil, networkingv1.NetworkPolicyPort{EndPort: ptr(int32(90))}),
					from(nil, portRange(90, 80)),
					from(nil, networkingv1.NetworkPolicyPort{Port: ptr(intstr.FromString("http")), EndPort: ptr(int32(90))}),
				),
			},
			conns:    []conn{no("y/a", "x/a", TCP, 85), no("y/a", "x/a", TCP, 90), no("y/a", "x/b", TCP, 80), no("y/a", "x/a", TCP, 8080)},
			problems: 3,
		},
		{
			name: "ingress named port resolves on the selected pod itself",
			policies: []*networkingv1.NetworkPolicy{
				withIngress(np("x", "http", sel()), from(nil, namedPort("", "http"))),
			},
			conns: []conn{
				ok("y/a", "x/a", TCP, 8080), no("y/a", "x/a", TCP, 80),
				ok("y/a", "x/b", TCP, 80), no("y/a", "x/b", TCP, 8080),
			},
		},
		{
			name: "egress named port resolves on each destination pod (and only on pods)",
			policies: []*networkingv1.NetworkPolicy{
				withEgress(np("x", "http", sel("pod", "a"), out), to(nil, namedPort("", "http"))),
			},
			conns: []conn{
				ok("x/a", "y/b", TCP, 80), no("x/a", "y/b", TCP, 8080),
				ok("x/a", "y/c", TCP, 8080), no("x/a", "y/c", TCP, 80),
				ok("x/a6", "z/a6", TCP, 8080),
				no("x/a", "172.16.0.1", TCP, 80), no("x/a", "172.16.0.1", TCP, 8080),
			},
		},
		{
			name: "egress named port with peers: the peer must match and the name resolve on it",
			policies: []*networkingv1.NetworkPolicy{
				withEgress(np("x", "http", sel("pod", "a"), out),
					to(peers(nsPeer(sel("team", "red")), cidrPeer("10.3.0.0/16")), namedPort("", "http"), port("", 443))),
			},
			conns: []conn{
				ok("x/a", "y/b", TCP, 80), ok("x/a", "z/c", TCP, 8080), no("x/a", "x/c", TCP, 8080),
				ok("x/a", "y/a", TCP, 443), ok("x/a", "10.3.9.9", TCP, 443), no("x/a", "10.3.9.9", TCP, 80),
			},
		},
		{
			name: "a named port matches only with its protocol",
			policies: []*networkingv1.NetworkPolicy{
				withIngress(np("x", "dns", sel()), from(nil, namedPort("", "dns"))),
				withIngress(np("y", "dns", sel()), from(nil, namedPort(corev1.ProtocolUDP, "dns"))),
			},
			conns: []conn{no("z/a", "x/b", TCP, 53), no("z/a", "x/b", UDP, 53), ok("z/a", "y/b", UDP, 53)},
		},
		{
			name: "a named port no pod has matches nothing; the rule does not turn into all ports",
			policies: []*networkingv1.NetworkPolicy{
				withIngress(np("x", "nope", sel()), from(nil, namedPort("", "nope"))),
			},
			conns: []conn{no("y/a", "x/a", TCP, 8080), no("y/a", "x/a", 1, 0)},
		},
		{
			name: "both sides must allow: source egress and destination ingress",
			policies: []*networkingv1.NetworkPolicy{
				withEgress(np("x", "eg", sel("pod", "a"), out), to(peers(nsPeer(sel())))),
				np("y", "deny", sel("pod", "b")),
			},
			conns: []conn{
				no("x/a", "y/b", TCP, 80).reasons(AllowedByRule, Denied),
				ok("x/a", "y/a", TCP, 80).reasons(AllowedByRule, NotIsolated),
				no("x/a", "172.16.0.1", TCP, 80).reasons(Denied, NotIsolated),
			},
		},
		{
			name:     `"a pod cannot block access to itself"`,
			policies: []*networkingv1.NetworkPolicy{np("x", "deny", sel(), in, out)},
			conns:    []conn{ok("x/a", "x/a", TCP, 80).reasons(Self, Self), no("x/a", "x/b", TCP, 80)},
		},
		{
			name:     "traffic from the pod's own node is always allowed in, not to other nodes' pods, and egress to the node is not exempt",
			policies: []*networkingv1.NetworkPolicy{np("x", "deny", sel(), in, out), np("y", "deny", sel())},
			conns: []conn{
				ok("192.168.0.1", "x/a", TCP, 80).reasons(NotIsolated, LocalNode),
				no("192.168.0.1", "y/a", TCP, 80),
				no("x/a", "192.168.0.1", TCP, 10250),
				// a hostNetwork pod sends as its node
				ok("x/h", "x/b", TCP, 80).reasons(NotIsolated, LocalNode),
			},
		},
		{
			name: "hostNetwork pods: never isolated, never selected as peers by selectors, reachable by an ipBlock of their node",
			policies: []*networkingv1.NetworkPolicy{
				np("x", "deny-h", sel("pod", "h"), in, out),
				withEgress(np("x", "eg", sel("pod", "a"), out), to(peers(nsPeer(sel())))),
				withEgress(np("x", "eg-b", sel("pod", "b"), out), to(peers(cidrPeer("192.168.0.0/24")))),
			},
			conns: []conn{
				ok("x/h", "172.16.0.1", TCP, 80).reasons(NotIsolated, NotIsolated),
				no("x/a", "x/h", TCP, 80).reasons(Denied, NotIsolated),
				ok("x/b", "x/h", TCP, 80).reasons(AllowedByRule, NotIsolated),
			},
		},
		{
			name: "an invalid selector selects nothing (and is a Problem)",
			policies: []*networkingv1.NetworkPolicy{
				np("x", "bad-sel", &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "pod", Operator: "Like"}}}),
				withIngress(np("y", "bad-peer", sel()), from(peers(podPeer(expr("pod", metav1.LabelSelectorOpIn))))),
			},
			conns:    []conn{ok("z/a", "x/a", TCP, 80), no("y/b", "y/a", TCP, 80)},
			problems: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fixture(tt.policies...)
			ir := Compile(s, Options{})
			if len(ir.Problems) != tt.problems {
				t.Errorf("problems: %v, want %d", ir.Problems, tt.problems)
			}
			ev := NewEvaluator(ir)
			for _, c := range tt.conns {
				src, dst := ep(s, c.src), ep(s, c.dst)
				decided := Decide(s, src, dst, c.proto, c.port)
				evaluated := ev.Evaluate(src.IP, dst.IP, c.proto, c.port)
				for name, d := range map[string]Decision{"Decide": decided, "Evaluate": evaluated} {
					what := fmt.Sprintf("%s %s -> %s %s/%d: %s", name, c.src, c.dst, c.proto, c.port, d)
					if d.Allowed != c.allowed {
						t.Errorf("%s; want allowed=%v", what, c.allowed)
					}
					if c.egress != 255 && d.Egress.Reason != c.egress {
						t.Errorf("%s; want egress %s", what, c.egress)
					}
					if c.ingress != 255 && d.Ingress.Reason != c.ingress {
						t.Errorf("%s; want ingress %s", what, c.ingress)
					}
					if c.by != nil {
						got := d.Ingress.AllowedBy
						if d.Egress.Reason == AllowedByRule {
							got = d.Egress.AllowedBy
						}
						if !reflect.DeepEqual(got, c.by) {
							t.Errorf("%s; want allowed by %v", what, c.by)
						}
					}
				}
				if !sameDecision(decided, evaluated) {
					t.Errorf("%s -> %s: Decide %s, Evaluate %s", c.src, c.dst, decided, evaluated)
				}
				checkExplanation(t, Explain(s, src, dst, c.proto, c.port), decided)
			}
		})
	}
}
