package policy

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestCompileMatchesDecide is the differential test: on random clusters
// and policies, evaluating the compiled IR by address gives the same
// decision, with the same reasons, as Decide reading the API objects.
func TestCompileMatchesDecide(t *testing.T) {
	seeds := 400
	if testing.Short() {
		seeds = 60
	}
	for seed := range seeds {
		checkSeed(t, uint64(seed))
	}
}

// FuzzCompileMatchesDecide runs the same check on seeds the fuzzer picks.
func FuzzCompileMatchesDecide(f *testing.F) {
	f.Add(uint64(1))
	f.Fuzz(func(t *testing.T, seed uint64) { checkSeed(t, seed) })
}

func checkSeed(t *testing.T, seed uint64) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	s := randomSnapshot(r)
	ir := Compile(s, Options{})
	ev := NewEvaluator(ir)
	eps := endpoints(s)
	probes := []struct {
		proto Protocol
		port  uint16
	}{{TCP, 80}, {TCP, 81}, {TCP, 85}, {TCP, 8080}, {UDP, 53}, {TCP, 53}, {SCTP, 80}, {TCP, 9090}, {UDP, 0}, {1, 0}}
	checked, allowed := 0, 0
	for _, src := range eps {
		for _, dst := range eps {
			if src.IP.Is4() != dst.IP.Is4() {
				continue
			}
			for _, pr := range probes {
				want := Decide(s, src, dst, pr.proto, pr.port)
				got := ev.Evaluate(src.IP, dst.IP, pr.proto, pr.port)
				checked++
				if want.Allowed {
					allowed++
				}
				if !sameDecision(want, got) {
					t.Fatalf("seed %d: %s -> %s %s/%d:\n Decide:   %s %+v\n Evaluate: %s %+v\n%s",
						seed, src, dst, pr.proto, pr.port, want, want, got, got, dump(s, ir))
				}
			}
		}
	}
	if checked == 0 {
		t.Fatalf("seed %d: nothing checked", seed)
	}
}

func sameDecision(a, b Decision) bool {
	norm := func(v Verdict) Verdict {
		if len(v.IsolatedBy) == 0 {
			v.IsolatedBy = nil
		}
		if len(v.AllowedBy) == 0 {
			v.AllowedBy = nil
		}
		return v
	}
	a.Egress, a.Ingress = norm(a.Egress), norm(a.Ingress)
	b.Egress, b.Ingress = norm(b.Egress), norm(b.Ingress)
	return reflect.DeepEqual(a, b)
}

func dump(s *Snapshot, ir *IR) string {
	out := "snapshot:\n"
	for _, ns := range s.Namespaces {
		out += fmt.Sprintf("  ns %s %v\n", ns.Name, ns.Labels)
	}
	for _, p := range s.Pods {
		out += fmt.Sprintf("  pod %s/%s %v ips=%v host=%v node=%s ports=%v\n", p.Namespace, p.Name, p.Labels, p.IPs, p.HostNetwork, p.Node, p.Ports)
	}
	for _, np := range s.Policies {
		out += fmt.Sprintf("  policy %s/%s %+v\n", np.Namespace, np.Name, np.Spec)
	}
	for _, cp := range s.ClusterPolicies {
		out += fmt.Sprintf("  cluster policy %+v\n", cp)
	}
	out += fmt.Sprintf("ir: %+v\n", *ir)
	return out
}

// endpoints lists every pod address as that pod, hostNetwork pods as their
// node's address (still naming the pod: Decide must see through it), the
// nodes and a few external addresses.
func endpoints(s *Snapshot) []Endpoint {
	var eps []Endpoint
	for _, p := range s.Pods {
		if p.HostNetwork {
			for _, n := range s.Nodes {
				if n.Name == p.Node {
					eps = append(eps, Endpoint{Pod: p.Key(), IP: n.IPs[0]})
				}
			}
			continue
		}
		for _, ip := range p.IPs {
			eps = append(eps, Endpoint{Pod: p.Key(), IP: ip})
		}
	}
	for _, n := range s.Nodes {
		for _, ip := range n.IPs {
			eps = append(eps, Endpoint{IP: ip})
		}
	}
	for _, a := range []string{"10.0.1.5", "172.16.0.1", "2001:db8::1", "fd00::ff00:1"} {
		eps = append(eps, Endpoint{IP: netip.MustParseAddr(a)})
	}
	return eps
}

