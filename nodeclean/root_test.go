package nodeclean

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/podnet/podnet/agent/clusterstate"
	"github.com/podnet/podnet/agent/route"
	"github.com/podnet/podnet/dataplane"
	"github.com/podnet/podnet/dataplane/policyrules"
	"github.com/podnet/podnet/dataplane/tag"
	"github.com/podnet/podnet/install"
	"github.com/podnet/podnet/internal/sysctlrecord"
	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/ipam/store/bolt"
	"github.com/podnet/podnet/netns"
	"github.com/podnet/podnet/policy"
	"github.com/podnet/podnet/portmap"
)

// node is a modelled node: its namespace and the directories standing
// for /etc/cni/net.d, /opt/cni/bin, /var/lib/podnet and /run/podnet.
type node struct {
	ns    string
	paths Paths
}

func newNode(t *testing.T) *node {
	testutil.RequireRoot(t)
	_, ns := testutil.NewNodeNetNS(t)
	base := t.TempDir()
	n := &node{ns: ns, paths: Paths{ConfDir: filepath.Join(base, "net.d"), BinDir: filepath.Join(base, "bin"),
		StateDir: filepath.Join(base, "var-lib-podnet"), RunDir: filepath.Join(base, "run-podnet")}}
	for _, d := range []string{n.paths.ConfDir, n.paths.BinDir, n.paths.StateDir, n.paths.RunDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// do runs f in the node's namespace.
func (n *node) do(t *testing.T, f func() error) {
	t.Helper()
	if err := netns.Do(n.ns, f); err != nil {
		t.Fatal(err)
	}
}

var (
	owner     = tag.Owner{Network: "podnet", ContainerID: "c0ffee", IfName: "eth0"}
	podAddr   = netip.MustParseAddr("10.244.0.5")
	foreignRt = netip.MustParsePrefix("10.99.0.0/24")
)

// TestRemove: a node with podnet made by podnet's own code, and things
// of others beside it; removal takes podnet's and nothing else, and a
// second run finds nothing.
func TestRemove(t *testing.T) {
	n := newNode(t)
	hostVeth := dataplane.HostVethName(owner.ContainerID, owner.IfName)
	n.do(t, func() error { return foreign(n, hostVeth) })
	installFiles(t, n)
	programRoutes(t, n)
	n.do(t, func() error { return podnetTables(n) })
	podnetState(t, n)

	var first, second Report
	n.do(t, func() (err error) { first, err = Remove(n.paths, false); return err })
	if first.Clean() || len(first.Errors) > 0 {
		t.Fatalf("first removal: %+v", first)
	}
	for _, s := range first.Steps {
		t.Logf("removed %s", s)
	}
	checkClean(t, n, hostVeth)
	n.do(t, func() (err error) { second, err = Remove(n.paths, false); return err })
	if !second.Clean() {
		t.Errorf("second removal found %+v", second.Steps)
	}
	n.do(t, func() (err error) { second, err = Verify(n.paths); return err })
	if !second.Clean() {
		t.Errorf("verify after removal: %+v", second.Steps)
	}
}

// foreign makes what is not podnet's: another CNI's config and plugin, a
// table, a route of another protocol, a sysctl podnet does not set, and
// a pod's host veth (the pod's until it is deleted).
func foreign(n *node, hostVeth string) error {
	if err := os.WriteFile(filepath.Join(n.paths.ConfDir, "10-other.conflist"),
		[]byte(`{"cniVersion":"1.0.0","name":"other","plugins":[{"type":"bridge","ipam":{"type":"host-local"}}]}`), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(n.paths.BinDir, "bridge"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		return err
	}
	c, err := nftables.New()
	if err != nil {
		return err
	}
	c.AddTable(&nftables.Table{Name: "other", Family: nftables.TableFamilyINet})
	if err := c.Flush(); err != nil {
		return err
	}
	h, err := dataplane.NewHandle()
	if err != nil {
		return err
	}
	defer h.Close()
	if err := h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "ul0", MTU: 1500}, PeerName: "ul0p"}); err != nil {
		return err
	}
	ul, err := h.LinkByName("ul0")
	if err != nil {
		return err
	}
	if err := h.AddrAdd(ul, &netlink.Addr{IPNet: dataplane.IPNet(netip.MustParsePrefix("198.18.0.11/24"))}); err != nil {
		return err
	}
	if err := h.LinkSetUp(ul); err != nil {
		return err
	}
	if err := h.RouteAdd(&netlink.Route{Dst: dataplane.IPNet(foreignRt), Gw: net.ParseIP("198.18.0.1"), Protocol: unix.RTPROT_STATIC}); err != nil {
		return err
	}
	if err := h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: hostVeth}, PeerName: "podpeer0"}); err != nil {
		return err
	}
	return dataplane.WriteSysctls([]dataplane.Sysctl{{Key: "net/ipv4/conf/all/rp_filter", Value: "2"}})
}

