package netpol

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/podnet/podnet/agent/netpol/admitsock"
	itestutil "github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/policy"
)

// BenchmarkHandshake is what the agent's side of ADD's first-packet
// handshake costs, socket round trip included, with the real renderer in
// a fresh namespace: "not-selected" is a cache lookup (no policy selects
// the pod); "selected" waits for a rebuild and an apply that has the
// pod's addresses (the service's debounce, DefaultDebounce, included;
// the IR changes nothing after the first time, so the kernel's batch is
// empty).
func BenchmarkHandshake(b *testing.B) {
	n := newNode(b)
	n.c.addPolicy(denyFrom("x", "db", "db", "web"))
	for _, name := range []string{"db", "web"} {
		n.c.addPod(apiPod("x", name, self, map[string]string{"app": name}))
	}
	serveAdmission(b, n, self) // the default debounce
	for _, tc := range []struct {
		pod      string
		selected bool
	}{{"web", false}, {"db", true}} {
		name := "not-selected"
		if tc.selected {
			name = "selected"
		}
		b.Run(name, func(b *testing.B) {
			p := admitsock.Pod{Namespace: "x", Name: tc.pod, ContainerID: "c", IfName: "eth0", HostIf: "pnx",
				Addrs: []netip.Addr{netip.MustParseAddr("10.100.0.2")}}
			for b.Loop() {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				sel, err := admitsock.Ask(ctx, n.socket, p)
				cancel()
				if err != nil || sel != tc.selected {
					b.Fatalf("Ask = %v, %v", sel, err)
				}
			}
		})
	}
}

// BenchmarkAddHandshake is what a pod's ADD (the plugin exec'd by a
// runtime, its own IPAM exec included) costs with each outcome of the
// handshake: no policySocket (none), the agent up and the pod selected
// or not, and no agent listening (the pod closed). DEL is not timed.
func BenchmarkAddHandshake(b *testing.B) {
	n := newNode(b)
	n.c.addPolicy(denyFrom("x", "db", "db", ""))
	s := New(Config{Node: self, NetNS: n.host, Sources: n.c.sources()})
	adm := s.Admission(AdmissionConfig{Socket: n.socket})
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, 2)
	go func() { errs <- s.Run(ctx) }()
	go func() { errs <- adm.Run(ctx) }()
	<-adm.ReadyC()
	<-s.FirstApplied()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			<-errs
			<-errs
		}
	}
	defer stop()
	seq := 0
	for _, tc := range []struct {
		name       string
		withSocket bool
		app        string
		agentDown  bool
	}{{"none", false, "web", false}, {"not-selected", true, "web", false}, {"selected", true, "db", false}, {"agent-down", true, "db", true}} {
		b.Run(tc.name, func(b *testing.B) {
			if tc.agentDown {
				stop()
			}
			for b.Loop() {
				b.StopTimer()
				seq++
				p := n.newPod(fmt.Sprintf("p%d", seq), 1)
				n.c.addPod(apiPod("x", p.name, self, map[string]string{"app": tc.app}))
				if !tc.agentDown {
					itestutil.Eventually(b, "the pod in the agent's cache", 5*time.Second, func() bool {
						_, ok := s.cachedPod(policy.PodKey{Namespace: "x", Name: p.name})
						return ok
					})
				}
				b.StartTimer()
				if err := n.exec("ADD", p, n.conf(p, tc.withSocket)); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := n.exec("DEL", p, n.conf(p, tc.withSocket)); err != nil {
					b.Fatal(err)
				}
				n.c.deletePod("x", p.name) // its address is the next pod's
				b.StartTimer()
			}
		})
	}
}