var (
	labelValues = []string{"a", "b", "c"}
	podKeys     = []string{"app", "tier", "ver"}
	nsKeys      = []string{"team", "env"}
	portNames   = []string{"http", "dns", "metrics", "nope"}
)

func pick[T any](r *rand.Rand, xs []T) T { return xs[r.IntN(len(xs))] }

func randomLabels(r *rand.Rand, keys []string) map[string]string {
	l := map[string]string{}
	for _, k := range keys {
		if r.IntN(3) > 0 {
			l[k] = pick(r, labelValues)
		}
	}
	return l
}

func randomSnapshot(r *rand.Rand) *Snapshot {
	s := &Snapshot{Nodes: []Node{
		{Name: "n1", IPs: []netip.Addr{netip.MustParseAddr("192.168.0.1"), netip.MustParseAddr("fd00:ff::1")}},
		{Name: "n2", IPs: []netip.Addr{netip.MustParseAddr("192.168.0.2"), netip.MustParseAddr("fd00:ff::2")}},
	}}
	nss := []string{"x", "y", "z"}
	for _, name := range nss {
		l := randomLabels(r, nsKeys)
		l["kubernetes.io/metadata.name"] = name
		s.Namespaces = append(s.Namespaces, Namespace{Name: name, Labels: l})
	}
	nPods := 3 + r.IntN(8)
	for i := range nPods {
		ns := pick(r, nss)
		if r.IntN(12) == 0 {
			ns = "w" // a namespace the snapshot does not have (yet)
		}
		p := Pod{Namespace: ns, Name: fmt.Sprintf("p%d", i), Labels: randomLabels(r, podKeys), Node: pick(r, []string{"n1", "n2"})}
		switch r.IntN(10) {
		case 0:
			p.HostNetwork = true
			if r.IntN(2) == 0 { // a caller that kept them: the node's
				p.IPs = slices.Clone(s.Nodes[0].IPs)
				p.Node = "n1"
			}
		case 1: // no address yet
		default:
			p.IPs = append(p.IPs, netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}))
			if r.IntN(2) == 0 {
				p.IPs = append(p.IPs, netip.MustParseAddr(fmt.Sprintf("fd00::%x", i+1)))
			}
		}
		for range r.IntN(3) {
			switch r.IntN(4) {
			case 0:
				p.Ports = append(p.Ports, NamedPort{"http", TCP, pick(r, []uint16{80, 8080, 85})})
			case 1:
				p.Ports = append(p.Ports, NamedPort{"dns", pick(r, []Protocol{UDP, TCP}), 53})
			case 2:
				p.Ports = append(p.Ports, NamedPort{"metrics", TCP, 9090})
			case 3:
				p.Ports = append(p.Ports, NamedPort{"http", SCTP, 80})
			}
		}
		s.Pods = append(s.Pods, p)
	}
	for i := range 1 + r.IntN(5) {
		s.Policies = append(s.Policies, randomPolicy(r, fmt.Sprintf("np%d", i), pick(r, append(nss, "w"))))
	}
	addRandomClusterPolicies(r, s)
	return s
}

func randomSelector(r *rand.Rand, keys []string) *metav1.LabelSelector {
	ls := &metav1.LabelSelector{}
	switch r.IntN(4) {
	case 0: // empty: everything
	case 1:
		ls.MatchLabels = map[string]string{pick(r, keys): pick(r, labelValues)}
	default:
		for range 1 + r.IntN(2) {
			e := metav1.LabelSelectorRequirement{Key: pick(r, keys)}
			switch r.IntN(4) {
			case 0:
				e.Operator = metav1.LabelSelectorOpIn
				e.Values = []string{pick(r, labelValues), pick(r, labelValues)}
			case 1:
				e.Operator = metav1.LabelSelectorOpNotIn
				e.Values = []string{pick(r, labelValues)}
			case 2:
				e.Operator = metav1.LabelSelectorOpExists
			case 3:
				e.Operator = metav1.LabelSelectorOpDoesNotExist
			}
			ls.MatchExpressions = append(ls.MatchExpressions, e)
		}
		if r.IntN(4) == 0 {
			ls.MatchLabels = map[string]string{pick(r, keys): pick(r, labelValues)}
		}
	}
	if r.IntN(40) == 0 { // invalid: the API server would refuse it
		ls.MatchExpressions = append(ls.MatchExpressions, metav1.LabelSelectorRequirement{Key: "app", Operator: metav1.LabelSelectorOpIn})
	}
	return ls
}

