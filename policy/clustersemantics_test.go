package policy

import (
	"fmt"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cnp "sigs.k8s.io/network-policy-api/apis/v1beta1"
)

// ClusterNetworkPolicy builders.

func cnpol(name string, tier cnp.Tier, priority int32, subject cnp.ClusterNetworkPolicySubject) *cnp.ClusterNetworkPolicy {
	return &cnp.ClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: cnp.ClusterNetworkPolicySpec{Tier: tier, Priority: priority, Subject: subject}}
}

func admin(name string, priority int32, subject cnp.ClusterNetworkPolicySubject) *cnp.ClusterNetworkPolicy {
	return cnpol(name, cnp.AdminTier, priority, subject)
}

func baseline(name string, priority int32, subject cnp.ClusterNetworkPolicySubject) *cnp.ClusterNetworkPolicy {
	return cnpol(name, cnp.BaselineTier, priority, subject)
}

func subjectNs(s *metav1.LabelSelector) cnp.ClusterNetworkPolicySubject {
	return cnp.ClusterNetworkPolicySubject{Namespaces: s}
}

func subjectPods(ns, pods *metav1.LabelSelector) cnp.ClusterNetworkPolicySubject {
	return cnp.ClusterNetworkPolicySubject{Pods: &cnp.NamespacedPod{NamespaceSelector: *ns, PodSelector: *pods}}
}

const (
	accept = cnp.ClusterNetworkPolicyRuleActionAccept
	deny   = cnp.ClusterNetworkPolicyRuleActionDeny
	pass   = cnp.ClusterNetworkPolicyRuleActionPass
)

func cin(p *cnp.ClusterNetworkPolicy, action cnp.ClusterNetworkPolicyRuleAction, from []cnp.ClusterNetworkPolicyIngressPeer, protos ...cnp.ClusterNetworkPolicyProtocol) *cnp.ClusterNetworkPolicy {
	p.Spec.Ingress = append(p.Spec.Ingress, cnp.ClusterNetworkPolicyIngressRule{
		Name: fmt.Sprintf("in%d", len(p.Spec.Ingress)), Action: action, From: from, Protocols: protos})
	return p
}

func ceg(p *cnp.ClusterNetworkPolicy, action cnp.ClusterNetworkPolicyRuleAction, to []cnp.ClusterNetworkPolicyEgressPeer, protos ...cnp.ClusterNetworkPolicyProtocol) *cnp.ClusterNetworkPolicy {
	p.Spec.Egress = append(p.Spec.Egress, cnp.ClusterNetworkPolicyEgressRule{
		Name: fmt.Sprintf("eg%d", len(p.Spec.Egress)), Action: action, To: to, Protocols: protos})
	return p
}

func fromNs(s *metav1.LabelSelector) []cnp.ClusterNetworkPolicyIngressPeer {
	return []cnp.ClusterNetworkPolicyIngressPeer{{Namespaces: s}}
}

func fromPods(ns, pods *metav1.LabelSelector) []cnp.ClusterNetworkPolicyIngressPeer {
	return []cnp.ClusterNetworkPolicyIngressPeer{{Pods: &cnp.NamespacedPod{NamespaceSelector: *ns, PodSelector: *pods}}}
}

func toNs(s *metav1.LabelSelector) []cnp.ClusterNetworkPolicyEgressPeer {
	return []cnp.ClusterNetworkPolicyEgressPeer{{Namespaces: s}}
}

func toPods(ns, pods *metav1.LabelSelector) []cnp.ClusterNetworkPolicyEgressPeer {
	return []cnp.ClusterNetworkPolicyEgressPeer{{Pods: &cnp.NamespacedPod{NamespaceSelector: *ns, PodSelector: *pods}}}
}

func toNets(cidrs ...cnp.CIDR) []cnp.ClusterNetworkPolicyEgressPeer {
	return []cnp.ClusterNetworkPolicyEgressPeer{{Networks: cidrs}}
}

func toNodes(s *metav1.LabelSelector) []cnp.ClusterNetworkPolicyEgressPeer {
	return []cnp.ClusterNetworkPolicyEgressPeer{{Nodes: s}}
}

func tcp(p int32) cnp.ClusterNetworkPolicyProtocol {
	return cnp.ClusterNetworkPolicyProtocol{TCP: &cnp.ClusterNetworkPolicyProtocolTCP{DestinationPort: &cnp.Port{Number: p}}}
}

