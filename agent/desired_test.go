package agent

import (
	"encoding/json"
	"net"
	"net/netip"
	"slices"
	"testing"

	"github.com/podnet/podnet/ipam"
)

func TestCompute(t *testing.T) {
	bLL := netip.MustParseAddr("fe80::b")
	nodes := map[string]NodeRecord{
		"a": rec("a", "198.18.0.11"),
		"b": withLinkLocal6(rec("b", "198.18.0.12"), bLL),
		"c": rec("c", "198.18.2.13"), // no IPv6 on its underlay
		"d": rec("d", "198.18.0.14"), // on-link, no IPv6 on its underlay
	}
	bV6, cV6, dV6 := VTEPLinkLocal6(VTEPMAC("b")).String(), VTEPLinkLocal6(VTEPMAC("c")).String(), VTEPLinkLocal6(VTEPMAC("d")).String()
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
				&Snapshot{Nodes: nodes, Blocks: blocks, Borrowed: borrowed})
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
				if p.MAC != VTEPMAC(n).String() || p.Underlay != nodes[n].Address || p.VTEPIP != nodes[n].VTEPIP {
					t.Errorf("peer %s: %+v", n, p)
				}
				want6 := netip.Addr{}
				if slices.Contains(tt.peers6, n) {
					want6 = VTEPLinkLocal6(VTEPMAC(n))
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

func withLinkLocal6(r NodeRecord, ll netip.Addr) NodeRecord {
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

func TestVTEPMAC(t *testing.T) {
	a, b := VTEPMAC("node-1"), VTEPMAC("node-2")
	if a.String() == b.String() || a.String() != VTEPMAC("node-1").String() {
		t.Fatalf("MACs not deterministic and distinct: %s %s", a, b)
	}
	if a[0]&1 != 0 || a[0]&2 == 0 {
		t.Fatalf("%s: want unicast, locally administered", a)
	}
}

// idx is node's index with one claim of 10.103.0.64/26 in state.
func idx(node string, state ipam.AffinityState) ipam.NodeIndex {
	return ipam.NodeIndex{Node: node, Blocks: []ipam.NodeBlock{{CIDR: pfx("10.103.0.64/26"), State: state}}}
}

func TestStateApply(t *testing.T) {
	keys := ipam.Keys{}
	s := newClusterState(keys, ipam.DefaultPrefix)
	mustJSON := func(v any) []byte { b, _ := json.Marshal(v); return b }
	steps := []struct {
		key     string
		value   []byte
		deleted bool
		changed bool
	}{
		{NodeKey(ipam.DefaultPrefix, "b"), mustJSON(rec("b", "198.18.0.12")), false, true},
		{NodeKey(ipam.DefaultPrefix, "b"), mustJSON(rec("b", "198.18.0.12")), false, false},
		{keys.Node("b"), mustJSON(idx("b", ipam.AffinityPending)), false, false},
		{keys.Node("b"), mustJSON(idx("b", ipam.AffinityConfirmed)), false, true},
		{keys.Node("b"), mustJSON(idx("b", ipam.AffinityPendingDeletion)), false, true},
		{keys.Node("b"), nil, true, false},
		{keys.Block(pfx("10.103.0.64/26")), []byte("{}"), false, false},
	}
	for i, st := range steps {
		changed, err := s.apply(st.key, st.value, st.deleted)
		if err != nil || changed != st.changed {
			t.Fatalf("step %d (%s): changed %v, err %v; want changed %v", i, st.key, changed, err, st.changed)
		}
	}
	// c borrows 10.103.0.1 from a's block, and publishes it.
	a := idx("a", ipam.AffinityConfirmed)
	a.Blocks[0].CIDR = pfx("10.103.0.0/26")
	if changed, err := s.apply(keys.Node("a"), mustJSON(a), false); err != nil || !changed {
		t.Fatalf("a's index: changed %v, err %v", changed, err)
	}
	c := ipam.NodeIndex{Node: "c", Borrowed: []ipam.BorrowedBlock{{CIDR: pfx("10.103.0.0/26")}}}
	if changed, _ := s.apply(keys.Node("c"), mustJSON(c), false); changed {
		t.Fatal("a borrow's intent changed routes")
	}
	c.Borrowed[0].IPs = []netip.Addr{netip.MustParseAddr("10.103.0.1")}
	if changed, _ := s.apply(keys.Node("c"), mustJSON(c), false); !changed {
		t.Fatal("a published address did not change routes")
	}
	snap := s.snapshot()
	if len(snap.Borrowed) != 1 || snap.Borrowed[netip.MustParseAddr("10.103.0.1")] != "c" || snap.Blocks[pfx("10.103.0.0/26")] != "a" {
		t.Fatalf("snapshot %+v, want a's block and 10.103.0.1 held by c", snap)
	}
	if changed, _ := s.apply(keys.Node("c"), nil, true); !changed || len(s.snapshot().Borrowed) != 0 {
		t.Fatal("deleting c's index did not drop its borrowed address")
	}
	if _, err := s.apply(NodeKey(ipam.DefaultPrefix, "bad"), []byte("{"), false); err == nil {
		t.Fatal("undecodable node record: no error")
	}
}
