package route

import (
	"net"
	"net/netip"
	"reflect"
	"slices"
	"testing"

	"github.com/podnet/podnet/agent/clusterstate"
	"github.com/podnet/podnet/ipam"
)

func TestCompute(t *testing.T) {
	bLL := netip.MustParseAddr("fe80::b")
	nodes := map[string]clusterstate.NodeRecord{
		"a": rec("a", "198.18.0.11"),
		"b": withLinkLocal6(rec("b", "198.18.0.12"), bLL),
		"c": rec("c", "198.18.2.13"), // no IPv6 on its underlay
		"d": rec("d", "198.18.0.14"), // on-link, no IPv6 on its underlay
	}
	bV6, cV6, dV6 := VTEPLinkLocal6(clusterstate.VTEPMAC("b")).String(), VTEPLinkLocal6(clusterstate.VTEPMAC("c")).String(), VTEPLinkLocal6(clusterstate.VTEPMAC("d")).String()
	blocks := map[netip.Prefix]string{
		pfx("10.103.0.0/26"):  "a",
		pfx("10.103.0.64/26"): "b",
		pfx("10.103.1.0/26"):  "c",
		pfx("10.103.2.0/26"):  "gone", // not registered: no route
		pfx("fd00::/122"):     "b",
		pfx("fd00::40/122"):   "c",
		pfx("fd00::80/122"):   "a",
		pfx("fd00::c0/122"):   "d",
	}
	borrowed := map[netip.Addr]string{
		netip.MustParseAddr("10.103.0.9"):  "b", // from a's own block
		netip.MustParseAddr("10.103.1.5"):  "a", // held here: the veth route covers it
		netip.MustParseAddr("10.103.0.70"): "c",
		netip.MustParseAddr("10.103.3.1"):  "gone",
		netip.MustParseAddr("fd00::85"):    "b", // from a's own IPv6 block
	}
	local := []netip.Prefix{pfx("198.18.0.0/24")}
	tests := []struct {
		mode   Mode
		want   map[string]string // dst -> "kind via"
		peers  []string
		peers6 []string // peers with an IPv6 neighbour
	}{
		{ModeHostGW, map[string]string{
			"10.103.0.0/26":  "blackhole ",
			"10.103.0.64/26": "host-gw 198.18.0.12",
			"10.103.1.0/26":  "host-gw 198.18.2.13",
			"10.103.0.9/32":  "host-gw 198.18.0.12",
			"10.103.0.70/32": "host-gw 198.18.2.13",
			"fd00::/122":     "host-gw fe80::b",
			"fd00::80/122":   "blackhole ",
			"fd00::85/128":   "host-gw fe80::b",
			// c and d have no IPv6 link-local to route via: their IPv6
			// blocks stay out.
		}, nil, nil},
		{ModeVXLAN, map[string]string{
			"10.103.0.0/26":  "blackhole ",
			"10.103.0.64/26": "vxlan 198.18.0.12",
			"10.103.1.0/26":  "vxlan 198.18.2.13",
			"10.103.0.9/32":  "vxlan 198.18.0.12",
			"10.103.0.70/32": "vxlan 198.18.2.13",
			"fd00::/122":     "vxlan " + bV6,
			"fd00::40/122":   "vxlan " + cV6,
			"fd00::80/122":   "blackhole ",
			"fd00::85/128":   "vxlan " + bV6,
			"fd00::c0/122":   "vxlan " + dV6,
		}, []string{"b", "c", "d"}, []string{"b", "c", "d"}},
		{ModeAuto, map[string]string{
			"10.103.0.0/26":  "blackhole ",
			"10.103.0.64/26": "host-gw 198.18.0.12",
			"10.103.1.0/26":  "vxlan 198.18.2.13",
			"10.103.0.9/32":  "host-gw 198.18.0.12",
			"10.103.0.70/32": "vxlan 198.18.2.13",
			"fd00::/122":     "host-gw fe80::b",
			"fd00::40/122":   "vxlan " + cV6,
			"fd00::80/122":   "blackhole ",
			"fd00::85/128":   "host-gw fe80::b",
			// d is on-link but without an IPv6 next hop there: the
			// tunnel carries its IPv6 pods.
			"fd00::c0/122": "vxlan " + dV6,
		}, []string{"c", "d"}, []string{"c", "d"}},
	}
	for _, tt := range tests {
		t.Run(string(tt.mode), func(t *testing.T) {
			d := Compute(Params{Self: "a", Mode: tt.mode, LocalSubnets: local},
				&clusterstate.Snapshot{Nodes: nodes, Blocks: blocks, Borrowed: borrowed})
			got := map[string]string{}
			for _, r := range d.SortedRoutes() {
				via := ""
				if r.Via.IsValid() {
					via = r.Via.String()
				}
				got[r.Dst.String()] = r.Kind.String() + " " + via
			}
			if len(got) != len(tt.want) {
				t.Errorf("routes %v, want %v", got, tt.want)
			}
			for k, v := range tt.want {
				if got[k] != v {
					t.Errorf("%s: %q, want %q", k, got[k], v)
				}
			}
			if len(d.Peers) != len(tt.peers) {
				t.Errorf("peers %v, want %v", d.Peers, tt.peers)
			}
			for _, n := range tt.peers {
				p := d.Peers[n]
				if p.MAC != clusterstate.VTEPMAC(n).String() || p.Underlay != nodes[n].Address || p.VTEPIP != nodes[n].VTEPIP {
					t.Errorf("peer %s: %+v", n, p)
				}
				want6 := netip.Addr{}
				if slices.Contains(tt.peers6, n) {
					want6 = VTEPLinkLocal6(clusterstate.VTEPMAC(n))
				}
				if p.VTEPIP6 != want6 {
					t.Errorf("peer %s: IPv6 neighbour %v, want %v", n, p.VTEPIP6, want6)
				}
			}
			if d.VXLAN != (tt.mode != ModeHostGW) {
				t.Errorf("VXLAN %v in mode %s", d.VXLAN, tt.mode)
			}
		})
	}
}

