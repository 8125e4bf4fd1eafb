package flowcap

import (
	"context"
	"encoding/binary"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/ti-mo/conntrack"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/podnet/podnet/flows"
	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/netns"
)

// testPod is a pod-like namespace behind a veth of the node's: routed
// through the node, each in a /24 of its own.
type testPod struct {
	ns   string
	addr netip.Addr
}

var (
	podA = netip.MustParseAddr("10.244.1.2")
	podB = netip.MustParseAddr("10.244.2.2")
	// The rule ids the test table writes and logs, and what they name.
	egressID, ingressID, denyID = uint64(0x1111), uint64(0x2222), uint64(0xab)
	egressRule                  = flows.Rule{Kind: "NetworkPolicy", Namespace: "x", Name: "a-out", Direction: "egress", Index: 0, Action: "Allow"}
	ingressRule                 = flows.Rule{Kind: "NetworkPolicy", Namespace: "x", Name: "b-in", Direction: "ingress", Index: 0, Action: "Allow"}
	denyRule                    = flows.Rule{Kind: "NetworkPolicy", Namespace: "x", Name: "b-in", Direction: "ingress", Index: -1, Action: "Deny"}
)

// testNode is a node namespace forwarding between two pods.
type testNode struct {
	ns   string
	a, b testPod
	// rcvbuf is the capture's Config.ReceiveBuffer.
	rcvbuf int
}

func newTestNode(t *testing.T) *testNode {
	t.Helper()
	testutil.RequireRoot(t)
	_, node := testutil.NewNodeNetNS(t)
	n := &testNode{ns: node}
	for i, p := range []*testPod{&n.a, &n.b} {
		_, p.ns = testutil.NewNetNS(t)
		p.addr = []netip.Addr{podA, podB}[i]
		host := []string{"pnfa", "pnfb"}[i]
		gw := netip.AddrFrom4([4]byte{10, 244, byte(i + 1), 1})
		if err := plugPod(node, p.ns, host, gw, p.addr); err != nil {
			t.Fatalf("pod %s: %v", p.addr, err)
		}
	}
	err := netns.Do(node, func() error {
		return os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0)
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// plugPod makes a veth host <-> eth0 in pod, the host side holding gw
// and the pod addr, both in gw's /24, the pod's default route via gw.
func plugPod(node, pod, host string, gw, addr netip.Addr) error {
	podNS, err := os.Open(pod)
	if err != nil {
		return err
	}
	defer podNS.Close()
	err = netns.Do(node, func() error {
		v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: host}, PeerName: "eth0"}
		if err := netlink.LinkAdd(v); err != nil {
			return err
		}
		peer, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		if err := netlink.LinkSetNsFd(peer, int(podNS.Fd())); err != nil {
			return err
		}
		return upWithAddr(host, netip.PrefixFrom(gw, 24))
	})
	if err != nil {
		return err
	}
	return netns.Do(pod, func() error {
		if err := upWithAddr("eth0", netip.PrefixFrom(addr, 24)); err != nil {
			return err
		}
		if err := upWithAddr("lo", netip.Prefix{}); err != nil {
			return err
		}
		return netlink.RouteAdd(&netlink.Route{Gw: gw.AsSlice()})
	})
}

func upWithAddr(name string, p netip.Prefix) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return err
	}
	if p.IsValid() {
		a := &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), 32)}}
		if err := netlink.AddrAdd(l, a); err != nil {
			return err
		}
	}
	return netlink.LinkSetUp(l)
}

// addTestTable writes what the policy rules write for flows: A's
// connections to B get the egress rule's id in the label's low half and
// the ingress rule's in its high half (two rules: the kernel ORs them),
// and UDP to B's port 9999 is logged with the deny id and dropped.
func (n *testNode) addTestTable(t *testing.T) {
	t.Helper()
	err := netns.Do(n.ns, func() error {
		c, err := nftables.New()
		if err != nil {
			return err
		}
		tb := c.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: "flowcap-test"})
		pol := nftables.ChainPolicyAccept
		ch := c.AddChain(&nftables.Chain{Name: "forward", Table: tb, Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &pol})
		aToB := ipv4Pair(podA, podB)
		for _, l := range []Labels{{Egress: egressID}, {Ingress: ingressID}} {
			b := l.LabelBytes()
			c.AddRule(&nftables.Rule{Table: tb, Chain: ch, Exprs: append(aToB,
				&expr.Immediate{Register: 1, Data: b[:]},
				&expr.Ct{Key: expr.CtKeyLABELS, Register: 1, SourceRegister: true})})
		}
		for port, prefix := range map[uint16]string{9999: PolicyPrefix + "00000000000000ab", 9998: GuardPrefix} {
			c.AddRule(&nftables.Rule{Table: tb, Chain: ch, Exprs: append(ipv4Pair(podA, podB),
				&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_UDP}},
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binary.BigEndian.AppendUint16(nil, port)},
				&expr.Log{Key: 1<<unix.NFTA_LOG_GROUP | 1<<unix.NFTA_LOG_PREFIX, Group: DefaultGroup, Data: []byte(prefix)},
				&expr.Verdict{Kind: expr.VerdictDrop})})
		}
		return c.Flush()
	})
	if err != nil {
		t.Fatalf("test table: %v", err)
	}
}

