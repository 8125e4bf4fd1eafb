package e2e

import (
	"fmt"
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

func newNS(t testing.TB) *ns {
	t.Helper()
	_, path := testutil.NewNetNS(t)
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

// underlay is the network between the nodes and where etcd listens.
type underlay struct {
	hub      *ns        // the switch or the router
	etcdAddr netip.Addr // on hub
	// attach connects node i (1-based) and returns its underlay address.
	attach func(t testing.TB, node *ns, i int) netip.Addr
}

// newSwitch is one L2 segment, 198.18.0.0/24: a bridge in a "switch"
// namespace holding 198.18.0.1 (etcd), node i at 198.18.0.(10+i).
func newSwitch(t testing.TB) *underlay {
	t.Helper()
	sw := newNS(t)
	if err := sw.h.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0"}}); err != nil {
		t.Fatal(err)
	}
	sw.up(t, "br0")
	sw.addr(t, "br0", netip.MustParsePrefix("198.18.0.1/24"))
	br, _ := sw.h.LinkByName("br0")
	return &underlay{hub: sw, etcdAddr: netip.MustParseAddr("198.18.0.1"), attach: func(t testing.TB, node *ns, i int) netip.Addr {
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
		return a
	}}
}

// newRouter puts node i alone on 198.18.i.0/24 behind a "router"
// namespace that forwards between the subnets (198.18.i.1 on its side);
// etcd listens on 198.18.1.1... on the router.
func newRouter(t testing.TB) *underlay {
	t.Helper()
	r := newNS(t)
	r.sysctl(t, "net/ipv4/ip_forward", "1")
	// etcd's address, on the router's loopback so it does not depend on
	// any one node's link.
	r.addr(t, "lo", netip.MustParsePrefix("198.18.255.1/32"))
	return &underlay{hub: r, etcdAddr: netip.MustParseAddr("198.18.255.1"), attach: func(t testing.TB, node *ns, i int) netip.Addr {
		port := fmt.Sprintf("r-n%d", i)
		node.link(t, "eth0", r, port)
		gw := netip.AddrFrom4([4]byte{198, 18, byte(i), 1})
		r.addr(t, port, netip.PrefixFrom(gw, 24))
		a := netip.AddrFrom4([4]byte{198, 18, byte(i), 10})
		node.addr(t, "eth0", netip.PrefixFrom(a, 24))
		l, _ := node.h.LinkByName("eth0")
		// The default route stays inside the test: there is nothing
		// behind the router but the other nodes' subnets and etcd.
		if err := node.h.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: gw.AsSlice()}); err != nil {
			t.Fatal(err)
		}
		return a
	}}
}
