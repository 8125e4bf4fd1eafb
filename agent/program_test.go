package agent

import (
	"log/slog"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/podnet/podnet/dataplane"
	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/netns"
)

// testNode is a namespace with an underlay "ul0" at addr (a veth whose
// peer stays in the namespace: the kernel may lack the dummy driver).
type testNode struct {
	path string
	h    *netlink.Handle
	ul   netlink.Link
}

func newTestNode(t testing.TB, addr netip.Prefix) *testNode {
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
	return &testNode{path: path, h: h, ul: ul}
}

func (n *testNode) programmer(t testing.TB, addr netip.Addr, self string) *Programmer {
	return &Programmer{h: n.h, log: slog.New(slog.DiscardHandler), UnderlayIndex: n.ul.Attrs().Index,
		UnderlayAddr: addr, UnderlayMTU: 1500, VTEPMAC: VTEPMAC(self),
		sysctl: func(s []dataplane.Sysctl) error {
			return netns.Do(n.path, func() error { return dataplane.WriteSysctls(s) })
		}}
}

func TestProgramReconcile(t *testing.T) {
	n := newTestNode(t, netip.MustParsePrefix("198.18.0.11/24"))
	p := n.programmer(t, netip.MustParseAddr("198.18.0.11"), "a")
	// A route podnet does not own, to a destination it will want: it
	// must survive every apply.
	foreign := &netlink.Route{Dst: dataplane.IPNet(netip.MustParsePrefix("10.103.9.0/26")), Gw: netip.MustParseAddr("198.18.0.99").AsSlice(), Table: unix.RT_TABLE_MAIN}
	if err := n.h.RouteAdd(foreign); err != nil {
		t.Fatal(err)
	}
	snap := &Snapshot{
		Nodes: map[string]NodeRecord{
			"a": rec("a", "198.18.0.11"),
			"b": rec("b", "198.18.0.12"),
			"c": rec("c", "198.18.5.13"),
		},
		Blocks: map[netip.Prefix]string{
			pfx("10.103.0.0/26"):  "a",
			pfx("10.103.0.64/26"): "b",
			pfx("10.103.1.0/26"):  "c",
			pfx("10.103.9.0/26"):  "b",
		},
		Borrowed: map[netip.Addr]string{netip.MustParseAddr("10.103.0.7"): "c"},
	}
	params := Params{Self: "a", Mode: ModeAuto, LocalSubnets: []netip.Prefix{pfx("198.18.0.0/24")}}
	st, err := p.Apply(Compute(params, snap))
	if err != nil {
		t.Fatal(err)
	}
	if st.Added != 4 || st.Conflicts != 1 || st.Routes != 4 {
		t.Fatalf("stats %+v, want 4 added, 1 conflict", st)
	}
	owned, err := OwnedRoutes(n.h)
	if err != nil {
		t.Fatal(err)
	}
	vx, err := n.h.LinkByName(VXLANDevice)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"10.103.0.0/26":  "blackhole",
		"10.103.0.64/26": "via 198.18.0.12 dev ul0",
		"10.103.1.0/26":  "via 198.18.5.13 dev podnet.vxlan onlink",
		"10.103.0.7/32":  "via 198.18.5.13 dev podnet.vxlan onlink",
	}
	checkRoutes(t, n.h, owned, want)
	checkPeers(t, n.h, vx.Attrs().Index, map[string]string{"198.18.5.13": VTEPMAC("c").String()})
	// Again: nothing to do.
	if st, err := p.Apply(Compute(params, snap)); err != nil || st.Changed() {
		t.Fatalf("second apply: %+v, %v", st, err)
	}
	// Node c leaves, b moves off-link: c's routes, neighbour and FDB entry
	// go, b's routes switch to VXLAN; the foreign route stays.
	delete(snap.Nodes, "c")
	snap.Nodes["b"] = rec("b", "198.18.6.12")
	st, err = p.Apply(Compute(params, snap))
	if err != nil {
		t.Fatal(err)
	}
	owned, _ = OwnedRoutes(n.h)
	checkRoutes(t, n.h, owned, map[string]string{
		"10.103.0.0/26":  "blackhole",
		"10.103.0.64/26": "via 198.18.6.12 dev podnet.vxlan onlink",
	})
	checkPeers(t, n.h, vx.Attrs().Index, map[string]string{"198.18.6.12": VTEPMAC("b").String()})
	if ok, err := dataplane.HasRoute(n.h, n.ul.Attrs().Index, dataplane.LinkRoute{Dst: pfx("10.103.9.0/26"), GW: netip.MustParseAddr("198.18.0.99")}); err != nil || !ok {
		t.Fatalf("foreign route gone: %v %v", ok, err)
	}
	// host-gw: the device goes, with it its entries.
	params.Mode = ModeHostGW
	if _, err := p.Apply(Compute(params, snap)); err == nil {
		// b is not on-link: host-gw cannot route it, which is an error.
		t.Fatal("host-gw route to an off-link node: no error")
	}
	if _, err := n.h.LinkByName(VXLANDevice); !dataplane.IsNotFound(err) {
		t.Fatalf("%s still there in host-gw mode: %v", VXLANDevice, err)
	}
}

