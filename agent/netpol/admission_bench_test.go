package netpol

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

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
	s := New(Config{Node: self, NetNS: n.host, Sources: n.c.sources()}) // the default debounce
	adm := s.Admission(AdmissionConfig{Socket: n.socket})
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, 2)
	go func() { errs <- s.Run(ctx) }()
	go func() { errs <- adm.Run(ctx) }()
	defer func() {
		cancel()
		<-errs
		<-errs
	}()
	<-adm.ReadyC()
	<-s.FirstApplied()
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
