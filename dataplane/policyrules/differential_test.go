package policyrules

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podnet/podnet/policy"
)

// TestKernelMatchesDecide is the judge of the renderer: on random
// clusters and policies, compiled for the node and applied one after the
// other (so every seed also exercises an incremental change from the
// previous one), real TCP SYNs and UDP datagrams get through the node's
// kernel exactly when policy.Decide allows them. SCTP is not probed: the
// IR treats it like TCP and UDP (protocol . port), and a probe would need
// the sctp module.
func TestKernelMatchesDecide(t *testing.T) {
	checkKernelMatchesDecide(t, randomCluster)
}

// checkKernelMatchesDecide is TestKernelMatchesDecide on the clusters
// gen draws, with the renderers' options opts.
func checkKernelMatchesDecide(t *testing.T, gen func(*rand.Rand, *topology) *policy.Snapshot, opts ...Option) {
	seeds, perSeed := 30, 48
	if testing.Short() {
		seeds = 6
	}
	keys := make([]policy.PodKey, 4)
	tp := newTopology(t, keys)
	r := tp.renderer(t, opts...)
	checked, allowed, judged := 0, 0, 0
	for seed := range seeds {
		rng := rand.New(rand.NewPCG(uint64(seed), 0x5eed))
		s := gen(rng, tp)
		ir := policy.Compile(s, policy.Options{Node: "n1"})
		if _, err := r.Apply(ir); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		probes := sampleProbes(rng, tp, perSeed)
		got := make([]bool, len(probes))
		want := make([]policy.Decision, len(probes))
		var wg sync.WaitGroup
		sem := make(chan struct{}, 16)
		for i, p := range probes {
			want[i] = tp.onThisNode(policy.Decide(s, s.EndpointFor(p.src), s.EndpointFor(p.dst), p.proto, p.port), p)
			wait := waitDenied
			if want[i].Allowed {
				wait = waitAllowed
			}
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				got[i] = tp.probe(p.src, p.dst, p.proto, p.port, wait)
				<-sem
			}()
		}
		wg.Wait()
		for i, p := range probes {
			checked++
			if want[i].Allowed {
				allowed++
			}
			if want[i].Egress.Reason != policy.NotIsolated || want[i].Ingress.Reason != policy.NotIsolated {
				judged++
			}
			if !got[i] && want[i].Allowed {
				// An allowed probe that timed out on a loaded machine
				// (16 at a time, -race) gets one more, longer chance; a
				// denied one that got through has no excuse.
				got[i] = tp.probe(p.src, p.dst, p.proto, p.port, 3*waitAllowed)
			}
			if got[i] != want[i].Allowed {
				t.Fatalf("seed %d: %s -> %s %s/%d: got through=%v, Decide: %s\n%s\nruleset:\n%s",
					seed, s.EndpointFor(p.src), s.EndpointFor(p.dst), p.proto, p.port, got[i], want[i],
					describe(s), strings.Join(dumpTable(t, tp.node), "\n"))
			}
		}
		// The incremental result is what a resync writes.
		inc := dumpTable(t, tp.node)
		r2 := tp.renderer(t, opts...)
		if _, err := r2.Resync(ir); err != nil {
			t.Fatal(err)
		}
		if full := dumpTable(t, tp.node); !slices.Equal(inc, full) {
			t.Fatalf("seed %d: incremental and full differ:\n%s\n----\n%s", seed, strings.Join(inc, "\n"), strings.Join(full, "\n"))
		}
	}
	t.Logf("%d probes over %d seeds: %d allowed, %d through an isolated side", checked, seeds, allowed, judged)
	if allowed == 0 || allowed == checked {
		t.Fatalf("degenerate sample: %d of %d allowed", allowed, checked)
	}
}

// onThisNode is the part of d that n1 enforces: the sides of its own
// pods. The remote pod's side is its node's business, and that node
// (n2, the outside namespace) enforces nothing here.
func (tp *topology) onThisNode(d policy.Decision, p probeSpec) policy.Decision {
	local := func(a netip.Addr) bool { return tp.nsOf[a] != tp.node && tp.nsOf[a] != tp.outside }
	if !local(p.src) {
		d.Egress = policy.Verdict{}
	}
	if !local(p.dst) {
		d.Ingress = policy.Verdict{}
	}
	d.Allowed = d.Egress.Allowed() && d.Ingress.Allowed()
	return d
}

type probeSpec struct {
	src, dst netip.Addr
	proto    policy.Protocol
	port     uint16
}