func rec(name, addr string) NodeRecord {
	a := netip.MustParseAddr(addr)
	return NodeRecord{Name: name, Address: a, VTEPIP: a, VTEPMAC: VTEPMAC(name).String()}
}

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func describe(h *netlink.Handle, r netlink.Route) string {
	if r.Type == unix.RTN_BLACKHOLE {
		return "blackhole"
	}
	s := "via " + r.Gw.String()
	if l, err := h.LinkByIndex(r.LinkIndex); err == nil {
		s += " dev " + l.Attrs().Name
	}
	if r.Flags&int(netlink.FLAG_ONLINK) != 0 {
		s += " onlink"
	}
	return s
}

func checkRoutes(t testing.TB, h *netlink.Handle, owned map[netip.Prefix]netlink.Route, want map[string]string) {
	t.Helper()
	got := map[string]string{}
	for p, r := range owned {
		got[p.String()] = describe(h, r)
	}
	if len(got) != len(want) {
		t.Errorf("owned routes %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("route %s: %q, want %q (all: %v)", k, got[k], v, got)
		}
	}
}

func checkPeers(t testing.TB, h *netlink.Handle, index int, want map[string]string) {
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

// TestProgramIPv6: IPv6 blocks over an IPv4 underlay. An on-link node's
// blocks go via its underlay link-local address on the underlay; an
// off-link node's via its VTEP's link-local address on podnet.vxlan,
// which gets a permanent IPv6 neighbour for it; this node's own block is
// a blackhole. A second apply changes nothing, and a node that leaves
// takes its IPv6 routes and neighbour with it.
// sysctlIn reads a sysctl in the node's namespace.
func (n *testNode) sysctlIn(t testing.TB, key string) string {
	t.Helper()
	var v string
	if err := netns.Do(n.path, func() (err error) { v, err = dataplane.ReadSysctl(key); return err }); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestProgramIPv6(t *testing.T) {
	n := newTestNode(t, netip.MustParsePrefix("198.18.0.11/24"))
	if v := n.sysctlIn(t, "net/ipv6/conf/all/forwarding"); v != "0" {
		t.Fatalf("IPv6 forwarding %s before any IPv6 route, want 0", v)
	}
	p := n.programmer(t, netip.MustParseAddr("198.18.0.11"), "a")
	bLL := netip.MustParseAddr("fe80::b")
	snap := &Snapshot{
		Nodes: map[string]NodeRecord{
			"a": rec("a", "198.18.0.11"),
			"b": withLinkLocal6(rec("b", "198.18.0.12"), bLL),
			"c": rec("c", "198.18.5.13"),
		},
		Blocks: map[netip.Prefix]string{
			pfx("fd00:103::/122"):   "a",
			pfx("fd00:103::40/122"): "b",
			pfx("fd00:103::80/122"): "c",
			pfx("10.103.0.0/26"):    "a",
			pfx("10.103.0.64/26"):   "c",
		},
		Borrowed: map[netip.Addr]string{netip.MustParseAddr("fd00:103::7"): "c"},
	}
	params := Params{Self: "a", Mode: ModeAuto, LocalSubnets: []netip.Prefix{pfx("198.18.0.0/24")}}
	if _, err := p.Apply(Compute(params, snap)); err != nil {
		t.Fatal(err)
	}
	// IPv6 blocks: the node forwards IPv6, or routes to them are useless.
	if v := n.sysctlIn(t, "net/ipv6/conf/all/forwarding"); v != "1" {
		t.Errorf("IPv6 forwarding %s with IPv6 routes, want 1", v)
	}
	owned, err := OwnedRoutes(n.h)
	if err != nil {
		t.Fatal(err)
	}
	cV6 := VTEPLinkLocal6(VTEPMAC("c")).String()
	checkRoutes(t, n.h, owned, map[string]string{
		"fd00:103::/122":   "blackhole",
		"fd00:103::40/122": "via fe80::b dev ul0",
		"fd00:103::80/122": "via " + cV6 + " dev podnet.vxlan",
		"fd00:103::7/128":  "via " + cV6 + " dev podnet.vxlan",
		"10.103.0.0/26":    "blackhole",
		"10.103.0.64/26":   "via 198.18.5.13 dev podnet.vxlan onlink",
	})
	vx, err := n.h.LinkByName(VXLANDevice)
	if err != nil {
		t.Fatal(err)
	}
	neigh6 := func() map[string]string {
		t.Helper()
		ns, err := n.h.NeighList(vx.Attrs().Index, netlink.FAMILY_V6)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, e := range ns {
			if e.State&netlink.NUD_PERMANENT != 0 {
				out[e.IP.String()] = e.HardwareAddr.String()
			}
		}
		return out
	}
	if got := neigh6(); len(got) != 1 || got[cV6] != VTEPMAC("c").String() {
		t.Fatalf("IPv6 neighbours on %s: %v, want %s at %s", VXLANDevice, got, cV6, VTEPMAC("c"))
	}
	if st, err := p.Apply(Compute(params, snap)); err != nil || st.Changed() {
		t.Fatalf("second apply: %+v, %v", st, err)
	}
	delete(snap.Nodes, "c")
	if _, err := p.Apply(Compute(params, snap)); err != nil {
		t.Fatal(err)
	}
	owned, _ = OwnedRoutes(n.h)
	checkRoutes(t, n.h, owned, map[string]string{
		"fd00:103::/122":   "blackhole",
		"fd00:103::40/122": "via fe80::b dev ul0",
		"10.103.0.0/26":    "blackhole",
	})
	if got := neigh6(); len(got) != 0 {
		t.Fatalf("IPv6 neighbours left after c left: %v", got)
	}
}