// installFiles installs the conflist and the plugins as podnet install
// does; loopback is a real build of podnet's.
func installFiles(t *testing.T, n *node) {
	src := t.TempDir()
	testutil.BuildBinary(t, "./plugins/loopback", src)
	for _, p := range uniquePlugins {
		if err := os.WriteFile(filepath.Join(src, p), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := install.Plugins(src, n.paths.BinDir, install.PluginNames); err != nil {
		t.Fatal(err)
	}
	conf, err := install.ConfList(install.Network{})
	if err != nil {
		t.Fatal(err)
	}
	if err := install.WriteFile(filepath.Join(n.paths.ConfDir, install.ConfFileName("podnet")), conf, 0o644); err != nil {
		t.Fatal(err)
	}
}

// programRoutes runs the agent's route service on the node in VXLAN
// mode, with one peer off-link, so that it makes podnet.vxlan, its
// neighbour and FDB entry, a route to the peer and a blackhole for its
// own pod CIDR, and turns forwarding on (recording it); then an IPv6
// blackhole and a route in another table, both of protocol 97.
func programRoutes(t *testing.T, n *node) {
	view := clusterstate.NewView("")
	rec := func(name, addr string) clusterstate.NodeRecord {
		a := netip.MustParseAddr(addr)
		return clusterstate.NodeRecord{Name: name, Address: a, VTEPIP: a, VTEPMAC: clusterstate.VTEPMAC(name).String()}
	}
	view.Update(func(s *clusterstate.State) bool {
		s.SetNode("a", rec("a", "198.18.0.11"), true, []netip.Prefix{netip.MustParsePrefix("10.244.0.0/24")})
		s.SetNode("b", rec("b", "198.18.5.12"), true, []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24")})
		return true
	})
	view.MarkListed()
	svc := route.New(route.Config{Node: "a", Mode: route.ModeVXLAN, UnderlayInterface: "ul0", NetNS: n.ns, ResyncInterval: time.Hour,
		SysctlRecord: filepath.Join(n.paths.StateDir, sysctlrecord.FileName), Registry: prometheus.NewRegistry(),
		Logger: slog.New(slog.DiscardHandler)}, view)
	if err := svc.Setup(); err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	view.Signal()
	select {
	case <-svc.FirstProgrammed():
	case <-time.After(10 * time.Second):
		t.Error("routes not programmed in 10s")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	n.do(t, func() error {
		h, err := dataplane.NewHandle()
		if err != nil {
			return err
		}
		defer h.Close()
		for _, r := range []*netlink.Route{
			{Dst: dataplane.IPNet(netip.MustParsePrefix("fd00:244::/64")), Type: unix.RTN_BLACKHOLE, Protocol: route.RouteProtocol, Family: unix.AF_INET6},
			{Dst: dataplane.IPNet(netip.MustParsePrefix("10.244.7.0/24")), Type: unix.RTN_BLACKHOLE, Protocol: route.RouteProtocol, Table: 100},
		} {
			if err := h.RouteAdd(r); err != nil {
				return err
			}
		}
		return nil
	})
}

// podnetTables makes every podnet table through the code that makes it.
func podnetTables(n *node) error {
	m, err := dataplane.NewMasq()
	if err != nil {
		return err
	}
	defer m.Close()
	if err := m.AddPod(dataplane.MasqNetwork{Network: "podnet", Exclude: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}},
		owner, []netip.Addr{podAddr}); err != nil {
		return err
	}
	g, err := dataplane.NewGuards()
	if err != nil {
		return err
	}
	defer g.Close()
	mac, _ := dataplane.AttachmentMACs(owner.ContainerID, owner.IfName)
	for _, bridged := range []bool{false, true} {
		if err := g.Install(dataplane.Guard{Owner: owner, HostIf: "pn-guard0", PodMAC: mac, Addrs: []netip.Addr{podAddr}, Bridged: bridged}); err != nil {
			return err
		}
	}
	cl, err := dataplane.NewClosed(filepath.Join(n.paths.RunDir, "closed.lock"), 0)
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := cl.Add(context.Background(), dataplane.ClosedPod{Pod: "default/p", Owner: owner, Addrs: []netip.Addr{podAddr}}); err != nil {
		return err
	}
	r, err := policyrules.New("a")
	if err != nil {
		return err
	}
	defer r.Close()
	if _, err := r.Resync(&policy.IR{}); err != nil {
		return err
	}
	return portmap.Add(&portmap.Request{Owner: owner, LockPath: filepath.Join(n.paths.RunDir, "portmap.lock"),
		Config:    &portmap.Config{SNAT: true, Mappings: []portmap.Mapping{{HostPort: 8080, ContainerPort: 80, Proto: portmap.TCP}}},
		Container: &portmap.Container{V4: podAddr}})
}

// podnetState makes the IPAM file and a socket as podnet's stores do.
func podnetState(t *testing.T, n *node) {
	st, err := bolt.Open(context.Background(), bolt.Options{Path: filepath.Join(n.paths.StateDir, "ipam.db")})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	if err := os.MkdirAll(filepath.Join(n.paths.StateDir, "releases"), 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(n.paths.RunDir, "ipam.sock"), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
}
