package nodetest

import (
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/podnet/podnet/dataplane"
	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/netns"
)

// Node is a namespace with an underlay "ul0" at an address (a veth whose
// peer stays in the namespace: the kernel may lack the dummy driver).
type Node struct {
	// Path is the namespace's path, H a netlink handle in it, UL its
	// underlay.
	Path string
	H    *netlink.Handle
	UL   netlink.Link
}

// New makes a node whose underlay has addr; it skips the test without
// root.
func New(t testing.TB, addr netip.Prefix) *Node {
	t.Helper()
	testutil.RequireRoot(t)
	_, path := testutil.NewNodeNetNS(t)
	var h *netlink.Handle
	if err := netns.Do(path, func() (err error) { h, err = dataplane.NewHandle(); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	if err := h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "ul0", MTU: 1500}, PeerName: "ul0p"}); err != nil {
		t.Fatal(err)
	}
	ul, err := h.LinkByName("ul0")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.AddrAdd(ul, &netlink.Addr{IPNet: dataplane.IPNet(addr)}); err != nil {
		t.Fatal(err)
	}
	if err := h.LinkSetUp(ul); err != nil {
		t.Fatal(err)
	}
	return &Node{Path: path, H: h, UL: ul}
}

// Sysctl reads a sysctl in the node's namespace.
func (n *Node) Sysctl(t testing.TB, key string) string {
	t.Helper()
	var v string
	if err := netns.Do(n.Path, func() (err error) { v, err = dataplane.ReadSysctl(key); return err }); err != nil {
		t.Fatal(err)
	}
	return v
}

// CheckPeers fails t unless the VXLAN device at index has exactly the
// neighbour and FDB entries of want (VTEP IP -> MAC).
func CheckPeers(t testing.TB, h *netlink.Handle, index int, want map[string]string) {
	t.Helper()
	neighs, err := h.NeighList(index, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, n := range neighs {
		got[n.IP.String()] = n.HardwareAddr.String()
	}
	fdb, err := h.NeighList(index, unix.AF_BRIDGE)
	if err != nil {
		t.Fatal(err)
	}
	gotFDB := map[string]string{}
	for _, n := range fdb {
		gotFDB[n.IP.String()] = n.HardwareAddr.String()
	}
	if len(got) != len(want) || len(gotFDB) != len(want) {
		t.Errorf("neighbours %v, FDB %v; want %v for both", got, gotFDB, want)
	}
	for ip, mac := range want {
		if got[ip] != mac || gotFDB[ip] != mac {
			t.Errorf("peer %s: neighbour %q, FDB %q, want %q", ip, got[ip], gotFDB[ip], mac)
		}
	}
}
