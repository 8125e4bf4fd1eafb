package netpol

import (
	"context"
	"fmt"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/podnet/podnet/agent/flowcap"
	"github.com/podnet/podnet/flows"
	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/policy"
)

// The service is the flow capture's resolver and rule index.
var (
	_ flowcap.Resolver  = (*Service)(nil)
	_ flowcap.RuleIndex = (*Service)(nil)
)

func TestResolveAddr(t *testing.T) {
	c := newCluster(t)
	c.addNamespace("x", nil)
	c.addNode(self, "198.18.0.1")
	c.addPod(apiPod("x", "a", self, nil, "10.244.0.2", "fd00::2"))
	c.addPod(apiPod("x", "b", "n2", nil, "10.244.1.2"))
	host := apiPod("x", "h", self, nil, "198.18.0.1")
	host.Spec.HostNetwork = true
	c.addPod(host)
	c.addPod(apiPod("x", "new", self, nil)) // no address in its status yet
	r := newRecorder()
	s := startService(t, c, r, Config{})
	// Before the caches synced nothing is known, and nothing waits.
	if ns, pod, local := New(Config{Node: self}).ResolveAddr(netip.MustParseAddr("10.244.0.2")); pod != "" || ns != "" || local {
		t.Errorf("before sync: %s/%s %v", ns, pod, local)
	}
	r.waitIR(t, "the first apply", func(*policy.IR) bool { return true })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := s.Admit(ctx, "x", "new", []netip.Addr{netip.MustParseAddr("10.244.0.9")}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		addr, want string
		local      bool
	}{
		{"10.244.0.2", "x/a", true},
		{"fd00::2", "x/a", true},
		{"::ffff:10.244.0.2", "x/a", true},
		{"10.244.1.2", "x/b", false},
		{"10.244.0.9", "x/new", true}, // told by CNI ADD
		{"198.18.0.1", "", false},     // the node's, not the host-network pod's
		{"192.0.2.1", "", false},
	}
	for _, tt := range tests {
		ns, pod, local := s.ResolveAddr(netip.MustParseAddr(tt.addr))
		got := ""
		if pod != "" {
			got = ns + "/" + pod
		}
		if got != tt.want || local != tt.local {
			t.Errorf("%s: %q local %v, want %q local %v", tt.addr, got, local, tt.want, tt.local)
		}
	}
	// A pod gone from the cache is not answered any more.
	c.deletePod("x", "b")
	testutil.Eventually(t, "x/b gone", 5*time.Second, func() bool {
		_, pod, _ := s.ResolveAddr(netip.MustParseAddr("10.244.1.2"))
		return pod == ""
	})
}

// The index is the one of the IR being applied, the previous one's ids
// still answered; without the hook FlowRules answers nothing.
func TestFlowRules(t *testing.T) {
	c := newCluster(t)
	c.addNamespace("x", nil)
	c.addNode(self, "198.18.0.1")
	var applies atomic.Int64
	index := func(ir *policy.IR, node string) map[uint64][]flows.Rule {
		n := applies.Add(1)
		if node != self {
			t.Errorf("FlowIndex for node %q", node)
		}
		// id 1 in every IR; id 100+n only in the n-th.
		return map[uint64][]flows.Rule{
			1:               {{Name: fmt.Sprint("always-", n)}},
			100 + uint64(n): {{Name: fmt.Sprint("only-", n)}},
		}
	}
	r := newRecorder()
	s := startService(t, c, r, Config{FlowIndex: index})
	r.waitIR(t, "the first apply", func(*policy.IR) bool { return true })
	n := applies.Load()
	if got := s.FlowRules(1); len(got) != 1 || got[0].Name != fmt.Sprint("always-", n) {
		t.Errorf("FlowRules(1) = %+v", got)
	}
	c.addPod(apiPod("x", "a", self, nil, "10.244.0.2"))
	testutil.Eventually(t, "another apply", 5*time.Second, func() bool { return applies.Load() > n })
	m := applies.Load()
	if got := s.FlowRules(100 + uint64(m)); len(got) != 1 {
		t.Errorf("the new IR's id: %+v", got)
	}
	if got := s.FlowRules(100 + uint64(m-1)); len(got) != 1 {
		t.Errorf("the previous IR's id: %+v", got)
	}
	if got := s.FlowRules(12345); got != nil {
		t.Errorf("unknown id: %+v", got)
	}
	if got := New(Config{}).FlowRules(1); got != nil {
		t.Errorf("no hook: %+v", got)
	}
}
