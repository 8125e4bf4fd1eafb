package policyrules

import (
	"fmt"
	"net/netip"
	"os"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/policy"
)

// benchSnapshot is a cluster of 100 namespaces of 50 pods on 50 nodes
// (100 pods a node, spread over the namespaces) with 10 policies a namespace (1,000): default deny,
// allows from an app of the namespace on a named port, from a tier of
// other teams' namespaces on a port and a range, egress to the internet
// minus private ranges and to DNS pods by named port, egress by named
// port to prod namespaces.
func benchSnapshot() *policy.Snapshot {
	s := &policy.Snapshot{}
	for n := range 50 {
		s.Nodes = append(s.Nodes, policy.Node{Name: fmt.Sprintf("node%d", n), IPs: []netip.Addr{netip.AddrFrom4([4]byte{198, 18, 0, byte(n + 1)})}})
	}
	tiers := []string{"web", "api", "db"}
	for i := range 100 {
		ns := fmt.Sprintf("ns%d", i)
		s.Namespaces = append(s.Namespaces, policy.Namespace{Name: ns, Labels: map[string]string{
			"kubernetes.io/metadata.name": ns, "team": fmt.Sprintf("team%d", i%10), "env": []string{"prod", "dev"}[i%2]}})
		for j := range 50 {
			k := i*50 + j
			s.Pods = append(s.Pods, policy.Pod{
				Namespace: ns, Name: fmt.Sprintf("pod%d", j), Node: fmt.Sprintf("node%d", (k*7+i)%50),
				Labels: map[string]string{"app": fmt.Sprintf("app%d", j%10), "tier": tiers[j%3]},
				IPs:    []netip.Addr{netip.AddrFrom4([4]byte{10, 244, byte(k >> 8), byte(k)}), netip.AddrFrom16([16]byte{0xfd, 0, 2, 0x44, 14: byte(k >> 8), 15: byte(k)})},
				Ports:  []policy.NamedPort{{Name: "http", Protocol: policy.TCP, Port: uint16(8080 + j%3)}, {Name: "dns", Protocol: policy.UDP, Port: 53}},
			})
		}
		for p := range 10 {
			name := fmt.Sprintf("np%d", p)
			app := map[string]string{"app": fmt.Sprintf("app%d", p)}
			var np *networkingv1.NetworkPolicy
			switch p % 5 {
			case 0:
				np = netpol(ns, name, nil, networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress)
			case 1:
				np = netpol(ns, name, app)
				np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{
					From:  []networkingv1.NetworkPolicyPeer{podPeer(map[string]string{"app": fmt.Sprintf("app%d", (p+1)%10)})},
					Ports: []networkingv1.NetworkPolicyPort{namedPort(corev1.ProtocolTCP, "http")}}}
			case 2:
				np = netpol(ns, name, app)
				np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{
					From:  []networkingv1.NetworkPolicyPeer{nsPodPeer(map[string]string{"team": fmt.Sprintf("team%d", p)}, map[string]string{"tier": "web"})},
					Ports: []networkingv1.NetworkPolicyPort{numPort(corev1.ProtocolTCP, 8080), numPort(corev1.ProtocolTCP, 9000, 9100)}}}
			case 3:
				np = netpol(ns, name, app, networkingv1.PolicyTypeEgress)
				np.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{
					{To: []networkingv1.NetworkPolicyPeer{blockPeer("0.0.0.0/0", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")},
						Ports: []networkingv1.NetworkPolicyPort{numPort(corev1.ProtocolTCP, 443)}},
					{To: []networkingv1.NetworkPolicyPeer{nsPodPeer(map[string]string{"kubernetes.io/metadata.name": "ns0"}, map[string]string{"app": "app0"})},
						Ports: []networkingv1.NetworkPolicyPort{namedPort(corev1.ProtocolUDP, "dns")}},
				}
			case 4:
				np = netpol(ns, name, app, networkingv1.PolicyTypeEgress)
				np.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{{
					To:    []networkingv1.NetworkPolicyPeer{nsPodPeer(map[string]string{"env": "prod"}, nil)},
					Ports: []networkingv1.NetworkPolicyPort{namedPort(corev1.ProtocolTCP, "http")}}}
			}
			s.Policies = append(s.Policies, np)
		}
	}
	return s
}

func benchRenderer(b *testing.B, opts ...Option) *Renderer {
	return benchRendererOf(b, "node7", opts...)
}

// benchRendererOf is a Renderer of node in a node namespace of its own.
func benchRendererOf(b *testing.B, node string, opts ...Option) *Renderer {
	testutil.RequireRoot(b)
	_, path := testutil.NewNodeNetNS(b)
	f, err := os.Open(path)
	must(b, err)
	b.Cleanup(func() { f.Close() })
	r, err := New(node, append([]Option{WithNetNSFd(int(f.Fd()))}, opts...)...)
	must(b, err)
	b.Cleanup(func() { r.Close() })
	return r
}