func tcpRange(start, end int32) cnp.ClusterNetworkPolicyProtocol {
	return cnp.ClusterNetworkPolicyProtocol{TCP: &cnp.ClusterNetworkPolicyProtocolTCP{DestinationPort: &cnp.Port{Range: &cnp.PortRange{Start: start, End: end}}}}
}

func anyTCP() cnp.ClusterNetworkPolicyProtocol {
	return cnp.ClusterNetworkPolicyProtocol{TCP: &cnp.ClusterNetworkPolicyProtocolTCP{}}
}

func udp(p int32) cnp.ClusterNetworkPolicyProtocol {
	return cnp.ClusterNetworkPolicyProtocol{UDP: &cnp.ClusterNetworkPolicyProtocolUDP{DestinationPort: &cnp.Port{Number: p}}}
}

func sctp(p int32) cnp.ClusterNetworkPolicyProtocol {
	return cnp.ClusterNetworkPolicyProtocol{SCTP: &cnp.ClusterNetworkPolicyProtocolSCTP{DestinationPort: &cnp.Port{Number: p}}}
}

func named(name string) cnp.ClusterNetworkPolicyProtocol {
	return cnp.ClusterNetworkPolicyProtocol{DestinationNamedPort: name}
}

var (
	nsX = sel("kubernetes.io/metadata.name", "x")
	nsY = sel("kubernetes.io/metadata.name", "y")
	nsZ = sel("kubernetes.io/metadata.name", "z")
)