// TestComputePeerModes: a rolling change of routing_mode, where the
// nodes run two modes for a while. A vxlan node reaches a host-gw peer
// on its segment host-gw (the peer may have no device), an off-link one
// and a peer of unknown mode (an older agent) encapsulated; a host-gw
// node keeps its device, without peers, while a peer runs vxlan.
func TestComputePeerModes(t *testing.T) {
	withMode := func(r clusterstate.NodeRecord, m Mode) clusterstate.NodeRecord { r.Mode = string(m); return r }
	nodes := map[string]clusterstate.NodeRecord{
		"a": withMode(rec("a", "198.18.0.11"), ModeVXLAN),
		"b": withMode(rec("b", "198.18.0.12"), ModeHostGW),
		"c": withMode(rec("c", "198.18.2.13"), ModeHostGW), // off-link
		"d": rec("d", "198.18.0.14"),                       // an older agent: no mode
		"e": withMode(rec("e", "198.18.0.15"), ModeAuto),
	}
	blocks := map[netip.Prefix]string{
		pfx("10.103.0.0/26"): "a", pfx("10.103.0.64/26"): "b", pfx("10.103.1.0/26"): "c",
		pfx("10.103.2.0/26"): "d", pfx("10.103.3.0/26"): "e",
	}
	local := []netip.Prefix{pfx("198.18.0.0/24")}
	kinds := func(d Desired) map[string]string {
		got := map[string]string{}
		for _, r := range d.SortedRoutes() {
			got[r.Dst.String()] = r.Kind.String()
		}
		return got
	}
	d := Compute(Params{Self: "a", Mode: ModeVXLAN, LocalSubnets: local}, &clusterstate.Snapshot{Nodes: nodes, Blocks: blocks})
	want := map[string]string{"10.103.0.0/26": "blackhole", "10.103.0.64/26": "host-gw", "10.103.1.0/26": "vxlan",
		"10.103.2.0/26": "vxlan", "10.103.3.0/26": "vxlan"}
	if got := kinds(d); !reflect.DeepEqual(got, want) {
		t.Errorf("vxlan node: routes %v, want %v", got, want)
	}
	if _, ok := d.Peers["b"]; ok || !d.VXLAN {
		t.Errorf("vxlan node: device %v, peers %v; want the device, b no peer", d.VXLAN, d.Peers)
	}
	// b, in host-gw, routes host-gw to everyone and keeps a device with
	// no peer while a runs vxlan.
	d = Compute(Params{Self: "b", Mode: ModeHostGW, LocalSubnets: local}, &clusterstate.Snapshot{Nodes: nodes, Blocks: blocks})
	if !d.VXLAN || len(d.Peers) != 0 {
		t.Errorf("host-gw node with a vxlan peer: device %v, peers %v; want the device and no peers", d.VXLAN, d.Peers)
	}
	for dst, k := range kinds(d) {
		if k != "host-gw" && k != "blackhole" {
			t.Errorf("host-gw node: %s is %s", dst, k)
		}
	}
	// a switched to host-gw too: no device left to keep.
	nodes["a"] = withMode(nodes["a"], ModeHostGW)
	d = Compute(Params{Self: "b", Mode: ModeHostGW, LocalSubnets: local}, &clusterstate.Snapshot{Nodes: nodes, Blocks: blocks})
	if d.VXLAN {
		t.Error("host-gw node, no vxlan peer: the device is kept")
	}
}

