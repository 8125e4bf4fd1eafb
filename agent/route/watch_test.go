package route

import (
	"context"
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/podnet/podnet/agent/clusterstate"
	"github.com/podnet/podnet/agent/internal/nodetest"
	"github.com/podnet/podnet/dataplane"
	"github.com/podnet/podnet/internal/testutil"
)

// TestRouteDeletedByHandComesBack, in a fresh node namespace: the route
// service (host-gw, a peer on the underlay's subnet, resync an hour
// away) puts back a route of its own deleted by hand at once, not at the
// next resync.
func TestRouteDeletedByHandComesBack(t *testing.T) {
	n := nodetest.New(t, netip.MustParsePrefix("198.18.0.11/24"))
	view := clusterstate.NewView("")
	rec := func(name, addr string) clusterstate.NodeRecord {
		a := netip.MustParseAddr(addr)
		return clusterstate.NodeRecord{Name: name, Address: a, VTEPIP: a, VTEPMAC: clusterstate.VTEPMAC(name).String()}
	}
	peer := netip.MustParsePrefix("10.244.1.0/24")
	view.Update(func(s *clusterstate.State) bool {
		s.SetNode("a", rec("a", "198.18.0.11"), true, []netip.Prefix{netip.MustParsePrefix("10.244.0.0/24")})
		s.SetNode("b", rec("b", "198.18.0.12"), true, []netip.Prefix{peer})
		return true
	})
	view.MarkListed()
	reg := prometheus.NewRegistry()
	svc := New(Config{Node: "a", Mode: ModeHostGW, UnderlayInterface: "ul0", NetNS: n.Path, ResyncInterval: time.Hour,
		SysctlRecord: t.TempDir() + "/sysctls.json", Registry: reg,
		Logger: slog.New(slog.DiscardHandler)}, view)
	if err := svc.Setup(); err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	view.Signal()
	route := func() (*netlink.Route, error) {
		routes, err := n.H.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Dst: dataplane.IPNet(peer), Protocol: RouteProtocol},
			netlink.RT_FILTER_DST|netlink.RT_FILTER_PROTOCOL)
		if err != nil || len(routes) == 0 {
			return nil, err
		}
		return &routes[0], nil
	}
	testutil.WaitFor(t, "the route to b's pods", 10*time.Second, func() (bool, error) { r, err := route(); return r != nil, err })
	for i := range 3 {
		r, err := route()
		if err != nil || r == nil {
			t.Fatalf("round %d: route to %s: %v, %v", i, peer, r, err)
		}
		if err := n.H.RouteDel(r); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		testutil.WaitFor(t, "the route deleted by hand back", 2*time.Second, func() (bool, error) { r, err := route(); return r != nil, err })
		t.Logf("round %d: the route deleted by hand was back after %s", i, time.Since(start).Round(time.Millisecond))
	}
	// A route of another's over the destination is left alone (a
	// conflict); once it goes, the agent's is back at once.
	r, err := route()
	if err != nil || r == nil {
		t.Fatalf("route to %s: %v, %v", peer, r, err)
	}
	foreign := &netlink.Route{Dst: dataplane.IPNet(peer), Type: unix.RTN_BLACKHOLE, Protocol: unix.RTPROT_BOOT}
	if err := n.H.RouteReplace(foreign); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if r, err := route(); err != nil || r != nil {
		t.Fatalf("the agent's route over a foreign one: %v, %v; want it left alone", r, err)
	}
	if err := n.H.RouteDel(foreign); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	testutil.WaitFor(t, "the route back once the foreign one went", 2*time.Second, func() (bool, error) { r, err := route(); return r != nil, err })
	t.Logf("the route was back %s after the foreign one went", time.Since(start).Round(time.Millisecond))
	// The agent's own deletions wake the watch too: that must settle,
	// not loop.
	time.Sleep(300 * time.Millisecond)
	before := reconciles(t, reg)
	time.Sleep(700 * time.Millisecond)
	if after := reconciles(t, reg); after != before {
		t.Errorf("%d reconciles in 700 ms with nothing changed: the watch wakes itself", after-before)
	}
}

// reconciles is how many reconciles the service has observed.
func reconciles(t *testing.T, reg *prometheus.Registry) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "podnet_agent_reconcile_duration_seconds" {
			return mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	t.Fatal("no podnet_agent_reconcile_duration_seconds")
	return 0
}
