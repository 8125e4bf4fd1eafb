package route

import (
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vishvananda/netlink"

	"github.com/podnet/podnet/agent/clusterstate"
	"github.com/podnet/podnet/agent/internal/nodetest"
	"github.com/podnet/podnet/dataplane"
	"github.com/podnet/podnet/netns"
)

// TestSetupRemovesWireGuardWhenOff, in a fresh node namespace: a
// podnet.wg left on the node (a persistent TUN device stands for a
// kernel WireGuard device, which this kernel may lack) is deleted by
// the route service's Setup with encryption off, and kept with it on.
func TestSetupRemovesWireGuardWhenOff(t *testing.T) {
	for _, wg := range []bool{true, false} {
		n := nodetest.New(t, netip.MustParsePrefix("198.18.0.11/24"))
		tun := &netlink.Tuntap{LinkAttrs: netlink.LinkAttrs{Name: WireGuardDevice}, Mode: netlink.TUNTAP_MODE_TUN}
		// TUN devices are made through /dev/net/tun in the thread's
		// namespace, not over the handle's netlink socket.
		if err := netns.Do(n.Path, func() error { return netlink.LinkAdd(tun) }); err != nil {
			t.Fatal(err)
		}
		view := clusterstate.NewView("")
		svc := New(Config{Node: "a", Mode: ModeHostGW, UnderlayInterface: "ul0", NetNS: n.Path, ResyncInterval: time.Hour,
			WireGuard: wg, SysctlRecord: t.TempDir() + "/sysctls.json", Registry: prometheus.NewRegistry(),
			Logger: slog.New(slog.DiscardHandler)}, view)
		if err := svc.Setup(); err != nil {
			t.Fatal(err)
		}
		svc.Close()
		link, err := dataplane.LinkByName(n.H, WireGuardDevice)
		if err != nil {
			t.Fatal(err)
		}
		if got := link != nil; got != wg {
			t.Errorf("encryption wireguard %v: %s present after Setup: %v, want %v", wg, WireGuardDevice, got, wg)
		}
	}
}