func withLinkLocal6(r clusterstate.NodeRecord, ll netip.Addr) clusterstate.NodeRecord {
	r.LinkLocal6 = ll
	return r
}

// TestVTEPLinkLocal6: the address is the one the kernel gives a device
// with that MAC (modified EUI-64), as on the remote node's podnet.vxlan.
func TestVTEPLinkLocal6(t *testing.T) {
	mac, _ := net.ParseMAC("52:54:00:12:34:56")
	if got := VTEPLinkLocal6(mac); got != netip.MustParseAddr("fe80::5054:ff:fe12:3456") {
		t.Fatalf("got %s", got)
	}
	if VTEPLinkLocal6(nil).IsValid() {
		t.Fatal("an address for no MAC")
	}
}

// TestStateSetNode: a Node's podCIDRs route as confirmed blocks do, this
// node's own ones blackholed, and a deleted Node takes its routes along.
func TestStateSetNode(t *testing.T) {
	s := clusterstate.NewState(ipam.DefaultPrefix)
	a, b := rec("a", "198.18.0.11"), rec("b", "198.18.0.12")
	steps := []struct {
		name    string
		node    string
		rec     clusterstate.NodeRecord
		ok      bool
		cidrs   []netip.Prefix
		changed bool
	}{
		{"a", "a", a, true, []netip.Prefix{pfx("10.244.0.0/24")}, true},
		{"b before its podCIDR", "b", b, true, nil, true},
		{"b gets one", "b", b, true, []netip.Prefix{pfx("10.244.1.0/24"), pfx("fd00:1::/64")}, true},
		{"b again", "b", b, true, []netip.Prefix{pfx("10.244.1.0/24"), pfx("fd00:1::/64")}, false},
	}
	for _, st := range steps {
		if changed := s.SetNode(st.node, st.rec, st.ok, st.cidrs); changed != st.changed {
			t.Fatalf("%s: changed %v, want %v", st.name, changed, st.changed)
		}
	}
	d := Compute(Params{Self: "a", Mode: ModeHostGW}, s.Snapshot())
	want := map[netip.Prefix]Route{
		pfx("10.244.0.0/24"): {Dst: pfx("10.244.0.0/24"), Kind: RouteBlackhole, Node: "a"},
		pfx("10.244.1.0/24"): {Dst: pfx("10.244.1.0/24"), Kind: RouteHostGW, Via: addr("198.18.0.12"), Node: "b"},
		// b has no IPv6 on its underlay: no host-gw route for its IPv6 CIDR.
	}
	if !reflect.DeepEqual(d.Routes, want) {
		t.Fatalf("routes %v, want %v", d.Routes, want)
	}
	if !s.SetNode("b", clusterstate.NodeRecord{}, false, nil) {
		t.Fatal("deleting b changed nothing")
	}
	d = Compute(Params{Self: "a", Mode: ModeVXLAN}, s.Snapshot())
	if len(d.Routes) != 1 || len(d.Peers) != 0 {
		t.Fatalf("after deleting b: routes %v, peers %v; want a's blackhole alone", d.Routes, d.Peers)
	}
	// A CIDR the controller reused for c before b's deletion arrived
	// stays c's.
	s.SetNode("b", b, true, []netip.Prefix{pfx("10.244.1.0/24")})
	s.SetNode("c", rec("c", "198.18.0.13"), true, []netip.Prefix{pfx("10.244.1.0/24")})
	s.SetNode("b", clusterstate.NodeRecord{}, false, nil)
	if got := s.Snapshot().Blocks[pfx("10.244.1.0/24")]; got != "c" {
		t.Fatalf("10.244.1.0/24 routes to %q, want c", got)
	}
}

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }
