package policy

import (
	"fmt"
	"github.com/podnet/podnet/policy/policytest"
	"net/netip"
	"runtime"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// benchCluster is a cluster of 100 namespaces of 50 pods each on 50 nodes,
// with 10 policies per namespace of the usual kinds: a default deny, allows
// from an app of the namespace, from a tier of other teams' namespaces, an
// ipBlock with excepts, named and ranged ports, DNS egress by named port.
func benchCluster(namespaces, podsPerNs, policiesPerNs int) *Snapshot {
	s := &Snapshot{}
	for n := range 50 {
		s.Nodes = append(s.Nodes, Node{Name: fmt.Sprintf("node%d", n), IPs: []netip.Addr{netip.AddrFrom4([4]byte{198, 18, 0, byte(n + 1)})}})
	}
	tiers := []string{"web", "api", "db"}
	for i := range namespaces {
		ns := fmt.Sprintf("ns%d", i)
		s.Namespaces = append(s.Namespaces, Namespace{Name: ns, Labels: map[string]string{
			"kubernetes.io/metadata.name": ns, "team": fmt.Sprintf("team%d", i%10), "env": []string{"prod", "dev"}[i%2]}})
		for j := range podsPerNs {
			k := i*podsPerNs + j
			s.Pods = append(s.Pods, Pod{
				Namespace: ns, Name: fmt.Sprintf("pod%d", j), Node: fmt.Sprintf("node%d", (k*7+i)%50),
				Labels: map[string]string{"app": fmt.Sprintf("app%d", j%10), "tier": tiers[j%3], "pod-template-hash": fmt.Sprintf("%08x", j/5)},
				IPs:    []netip.Addr{netip.AddrFrom4([4]byte{10, byte(k >> 16), byte(k >> 8), byte(k)}), netip.AddrFrom16([16]byte{0xfd, 0, 14: byte(k >> 8), 15: byte(k)})},
				Ports:  []NamedPort{{"http", TCP, uint16(8080 + j%3)}, {"dns", UDP, 53}},
			})
		}
		for p := range policiesPerNs {
			name := fmt.Sprintf("np%d", p)
			app := sel("app", fmt.Sprintf("app%d", p))
			var pol *networkingv1.NetworkPolicy
			switch p % 5 {
			case 0:
				pol = np(ns, name, sel(), in, out)
			case 1:
				pol = withIngress(np(ns, name, app), from(peers(podPeer(sel("app", fmt.Sprintf("app%d", (p+1)%10)))), namedPort("", "http")))
			case 2:
				pol = withIngress(np(ns, name, app), from(peers(nsPodPeer(sel("team", fmt.Sprintf("team%d", p%10)), sel("tier", "web"))), port("", 8080), portRange(9000, 9100)))
			case 3:
				pol = withEgress(np(ns, name, app, out),
					to(peers(cidrPeer("0.0.0.0/0", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")), port("", 443)),
					to(peers(nsPodPeer(sel("kubernetes.io/metadata.name", "ns0"), sel("app", "app0"))), namedPort(corev1.ProtocolUDP, "dns")))
			case 4:
				pol = withEgress(np(ns, name, app, out), to(peers(nsPeer(expr("env", metav1.LabelSelectorOpIn, "prod"))), namedPort("", "http")))
			}
			s.Policies = append(s.Policies, pol)
		}
	}
	return s
}

// BenchmarkCompile: go test ./policy -run '^$' -bench Compile -benchmem
func BenchmarkCompile(b *testing.B) {
	s := benchCluster(100, 50, 10)
	for _, bc := range []struct {
		name string
		opts Options
	}{{"cluster", Options{}}, {"node", Options{Node: "node7"}}} {
		b.Run(fmt.Sprintf("%s/policies=%d/pods=%d/namespaces=%d", bc.name, len(s.Policies), len(s.Pods), len(s.Namespaces)), func(b *testing.B) {
			b.ReportAllocs()
			var ir *IR
			for b.Loop() {
				ir = Compile(s, bc.opts)
			}
			b.ReportMetric(float64(len(ir.Pods)), "pods")
			b.ReportMetric(float64(len(ir.PeerSets)+len(ir.CIDRSets)+len(ir.PortSets)+len(ir.NamedPortSets)), "sets")
		})
	}
}

// BenchmarkSlimPodMemory measures the heap a slim Pod keeps (after GC),
// converted from API pods whose strings are all their own, as decoding
// makes them: with 6 labels, 2 addresses and 3 named ports.
func BenchmarkSlimPodMemory(b *testing.B) {
	const n = 5000
	api := make([]*corev1.Pod, n)
	for i := range api {
		api[i] = policytest.DecodedPod(i)
	}
	b.ReportAllocs()
	var perPod float64
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		pods := make([]Pod, n)
		for i, p := range api {
			pods[i] = PodFromAPI(p)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perPod = float64(after.HeapAlloc-before.HeapAlloc) / n
		runtime.KeepAlive(pods)
	}
	b.ReportMetric(perPod, "B/pod")
}

// BenchmarkCompileLarge is one node's compile in a cluster of the size the
// agent's memory goal names: 50,000 pods in 500 namespaces, 10,000
// policies, 1,000 of the pods on the node.
func BenchmarkCompileLarge(b *testing.B) {
	s := benchCluster(500, 100, 20)
	b.ReportAllocs()
	var ir *IR
	for b.Loop() {
		ir = Compile(s, Options{Node: "node7"})
	}
	b.ReportMetric(float64(len(ir.Pods)), "pods")
}
