package interop

import (
	"context"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/podnet/podnet/agent/flowcap"
	"github.com/podnet/podnet/dataplane/policyrules"
	"github.com/podnet/podnet/flows"
)

// flowsPath is policyPath's n policies with flow capture on, as the
// agent runs it with --flows: the table written WithFlowLabels (each
// accepting rule labels the connection, each drop is logged), and the
// capture (agent/flowcap: conntrack events, NFLOG, nf_conntrack_acct)
// running in the node namespace into a ring of the agent's default size.
// Its cost is the difference from the np-n row without it.
func flowsPath(t testing.TB, n int) *dpPath {
	t.Helper()
	p, ir := policyPathWith(t, n, 0, policyrules.WithFlowLabels(policyrules.FlowLog{}))
	ring := flows.NewRing(8192)
	idx := flowIndex(policyrules.FlowIndex(ir, policyNode))
	svc := flowcap.New(flowcap.Config{NetNS: filepath.Join("/run/netns", p.node), Node: policyNode, Index: idx,
		Resolver: localPods{p.clientAddr: "client", p.addr: "server"}, Sink: func(r flows.Record) { ring.Add(r) }})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	select {
	case <-svc.ReadyC():
	case err := <-done:
		cancel()
		t.Fatalf("flow capture: %v", err)
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatal("flow capture not ready after 10 s")
	}
	// Before the policy table's removal and the pods' DEL.
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && ctx.Err() == nil {
			t.Errorf("flow capture: %v", err)
		}
		t.Logf("flow capture on %s: %d records in the ring", p.node, ring.Len())
	})
	return p
}

type flowIndex map[uint64][]flows.Rule

func (f flowIndex) FlowRules(id uint64) []flows.Rule { return f[id] }

// localPods are the path's two pods, both on its node.
type localPods map[netip.Addr]string

func (l localPods) ResolveAddr(a netip.Addr) (string, string, bool) {
	if name, ok := l[a]; ok {
		return policySnapshotNS, name, true
	}
	return "", "", false
}