// sampleProbes picks n probes between addresses of one family in
// different namespaces, at least one end a local pod.
func sampleProbes(rng *rand.Rand, tp *topology, n int) []probeSpec {
	var local, other []netip.Addr
	for _, p := range tp.pods {
		local = append(local, p.v4, p.v6)
	}
	other = []netip.Addr{nodeIP4, nodeIP6, n2IP4, n2IP6, externalIP4, externalIP6, remoteIP4, remoteIP6}
	all := append(slices.Clone(local), other...)
	kinds := []struct {
		proto policy.Protocol
		port  uint16
	}{{policy.TCP, 80}, {policy.TCP, 81}, {policy.TCP, 8080}, {policy.TCP, 53}, {policy.UDP, 53}, {policy.UDP, 80}}
	var out []probeSpec
	for len(out) < n {
		src, dst := all[rng.IntN(len(all))], all[rng.IntN(len(all))]
		if src.Is4() != dst.Is4() || tp.nsOf[src] == tp.nsOf[dst] || (!slices.Contains(local, src) && !slices.Contains(local, dst)) {
			continue
		}
		k := kinds[rng.IntN(len(kinds))]
		out = append(out, probeSpec{src, dst, k.proto, k.port})
	}
	return out
}

var (
	values   = []string{"a", "b", "c"}
	nsNames  = []string{"x", "y", "z"}
	ipBlocks = [][]string{
		{"10.244.0.0/16", "10.244.0.3/32"},
		{"10.0.0.0/8"},
		{"198.18.0.0/15", "198.18.0.0/24"},
		{"198.19.0.0/16"},
		{"0.0.0.0/0", "10.0.0.0/8"},
		{"10.245.0.7/32"},
		{"fd00::/8"},
		{"fd00:244::/64", "fd00:244::2/128", "fd00:244::4/127"},
		{"::/0", "fd00:198:18::/64"},
		// Blocks folding takes as addresses (fold.go, maxFoldBlock).
		{"10.244.0.3/32"},
		{"10.244.0.4/30", "10.244.0.5/32"},
		{"fd00:244::3/128"},
		{"198.19.0.10/32"},
		{"fd00:244::/120", "fd00:244::2/127"},
	}
)

func pickOne[T any](rng *rand.Rand, xs []T) T { return xs[rng.IntN(len(xs))] }

func randomLabels(rng *rand.Rand, keys ...string) map[string]string {
	l := map[string]string{}
	for _, k := range keys {
		if rng.IntN(3) > 0 {
			l[k] = pickOne(rng, values)
		}
	}
	return l
}

// randomCluster gives the topology's pods random namespaces, labels and
// named ports, adds the remote pod, and writes 2 to 5 random policies.
func randomCluster(rng *rand.Rand, tp *topology) *policy.Snapshot {
	s := &policy.Snapshot{Nodes: []policy.Node{{Name: "n1", IPs: []netip.Addr{nodeIP4, nodeIP6}}, {Name: "n2", IPs: []netip.Addr{n2IP4, n2IP6}}}}
	for _, ns := range nsNames {
		l := randomLabels(rng, "team", "env")
		l["kubernetes.io/metadata.name"] = ns
		s.Namespaces = append(s.Namespaces, policy.Namespace{Name: ns, Labels: l})
	}
	ports := func() []policy.NamedPort {
		var out []policy.NamedPort
		for range rng.IntN(3) {
			switch rng.IntN(3) {
			case 0:
				out = append(out, policy.NamedPort{Name: "http", Protocol: policy.TCP, Port: pickOne(rng, []uint16{80, 81, 8080})})
			case 1:
				out = append(out, policy.NamedPort{Name: "dns", Protocol: pickOne(rng, []policy.Protocol{policy.UDP, policy.TCP}), Port: 53})
			case 2:
				out = append(out, policy.NamedPort{Name: "alt", Protocol: policy.UDP, Port: 80})
			}
		}
		return out
	}
	for i, p := range tp.pods {
		s.Pods = append(s.Pods, policy.Pod{Namespace: pickOne(rng, nsNames), Name: fmt.Sprintf("p%d", i), Labels: randomLabels(rng, "app", "tier"),
			Node: "n1", IPs: []netip.Addr{p.v4, p.v6}, Ports: ports()})
	}
	s.Pods = append(s.Pods, policy.Pod{Namespace: pickOne(rng, nsNames), Name: "remote", Labels: randomLabels(rng, "app", "tier"),
		Node: "n2", IPs: []netip.Addr{remoteIP4, remoteIP6}, Ports: ports()})
	for i := range 2 + rng.IntN(4) {
		s.Policies = append(s.Policies, randomPolicy(rng, fmt.Sprintf("np%d", i)))
	}
	return s
}

func randomSelector(rng *rand.Rand, keys ...string) map[string]string {
	if rng.IntN(3) == 0 {
		return nil // everything
	}
	return map[string]string{pickOne(rng, keys): pickOne(rng, values)}
}

