package e2e

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/podnet/podnet/dataplane"
	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/netns"
)

// ns is a test namespace with a netlink handle in it.
type ns struct {
	path string
	h    *netlink.Handle
}

// newNS is a namespace that is not a node: the underlay's switch or
// router, whose forwarding each sets itself.
func newNS(t testing.TB) *ns {
	t.Helper()
	_, path := testutil.NewNetNS(t)
	return wrapNS(t, path)
}

// newNodeNS is a node's namespace: forwarding off, as on a fresh host,
// whatever this machine has, so that podnet must turn it on.
func newNodeNS(t testing.TB) *ns {
	t.Helper()
	_, path := testutil.NewNodeNetNS(t)
	return wrapNS(t, path)
}

func wrapNS(t testing.TB, path string) *ns {
	t.Helper()
	var h *netlink.Handle
	if err := netns.Do(path, func() (err error) { h, err = dataplane.NewHandle(); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	n := &ns{path: path, h: h}
	// Interfaces made from here on skip duplicate address detection: an
	// underlay link-local address is a host-gw next hop, and a tentative
	// one answers no neighbour solicitation for the first second.
	n.sysctl(t, "net/ipv6/conf/default/accept_dad", "0")
	n.up(t, "lo")
	return n
}

func (n *ns) up(t testing.TB, name string) netlink.Link {
	t.Helper()
	l, err := n.h.LinkByName(name)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if err := n.h.LinkSetUp(l); err != nil {
		t.Fatalf("set %s up: %v", name, err)
	}
	return l
}

func (n *ns) addr(t testing.TB, name string, p netip.Prefix) {
	t.Helper()
	l, err := n.h.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.h.AddrAdd(l, &netlink.Addr{IPNet: dataplane.IPNet(p)}); err != nil {
		t.Fatalf("address %s on %s: %v", p, name, err)
	}
}

func (n *ns) sysctl(t testing.TB, key, value string) {
	t.Helper()
	if err := netns.Do(n.path, func() error { return dataplane.WriteSysctls([]dataplane.Sysctl{{Key: key, Value: value}}) }); err != nil {
		t.Fatal(err)
	}
}

// link connects n's interface name to peer's peerName with a veth pair,
// created in n with the peer directly in the other namespace.
func (n *ns) link(t testing.TB, name string, peer *ns, peerName string) {
	t.Helper()
	f, err := os.Open(peer.path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name, MTU: 1500}, PeerName: peerName, PeerNamespace: netlink.NsFd(int(f.Fd()))}
	if err := n.h.LinkAdd(v); err != nil {
		t.Fatalf("veth %s-%s: %v", name, peerName, err)
	}
	n.up(t, name)
	peer.up(t, peerName)
}

// underlay is the network between the nodes and where etcd listens. It
// has IPv4 and IPv6 addresses (the IPv6 ones only for traffic that
// leaves the pods: the agents' IPv6 next hops are link-local).
type underlay struct {
	hub      *ns        // the switch or the router
	etcdAddr netip.Addr // on hub
	// outside are hosts beyond every node, outside every pool, IPv4 and
	// IPv6: addresses of hub.
	outside4, outside6 netip.Addr
	// attach connects node i (1-based) and returns its underlay
	// addresses.
	attach func(t testing.TB, node *ns, i int) (addr4, addr6 netip.Addr)
}

// newSwitch is one L2 segment, 198.18.0.0/24 and fd00:198:18::/64: a
// bridge in a "switch" namespace holding 198.18.0.1 (etcd) and
// fd00:198:18::1, node i at 198.18.0.(10+i) and fd00:198:18::(10+i).
func newSwitch(t testing.TB) *underlay {
	t.Helper()
	sw := newNS(t)
	// A switch does not route, whatever this machine's namespace does:
	// a pod's packet that reached it unmasqueraded must go nowhere.
	sw.sysctl(t, "net/ipv4/ip_forward", "0")
	sw.sysctl(t, "net/ipv6/conf/all/forwarding", "0")
	// A MAC of its own: a bridge without one takes the lowest of its
	// ports', so a node joining later could change it under the other
	// nodes' neighbour entries for the outside host.
	mac := net.HardwareAddr{0x02, 0x00, 0xc6, 0x12, 0x00, 0x01}
	if err := sw.h.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0", HardwareAddr: mac}}); err != nil {
		t.Fatal(err)
	}
	sw.up(t, "br0")
	sw.addr(t, "br0", netip.MustParsePrefix("198.18.0.1/24"))
	sw.addr(t, "br0", netip.MustParsePrefix("fd00:198:18::1/64"))
	br, _ := sw.h.LinkByName("br0")
	return &underlay{hub: sw, etcdAddr: netip.MustParseAddr("198.18.0.1"),
		outside4: netip.MustParseAddr("198.18.0.1"), outside6: netip.MustParseAddr("fd00:198:18::1"),
		attach: func(t testing.TB, node *ns, i int) (netip.Addr, netip.Addr) {
			port := fmt.Sprintf("sw-n%d", i)
			node.link(t, "eth0", sw, port)
			l, err := sw.h.LinkByName(port)
			if err != nil {
				t.Fatal(err)
			}
			if err := sw.h.LinkSetMaster(l, br); err != nil {
				t.Fatal(err)
			}
			a := netip.AddrFrom4([4]byte{198, 18, 0, byte(10 + i)})
			node.addr(t, "eth0", netip.PrefixFrom(a, 24))
			a6 := netip.MustParseAddr(fmt.Sprintf("fd00:198:18::%d", 10+i))
			node.addr(t, "eth0", netip.PrefixFrom(a6, 64))
			return a, a6
		}}
}

