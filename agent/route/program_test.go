package route

import (
	"log/slog"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/podnet/podnet/agent/clusterstate"
	"github.com/podnet/podnet/agent/internal/nodetest"
	"github.com/podnet/podnet/dataplane"
	"github.com/podnet/podnet/netns"
)

// programmer programs n as node self, whose underlay address is addr.
func programmer(n *nodetest.Node, addr netip.Addr, self string) *Programmer {
	return &Programmer{h: n.H, log: slog.New(slog.DiscardHandler), UnderlayIndex: n.UL.Attrs().Index,
		UnderlayAddr: addr, UnderlayMTU: 1500, VTEPMAC: clusterstate.VTEPMAC(self),
		sysctl: func(s []dataplane.Sysctl) error {
			return netns.Do(n.Path, func() error { return dataplane.WriteSysctls(s) })
		}}
}

func TestProgramReconcile(t *testing.T) {
	n := nodetest.New(t, netip.MustParsePrefix("198.18.0.11/24"))
	p := programmer(n, netip.MustParseAddr("198.18.0.11"), "a")
	// A route podnet does not own, to a destination it will want: it
	// must survive every apply.
	foreign := &netlink.Route{Dst: dataplane.IPNet(netip.MustParsePrefix("10.103.9.0/26")), Gw: netip.MustParseAddr("198.18.0.99").AsSlice(), Table: unix.RT_TABLE_MAIN}
	if err := n.H.RouteAdd(foreign); err != nil {
		t.Fatal(err)
	}
	snap := &clusterstate.Snapshot{
		Nodes: map[string]clusterstate.NodeRecord{
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
	owned, err := OwnedRoutes(n.H)
	if err != nil {
		t.Fatal(err)
	}
	vx, err := n.H.LinkByName(VXLANDevice)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"10.103.0.0/26":  "blackhole",
		"10.103.0.64/26": "via 198.18.0.12 dev ul0",
		"10.103.1.0/26":  "via 198.18.5.13 dev podnet.vxlan onlink",
		"10.103.0.7/32":  "via 198.18.5.13 dev podnet.vxlan onlink",
	}
	checkRoutes(t, n.H, owned, want)
	nodetest.CheckPeers(t, n.H, vx.Attrs().Index, map[string]string{"198.18.5.13": clusterstate.VTEPMAC("c").String()})
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
	owned, _ = OwnedRoutes(n.H)
	checkRoutes(t, n.H, owned, map[string]string{
		"10.103.0.0/26":  "blackhole",
		"10.103.0.64/26": "via 198.18.6.12 dev podnet.vxlan onlink",
	})
	nodetest.CheckPeers(t, n.H, vx.Attrs().Index, map[string]string{"198.18.6.12": clusterstate.VTEPMAC("b").String()})
	if ok, err := dataplane.HasRoute(n.H, n.UL.Attrs().Index, dataplane.LinkRoute{Dst: pfx("10.103.9.0/26"), GW: netip.MustParseAddr("198.18.0.99")}); err != nil || !ok {
		t.Fatalf("foreign route gone: %v %v", ok, err)
	}
	// host-gw: the device goes, with it its entries.
	params.Mode = ModeHostGW
	if _, err := p.Apply(Compute(params, snap)); err == nil {
		// b is not on-link: host-gw cannot route it, which is an error.
		t.Fatal("host-gw route to an off-link node: no error")
	}
	if _, err := n.H.LinkByName(VXLANDevice); !dataplane.IsNotFound(err) {
		t.Fatalf("%s still there in host-gw mode: %v", VXLANDevice, err)
	}
}

func rec(name, addr string) clusterstate.NodeRecord {
	a := netip.MustParseAddr(addr)
	return clusterstate.NodeRecord{Name: name, Address: a, VTEPIP: a, VTEPMAC: clusterstate.VTEPMAC(name).String()}
}

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func describe(h *netlink.Handle, r netlink.Route) string {
	switch {
	case r.Type == unix.RTN_BLACKHOLE:
		return "blackhole"
	case r.Type == unix.RTN_UNREACHABLE:
		return "unreachable"
	case r.Gw == nil:
		l, _ := h.LinkByIndex(r.LinkIndex)
		return "dev " + l.Attrs().Name
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

// TestProgramIPv6: IPv6 blocks over an IPv4 underlay. An on-link node's
// blocks go via its underlay link-local address on the underlay; an
// off-link node's via its VTEP's link-local address on podnet.vxlan,
// which gets a permanent IPv6 neighbour for it; this node's own block is
// a blackhole. A second apply changes nothing, and a node that leaves
// takes its IPv6 routes and neighbour with it.
func TestProgramIPv6(t *testing.T) {
	n := nodetest.New(t, netip.MustParsePrefix("198.18.0.11/24"))
	if v := n.Sysctl(t, "net/ipv6/conf/all/forwarding"); v != "0" {
		t.Fatalf("IPv6 forwarding %s before any IPv6 route, want 0", v)
	}
	p := programmer(n, netip.MustParseAddr("198.18.0.11"), "a")
	bLL := netip.MustParseAddr("fe80::b")
	snap := &clusterstate.Snapshot{
		Nodes: map[string]clusterstate.NodeRecord{
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
	if v := n.Sysctl(t, "net/ipv6/conf/all/forwarding"); v != "1" {
		t.Errorf("IPv6 forwarding %s with IPv6 routes, want 1", v)
	}
	owned, err := OwnedRoutes(n.H)
	if err != nil {
		t.Fatal(err)
	}
	cV6 := VTEPLinkLocal6(clusterstate.VTEPMAC("c")).String()
	checkRoutes(t, n.H, owned, map[string]string{
		"fd00:103::/122":   "blackhole",
		"fd00:103::40/122": "via fe80::b dev ul0",
		"fd00:103::80/122": "via " + cV6 + " dev podnet.vxlan",
		"fd00:103::7/128":  "via " + cV6 + " dev podnet.vxlan",
		"10.103.0.0/26":    "blackhole",
		"10.103.0.64/26":   "via 198.18.5.13 dev podnet.vxlan onlink",
	})
	vx, err := n.H.LinkByName(VXLANDevice)
	if err != nil {
		t.Fatal(err)
	}
	neigh6 := func() map[string]string {
		t.Helper()
		ns, err := n.H.NeighList(vx.Attrs().Index, netlink.FAMILY_V6)
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
	if got := neigh6(); len(got) != 1 || got[cV6] != clusterstate.VTEPMAC("c").String() {
		t.Fatalf("IPv6 neighbours on %s: %v, want %s at %s", VXLANDevice, got, cV6, clusterstate.VTEPMAC("c"))
	}
	if st, err := p.Apply(Compute(params, snap)); err != nil || st.Changed() {
		t.Fatalf("second apply: %+v, %v", st, err)
	}
	delete(snap.Nodes, "c")
	if _, err := p.Apply(Compute(params, snap)); err != nil {
		t.Fatal(err)
	}
	owned, _ = OwnedRoutes(n.H)
	checkRoutes(t, n.H, owned, map[string]string{
		"fd00:103::/122":   "blackhole",
		"fd00:103::40/122": "via fe80::b dev ul0",
		"10.103.0.0/26":    "blackhole",
	})
	if got := neigh6(); len(got) != 0 {
		t.Fatalf("IPv6 neighbours left after c left: %v", got)
	}
}