// serviceAddr is a Service's address the test's DNAT rule sends to B's
// port 8080, as kube-proxy's would.
var serviceAddr = netip.MustParseAddr("10.96.0.10")

// addServiceDNAT sends TCP to serviceAddr:80 to B:8080 at prerouting.
func (n *testNode) addServiceDNAT(t *testing.T) {
	t.Helper()
	err := netns.Do(n.ns, func() error {
		c, err := nftables.New()
		if err != nil {
			return err
		}
		tb := c.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: "flowcap-test-nat"})
		ch := c.AddChain(&nftables.Chain{Name: "prerouting", Table: tb, Type: nftables.ChainTypeNAT,
			Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest})
		c.AddRule(&nftables.Rule{Table: tb, Chain: ch, Exprs: []expr.Any{
			&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: serviceAddr.AsSlice()},
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binary.BigEndian.AppendUint16(nil, 80)},
			&expr.Immediate{Register: 1, Data: podB.AsSlice()},
			&expr.Immediate{Register: 2, Data: binary.BigEndian.AppendUint16(nil, 8080)},
			&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegProtoMin: 2},
		}})
		return c.Flush()
	})
	if err != nil {
		t.Fatalf("DNAT table: %v", err)
	}
}

func ipv4Pair(src, dst netip.Addr) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: src.AsSlice()},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: dst.AsSlice()},
	}
}

// flushConntrack deletes the node's conntrack entries: their DESTROY
// events come at once, where a closed TCP connection would wait out
// TIME_WAIT (2 minutes) and a UDP one its 30 s.
func (n *testNode) flushConntrack(t *testing.T) {
	t.Helper()
	err := netns.Do(n.ns, func() error {
		c, err := conntrack.Dial(nil)
		if err != nil {
			return err
		}
		defer c.Close()
		return c.Flush()
	})
	if err != nil {
		t.Fatalf("flush conntrack: %v", err)
	}
}

// sink collects records.
type sink struct {
	mu   sync.Mutex
	recs []flows.Record
	// gate, when set, holds the first record back until it is closed.
	gate chan struct{}
}

func (s *sink) add(r flows.Record) {
	if s.gate != nil {
		<-s.gate
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recs = append(s.recs, r)
}

func (s *sink) matching(ok func(flows.Record) bool) []flows.Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []flows.Record
	for _, r := range s.recs {
		if ok(r) {
			out = append(out, r)
		}
	}
	return out
}

// startCapture runs the service in the node's namespace until the test
// ends, and waits for it to listen.
func (n *testNode) startCapture(t *testing.T, s *sink, lost func(string)) (*Service, string) {
	t.Helper()
	rec := filepath.Join(t.TempDir(), "sysctls.json")
	svc := New(Config{NetNS: n.ns, Node: "node-1", Sink: s.add, Lost: lost, SysctlRecord: rec, ReceiveBuffer: n.rcvbuf,
		Resolver: fakePods{podA: {"x", "a", true}, podB: {"x", "b", true}},
		Index:    fakeIndex{egressID: {egressRule}, ingressID: {ingressRule}, denyID: {denyRule}},
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case <-svc.ReadyC():
	case err := <-done:
		t.Fatalf("Run ended before it listened: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatalf("not listening after 10 s: %v", svc.Ready())
	}
	return svc, rec
}

// inNS runs f in ns; the sockets it opens stay there.
func inNS(t *testing.T, ns string, f func() error) {
	t.Helper()
	if err := netns.Do(ns, f); err != nil {
		t.Fatal(err)
	}
}
