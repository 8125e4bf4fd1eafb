package route

import (
	"encoding/base64"
	"net/netip"
	"strings"
	"testing"

	"github.com/podnet/podnet/agent/clusterstate"
)

// TestComputeWireGuard: with encryption on, every other node's pods go
// through podnet.wg in every mode, and a node without a usable key (none
// yet, malformed, or not registered at all) gets unreachable routes,
// never host-gw or VXLAN ones; no VXLAN peer is made.
func TestComputeWireGuard(t *testing.T) {
	key := base64.StdEncoding.EncodeToString(make([]byte, 32))
	withKey := func(r clusterstate.NodeRecord, k string) clusterstate.NodeRecord { r.WireGuardKey = k; return r }
	nodes := map[string]clusterstate.NodeRecord{
		"a": withKey(rec("a", "198.18.0.11"), key),
		"b": withKey(rec("b", "198.18.0.12"), key),
		"c": rec("c", "198.18.2.13"),                                   // no key yet
		"d": withKey(rec("d", "198.18.0.14"), key[:20]),                // malformed
		"e": withKey(rec("e", "198.18.0.15"), strings.Repeat("A", 40)), // 30 bytes
	}
	blocks := map[netip.Prefix]string{
		pfx("10.103.0.0/26"):   "a",
		pfx("10.103.0.64/26"):  "b",
		pfx("10.103.1.0/26"):   "c",
		pfx("10.103.1.64/26"):  "d",
		pfx("10.103.1.128/26"): "e",
		pfx("10.103.2.0/26"):   "gone",
		pfx("fd00::/122"):      "b",
	}
	borrowed := map[netip.Addr]string{netip.MustParseAddr("10.103.0.9"): "b"}
	want := map[string]string{
		"10.103.0.0/26":   "blackhole",
		"10.103.0.64/26":  "wireguard",
		"10.103.0.9/32":   "wireguard",
		"fd00::/122":      "wireguard",
		"10.103.1.0/26":   "unreachable",
		"10.103.1.64/26":  "unreachable",
		"10.103.1.128/26": "unreachable",
		"10.103.2.0/26":   "unreachable",
	}
	for _, mode := range []Mode{ModeHostGW, ModeVXLAN, ModeAuto} {
		d := Compute(Params{Self: "a", Mode: mode, WireGuard: true, LocalSubnets: []netip.Prefix{pfx("198.18.0.0/24")}},
			&clusterstate.Snapshot{Nodes: nodes, Blocks: blocks, Borrowed: borrowed})
		if !d.WireGuard || len(d.Peers) != 0 {
			t.Errorf("%s: WireGuard %v, VXLAN peers %v; want true and none", mode, d.WireGuard, d.Peers)
		}
		if len(d.Routes) != len(want) {
			t.Errorf("%s: routes %v, want %v", mode, d.Routes, want)
		}
		for dst, kind := range want {
			if r := d.Routes[pfx(dst)]; r.Kind.String() != kind || r.Via.IsValid() {
				t.Errorf("%s: %s: %s via %v, want %s", mode, dst, r.Kind, r.Via, kind)
			}
		}
	}
}

// TestUnreachableWithout: with podnet.wg missing or down, every
// encrypted route becomes unreachable and the input is left as it was.
func TestUnreachableWithout(t *testing.T) {
	d := Desired{Routes: map[netip.Prefix]Route{
		pfx("10.0.0.0/26"): {Dst: pfx("10.0.0.0/26"), Kind: RouteWireGuard},
		pfx("10.0.1.0/26"): {Dst: pfx("10.0.1.0/26"), Kind: RouteBlackhole},
		pfx("10.0.2.0/26"): {Dst: pfx("10.0.2.0/26"), Kind: RouteUnreachable},
	}, WireGuard: true}
	got := unreachableWithout(d)
	if got.Routes[pfx("10.0.0.0/26")].Kind != RouteUnreachable || got.Routes[pfx("10.0.1.0/26")].Kind != RouteBlackhole {
		t.Errorf("got %v", got.Routes)
	}
	if d.Routes[pfx("10.0.0.0/26")].Kind != RouteWireGuard {
		t.Error("the input was changed")
	}
}