func reportSize(b *testing.B, ir *policy.IR) {
	rs := build(ir, "node7", false)
	elems := 0
	for _, s := range rs.sets {
		elems += len(s.elems)
	}
	b.ReportMetric(float64(len(rs.chains)), "chains")
	b.ReportMetric(float64(len(rs.sets)), "sets")
	b.ReportMetric(float64(elems), "elements")
}

// BenchmarkApplyFull programs a node's whole table from scratch (a
// resync: one batch that replaces the table):
// go test ./dataplane/policyrules -run '^$' -bench Apply -benchmem
func BenchmarkApplyFull(b *testing.B) { benchApplyFull(b) }

// BenchmarkApplyFullFlowLabels is BenchmarkApplyFull with the flow
// labels and the flow log (WithFlowLabels).
func BenchmarkApplyFullFlowLabels(b *testing.B) { benchApplyFull(b, WithFlowLabels(FlowLog{})) }

func benchApplyFull(b *testing.B, opts ...Option) {
	s := benchSnapshot()
	ir := policy.Compile(s, policy.Options{Node: "node7"})
	r := benchRenderer(b, opts...)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.Resync(ir); err != nil {
			b.Fatal(err)
		}
	}
	reportSize(b, ir)
}

// BenchmarkApplyOnePod applies, alternately, two IRs that differ by one
// local pod's labels (to app2, tier web, in a namespace of team2:
// it leaves one policy's selection for another's, so its two chains are
// rewritten, and joins the peers "team2's web pods" that the node's
// app2 and app7 pods take in, two elements): the incremental path.
func BenchmarkApplyOnePod(b *testing.B) { benchApplyOnePod(b) }

// BenchmarkApplyOnePodFlowLabels is BenchmarkApplyOnePod with the flow
// labels and the flow log.
func BenchmarkApplyOnePodFlowLabels(b *testing.B) { benchApplyOnePod(b, WithFlowLabels(FlowLog{})) }

func benchApplyOnePod(b *testing.B, opts ...Option) {
	s := benchSnapshot()
	irA := policy.Compile(s, policy.Options{Node: "node7"})
	team2 := map[string]bool{}
	for _, ns := range s.Namespaces {
		team2[ns.Name] = ns.Labels["team"] == "team2"
	}
	i := slices.IndexFunc(s.Pods, func(p policy.Pod) bool {
		return p.Node == "node7" && p.Labels["tier"] != "web" && p.Labels["app"] != "app2" && team2[p.Namespace]
	})
	if i < 0 {
		b.Fatal("no pod of team2 to change on node7")
	}
	s.Pods[i].Labels = map[string]string{"app": "app2", "tier": "web"}
	irB := policy.Compile(s, policy.Options{Node: "node7"})
	r := benchRenderer(b, opts...)
	if _, err := r.Apply(irA); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	var st Stats
	n := 0
	for b.Loop() {
		ir := irB
		if n%2 == 1 {
			ir = irA
		}
		n++
		var err error
		if st, err = r.Apply(ir); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(st.ElementsAdded+st.ElementsRemoved), "elements-changed")
	b.ReportMetric(float64(st.ChainsAdded+st.ChainsRewritten+st.ChainsRemoved), "chains-changed")
}

// BenchmarkApplyFold programs flatIR's node (one pod, n rules over peer
// sets of one pod each: interop's np-n data path) from scratch, folded
// and, for comparison, walked (the rules and sets of every peer; 1,000
// only):
// go test ./dataplane/policyrules -run '^$' -bench ApplyFold -benchmem
func BenchmarkApplyFold(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		ir := flatIR(n)
		b.Run(fmt.Sprintf("rules-%d/folded", n), func(b *testing.B) { benchResync(b, ir) })
		if n <= 1000 { // 10,000 walked rules and their 20,000 sets are more than one batch of the socket takes
			b.Run(fmt.Sprintf("rules-%d/walked", n), func(b *testing.B) { benchResync(b, ir, withFolding(noFolding)) })
		}
	}
}

func benchResync(b *testing.B, ir *policy.IR, opts ...Option) {
	r := benchRendererOf(b, "n1", opts...)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.Resync(ir); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkApplyFoldOnePod applies, alternately, flatIR(n) and the same
// with one more peer pod in a folded peer set: one fold map element.
func BenchmarkApplyFoldOnePod(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("rules-%d", n), func(b *testing.B) {
			irA, irB := flatIR(n), flatIR(n)
			ps := &irB.PeerSets[n/2]
			ps.V4 = append(slices.Clone(ps.V4), netip.MustParseAddr("10.98.0.1"))
			r := benchRendererOf(b, "n1")
			if _, err := r.Apply(irA); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			var st Stats
			for i := 0; b.Loop(); i++ {
				ir := irB
				if i%2 == 1 {
					ir = irA
				}
				var err error
				if st, err = r.Apply(ir); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(st.MapEntriesAdded+st.MapEntriesRemoved), "entries-changed")
		})
	}
}