func randomPolicy(rng *rand.Rand, name string) *networkingv1.NetworkPolicy {
	types := [][]networkingv1.PolicyType{nil, {networkingv1.PolicyTypeIngress}, {networkingv1.PolicyTypeEgress},
		{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}}
	np := netpol(pickOne(rng, nsNames), name, randomSelector(rng, "app", "tier"), pickOne(rng, types)...)
	for range rng.IntN(3) {
		np.Spec.Ingress = append(np.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{From: randomPeers(rng), Ports: randomPorts(rng)})
	}
	for range rng.IntN(3) {
		np.Spec.Egress = append(np.Spec.Egress, networkingv1.NetworkPolicyEgressRule{To: randomPeers(rng), Ports: randomPorts(rng)})
	}
	return np
}

func randomPeers(rng *rand.Rand) []networkingv1.NetworkPolicyPeer {
	var out []networkingv1.NetworkPolicyPeer
	for range rng.IntN(3) {
		switch rng.IntN(4) {
		case 0:
			out = append(out, podPeer(randomSelector(rng, "app", "tier")))
		case 1:
			out = append(out, nsPodPeer(randomSelector(rng, "team", "env", "kubernetes.io/metadata.name"), nil))
		case 2:
			out = append(out, nsPodPeer(randomSelector(rng, "team", "env"), randomSelector(rng, "app", "tier")))
		case 3:
			b := pickOne(rng, ipBlocks)
			out = append(out, blockPeer(b[0], b[1:]...))
		}
	}
	return out
}

func randomPorts(rng *rand.Rand) []networkingv1.NetworkPolicyPort {
	var out []networkingv1.NetworkPolicyPort
	for range rng.IntN(3) {
		switch rng.IntN(8) {
		case 0:
			out = append(out, numPort(corev1.ProtocolTCP, 80))
		case 1:
			out = append(out, numPort(corev1.ProtocolTCP, 80, 81))
		case 2:
			out = append(out, numPort(corev1.ProtocolUDP, 53))
		case 3:
			out = append(out, namedPort(corev1.ProtocolTCP, "http"))
		case 4:
			out = append(out, namedPort(corev1.ProtocolUDP, pickOne(rng, []string{"dns", "alt"})))
		case 5:
			out = append(out, protoOnly(pickOne(rng, []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP})))
		case 6:
			out = append(out, numPort(corev1.ProtocolTCP, 8000, 8080))
		case 7:
			out = append(out, namedPort(corev1.ProtocolTCP, "dns"))
		}
	}
	return out
}

func describe(s *policy.Snapshot) string {
	var b strings.Builder
	for _, ns := range s.Namespaces {
		fmt.Fprintf(&b, "ns %s %v\n", ns.Name, ns.Labels)
	}
	for _, p := range s.Pods {
		fmt.Fprintf(&b, "pod %s/%s %v %v node=%s ports=%v\n", p.Namespace, p.Name, p.Labels, p.IPs, p.Node, p.Ports)
	}
	for _, np := range s.Policies {
		fmt.Fprintf(&b, "policy %s/%s %s\n", np.Namespace, np.Name, specString(&np.Spec))
	}
	for _, cp := range s.ClusterPolicies {
		fmt.Fprintf(&b, "cluster policy %s\n", clusterString(&cp))
	}
	return b.String()
}

func specString(spec *networkingv1.NetworkPolicySpec) string {
	sel := func(l *metav1.LabelSelector) string {
		if l == nil {
			return "-"
		}
		return fmt.Sprint(l.MatchLabels)
	}
	peers := func(ps []networkingv1.NetworkPolicyPeer) string {
		var out []string
		for _, p := range ps {
			if p.IPBlock != nil {
				out = append(out, fmt.Sprintf("ipBlock %s except %v", p.IPBlock.CIDR, p.IPBlock.Except))
				continue
			}
			out = append(out, fmt.Sprintf("ns %s pods %s", sel(p.NamespaceSelector), sel(p.PodSelector)))
		}
		return "[" + strings.Join(out, "; ") + "]"
	}
	ports := func(ps []networkingv1.NetworkPolicyPort) string {
		var out []string
		for _, p := range ps {
			s := string(*p.Protocol)
			if p.Port != nil {
				s += "/" + p.Port.String()
			}
			if p.EndPort != nil {
				s += fmt.Sprintf("-%d", *p.EndPort)
			}
			out = append(out, s)
		}
		return "[" + strings.Join(out, " ") + "]"
	}
	out := fmt.Sprintf("select %s types %v", sel(&spec.PodSelector), spec.PolicyTypes)
	for _, r := range spec.Ingress {
		out += fmt.Sprintf(" in(from %s ports %s)", peers(r.From), ports(r.Ports))
	}
	for _, r := range spec.Egress {
		out += fmt.Sprintf(" out(to %s ports %s)", peers(r.To), ports(r.Ports))
	}
	return out
}