// newRouter puts node i alone on 198.18.i.0/24 and fd00:198:18:i::/64
// behind a "router" namespace that forwards between the subnets
// (198.18.i.1 and fd00:198:18:i::1 on its side); etcd listens on
// 198.18.255.1 on the router.
func newRouter(t testing.TB) *underlay {
	t.Helper()
	r := newNS(t)
	r.sysctl(t, "net/ipv4/ip_forward", "1")
	r.sysctl(t, "net/ipv6/conf/all/forwarding", "1")
	// etcd's address and the outside hosts, on the router's loopback so
	// they do not depend on any one node's link.
	r.addr(t, "lo", netip.MustParsePrefix("198.18.255.1/32"))
	r.addr(t, "lo", netip.MustParsePrefix("fd00:198:18:ff::1/128"))
	return &underlay{hub: r, etcdAddr: netip.MustParseAddr("198.18.255.1"),
		outside4: netip.MustParseAddr("198.18.255.1"), outside6: netip.MustParseAddr("fd00:198:18:ff::1"),
		attach: func(t testing.TB, node *ns, i int) (netip.Addr, netip.Addr) {
			port := fmt.Sprintf("r-n%d", i)
			node.link(t, "eth0", r, port)
			gw := netip.AddrFrom4([4]byte{198, 18, byte(i), 1})
			gw6 := netip.MustParseAddr(fmt.Sprintf("fd00:198:18:%d::1", i))
			r.addr(t, port, netip.PrefixFrom(gw, 24))
			r.addr(t, port, netip.PrefixFrom(gw6, 64))
			a := netip.AddrFrom4([4]byte{198, 18, byte(i), 10})
			a6 := netip.MustParseAddr(fmt.Sprintf("fd00:198:18:%d::10", i))
			node.addr(t, "eth0", netip.PrefixFrom(a, 24))
			node.addr(t, "eth0", netip.PrefixFrom(a6, 64))
			l, _ := node.h.LinkByName("eth0")
			// The default routes stay inside the test: there is nothing
			// behind the router but the other nodes' subnets, etcd and
			// the outside hosts.
			for _, via := range []netip.Addr{gw, gw6} {
				if err := node.h.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: via.AsSlice()}); err != nil {
					t.Fatalf("default route via %s: %v", via, err)
				}
			}
			return a, a6
		}}
}