var (
	cidrs4 = []string{"10.0.0.0/24", "10.0.0.0/16", "10.0.0.0/28", "10.0.0.4/30", "0.0.0.0/0", "192.168.0.0/24", "10.0.0.5/32", "10.0.0.3/24"}
	cidrs6 = []string{"fd00::/64", "fd00::/120", "::/0", "fd00::4/126", "fd00:ff::/64"}
)

func randomIPBlock(r *rand.Rand) *networkingv1.IPBlock {
	b := &networkingv1.IPBlock{}
	v6 := r.IntN(3) == 0
	if v6 {
		b.CIDR = pick(r, cidrs6)
	} else {
		b.CIDR = pick(r, cidrs4)
	}
	for range r.IntN(3) {
		k := 1 + r.IntN(10)
		if v6 {
			b.Except = append(b.Except, pick(r, []string{fmt.Sprintf("fd00::%x/128", k), "fd00::/124", "fd00::8/125", "fd00:ff::1/128"}))
		} else {
			b.Except = append(b.Except, pick(r, []string{fmt.Sprintf("10.0.0.%d/32", k), "10.0.0.0/29", "10.0.0.8/29", "192.168.0.1/32", "10.0.1.0/24"}))
		}
	}
	if r.IntN(50) == 0 {
		b.Except = append(b.Except, "not-a-cidr")
	}
	return b
}

func randomPeers(r *rand.Rand) []networkingv1.NetworkPolicyPeer {
	var peers []networkingv1.NetworkPolicyPeer
	for range r.IntN(3) {
		var p networkingv1.NetworkPolicyPeer
		switch r.IntN(5) {
		case 0:
			p.PodSelector = randomSelector(r, podKeys)
		case 1:
			p.NamespaceSelector = randomSelector(r, append(slices.Clone(nsKeys), "kubernetes.io/metadata.name"))
		case 2:
			p.PodSelector = randomSelector(r, podKeys)
			p.NamespaceSelector = randomSelector(r, nsKeys)
		case 3:
			p.IPBlock = randomIPBlock(r)
		case 4:
			if r.IntN(8) == 0 { // invalid: an empty peer, or ipBlock with a selector
				if r.IntN(2) == 0 {
					p.IPBlock = randomIPBlock(r)
					p.PodSelector = &metav1.LabelSelector{}
				}
			} else {
				p.IPBlock = randomIPBlock(r)
			}
		}
		peers = append(peers, p)
	}
	return peers
}

func randomPorts(r *rand.Rand) []networkingv1.NetworkPolicyPort {
	var ports []networkingv1.NetworkPolicyPort
	for range r.IntN(3) {
		var p networkingv1.NetworkPolicyPort
		switch r.IntN(5) {
		case 0:
		case 1:
			p.Protocol = ptr(corev1.ProtocolTCP)
		case 2:
			p.Protocol = ptr(corev1.ProtocolUDP)
		case 3:
			p.Protocol = ptr(corev1.ProtocolSCTP)
		case 4:
			if r.IntN(5) == 0 {
				p.Protocol = ptr(corev1.Protocol("ICMP"))
			}
		}
		switch r.IntN(6) {
		case 0: // all ports of the protocol
			if r.IntN(10) == 0 {
				p.EndPort = ptr(int32(90))
			}
		case 1, 2:
			n := pick(r, []int32{53, 80, 81, 82, 8080, 9090})
			p.Port = ptr(intstr.FromInt32(n))
			if r.IntN(3) == 0 {
				p.EndPort = ptr(n + pick(r, []int32{0, 1, 10, -1}))
			}
		default:
			p.Port = ptr(intstr.FromString(pick(r, portNames)))
			if r.IntN(15) == 0 {
				p.EndPort = ptr(int32(100))
			}
		}
		ports = append(ports, p)
	}
	return ports
}

func randomPolicy(r *rand.Rand, name, ns string) *networkingv1.NetworkPolicy {
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	np.Spec.PodSelector = *randomSelector(r, podKeys)
	switch r.IntN(4) {
	case 1:
		np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	case 2:
		np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
	case 3:
		np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}
	}
	for range r.IntN(3) {
		np.Spec.Ingress = append(np.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{From: randomPeers(r), Ports: randomPorts(r)})
	}
	for range r.IntN(3) {
		np.Spec.Egress = append(np.Spec.Egress, networkingv1.NetworkPolicyEgressRule{To: randomPeers(r), Ports: randomPorts(r)})
	}
	return np
}

func ptr[T any](v T) *T { return &v }