// TestClusterSemantics pins ClusterNetworkPolicy's semantics (the
// v1beta1 API's doc comments, quoted per case, and its conformance
// tests' expectations) on Decide and on Evaluate of the compiled IR.
// The fixture is TestSemantics's; node n2 has the label role=infra.
func TestClusterSemantics(t *testing.T) {
	tests := []struct {
		name     string
		cluster  []*cnp.ClusterNetworkPolicy
		policies []*networkingv1.NetworkPolicy
		conns    []conn
		problems int
	}{
		{
			name:    "Admin Deny: from namespace y to namespace x; others are not affected, no implicit isolation",
			cluster: []*cnp.ClusterNetworkPolicy{cin(admin("deny-y", 10, subjectNs(nsX)), deny, fromNs(nsY))},
			conns: []conn{
				no("y/a", "x/a", TCP, 80).reasons(NotIsolated, DeniedByAdmin).byRule("deny-y#0"),
				no("y/b6", "x/c6", UDP, 53).reasons(NotIsolated, DeniedByAdmin),
				ok("z/a", "x/a", TCP, 80).reasons(NotIsolated, NotIsolated),
				ok("x/a", "y/a", TCP, 80).reasons(NotIsolated, NotIsolated),
				ok("172.16.0.1", "x/a", TCP, 80).reasons(NotIsolated, NotIsolated),
			},
		},
		{
			name: `Admin Accept: "No further ingress ClusterNetworkPolicy or NetworkPolicy rules will be processed": a deny-all NetworkPolicy is overridden`,
			cluster: []*cnp.ClusterNetworkPolicy{
				cin(admin("dns", 10, subjectNs(sel())), accept, fromNs(nsY), udp(53)),
			},
			policies: []*networkingv1.NetworkPolicy{np("x", "deny", sel())},
			conns: []conn{
				ok("y/a", "x/b", UDP, 53).reasons(NotIsolated, AcceptedByAdmin).byRule("dns#0"),
				no("y/a", "x/b", TCP, 53).reasons(NotIsolated, Denied),
				no("z/a", "x/b", UDP, 53).reasons(NotIsolated, Denied),
				ok("z/a", "y/b", UDP, 53).reasons(NotIsolated, NotIsolated),
			},
		},
		{
			name: "Admin Deny overrides a NetworkPolicy that allows",
			cluster: []*cnp.ClusterNetworkPolicy{
				cin(admin("deny-y", 10, subjectNs(nsX)), deny, fromNs(nsY), tcp(80)),
			},
			policies: []*networkingv1.NetworkPolicy{withIngress(np("x", "allow-all", sel()), from(nil))},
			conns: []conn{
				no("y/a", "x/a", TCP, 80).reasons(NotIsolated, DeniedByAdmin),
				ok("y/a", "x/a", TCP, 81).reasons(NotIsolated, AllowedByRule),
			},
		},
		{
			name: `priority: "Policies with lower priority values have higher precedence"`,
			cluster: []*cnp.ClusterNetworkPolicy{
				cin(admin("deny", 20, subjectNs(nsX)), deny, fromNs(sel())),
				cin(admin("accept", 5, subjectNs(nsX)), accept, fromNs(nsY)),
				ceg(admin("deny-eg", 1, subjectNs(nsX)), deny, toNs(nsZ)),
				ceg(admin("accept-eg", 2, subjectNs(nsX)), accept, toNs(sel())),
			},
			conns: []conn{
				ok("y/a", "x/a", TCP, 80).reasons(NotIsolated, AcceptedByAdmin).byRule("accept#0"),
				no("z/a", "x/a", TCP, 80).reasons(NotIsolated, DeniedByAdmin).byRule("deny#0"),
				no("x/a", "z/b", TCP, 80).reasons(DeniedByAdmin, NotIsolated).byRule("deny-eg#0"),
				ok("x/a", "y/b", TCP, 80).reasons(AcceptedByAdmin, NotIsolated).byRule("accept-eg#0"),
			},
		},
		{
			name: "same priority: the API lets the implementation pick; podnet reads them by name, and each applies to its own subject only",
			cluster: []*cnp.ClusterNetworkPolicy{
				cin(admin("b-accept", 10, subjectNs(nsX)), accept, fromNs(nsY)),
				cin(admin("a-deny", 10, subjectNs(nsX)), deny, fromNs(nsY), tcp(80)),
				cin(admin("c-deny", 10, subjectNs(nsZ)), deny, fromNs(nsY), tcp(8080)),
			},
			conns: []conn{
				no("y/a", "x/a", TCP, 80).byRule("a-deny#0"),
				ok("y/a", "x/a", TCP, 8080).byRule("b-accept#0"),
				no("y/a", "z/a", TCP, 8080).byRule("c-deny#0"),
				ok("y/a", "z/a", TCP, 80),
			},
		},
		{
			name: `rule order within a policy: "a rule that appears at the top ... would take the highest precedence"`,
			cluster: []*cnp.ClusterNetworkPolicy{
				ceg(ceg(admin("web-only", 10, subjectPods(nsX, sel("pod", "a"))), accept, toNs(sel()), tcp(80)),
					deny, toNets("0.0.0.0/0", "::/0")),
			},
			conns: []conn{
				ok("x/a", "y/b", TCP, 80).reasons(AcceptedByAdmin, NotIsolated).byRule("web-only#0"),
				no("x/a", "y/b", TCP, 81).reasons(DeniedByAdmin, NotIsolated).byRule("web-only#1"),
				no("x/a6", "2001:db8::1", TCP, 80).reasons(DeniedByAdmin, NotIsolated),
				no("x/a", "172.16.0.1", UDP, 53),
				ok("x/b", "172.16.0.1", UDP, 53).reasons(NotIsolated, NotIsolated),
			},
		},
		{
			name: `Admin Pass: "Skips all further ClusterNetworkPolicy rules in the current tier", then NetworkPolicy, then Baseline`,
			cluster: []*cnp.ClusterNetworkPolicy{
				cin(admin("pass-y", 1, subjectNs(sel("team", "blue"))), pass, fromNs(nsY)),
				cin(admin("deny-all", 2, subjectNs(sel())), deny, fromNs(sel())),
				cin(baseline("base-deny-y", 1, subjectNs(sel())), deny, fromNs(nsY)),
			},
			policies: []*networkingv1.NetworkPolicy{
				withIngress(np("x", "allow-y-to-a", sel("pod", "a")), from(peers(nsPeer(nsY)))),
				np("x", "deny-c", sel("pod", "c")),
			},
			conns: []conn{
				// pass, then NetworkPolicy allows
				ok("y/a", "x/a", TCP, 80).reasons(NotIsolated, AllowedByRule).byRule("pass-y#0"),
				// pass, then NetworkPolicy isolates and denies
				no("y/a", "x/c", TCP, 80).reasons(NotIsolated, Denied).byRule("pass-y#0"),
				// pass, no NetworkPolicy: the Baseline tier denies
				no("y/a", "x/b", TCP, 80).reasons(NotIsolated, DeniedByBaseline).byRule("base-deny-y#0"),
				// no pass: the lower Admin rule denies
				no("z/a", "x/a", TCP, 80).reasons(NotIsolated, DeniedByAdmin).byRule("deny-all#0"),
				no("x/a", "y/a", TCP, 80).reasons(NotIsolated, DeniedByAdmin),
			},
		},
		{
			name: `Baseline: "can be overridden by the v1.NetworkPolicy"; it decides only for pods NetworkPolicy does not isolate`,
			cluster: []*cnp.ClusterNetworkPolicy{
				cin(cin(baseline("default", 10, subjectNs(sel())), accept, fromNs(nsZ), tcp(80)), deny, fromNs(sel())),
			},
			policies: []*networkingv1.NetworkPolicy{
				withIngress(np("x", "allow-y", sel("pod", "a")), from(peers(nsPeer(nsY)))),
			},
			conns: []conn{
				// x/a is isolated: NetworkPolicy decides, both ways
				ok("y/b", "x/a", TCP, 80).reasons(NotIsolated, AllowedByRule),
				no("z/b", "x/a", TCP, 80).reasons(NotIsolated, Denied),
				// x/b is not: the Baseline tier decides
				ok("z/b", "x/b", TCP, 80).reasons(NotIsolated, AcceptedByBaseline).byRule("default#0"),
				no("y/b", "x/b", TCP, 80).reasons(NotIsolated, DeniedByBaseline).byRule("default#1"),
				ok("172.16.0.1", "x/b", TCP, 80).reasons(NotIsolated, NotIsolated),
			},
		},
		{
			name: "Baseline Pass goes on to the default, which allows; isolation in one direction does not take the other from Baseline",
			cluster: []*cnp.ClusterNetworkPolicy{
				ceg(ceg(baseline("b", 10, subjectNs(nsX)), pass, toNs(nsY)), deny, toNs(sel())),
			},
			policies: []*networkingv1.NetworkPolicy{np("x", "deny-in", sel())},
			conns: []conn{
				ok("x/a", "y/a", TCP, 80).reasons(NotIsolated, NotIsolated).byRule("b#0"),
				no("x/a", "z/a", TCP, 80).reasons(DeniedByBaseline, NotIsolated).byRule("b#1"),
			},
		},
		{
			name: `egress Accept: "any ingress rules at the destination do apply"`,
			cluster: []*cnp.ClusterNetworkPolicy{
				ceg(admin("x-to-y", 10, subjectNs(nsX)), accept, toNs(nsY)),
			},
			policies: []*networkingv1.NetworkPolicy{np("y", "deny", sel()), np("x", "deny-out", sel(), out)},
			conns: []conn{
				no("x/a", "y/a", TCP, 80).reasons(AcceptedByAdmin, Denied),
				no("x/a", "z/a", TCP, 80).reasons(Denied, NotIsolated),
			},
		},
		{
			name: `networks: "cluster-internal traffic will be checked against the rule as well", per family`,
			cluster: []*cnp.ClusterNetworkPolicy{
				ceg(admin("nets", 10, subjectNs(nsX)), deny, toNets("10.2.0.0/16", "fd00:3::/32")),
			},
			conns: []conn{
				no("x/a", "y/a", TCP, 80).reasons(DeniedByAdmin, NotIsolated),
				ok("x/a6", "y/a6", TCP, 80),
				ok("x/a", "z/a", TCP, 80),
				no("x/a6", "z/a6", TCP, 80),
				ok("y/a", "x/a", TCP, 80),
			},
		},
		{
			name: "ports: TCP, UDP, SCTP numbers, ranges, a protocol without port; no protocols matches every protocol",
			cluster: []*cnp.ClusterNetworkPolicy{
				cin(admin("ports", 10, subjectNs(nsX)), deny, fromNs(nsY), tcp(80), tcpRange(8000, 8080), udp(53), sctp(9000)),
				cin(admin("any-tcp", 11, subjectNs(nsX)), deny, fromNs(nsZ), anyTCP()),
				cin(admin("all", 12, subjectNs(nsX)), deny, fromPods(sel(), sel("pod", "c"))),
			},
			conns: []conn{
				no("y/a", "x/a", TCP, 80), ok("y/a", "x/a", TCP, 81), no("y/a", "x/a", TCP, 8000),
				no("y/a6", "x/a6", TCP, 8080), ok("y/a", "x/a", TCP, 8081), ok("y/a", "x/a", TCP, 7999),
				no("y/a", "x/a", UDP, 53), ok("y/a", "x/a", TCP, 53), ok("y/a", "x/a", UDP, 80),
				no("y/a", "x/a", SCTP, 9000), ok("y/a", "x/a", SCTP, 80), ok("y/a", "x/a", 1, 0),
				no("z/a", "x/a", TCP, 1), no("z/a", "x/a", TCP, 65535), ok("z/a", "x/a", UDP, 53),
				no("z/c", "x/a", 1, 0), no("z/c6", "x/b6", 58, 0), no("y/c", "x/a", UDP, 1),
			},
		},
		{
			name: "named ports: ingress resolves on the subject, egress on the peer; a container port's name with its protocol",
			cluster: []*cnp.ClusterNetworkPolicy{
				cin(admin("http-in", 10, subjectNs(nsX)), deny, fromNs(nsY), named("http")),
				ceg(admin("dns-out", 10, subjectNs(nsZ)), deny, toPods(nsY, sel("pod", "b")), named("dns")),
			},
			conns: []conn{
				no("y/a", "x/a", TCP, 8080), ok("y/a", "x/a", TCP, 80),
				no("y/a", "x/b", TCP, 80), ok("y/a", "x/b", TCP, 8080), ok("y/a", "x/b", UDP, 80),
				no("z/a", "y/b", UDP, 53), ok("z/a", "y/b", TCP, 53), ok("z/a", "y/a", UDP, 53),
			},
		},
		{
			name: "pods peers and subjects: namespace AND pod selectors; host-networked pods are neither",
			cluster: []*cnp.ClusterNetworkPolicy{
				cin(admin("p", 10, subjectPods(sel("team", "red"), sel("pod", "a"))), deny, fromPods(sel("team", "blue"), sel("pod", "b"))),
				cin(admin("every-pod", 20, subjectPods(nsY, sel("pod", "b"))), deny, fromNs(sel())),
				ceg(admin("all", 20, subjectNs(nsZ)), deny, toNs(sel())),
			},
			conns: []conn{
				no("x/b", "y/a", UDP, 53).reasons(NotIsolated, DeniedByAdmin).byRule("p#0"),
				ok("x/a", "y/a", TCP, 80).reasons(NotIsolated, NotIsolated),
				no("x/c", "y/b", TCP, 80).byRule("every-pod#0"),
				// hostNetwork x/h sends from n1's address: no pod, no peer
				ok("x/h", "y/b", TCP, 80).reasons(NotIsolated, NotIsolated),
				ok("172.16.0.1", "y/b", TCP, 80),
				no("z/a", "x/a", TCP, 80).reasons(DeniedByAdmin, NotIsolated),
				ok("z/a", "172.16.0.1", TCP, 80).reasons(NotIsolated, NotIsolated),
			},
		},
		{
			name: `nodes peers (experimental): "the IPs present in the node.Status.Addresses"`,
			cluster: []*cnp.ClusterNetworkPolicy{
				ceg(admin("infra", 10, subjectNs(sel())), deny, toNodes(sel("role", "infra"))),
			},
			conns: []conn{
				no("x/a", "192.168.0.2", TCP, 10250).reasons(DeniedByAdmin, NotIsolated),
				ok("x/a", "192.168.0.1", TCP, 10250),
				ok("x/a", "y/a", TCP, 10250),
			},
		},
		{
			name: `a pod's traffic to itself and from its node: "A Pod connecting directly to its own Pod IP is never subject to ClusterNetworkPolicy"`,
			cluster: []*cnp.ClusterNetworkPolicy{
				ceg(cin(admin("lockdown", 10, subjectNs(sel())), deny, fromNs(sel())), deny, toNets("0.0.0.0/0", "::/0")),
			},
			conns: []conn{
				ok("x/a", "x/a", TCP, 80).reasons(Self, Self),
				ok("x/a6", "x/a6", TCP, 80).reasons(Self, Self),
				ok("192.168.0.1", "x/a", TCP, 80).reasons(NotIsolated, LocalNode),
				no("x/a", "x/b", TCP, 80).reasons(DeniedByAdmin, DeniedByAdmin),
			},
		},
		{
			name: `fail closed: a peer without a field makes an Accept rule match nothing, a Deny or Pass rule "a 'Deny all' rule"`,
			cluster: []*cnp.ClusterNetworkPolicy{
				cin(admin("broken-accept", 1, subjectNs(nsX)), accept, []cnp.ClusterNetworkPolicyIngressPeer{{}}),
				cin(admin("broken-pass", 2, subjectNs(nsX)), pass, []cnp.ClusterNetworkPolicyIngressPeer{{}}, tcp(80)),
				cin(admin("accept-y", 3, subjectNs(nsX)), accept, fromNs(nsY)),
				ceg(ceg(admin("domains", 1, subjectNs(nsZ)), accept, []cnp.ClusterNetworkPolicyEgressPeer{{DomainNames: []cnp.DomainName{"example.com"}}}),
					deny, toNets("172.16.0.0/12")),
			},
			conns: []conn{
				no("y/a", "x/a", TCP, 80).reasons(NotIsolated, DeniedByAdmin).byRule("broken-pass#0"),
				no("y/a", "x/a", UDP, 53).byRule("broken-pass#0"),
				no("172.16.0.1", "x/a", TCP, 80),
				ok("192.168.0.1", "x/a", TCP, 80).reasons(NotIsolated, LocalNode),
				no("z/a", "172.16.0.1", TCP, 443).byRule("domains#1"),
			},
			problems: 3,
		},
		{
			name: "an invalid policy (two subject fields, unknown tier) applies to no pod",
			cluster: []*cnp.ClusterNetworkPolicy{
				cin(admin("two", 1, cnp.ClusterNetworkPolicySubject{Namespaces: sel(), Pods: &cnp.NamespacedPod{}}), deny, fromNs(sel())),
				cin(cnpol("tier", "Other", 1, subjectNs(sel())), deny, fromNs(sel())),
			},
			conns:    []conn{ok("y/a", "x/a", TCP, 80).reasons(NotIsolated, NotIsolated)},
			problems: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fixture(tt.policies...)
			s.Nodes[1].Labels = map[string]string{"role": "infra"}
			for _, p := range tt.cluster {
				s.ClusterPolicies = append(s.ClusterPolicies, ClusterPolicyFromAPI(p))
			}
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
					if c.cluster != "" && !namesRule(d, c.cluster) {
						t.Errorf("%s; want a side naming %s", what, c.cluster)
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

// namesRule reports whether a side of d names the cluster rule ref
// ("policy#index") as its Admin or Baseline rule.
func namesRule(d Decision, ref string) bool {
	for _, v := range []Verdict{d.Egress, d.Ingress} {
		for _, r := range []*ClusterRuleRef{v.Admin, v.Baseline} {
			if r != nil && fmt.Sprintf("%s#%d", r.Policy, r.Index) == ref {
				return true
			}
		}
	}
	return false
}

func TestClusterPolicyFromAPI(t *testing.T) {
	p := cnpol("p", cnp.AdminTier, 7, subjectPods(nsX, sel("pod", "a")))
	ceg(p, deny, []cnp.ClusterNetworkPolicyEgressPeer{{Networks: []cnp.CIDR{"10.0.0.0/8", "fd00::/8"}}, {Nodes: sel()}}, tcpRange(1000, 2000), udp(53))
	ceg(p, pass, toNets("10.0.0.1/8"))                                                    // not masked
	ceg(p, accept, toNets("10.0.0.0/8"), named("http"))                                   // a named port with a network
	ceg(p, deny, toNs(sel()), tcpRange(2000, 2000))                                       // start not below end
	ceg(p, "Allow", toNs(sel()))                                                          // unknown action
	ceg(p, deny, []cnp.ClusterNetworkPolicyEgressPeer{{Namespaces: sel(), Nodes: sel()}}) // two fields
	ceg(p, accept, nil)                                                                   // no peers
	cin(p, accept, fromNs(nsY), cnp.ClusterNetworkPolicyProtocol{TCP: &cnp.ClusterNetworkPolicyProtocolTCP{}, UDP: &cnp.ClusterNetworkPolicyProtocolUDP{}})
	got := ClusterPolicyFromAPI(p)
	if got.Name != "p" || got.Tier != AdminTier || got.Priority != 7 || got.Invalid != "" || got.Subject.Pods == nil {
		t.Fatalf("policy: %+v", got)
	}
	r := got.Egress[0]
	if r.Broken != "" || r.Action != Deny || len(r.Peers) != 2 || len(r.Peers[0].Networks) != 2 || r.Peers[1].Nodes == nil ||
		r.Protocols[0] != (ClusterProtocol{Protocol: TCP, First: 1000, Last: 2000}) || r.Protocols[1] != (ClusterProtocol{Protocol: UDP, First: 53, Last: 53}) {
		t.Errorf("rule 0: %+v", r)
	}
	for i := 1; i < len(got.Egress); i++ {
		if got.Egress[i].Broken == "" {
			t.Errorf("egress rule %d not broken: %+v", i, got.Egress[i])
		}
	}
	if got.Ingress[0].Broken == "" {
		t.Errorf("ingress rule with two protocol fields not broken: %+v", got.Ingress[0])
	}
	if p.Spec.Egress[0].To[0].Networks[0] != "10.0.0.0/8" {
		t.Error("the API object was changed")
	}
}
