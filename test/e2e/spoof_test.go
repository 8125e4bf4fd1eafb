package e2e

import (
	"net"
	"net/netip"
	"testing"

	"github.com/podnet/podnet/agent/route"
	"github.com/podnet/podnet/dataplane"
	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/netns"
	"github.com/podnet/podnet/test/e2e/e2enet"
)

// TestSpoofAcrossNodes: a pod on one node sends UDP, IPv4 and IPv6, to a
// pod on another node from addresses that are not its own (the other
// node's pod's, its neighbour's on its own node, an unused pool address,
// one outside the pools), as raw frames; none arrives, in host-gw and in
// VXLAN, while the same frames from its own address do. rp_filter is 0
// on every node, Debian's default.
func TestSpoofAcrossNodes(t *testing.T) {
	testutil.RequireRoot(t)
	for _, tc := range crossNodeModes {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, tc.u(t), tc.mode, true)
			nodes := c.startNodes(2)
			for _, n := range nodes {
				setRPFilterOff(t, n)
			}
			attacker, neighbour, victim := nodes[0].Pods[0], nodes[0].Pods[1], nodes[1].Pods[0]
			for _, v4 := range []bool{true, false} {
				own, dst, nb := attacker.IP, victim.IP, neighbour.IP
				outside := netip.MustParseAddr("10.200.0.9")
				if !v4 {
					own, dst, nb, outside = attacker.IP6, victim.IP6, neighbour.IP6, netip.MustParseAddr("fd00:200::9")
				}
				forged := []netip.Addr{victim.Node.Pods[1].IP, nb, own.Next().Next().Next(), outside}
				if !v4 {
					forged[0] = victim.Node.Pods[1].IP6
				}
				// Routed: the next hop is the host end, whose MAC is the
				// same for every pod.
				got := testutil.UDPArrivals(t, attacker.NS, victim.NS, podMAC(t, attacker), dataplane.RoutedHostMAC, dst,
					append([]netip.Addr{own}, forged...), spoofTries)
				if got[own] == 0 {
					t.Fatalf("IPv4=%v: not even the attacker's own address got across (%v): the test proves nothing", v4, got)
				}
				for _, src := range forged {
					if got[src] != 0 {
						t.Errorf("IPv4=%v: %d of %d packets from forged source %s reached the pod on the other node", v4, got[src], spoofTries, src)
					}
				}
			}
			c.DelPods()
			for _, n := range nodes {
				c.CheckMasqClean(n)
				c.CheckPodsGone(n)
			}
		})
	}
}

const spoofTries = 3

// crossNodeModes are the ways pods reach another node that the forged
// source tests cover: host-gw on one segment, VXLAN across a router.
var crossNodeModes = []struct {
	name string
	u    func(testing.TB) *e2enet.Underlay
	mode route.Mode
}{
	{"host-gw", e2enet.NewSwitch, route.ModeHostGW},
	{"vxlan", e2enet.NewRouter, route.ModeVXLAN},
}

// podMAC is the MAC of the pod's eth0.
func podMAC(t *testing.T, p *e2enet.Pod) net.HardwareAddr {
	t.Helper()
	var mac net.HardwareAddr
	if err := netns.Do(p.NS, func() error {
		i, err := net.InterfaceByName("eth0")
		if err == nil {
			mac = i.HardwareAddr
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return mac
}
