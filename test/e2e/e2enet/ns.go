package e2enet

import (
	"net/netip"
	"os"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/podnet/podnet/dataplane"
	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/netns"
)

// NS is a test namespace with a netlink handle in it.
type NS struct {
	Path   string
	Handle *netlink.Handle
}

// newNS is a namespace that is not a node: the underlay's switch or
// router, whose forwarding each sets itself.
func newNS(t testing.TB) *NS {
	t.Helper()
	_, path := testutil.NewNetNS(t)
	return wrapNS(t, path)
}

// newNodeNS is a node's namespace: forwarding off, as on a fresh host,
// whatever this machine has, so that podnet must turn it on.
func newNodeNS(t testing.TB) *NS {
	t.Helper()
	_, path := testutil.NewNodeNetNS(t)
	return wrapNS(t, path)
}

func wrapNS(t testing.TB, path string) *NS {
	t.Helper()
	var h *netlink.Handle
	if err := netns.Do(path, func() (err error) { h, err = dataplane.NewHandle(); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	n := &NS{Path: path, Handle: h}
	// Interfaces made from here on skip duplicate address detection: an
	// underlay link-local address is a host-gw next hop, and a tentative
	// one answers no neighbour solicitation for the first second.
	n.sysctl(t, "net/ipv6/conf/default/accept_dad", "0")
	n.up(t, "lo")
	return n
}

func (n *NS) up(t testing.TB, name string) netlink.Link {
	t.Helper()
	l, err := n.Handle.LinkByName(name)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if err := n.Handle.LinkSetUp(l); err != nil {
		t.Fatalf("set %s up: %v", name, err)
	}
	return l
}

func (n *NS) addr(t testing.TB, name string, p netip.Prefix) {
	t.Helper()
	l, err := n.Handle.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Handle.AddrAdd(l, &netlink.Addr{IPNet: dataplane.IPNet(p)}); err != nil {
		t.Fatalf("address %s on %s: %v", p, name, err)
	}
}

func (n *NS) sysctl(t testing.TB, key, value string) {
	t.Helper()
	if err := netns.Do(n.Path, func() error { return dataplane.WriteSysctls([]dataplane.Sysctl{{Key: key, Value: value}}) }); err != nil {
		t.Fatal(err)
	}
}

// link connects n's interface name to peer's peerName with a veth pair
// of MTU mtu, created in n with the peer directly in the other
// namespace.
func (n *NS) link(t testing.TB, name string, peer *NS, peerName string, mtu int) {
	t.Helper()
	f, err := os.Open(peer.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name, MTU: mtu}, PeerName: peerName, PeerNamespace: netlink.NsFd(int(f.Fd()))}
	if err := n.Handle.LinkAdd(v); err != nil {
		t.Fatalf("veth %s-%s: %v", name, peerName, err)
	}
	n.up(t, name)
	peer.up(t, peerName)
}