// BenchmarkAdmitNew is the agent's side of the handshake of a selected
// pod whose sandbox brings addresses the rules do not have yet (a new
// address each time: the pod's sandbox made again), socket round trip
// included, with the real renderer in a fresh namespace:
//
//   - node=100: 100 pods on the node, one policy selecting them all,
//     which is their peer set too;
//   - cluster=5000: BenchmarkPolicyChange's cluster (1,000 policies,
//     5,000 pods on 50 nodes), 100 more pods on the node, in ns0, which
//     its default deny selects and its policies name as peers.
//
// Each is answered without compiling the cluster again (the apply's
// "admit" op) unless something else changed.
//
//	go test ./agent/netpol -run '^$' -bench AdmitNew -benchtime 2000x
func BenchmarkAdmitNew(b *testing.B) {
	b.Run("node=100", func(b *testing.B) {
		n := newNode(b)
		n.c.addPolicy(denyFrom("x", "db", "db", "db"))
		for i := range 100 {
			n.c.addPod(apiPod("x", fmt.Sprintf("p-%d", i), self, map[string]string{"app": "db"}))
		}
		benchAdmit(b, n, "x", self)
	})
	b.Run("cluster=5000", func(b *testing.B) {
		n := newNode(b)
		n.c.cs = fake.NewClientset(benchObjects()...)
		n.c.rv.Store(1 << 20)
		for i := range 100 {
			p := apiPod("ns0", fmt.Sprintf("p-%d", i), "node7", map[string]string{"app": fmt.Sprintf("app%d", i%10), "tier": "web"})
			p.ResourceVersion = n.c.nextRV()
			n.c.addPod(p)
		}
		benchAdmit(b, n, "ns0", "node7")
	})
}

// benchAdmit runs the node's policy service for node and asks it, each
// time, to admit one of the 100 pods p-<i> of namespace ns with a new
// address.
func benchAdmit(b *testing.B, n *node, ns, node string) {
	s := serveAdmission(b, n, node)
	seq := 0
	for b.Loop() {
		seq++
		addr := netip.AddrFrom4([4]byte{10, 100, byte(seq / 250 % 250), byte(1 + seq%250)})
		p := admitsock.Pod{Namespace: ns, Name: fmt.Sprintf("p-%d", seq%100), ContainerID: fmt.Sprint(seq), IfName: "eth0", HostIf: "pnx",
			Addrs: []netip.Addr{addr}}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		sel, err := admitsock.Ask(ctx, n.socket, p)
		cancel()
		if err != nil || !sel {
			b.Fatalf("Ask = %v, %v", sel, err)
		}
	}
	b.StopTimer()
	b.ReportMetric(meanMs(b, s.m.compile), "compile-ms")
	b.ReportMetric(float64(histCount(b, s.m.apply.WithLabelValues("admit").(prometheus.Histogram))), "admit-applies")
}

// histCount is a histogram's count.
// applyCounts counts the service's compiles and its applies without one
// (the handshake's fast way).
func applyCounts(t testing.TB, s *Service) (compiles, fast func() uint64) {
	return func() uint64 { return histCount(t, s.m.compile) },
		func() uint64 { return histCount(t, s.m.apply.WithLabelValues("admit").(prometheus.Histogram)) }
}

func histCount(b testing.TB, h prometheus.Histogram) uint64 {
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		b.Fatal(err)
	}
	return m.Histogram.GetSampleCount()
}

// serveAdmission runs the policy service of node (default settings) and
// its handshake on n's socket until the benchmark ends, and returns once
// both serve and the first rules are in place.
func serveAdmission(b *testing.B, n *node, node string) *Service {
	s := New(Config{Node: node, NetNS: n.host, Sources: n.c.sources()})
	adm := s.Admission(AdmissionConfig{Socket: n.socket})
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, 2)
	go func() { errs <- s.Run(ctx) }()
	go func() { errs <- adm.Run(ctx) }()
	b.Cleanup(func() {
		cancel()
		<-errs
		<-errs
	})
	<-adm.ReadyC()
	select {
	case <-s.FirstApplied():
	case <-time.After(time.Minute):
		b.Fatal("no first apply")
	}
	return s
}
