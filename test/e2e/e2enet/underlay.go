package e2enet

import (
	"fmt"
	"net"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"
)

// Underlay is the network between the nodes and where the datastore
// listens. It has IPv4 and IPv6 addresses (the IPv6 ones only for
// traffic that leaves the pods: the agents' IPv6 next hops are
// link-local).
type Underlay struct {
	// Hub is the switch or the router.
	Hub *NS
	// Server is the hub's address where the datastore (etcd, the API
	// server) listens.
	Server netip.Addr
	// Outside4 and Outside6 are hosts beyond every node, outside every
	// pool: addresses of the hub.
	Outside4, Outside6 netip.Addr
	// MTU is that of each node's link to the hub, both ends (0: 1500),
	// e.g. 9000 for jumbo frames. Set it before the first node attaches.
	MTU int
	// attach connects node i (1-based) and returns its underlay
	// addresses.
	attach func(t testing.TB, node *NS, i int) (addr4, addr6 netip.Addr)
}

// linkMTU is the MTU of the nodes' links.
func (u *Underlay) linkMTU() int {
	if u.MTU > 0 {
		return u.MTU
	}
	return 1500
}

// NewSwitch is one L2 segment, 198.18.0.0/24 and fd00:198:18::/64: a
// bridge in a "switch" namespace holding 198.18.0.1 (the server) and
// fd00:198:18::1, node i at 198.18.0.(10+i) and fd00:198:18::(10+i).
func NewSwitch(t testing.TB) *Underlay {
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
	if err := sw.Handle.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0", HardwareAddr: mac}}); err != nil {
		t.Fatal(err)
	}
	sw.up(t, "br0")
	sw.addr(t, "br0", netip.MustParsePrefix("198.18.0.1/24"))
	sw.addr(t, "br0", netip.MustParsePrefix("fd00:198:18::1/64"))
	br, _ := sw.Handle.LinkByName("br0")
	var u *Underlay
	u = &Underlay{Hub: sw, Server: netip.MustParseAddr("198.18.0.1"),
		Outside4: netip.MustParseAddr("198.18.0.1"), Outside6: netip.MustParseAddr("fd00:198:18::1"),
		attach: func(t testing.TB, node *NS, i int) (netip.Addr, netip.Addr) {
			port := fmt.Sprintf("sw-n%d", i)
			node.link(t, "eth0", sw, port, u.linkMTU())
			l, err := sw.Handle.LinkByName(port)
			if err != nil {
				t.Fatal(err)
			}
			if err := sw.Handle.LinkSetMaster(l, br); err != nil {
				t.Fatal(err)
			}
			a := netip.AddrFrom4([4]byte{198, 18, 0, byte(10 + i)})
			node.addr(t, "eth0", netip.PrefixFrom(a, 24))
			a6 := netip.MustParseAddr(fmt.Sprintf("fd00:198:18::%d", 10+i))
			node.addr(t, "eth0", netip.PrefixFrom(a6, 64))
			return a, a6
		}}
	return u
}

// NewRouter puts node i alone on 198.18.i.0/24 and fd00:198:18:i::/64
// behind a "router" namespace that forwards between the subnets
// (198.18.i.1 and fd00:198:18:i::1 on its side); the server listens on
// 198.18.255.1 on the router.
func NewRouter(t testing.TB) *Underlay {
	t.Helper()
	r := newNS(t)
	r.sysctl(t, "net/ipv4/ip_forward", "1")
	r.sysctl(t, "net/ipv6/conf/all/forwarding", "1")
	// The server's address and the outside hosts, on the router's
	// loopback so they do not depend on any one node's link.
	r.addr(t, "lo", netip.MustParsePrefix("198.18.255.1/32"))
	r.addr(t, "lo", netip.MustParsePrefix("fd00:198:18:ff::1/128"))
	var u *Underlay
	u = &Underlay{Hub: r, Server: netip.MustParseAddr("198.18.255.1"),
		Outside4: netip.MustParseAddr("198.18.255.1"), Outside6: netip.MustParseAddr("fd00:198:18:ff::1"),
		attach: func(t testing.TB, node *NS, i int) (netip.Addr, netip.Addr) {
			port := fmt.Sprintf("r-n%d", i)
			node.link(t, "eth0", r, port, u.linkMTU())
			gw := netip.AddrFrom4([4]byte{198, 18, byte(i), 1})
			gw6 := netip.MustParseAddr(fmt.Sprintf("fd00:198:18:%d::1", i))
			r.addr(t, port, netip.PrefixFrom(gw, 24))
			r.addr(t, port, netip.PrefixFrom(gw6, 64))
			a := netip.AddrFrom4([4]byte{198, 18, byte(i), 10})
			a6 := netip.MustParseAddr(fmt.Sprintf("fd00:198:18:%d::10", i))
			node.addr(t, "eth0", netip.PrefixFrom(a, 24))
			node.addr(t, "eth0", netip.PrefixFrom(a6, 64))
			l, _ := node.Handle.LinkByName("eth0")
			// The default routes stay inside the test: there is nothing
			// behind the router but the other nodes' subnets, the server
			// and the outside hosts.
			for _, via := range []netip.Addr{gw, gw6} {
				if err := node.Handle.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: via.AsSlice()}); err != nil {
					t.Fatalf("default route via %s: %v", via, err)
				}
			}
			return a, a6
		}}
	return u
}
