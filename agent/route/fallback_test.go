package route

import (
	"encoding/base64"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/podnet/podnet/agent/clusterstate"
	"github.com/podnet/podnet/agent/internal/nodetest"
)

// TestProgramWireGuardStrict, in a fresh node namespace (a veth named
// podnet.wg stands for the device: routes only need its index): a
// keyed node's blocks go through podnet.wg with an unreachable fallback
// under each; a node without a key is unreachable; when the device goes
// the kernel drops its routes and the fallback is what matches (not the
// default route); the next apply makes them unreachable and fails; with
// encryption off again the fallbacks go.
func TestProgramWireGuardStrict(t *testing.T) {
	n := nodetest.New(t, netip.MustParsePrefix("198.18.0.11/24"))
	p := programmer(n, netip.MustParseAddr("198.18.0.11"), "a")
	// A default route through the underlay: where pod traffic would go in
	// the clear without the fallbacks.
	if err := n.H.RouteAdd(&netlink.Route{LinkIndex: n.UL.Attrs().Index, Gw: netip.MustParseAddr("198.18.0.1").AsSlice()}); err != nil {
		t.Fatal(err)
	}
	wg := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: WireGuardDevice}, PeerName: "wg-peer"}
	if err := n.H.LinkAdd(wg); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{WireGuardDevice, "wg-peer"} {
		l, err := n.H.LinkByName(name)
		if err == nil {
			err = n.H.LinkSetUp(l)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	key := base64.StdEncoding.EncodeToString(make([]byte, 32))
	b := rec("b", "198.18.0.12")
	b.WireGuardKey = key
	snap := &clusterstate.Snapshot{
		Nodes:  map[string]clusterstate.NodeRecord{"a": rec("a", "198.18.0.11"), "b": b, "c": rec("c", "198.18.0.13")},
		Blocks: map[netip.Prefix]string{pfx("10.103.0.0/26"): "a", pfx("10.103.0.64/26"): "b", pfx("fd00::/122"): "b", pfx("10.103.1.0/26"): "c"},
	}
	params := Params{Self: "a", Mode: ModeHostGW, WireGuard: true}
	if _, err := p.Apply(Compute(params, snap)); err != nil {
		t.Fatal(err)
	}
	owned, err := OwnedRoutes(n.H)
	if err != nil {
		t.Fatal(err)
	}
	checkRoutes(t, n.H, owned, map[string]string{
		"10.103.0.0/26":  "blackhole",
		"10.103.0.64/26": "dev podnet.wg",
		"fd00::/122":     "dev podnet.wg",
		"10.103.1.0/26":  "unreachable",
	})
	for _, dst := range []string{"10.103.0.64/26", "fd00::/122"} {
		if got := lookup(t, n.H, dst); got != unix.RTN_UNREACHABLE && got != unix.RTN_UNICAST {
			t.Errorf("%s: lookup type %d", dst, got)
		}
	}
	if got := fallbackCount(t, n.H); got != 2 {
		t.Errorf("%d fallback routes, want 2 (under 10.103.0.64/26 and fd00::/122)", got)
	}
	// The device goes (a userspace device with its agent): what matches
	// the blocks is unreachable, never the default route.
	if err := n.H.LinkDel(wg); err != nil {
		t.Fatal(err)
	}
	for _, dst := range []string{"10.103.0.64/26", "fd00::/122"} {
		if got := lookup(t, n.H, dst); got != unix.RTN_UNREACHABLE {
			t.Errorf("device gone: %s: lookup type %d, want unreachable", dst, got)
		}
	}
	if _, err := p.Apply(Compute(params, snap)); err == nil {
		t.Error("apply without podnet.wg: no error")
	}
	owned, _ = OwnedRoutes(n.H)
	checkRoutes(t, n.H, owned, map[string]string{
		"10.103.0.0/26": "blackhole", "10.103.0.64/26": "unreachable", "fd00::/122": "unreachable", "10.103.1.0/26": "unreachable",
	})
	// Encryption off: host-gw routes, and no fallback left.
	params.WireGuard = false
	if _, err := p.Apply(Compute(params, snap)); err != nil {
		t.Fatal(err)
	}
	if got := fallbackCount(t, n.H); got != 0 {
		t.Errorf("encryption off: %d fallback routes left", got)
	}
}

// lookup is the type of the route the kernel picks for dst's address.
func lookup(t *testing.T, h *netlink.Handle, dst string) int {
	t.Helper()
	rs, err := h.RouteGet(pfx(dst).Addr().Next().AsSlice())
	if err != nil {
		if err == unix.EHOSTUNREACH || err == unix.ENETUNREACH {
			return unix.RTN_UNREACHABLE
		}
		t.Fatalf("route get %s: %v", dst, err)
	}
	return rs[0].Type
}

func fallbackCount(t *testing.T, h *netlink.Handle) int {
	t.Helper()
	n := 0
	for _, family := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rs, err := h.RouteListFiltered(family, &netlink.Route{Table: unix.RT_TABLE_MAIN, Protocol: RouteProtocol}, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			if r.Priority == FallbackMetric && r.Type == unix.RTN_UNREACHABLE {
				n++
			}
		}
	}
	return n
}
