package policyrules

import (
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/podnet/podnet/dataplane"
	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/netns"
	"github.com/podnet/podnet/policy"
)

// TestBridgedPodsJudged: in bridge mode two pods of one bridge talk at
// layer 2 and never cross the inet hooks, unless the bridge hands its IP
// traffic to them (net.bridge.bridge-nf-call-iptables and -ip6tables, the
// br_netfilter setting kube-proxy needs on a bridge too), which
// BridgeNetfilterSysctls turns on. Without it an isolated pod is reached by a pod
// no rule allows; with it the rules hold, replies pass as established,
// IPv4 and IPv6.
func TestBridgedPodsJudged(t *testing.T) {
	testutil.RequireRoot(t)
	_, node := testutil.NewNodeNetNS(t)
	nh := handle(t, node)
	must(t, netns.Do(node, func() error {
		return dataplane.WriteSysctls(append(dataplane.NodeForwardingSysctls(true, true),
			dataplane.Sysctl{Key: "net/ipv6/conf/default/accept_dad", Value: "0"}))
	}))
	bridge, err := dataplane.EnsureBridge(nh, dataplane.Bridge{Name: "pnbr0"})
	must(t, err)
	br := bridge.Attrs().Index
	must(t, dataplane.AddAddr(nh, br, netip.MustParsePrefix("10.244.0.1/24")))
	must(t, dataplane.AddAddr(nh, br, netip.MustParsePrefix("fd00:244::1/64")))

	names := []string{"client", "stranger", "server"}
	addrs := map[string][2]netip.Addr{}
	paths := map[string]string{}
	snap := &policy.Snapshot{Namespaces: []policy.Namespace{{Name: "x"}}}
	for i, n := range names {
		_, p := testutil.NewNetNS(t)
		paths[n] = p
		idx := veth(t, nh, "pnb"+n[:3], p)
		must(t, dataplane.SetMaster(nh, idx, br))
		a4, a6 := netip.AddrFrom4([4]byte{10, 244, 0, byte(i + 2)}), netip.AddrFrom16([16]byte{0xfd, 0, 2, 0x44, 15: byte(i + 2)})
		addrs[n] = [2]netip.Addr{a4, a6}
		ph := handle(t, p)
		must(t, netns.Do(p, func() error {
			return dataplane.WriteSysctls([]dataplane.Sysctl{{Key: "net/ipv6/conf/eth0/accept_dad", Value: "0"}})
		}))
		eth := linkUp(t, ph, "eth0")
		linkUp(t, ph, "lo")
		must(t, dataplane.AddAddr(ph, eth, netip.PrefixFrom(a4, 24)))
		must(t, dataplane.AddAddr(ph, eth, netip.PrefixFrom(a6, 64)))
		snap.Pods = append(snap.Pods, policy.Pod{Namespace: "x", Name: n, Node: "n1", Labels: map[string]string{"app": n}, IPs: []netip.Addr{a4, a6}})
	}
	snap.Policies = []*networkingv1.NetworkPolicy{func() *networkingv1.NetworkPolicy {
		np := netpol("x", "server-from-client", map[string]string{"app": "server"}, networkingv1.PolicyTypeIngress)
		np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{podPeer(map[string]string{"app": "client"})}}}
		return np
	}()}

	var lns []net.Listener
	for _, a := range addrs["server"] {
		must(t, netns.Do(paths["server"], func() error {
			l, err := net.Listen("tcp", netip.AddrPortFrom(a, 80).String())
			lns = append(lns, l)
			return err
		}))
		go serveEcho(lns[len(lns)-1])
	}
	t.Cleanup(func() {
		for _, l := range lns {
			l.Close()
		}
	})
	var reachesWithin func(from string, v6 bool, wait time.Duration) bool
	reaches := func(from string, v6 bool) bool { return reachesWithin(from, v6, 700*time.Millisecond) }
	// A path that should be open gets a longer chance on a loaded
	// machine; one that should be closed needs no more than one try.
	opens := func(from string, v6 bool) bool {
		return reaches(from, v6) || reachesWithin(from, v6, 5*time.Second)
	}
	reachesWithin = func(from string, v6 bool, wait time.Duration) bool {
		fam := 0
		if v6 {
			fam = 1
		}
		var c net.Conn
		err := netns.Do(paths[from], func() (err error) {
			d := net.Dialer{Timeout: wait}
			c, err = d.Dial("tcp", netip.AddrPortFrom(addrs["server"][fam], 80).String())
			return err
		})
		if err != nil {
			return false
		}
		defer c.Close()
		return echo(c, "hi", max(wait, time.Second)) == nil
	}

	f, err := os.Open(node)
	must(t, err)
	t.Cleanup(func() { f.Close() })
	r, err := New("n1", WithNetNSFd(int(f.Fd())))
	must(t, err)
	t.Cleanup(func() {
		must(t, r.Remove())
		r.Close()
	})
	_, err = r.Apply(policy.Compile(snap, policy.Options{Node: "n1"}))
	must(t, err)

	for _, v6 := range []bool{false, true} {
		must(t, netns.Do(node, func() error { return dataplane.WriteSysctls(dataplane.BridgeNetfilterSysctls(false)) }))
		if !opens("stranger", v6) {
			t.Fatalf("IPv6=%v: without the bridge's hand-over the stranger does not reach the server either: the test proves nothing", v6)
		}
		must(t, netns.Do(node, func() error { return dataplane.WriteSysctls(dataplane.BridgeNetfilterSysctls(true)) }))
		if !opens("client", v6) {
			t.Errorf("IPv6=%v: the client, which the policy allows, does not reach the server", v6)
		}
		if reaches("stranger", v6) {
			t.Errorf("IPv6=%v: the stranger reaches the isolated server across the bridge", v6)
		}
	}
}
